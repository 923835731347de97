"""Run sweep jobs in worker processes, one run at a time each, so no fault spreads.

Why not ``concurrent.futures.ProcessPoolExecutor``: when one worker dies abruptly (the OOM
killer's ``kill -9``), the executor marks the whole pool broken and terminates every other
worker, losing their training. Here each worker has its own process and its own pipe: a run whose
worker dies without a record is reported as failed, a fresh worker takes the next run, and the
others go on. A worker runs one run after another (each run seeds and sets up everything it
reads), which saves the 2 to 4 s a fresh Python process takes to import PyTorch for every run.

Signals: SIGINT (Ctrl-C), SIGTERM (``timeout``, schedulers) and SIGHUP (a closed terminal) sent
to the parent set a shared stop event; each running training saves a checkpoint at its next step
and returns ``interrupted``, runs not yet started are ``cancelled``. Workers leave the terminal's
process group, so Ctrl-C reaches the parent alone. A worker whose parent disappears (``kill -9``
of the sweep) stops the same way, then exits: no orphan keeps training.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from typing import Any

from lab.common.runtime import handling_stop_signals

ORPHAN_GRACE_S = 60.0
"""Seconds an orphaned worker may take to save its checkpoint before it exits regardless."""

MAX_WORKERS = 256
"""Most parallel runs of ``sweep.py --workers``: each worker is a Python process holding
PyTorch (about 300 MB before its model), so 256 already ask for tens of GB; a typo such as
``--workers 1000`` is refused by name instead of starting a process per run."""

Job = Callable[..., dict[str, Any]]
"""``job(spec, device, threads, should_stop) -> record``: a picklable module-level function
whose record holds at least ``name`` and ``status``."""


@dataclass
class _Slot:
    """One worker: its process, its pipe (runs in, records out), its slot, and the run it is
    on (None once it is told to exit)."""

    process: Any
    conn: Connection | None
    index: int
    name: str | None = None


def run_in_processes(
    job: Job,
    specs: list[Any],
    devices: list[str],
    threads: int,
    stop: Any,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run ``job`` once per spec, at most ``len(devices)`` at a time, in worker processes that
    each take one run after another.

    Args:
        job: see :data:`Job`; it runs in the child with ``should_stop`` polled between steps.
        specs: objects with a ``name``; one run each, started in this order.
        devices: one entry per parallel slot (``"cpu"``, ``"cuda:0"``, ...).
        threads: CPU threads per worker.
        stop: a ``multiprocessing`` event of the spawn context (``get_context("spawn").Event()``)
            shared with the workers; once set, running jobs stop at their next step and queued
            ones never start. Setting it is the caller's (see :func:`stop_on_signals`).
        on_record: called in the parent with each record as it arrives (e.g. a progress bar).

    Returns:
        One record per spec, in spec order: a worker that died without one gives status
        ``failed`` with its exit code; a run never started after a stop gives ``cancelled``.
    """
    context = get_context("spawn")
    queue = list(specs)
    running: list[_Slot] = []
    records: dict[str, dict[str, Any]] = {}
    while queue or running:
        free = sorted(set(range(len(devices))) - {s.index for s in running})
        while queue and free and not stop.is_set():
            index = free.pop(0)
            running.append(_start(context, job, index, devices[index], threads, stop))
            _give(running[-1], queue)
        if stop.is_set():
            for spec in queue:
                records[spec.name] = {"name": spec.name, "status": "cancelled", "error": None}
            queue.clear()
        if not running:
            break
        for name, record in _collect(running, stop, queue):
            records[name] = record
            if on_record is not None:
                on_record(record)
    return [records[spec.name] for spec in specs]


def _start(context: Any, job: Job, index: int, device: str, threads: int, stop: Any) -> _Slot:
    """Start a worker of ``job`` in a new process of ``context`` in slot ``index`` on
    ``device``; it waits for runs (:func:`_give`)."""
    ours, theirs = context.Pipe(duplex=True)
    process = context.Process(
        target=_child,
        args=(job, device, threads, stop, theirs, os.getpid()),
        name=f"sweep-worker-{index}",
    )
    # SIG_IGN is inherited through exec: a terminal Ctrl-C that reaches a worker before
    # it leaves the terminal's group is ignored instead of printing a traceback.
    with _sigint_ignored():
        process.start()
    theirs.close()  # the child holds the only other end: EOF when it dies
    return _Slot(process, ours, index)


