"""Sweeps on a cluster: one scheduler job per run, submitted through ``submitit`` (SLURM).

Each job runs :func:`lab.sweeps.sweep.run_one` (train -> eval, or resume, or skip), the same
function a local worker runs, so finished-run skipping, resuming and the report work as locally. All
jobs go in one SLURM job array; this process waits for them and returns their records, from
which ``sweep.py`` writes the report. ``submitit`` is an optional dependency
(``pip install -r requirements-cluster.txt``).

A job near its time limit gets SIGUSR2 from SLURM (submitit asks for it 90 s ahead); in a
training it acts as SIGTERM does: a checkpoint at the next step (:func:`run_job`). Running the
sweep again resumes the run.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.common.config import ConfigError
from lab.common.signals import deferred, exit_code
from lab.sweeps.sweep import RunSpec, run_one

CLUSTERS = {"slurm": "slurm", "submitit-local": "local"}
"""``--launcher`` name -> submitit cluster. ``submitit-local`` runs every job as a process on
this machine through submitit's local executor: the cluster path without a cluster."""

LOGS = ".submitit"
"""Subfolder of the sweep's ``out_dir`` that holds each job's script, stdout and stderr."""


@dataclass
class ClusterOptions:
    """What every job of a sweep asks the scheduler for.

    Attributes:
        partition: SLURM partition (``None``: the cluster's default).
        time_min: wall-clock limit of one job, minutes.
        gpus: GPUs per job (0: CPU only; the run's ``device=auto`` then picks the CPU).
        cpus: CPU cores per job; also the run's ``threads``.
        account: SLURM account to charge (optional).
        qos: SLURM quality of service (optional).
    """

    partition: str | None = None
    time_min: int = 60
    gpus: int = 1
    cpus: int = 4
    account: str | None = None
    qos: str | None = None

    def __post_init__(self) -> None:
        for name, low in (("time_min", 1), ("gpus", 0), ("cpus", 1)):
            if getattr(self, name) < low:
                flag = {"time_min": "time"}.get(name, name)
                raise ConfigError(
                    f"--slurm.{flag}={getattr(self, name)} is invalid; it must be >= {low}"
                )

    def parameters(self) -> dict[str, Any]:
        """submitit ``AutoExecutor.update_parameters`` keywords (``slurm_*`` ones only when
        set; the local executor ignores them)."""
        extra = {"partition": self.partition, "account": self.account, "qos": self.qos}
        return {
            "name": "posenc-sweep",
            "timeout_min": self.time_min,
            "gpus_per_node": self.gpus,
            "cpus_per_task": self.cpus,
            "tasks_per_node": 1,
            **{f"slurm_{k}": v for k, v in extra.items() if v is not None},
        }


def cluster_executor(launcher: str, out_dir: str | Path, options: ClusterOptions) -> Any:
    """A submitit executor for ``launcher`` with ``options``; job logs go under
    ``out_dir/.submitit/JOB_ID/``.

    Raises:
        ConfigError: see :func:`require_submitit`; or ``slurm`` on a machine without SLURM.
    """
    submitit = require_submitit(launcher)
    try:
        executor = submitit.AutoExecutor(
            folder=Path(out_dir) / LOGS / "%j", cluster=CLUSTERS[launcher]
        )
    except RuntimeError as error:  # no srun on this machine
        raise ConfigError(
            f"--launcher {launcher}: {error}; run it on the cluster's login node, or use "
            "--launcher local"
        ) from None
    executor.update_parameters(**options.parameters())
    return executor


def submit_all(
    specs: list[RunSpec], executor: Any, options: ClusterOptions, at_once: int | None = None
) -> tuple[list[dict[str, Any]], int | None]:
    """Submit one job per spec through ``executor`` (:func:`cluster_executor`; a job array
    on SLURM), wait for all, return their records.

    ``at_once`` (submitit's local executor: the sweep's workers) caps the jobs running at a
    time: that executor starts every job it is given at once, so the specs are submitted in
    turn, each when a slot frees. None submits every job together (SLURM queues them).

    A stop signal (Ctrl-C, SIGTERM, SIGHUP) while submitting or waiting stops the waiting, not
    the jobs: they keep running; the message names the unfinished ones and the command that
    stops them (:func:`still_running`); specs not yet submitted never start.

    Returns:
        ``(records, signum)`` as :func:`sweep.run_all` returns them: one record per spec in
        spec order (a job that died without one is ``failed``, its log named), and the signal
        that stopped the waiting, or None.
    """
    device = None if options.gpus else "cpu"
    jobs: list[Any] = []
    records: list[dict[str, Any]] = []
    try:
        if at_once is None or at_once >= len(specs):
            # a stop while submitting waits until the job ids are known
            with deferred(), executor.batch():
                jobs = [executor.submit(run_job, spec, device, options.cpus) for spec in specs]
            print(f"submitted {len(jobs)} job(s): {', '.join(job.job_id for job in jobs)}")
        else:
            print(f"submitting {len(specs)} job(s), at most {at_once} running at a time")
            submit_in_turn(specs, executor, (device, options.cpus), at_once, jobs)
        for spec, job in zip(specs, jobs, strict=True):
            records.append(job_record(spec, job))
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM or SIGHUP (see lab.common.signals)
        waiting = alive(jobs[len(records) :], executor)
        print(f"\n{still_running(waiting, executor)}", file=sys.stderr)
        if len(jobs) < len(specs):
            print(f"{len(specs) - len(jobs)} run(s) were never submitted", file=sys.stderr)
        return records, exit_code(stop) - 128
    return records, None


