"""Atomic file writes: every file the project writes goes through :func:`atomic_write`.

A write goes to a temporary file in the destination's folder, is flushed to disk, then renamed
over the destination. The rename is atomic on POSIX and Windows, so a reader (or a run killed
mid-write) sees the old file or the new one, never a mix; and a destination that is a symbolic
link is replaced by the new file instead of being written through (a link in a run folder can
never make the project overwrite a file elsewhere). Folders below a run folder are created by
:func:`safe_folder`, which refuses a folder that is a link (``RUN/evaluations -> /elsewhere``),
so no write follows a linked folder out of a run either.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

TMP_SUFFIX = ".tmp"
"""Suffix of the temporary files; ``.NAME.*.tmp`` in a folder is an interrupted write."""


def _umask() -> int:
    """The process's file-mode creation mask (read once, at import, in the importing thread)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()
"""Mode of every written file: what ``open()`` would give (``mkstemp`` alone gives 0600, which
would hide a run's results from the other users of a shared machine)."""


@contextlib.contextmanager
def atomic_writer(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file next to ``path``; on a clean exit, fsync it and rename it over
    ``path``; on any exception (Ctrl-C included) delete it and leave ``path`` as it was.

    Args:
        path: the destination; its folder is created if needed.
        mode: ``"wb"`` (bytes) or ``"w"`` (text, UTF-8, ``\\n`` line ends).

    Raises:
        OSError: the folder cannot be created or written (e.g. read-only, disk full).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        os.chmod(tmp, FILE_MODE)
        text = {"encoding": "utf-8", "newline": ""} if "b" not in mode else {}
        with os.fdopen(handle, mode, **text) as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)  # replaces a symlink at ``path``; never follows it
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically (see :func:`atomic_writer`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: the folder cannot be created or written.
    """
    with atomic_writer(path, "w" if isinstance(data, str) else "wb") as file:
        file.write(data)
    return Path(path)


def writable_folder(path: str | Path, create: bool = True) -> Path:
    """Prove ``path`` writable by creating (and removing) a file there, so a command fails
    before its work instead of after it (``os.access`` would not do: it says yes to root on a
    read-only mount's folder, and no file is written to learn it).

    Args:
        path: the folder.
        create: create ``path`` (and its parents) now; with False nothing is created: the
            nearest existing folder on its way is proved writable instead, so a command that
            is refused later leaves no empty folder behind.

    Raises:
        OSError: one line naming the folder and why (read-only, a file in the way, no space).
    """
    path = Path(path)
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
            probe = path
        else:
            probe = next(p for p in (path, *path.parents) if p.exists() or p.is_symlink())
            if not probe.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, f"{str(probe)!r} is not a folder")
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as error:
        raise OSError(f"cannot write into {str(path)!r}: {error.strerror or error}") from None
    return path


def linked_below(path: str | Path, root: str | Path) -> Path | None:
    """The first component of ``path`` below ``root`` (``path`` included) that is a symbolic
    link, or None; None also when ``path`` is not below ``root`` (lexically)."""
    path, root = Path(path), Path(root)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return None
    folder = root
    for part in parts:
        folder = folder / part
        if folder.is_symlink():
            return folder
    return None


def safe_folder(path: str | Path, root: str | Path) -> Path:
    """Create the folder ``path`` below ``root`` one component at a time, refusing any
    component below ``root`` that is a symbolic link or not a folder, so that a write into a
    run folder can never follow a planted link (``RUN/evaluations -> /elsewhere``) out of it.
    ``root`` itself may be a link (a user's ``runs -> /big/disk``).

    Raises:
        ValueError: ``path`` is not ``root`` or below it (lexically).
        OSError: a component is a symbolic link or a file (one line naming it), or cannot be
            created.
    """
    path, root = Path(path), Path(root)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise ValueError(f"{str(path)!r} is not inside {str(root)!r}") from None
    if ".." in parts:
        raise ValueError(f"{str(path)!r} leaves {str(root)!r} through '..'")
    root.mkdir(parents=True, exist_ok=True)
    folder = root
    for part in parts:
        folder = folder / part
        with contextlib.suppress(FileExistsError):
            folder.mkdir()  # never parents=True: that would create through a link
        if folder.is_symlink() or not folder.is_dir():
            what = "a symbolic link" if folder.is_symlink() else "not a folder"
            raise OSError(
                errno.ENOTDIR,
                f"refusing to write into {str(folder)!r}: it is {what}; writes never leave "
                f"{str(root)!r} through a link (remove or rename it)",
            )
    return path


def check_not_folders(folder: str | Path, names: tuple[str, ...] | list[str]) -> None:
    """Check, before any work, that no file a command will write into ``folder`` under
    ``names`` is a folder in the way (a file or a link there is replaced atomically, a folder
    would fail the write after the work, with some of the files already written).

    Raises:
        IsADirectoryError: one line naming the first such folder.
    """
    for name in names:
        path = Path(folder) / name
        if path.is_dir() and not path.is_symlink():
            raise IsADirectoryError(
                f"{str(path)!r} is a folder, where the file {name} is written; remove or rename "
                "it (nothing was written)"
            )


def output_file(
    name: str, flag: str = "--out", ours: Callable[[bytes], bool] | None = None
) -> Path:
    """The file a command will write its results to, checked before its work: a file name in
    an existing, writable folder; with ``ours``, an existing file is replaced only when
    ``ours(its bytes)`` says this command wrote it (a run's checkpoint, the command's own
    input or a user's notes are never overwritten).

    Raises:
        ValueError: ``name`` is empty or a folder, its folder does not exist, or it is a file
            this command did not write (one line naming ``flag`` and the value).
        OSError: the folder is not writable (:func:`writable_folder`).
    """
    out = Path(name)
    if not name or out.is_dir():
        raise ValueError(f"{flag}={name!r} must name a file, not a folder")
    if out.is_symlink():
        raise ValueError(f"{flag}={name!r} is a symbolic link; give the file itself")
    if ours is not None and out.is_file() and not ours(out.read_bytes()):
        raise ValueError(
            f"{flag}={name!r} is a file this command did not write, which it would replace; "
            "give a new file name (or remove that file first)"
        )
    if not out.parent.is_dir():
        parent = repr(str(out.parent))
        exists = out.parent.exists()
        why = f"{parent} is not a folder" if exists else f"folder {parent} does not exist"
        raise ValueError(f"{flag}={name}: {why}")
    writable_folder(out.parent)
    return out


def json_with_keys(*keys: str) -> Callable[[bytes], bool]:
    """An ``ours`` test for :func:`output_file`: the bytes are a JSON object holding ``keys``
    (the file a command wrote earlier)."""

    def ours(data: bytes) -> bool:
        try:
            value = json.loads(data)
        except (ValueError, RecursionError):
            return False
        return isinstance(value, dict) and set(keys) <= set(value)

    return ours


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of the file ``path``'s bytes, read in 1 MiB blocks.

    Raises:
        OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    with Path(path).open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
