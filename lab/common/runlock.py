"""One writer per run folder: an exclusive lock on ``RUN_DIR/.lock`` held while a run trains.

The lock is an operating-system lock on an open file (``flock`` on POSIX, ``msvcrt.locking``
on Windows): it is released when the process exits in any way, ``kill -9`` included, so a
crashed run never leaves a stale lock behind. The file itself stays and holds the last holder's
process id and host, which the refusal names. It is the one file the project writes in place,
not through :mod:`lab.common.files`: a lock must stay on one file, and a rename would replace it.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

LOCK_NAME = ".lock"

try:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

except ImportError:  # Windows
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True


class RunLocked(RuntimeError):
    """Another process holds the run folder's lock; the message is one line."""


@contextlib.contextmanager
def run_lock(
    run_dir: str | Path, key: str = "run_dir", holder: str = "another training process"
) -> Iterator[None]:
    """Hold the exclusive lock of ``run_dir`` (created if needed) for the block; ``key`` and
    ``holder`` name the folder's setting and the kind of process in the refusal (a sweep locks
    its ``out_dir`` against ``another sweep``).

    Raises:
        RunLocked: another process (or another open of the lock in this process) holds it; the
            message names the folder and the holder's process id and host when known.
        OSError: the folder or the lock file cannot be created, or the lock's name is a folder
            (one line).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = run_dir / LOCK_NAME
    if lock.is_symlink():
        lock.unlink()  # a planted link is replaced, never written through
    elif lock.exists() and not lock.is_file():
        kind = "a folder" if lock.is_dir() else "no regular file (a FIFO or a device)"
        raise OSError(f"{str(lock)!r} is {kind}, not a lock file; remove it or pick another {key}")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        if not _try_lock(fd):
            raise RunLocked(
                f"{key}={str(run_dir)!r} is in use by {holder} ({_holder(fd)}); "
                f"wait for it to end or pick another {key}"
            )
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _holder(fd: int) -> str:
    """What the lock file says about its holder (``pid N on HOST``), or ``holder unknown``."""
    try:
        return os.read(fd, 200).decode("utf-8", "replace").strip() or "holder unknown"
    except OSError:  # Windows refuses to read a locked byte range
        return "holder unknown"


def remove_lock_only_folder(run_dir: Path) -> None:
    """Remove ``run_dir`` when it holds nothing but its ``.lock``: a folder this process created
    for a run refused or failed before it wrote anything (call it after the lock is released)."""
    lock = run_dir / LOCK_NAME
    if run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= {LOCK_NAME}:
        lock.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            run_dir.rmdir()


@contextlib.contextmanager
def removed_if_refused(run_dir: Path, main: bool = True) -> Iterator[None]:
    """Around a block that locks ``run_dir`` (outside the lock, so it is released first): when
    the block raises and this call found no such folder, remove it if it holds only its
    ``.lock`` (:func:`remove_lock_only_folder`); ``main``: this process writes the files (rank
    0 of a distributed run)."""
    created = not run_dir.exists()
    try:
        yield
    except BaseException:
        if created and main:
            remove_lock_only_folder(run_dir)
        raise
