"""Atomic file writes: every file the project writes goes through :func:`atomic_write`.

A write goes to a temporary file in the destination's folder, is flushed to disk, then renamed
over the destination. The rename is atomic on POSIX and Windows, so a reader (or a run killed
mid-write) sees the old file or the new one, never a mix; and a destination that is a symbolic
link is replaced by the new file instead of being written through (a link in a run folder can
never make the project overwrite a file elsewhere).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
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


def writable_folder(path: str | Path) -> Path:
    """Create ``path`` if needed and prove it writable by creating (and removing) a file there,
    so a command fails before its work instead of after it (``os.access`` would not do: it says
    yes to root on a read-only mount's folder, and no file is written to learn it).

    Raises:
        OSError: one line naming the folder and why (read-only, a file in the way, no space).
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise OSError(f"cannot write into {str(path)!r}: {error.strerror or error}") from None
    return path


def output_file(name: str, flag: str = "--out") -> Path:
    """The file a command will write its results to, checked before its work: a file name in
    an existing, writable folder.

    Raises:
        ValueError: ``name`` is empty or a folder, or its folder does not exist (one line
            naming ``flag`` and the value).
        OSError: the folder is not writable (:func:`writable_folder`).
    """
    out = Path(name)
    if not name or out.is_dir():
        raise ValueError(f"{flag}={name!r} must name a file, not a folder")
    if not out.parent.is_dir():
        parent = repr(str(out.parent))
        exists = out.parent.exists()
        why = f"{parent} is not a folder" if exists else f"folder {parent} does not exist"
        raise ValueError(f"{flag}={name}: {why}")
    writable_folder(out.parent)
    return out
