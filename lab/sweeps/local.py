"""Run a sweep's runs on this machine: in this process one after the other, or in worker
processes (:mod:`lab.sweeps.workers`), stopping cleanly on SIGINT, SIGTERM and SIGHUP."""

from __future__ import annotations

import os
import signal
import threading
from multiprocessing import get_context
from typing import Any

from tqdm import tqdm

from lab.sweeps.sweep import RunSpec, run_one
from lab.sweeps.workers import MAX_WORKERS, run_in_processes, stop_on_signals

STOPPED = (
    "finished runs are kept and stopped ones saved a checkpoint; run the same command again to "
    "resume and write the report (finished runs are skipped)"
)
"""What a stop signal leaves of a sweep or an extend study, said after ``sweep.py: interrupted
by SIGNAL;`` (:func:`stopped_line`, :func:`lab.common.signals.run_main`)."""


def stopped_line(signum: int, command: str = "") -> str:
    """The last line of a sweep or extend study that a stop signal ended, whether its workers
    or the main process caught it: ``sweep.py: interrupted by SIGINT; ...``
    (:data:`STOPPED`), then ``: COMMAND`` to run again when given."""
    line = f"sweep.py: interrupted by {signal.Signals(signum).name}; {STOPPED}"
    return f"{line}: {command}" if command else line


GPU_RUNS_PER_DEVICE = 4
"""Runs that share one GPU by default (fewer where the machine has fewer CPU cores per GPU):
a small model's training step waits on kernel launches from Python, one CPU core per run, so
several processes keep a GPU busy; four bound the memory of their CUDA contexts and models."""


def parallel_runs(runs: int, workers: int, runs_per_device: int, gpus: int, cpus: int) -> int:
    """How many runs a local sweep trains at once: ``workers`` when given (> 0), else
    ``runs_per_device`` on each device (0: the default, one per CPU core on the CPU, or
    :data:`GPU_RUNS_PER_DEVICE` per GPU, at most the CPU cores per GPU); never more than the
    ``runs`` nor :data:`lab.sweeps.workers.MAX_WORKERS`, at least one. Workers share the
    ``gpus`` CUDA devices in turn (:func:`run_all`), so ``k`` runs per device on ``g`` GPUs
    are ``k * g`` workers."""
    if workers <= 0:
        per_device = runs_per_device or (
            min(GPU_RUNS_PER_DEVICE, max(1, cpus // gpus)) if gpus else cpus
        )
        workers = per_device * max(gpus, 1)
    return max(1, min(runs, workers, MAX_WORKERS))


def worker_devices(workers: int, gpus: int) -> list[str]:
    """The device of each of ``workers`` parallel slots: the ``gpus`` CUDA devices in turn
    (``cuda:0``, ``cuda:1``, ..., ``cuda:0``, ...), so each holds ``workers / gpus`` runs at a
    time; ``cpu`` for every slot without a GPU."""
    return [f"cuda:{i % gpus}" if gpus else "cpu" for i in range(workers)]


def run_all(specs: list[RunSpec], workers: int, gpus: int) -> tuple[list[dict], int | None]:
    """Run every spec: in this process, in order, with one worker; else one spawned process per
    run, ``workers`` at a time (see :mod:`lab.sweeps.workers`), on ``gpus`` CUDA devices in
    turn (CPU when 0).

    SIGINT, SIGTERM and SIGHUP stop the sweep: running trainings save a checkpoint (status
    ``interrupted``) and runs not yet started are ``cancelled``.

    Returns:
        ``(records, signum)``: one record per spec (:func:`lab.sweeps.sweep.run_one`), in spec
        order, and the signal that stopped the sweep (None when it ran to the end).
    """
    bar = tqdm(total=len(specs), desc="sweep", unit="run")
    stop = get_context("spawn").Event() if workers > 1 else threading.Event()
    with stop_on_signals(stop) as received:
        if workers > 1:
            threads = max(1, (os.cpu_count() or 1) // workers)
            devices = worker_devices(workers, gpus)
            records = run_in_processes(
                run_one, specs, devices, threads, stop, lambda _: bar.update()
            )
        else:
            records = _run_here(specs, stop, received, bar)
    bar.close()
    return records, received[0] if received else None


def _run_here(
    specs: list[RunSpec], stop: threading.Event, received: list[int], bar: Any
) -> list[dict]:
    """Run every spec in this process, in order, until ``stop`` is set; a run the training loop
    stopped on a signal it caught adds that signal to ``received`` and stops the rest."""
    records = []
    for spec in specs:
        if stop.is_set():
            records.append({"name": spec.name, "status": "cancelled", "error": None})
            continue
        records.append(run_one(spec, should_stop=stop.is_set))
        bar.update()
        if records[-1]["status"] == "interrupted":  # a signal the training loop caught
            received.append(records[-1]["signal"] or signal.SIGINT)
            stop.set()
    return records