def _give(slot: _Slot, queue: list[Any]) -> None:
    """Hand ``slot``'s worker the next run of ``queue`` (popped), or tell it to exit when the
    queue is empty. A worker that died in between gets nothing: the run stays queued."""
    spec = queue[0] if queue else None
    try:
        slot.conn.send(spec)
    except OSError:  # the worker is gone; its sentinel removes it (nothing was running)
        spec = None
    if spec is not None:
        queue.pop(0)
    slot.name = spec.name if spec is not None else None


def _collect(running: list[_Slot], stop: Any, queue: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """Wait up to a second for the ``running`` workers; receive the records sent (each worker
    that sent one gets the next run of ``queue``, or is told to exit once it is empty or the
    sweep stops), and remove from ``running`` the workers that exited.

    Returns:
        ``(spec name, record)`` of each run that ended, in ``running`` order (:func:`_died` for
        a worker that exited during a run).
    """
    finished = []
    ready = set(wait([o for s in running for o in _waitables(s)], timeout=1.0))
    for slot in list(running):
        if slot.conn is not None and slot.conn in ready:
            try:
                record = slot.conn.recv()
            except (EOFError, OSError):  # died: its sentinel reports it below
                slot.conn.close()
                slot.conn = None
            else:
                finished.append((slot.name, record))
                _give(slot, [] if stop.is_set() else queue)
        if slot.process.sentinel in ready:
            slot.process.join()
            if slot.name is not None:  # it died during a run
                finished.append((slot.name, _died(slot, stop.is_set())))
            if slot.conn is not None:
                slot.conn.close()
            running.remove(slot)
    return finished


def _waitables(slot: _Slot) -> list[Any]:
    return [slot.process.sentinel] + ([slot.conn] if slot.conn is not None else [])


def _died(slot: _Slot, stopping: bool) -> dict[str, Any]:
    """The record of a worker that exited without sending one: ``failed``, or ``interrupted``
    when the sweep was stopping anyway (a signal that reached it before it left the group)."""
    code = slot.process.exitcode
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    hint = " (SIGKILL: out of memory?)" if code == -signal.SIGKILL else ""
    return {
        "name": slot.name,
        "status": "interrupted" if stopping else "failed",
        "error": f"worker process died ({how}{hint}) before reporting; its last checkpoint, "
        "if any, is kept and the next sweep resumes from it",
        "result": None,
    }


@contextlib.contextmanager
def stop_on_signals(stop: Any) -> Iterator[list[int]]:
    """While inside, in the main thread, the :data:`lab.common.runtime.STOP_SIGNALS` set the event
    ``stop`` (a ``threading.Event`` or a ``multiprocessing`` one) instead of interrupting
    whatever code runs; that code polls ``stop`` at safe points (between training steps, between
    runs). Yields the list of signals received, in order. The previous handlers come back on
    exit; outside the main thread it does nothing."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: object) -> None:
        if not received:
            print(
                f"\n{signal.Signals(signum).name}: stopping; running trainings save a checkpoint "
                "at their next step, runs not yet started are cancelled",
                file=sys.stderr,
            )
        received.append(signum)
        stop.set()

    with handling_stop_signals(handler):
        yield received


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT in this (main) thread while inside; a no-op elsewhere."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _child(
    job: Job,
    device: str,
    threads: int,
    stop: Any,
    conn: Connection,
    parent_pid: int,
) -> None:
    """Worker process body: leave the terminal's process group, watch the parent, then run
    each job the parent sends and send back its record, until it sends None (or is gone)."""
    if hasattr(os, "setpgid"):
        os.setpgid(0, 0)  # Ctrl-C in the terminal reaches the parent only; it sets ``stop``
    orphaned = threading.Event()
    threading.Thread(target=_watch_parent, args=(parent_pid, orphaned), daemon=True).start()

    def should_stop() -> bool:
        return stop.is_set() or orphaned.is_set()

    while True:
        try:
            spec = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if spec is None:
            conn.close()
            return
        record = job(spec, device, threads, should_stop)
        if orphaned.is_set():
            os._exit(1)  # nobody is left to read the record
        conn.send(record)


def _watch_parent(parent_pid: int, orphaned: threading.Event, poll_s: float = 0.5) -> None:
    """Set ``orphaned`` once the parent is gone; exit the process if the job has not stopped
    within :data:`ORPHAN_GRACE_S` (a checkpoint save takes well under a second)."""
    while os.getppid() == parent_pid:
        threading.Event().wait(poll_s)
    orphaned.set()
    threading.Event().wait(ORPHAN_GRACE_S)
    os._exit(1)