POLL_SECONDS = 0.5
"""How often :func:`submit_in_turn` looks for a finished job."""


def submit_in_turn(
    specs: list[RunSpec], executor: Any, job_args: tuple, at_once: int, jobs: list[Any]
) -> None:
    """Submit ``specs`` one at a time into ``jobs`` (appended as each is submitted, so a stop
    signal leaves the submitted ones there), waiting while ``at_once`` of them are unfinished.
    ``job_args`` are :func:`run_job`'s arguments after the spec (device, threads)."""
    for spec in specs:
        while sum(not _done(job) for job in jobs) >= at_once:
            time.sleep(POLL_SECONDS)
        with deferred():
            jobs.append(executor.submit(run_job, spec, *job_args))
        print(f"submitted job {jobs[-1].job_id} ({spec.name})", flush=True)


def alive(jobs: list[Any], executor: Any, grace: float = 5.0) -> list[str]:
    """Ids of ``jobs`` still running after a stop signal. A terminal's Ctrl-C (or a signal to
    the process group) reaches submitit's local jobs too, since they share the sweep's process
    group: their trainings save a checkpoint and end, so they are given ``grace`` seconds and
    only the jobs still running then are named. SLURM jobs run elsewhere and are all named."""
    if getattr(executor, "cluster", "slurm") != "local":
        return [job.job_id for job in jobs]
    deadline = time.monotonic() + grace
    while True:
        running = [job for job in jobs if not _done(job)]
        if not running or time.monotonic() >= deadline:
            return [job.job_id for job in running]
        time.sleep(0.2)


def _done(job: Any) -> bool:
    try:
        return bool(job.done())
    except Exception:  # noqa: BLE001 - a job whose state cannot be read counts as running
        return False


def still_running(job_ids: list[str], executor: Any) -> str:
    """The line a stopped sweep prints: which jobs keep running and the command that stops
    them (``scancel`` on SLURM; ``kill`` for submitit's local jobs, whose ids are process ids;
    either makes a training save a checkpoint at its next step)."""
    if not job_ids:
        return "stopped waiting; no job is left running; run the same command again for the report"
    local = getattr(executor, "cluster", "slurm") == "local"
    stop = f"{'kill' if local else 'scancel'} {' '.join(job_ids)}"
    return (
        f"stopped waiting; {len(job_ids)} job(s) keep running ({', '.join(job_ids)}); stop "
        f"them with: {stop} (a training saves a checkpoint at its next step), or run the same "
        "command again once they have ended to get the report (finished runs are skipped)"
    )


def run_job(spec: RunSpec, device: str | None, threads: int) -> dict[str, Any]:
    """:func:`lab.sweeps.sweep.run_one` inside a scheduler job.

    submitit answers SLURM's advance warning (SIGUSR2, 90 s before the time limit) by raising
    an error wherever the job is, mid-step included, and saves nothing for a plain function.
    Here SIGUSR2 is turned into SIGTERM for this process, so a training stops at its next step
    with a checkpoint (``interrupted``); outside training, submitit's own SIGTERM handler only
    logs it. The previous handler comes back when the run ends.
    """
    usr2 = getattr(signal, "SIGUSR2", None)
    if usr2 is None:  # Windows: no SLURM either
        return run_one(spec, device, threads)
    previous = signal.signal(usr2, lambda signum, frame: os.kill(os.getpid(), signal.SIGTERM))
    try:
        return run_one(spec, device, threads)
    finally:
        signal.signal(usr2, previous)


def require_submitit(launcher: str) -> Any:
    """The ``submitit`` module, checked before anything is submitted.

    Raises:
        ConfigError: ``launcher`` is not in :data:`CLUSTERS`, or submitit is not installed
            (one line saying how to install it).
    """
    if launcher not in CLUSTERS:
        raise ConfigError(f"--launcher {launcher} is unknown; use local or {', '.join(CLUSTERS)}")
    try:
        import submitit
    except ImportError:
        raise ConfigError(
            f"--launcher {launcher} needs submitit; pip install -r requirements-cluster.txt"
        ) from None
    return submitit


def job_record(spec: RunSpec, job: Any) -> dict[str, Any]:
    """The record ``job`` returned, or a ``failed`` record naming its log if it returned none.

    A run stopped by a signal (SLURM's SIGTERM at the time limit, ``scancel``) saved a
    checkpoint; it is reported as ``failed`` with how to continue it, so the sweep's report
    lists it and exits 1 instead of counting it nowhere.
    """
    try:
        record = job.result()
        if record["status"] == "interrupted":
            record.update(
                status="failed",
                error=f"job {job.job_id} was stopped by a signal (its time limit?); a "
                "checkpoint was saved: run the same command again to continue it",
            )
        return record
    except Exception as error:  # submitit's FailedJobError, UncompletedJobError
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return {
            "name": spec.name,
            "status": "failed",
            "error": f"job {job.job_id} ended without a result ({first}); see {job.paths.stderr}",
            "result": None,
        }
