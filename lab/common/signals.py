"""Ctrl-C and SIGTERM at every moment of a command: one line on stderr and an exit code.

Every entry point (``train.py``, ``eval.py``, ``sweep.py``, ``properties.py``, ``bench.py``)
goes through three phases, each with its handler for the :data:`STOP_SIGNALS`:

1. Start-up (imports, which take seconds with torch): :func:`exit_at_once`, installed by the
   entry point's first statement, before any heavy import. A signal prints
   ``PROGRAM: interrupted by SIGTERM during start-up; nothing was written`` and ends the process
   there (nothing has been written yet, so there is nothing to clean).
2. The command itself, run by :func:`run_main`: a signal raises :class:`Stopped` (a
   ``KeyboardInterrupt``) wherever the code is, so an atomic write in progress deletes its
   temporary file and leaves the old file (:func:`lab.common.files.atomic_writer`), and the command
   ends with ``PROGRAM: interrupted by SIGNAL; HINT``. Code that must stop at a safe point
   instead (a training between steps, a sweep between runs) installs its own handler inside
   and gives this one back when done (:func:`lab.common.runtime.handling_stop_signals`).
3. After the command returned (or failed): a signal ends the process at once with its message.
   :func:`run_program` then ends the process itself (exit handlers, flushed output,
   ``os._exit``) instead of leaving it to Python's interpreter shutdown, which takes seconds
   after torch was imported and first sets every Python handler back to the default action:
   a signal in those seconds killed the process silently.

The exit code is ``128 + signal number`` in every phase: 130 for SIGINT, 143 for SIGTERM, 129
for SIGHUP, as a shell reports a process killed by that signal. This module imports nothing
but the standard library, so it is usable before torch is imported.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import NoReturn

STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""Signals that stop a command cleanly: Ctrl-C, what ``timeout``, ``kill`` and batch schedulers
send (SIGTERM), and what a closing terminal sends (SIGHUP, POSIX only)."""


class Stopped(KeyboardInterrupt):
    """A stop signal arrived while :func:`run_main` ran the command.

    Attributes:
        signum: the signal (``SIGINT``, ``SIGTERM`` or ``SIGHUP``).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(stop: BaseException) -> int:
    """``128 + signal number`` of a :class:`Stopped`; 130 (SIGINT) for a plain
    ``KeyboardInterrupt`` (Python's own Ctrl-C)."""
    return 128 + getattr(stop, "signum", signal.SIGINT)


def signal_name(stop: BaseException) -> str:
    """``"SIGTERM"`` etc. for a :class:`Stopped`, ``"SIGINT"`` for a plain ``KeyboardInterrupt``."""
    return signal.Signals(getattr(stop, "signum", signal.SIGINT)).name


def rank_prefix() -> str:
    """``"[rank R] "`` under ``torchrun`` with several ranks, else ``""``: what a process
    prints before a line every rank may print (an error, a stop)."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return ""
    return f"[rank {os.environ.get('RANK', '?')}] "


def _install(handler: Callable[[int, object], None]) -> None:
    """``handler`` for every stop signal not ignored (a worker started with SIGINT ignored, so
    that the terminal's Ctrl-C reaches its parent only, keeps ignoring it). Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, handler)


def _say(line: str) -> None:
    """Write ``line`` to stderr on a line of its own (after a progress bar at a terminal)."""
    with contextlib.suppress(OSError, ValueError):  # stderr closed or gone with the terminal
        start = "\n" if sys.stderr.isatty() else ""
        sys.stderr.write(f"{start}{rank_prefix()}{line}\n")
        sys.stderr.flush()


def exit_at_once(program: str, why: str = "during start-up; nothing was written") -> None:
    """Phase 1 (and 3): a stop signal prints ``PROGRAM: interrupted by SIGNAL WHY`` and exits
    with ``128 + signum`` immediately (``os._exit``: no cleanup, no traceback)."""

    def handler(signum: int, frame: object) -> None:
        _say(f"{program}: interrupted by {signal.Signals(signum).name} {why}")
        os._exit(128 + signum)

    _install(handler)


def raise_stopped(signum: int, frame: object) -> None:
    """Phase 2's handler: raise :class:`Stopped` where the code is."""
    raise Stopped(signum)


def run_main(program: str, main: Callable[[], int], hint: str) -> int:
    """Run ``main()`` (phase 2) and return its exit status; a stop signal anywhere in it ends it
    with ``PROGRAM: interrupted by SIGNAL; HINT`` on stderr and ``128 + signum``.

    Args:
        program: the command's name, e.g. ``"eval.py"``.
        main: the command; returns its exit status.
        hint: what is on disk and how to go on, e.g. ``"the same command finishes it"``.
    """
    _install(raise_stopped)
    status = None
    try:
        status = main()
        return status
    except KeyboardInterrupt as stop:
        exit_at_once(program, "while stopping")  # a second signal: no traceback either
        _say(f"{program}: interrupted by {signal_name(stop)}; {hint}")
        status = exit_code(stop)
        return status
    finally:  # however main ended (an error, argparse's exit): phase 3
        if isinstance(status, int) and status - 128 in STOP_SIGNALS:
            _exit_quietly(status)  # the stop was said (here or by main): once is enough
        else:
            exit_at_once(program, "while exiting")


def _exit_quietly(status: int) -> None:
    """Phase 3 after a stop was reported: a further stop signal (a second Ctrl-C, ``timeout``
    sending SIGTERM to a process already stopping) ends the process at once with ``status``,
    the first signal's code, and no second line."""
    _install(lambda signum, frame: os._exit(status))


def run_program(program: str, main: Callable[[], int], hint: str) -> NoReturn:
    """An entry point's last statement: :func:`run_main`, then end the process with its exit
    status (or that of a ``SystemExit`` it raised, e.g. argparse's usage error).

    Python's own shutdown after ``sys.exit`` resets the signal handlers to the default action
    first, then tears down every module (measured 1.8-2.8 s after a tiny ``train.py`` run):
    a stop signal in that time killed the process without a line. Here the exit handlers run
    (``atexit``: multiprocessing's clean-up, logging) and the output is flushed under phase 3's
    handler, then ``os._exit`` ends the process at once. An unexpected error propagates as
    before (its traceback is a bug to report).
    """
    try:
        status = run_main(program, main, hint)
    except SystemExit as done:
        status = done.code
    if status is None:
        status = 0
    elif not isinstance(status, int):  # sys.exit("message"): printed, exit status 1
        _say(str(status))
        status = 1
    threads = getattr(threading, "_shutdown", None)  # what the interpreter runs first:
    if threads is not None:  # join non-daemon threads (and threading's exit callbacks)
        threads()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or a reader gone
            stream.flush()
    os._exit(status)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold stop signals while inside (e.g. while jobs are submitted, so their ids are known);
    the first one raises :class:`Stopped` when the block ends. Main thread only (a no-op
    elsewhere); the previous handlers come back on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    _install(lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        for signum, action in previous.items():
            if action is not None:  # None: a handler set outside Python, left as it is
                signal.signal(signum, action)
    if received:
        raise Stopped(received[0])
