"""Run a sweep of position schemes: ``python sweep.py [--quick] [key=v1,v2 ...]``.

With no arguments it runs the default ablation (``configs/ablation.yaml``: five position
schemes on ``svo`` and ``copy``, three seeds) into ``runs/ablation/`` and prints the comparison
table; ``python -m lab.reporting.readme runs/ablation`` then puts its results into ``docs/`` and
the README.
``--quick`` runs ``configs/quick.yaml``, a one-minute smoke test of the pipeline. ``--launcher
slurm`` runs every run as a SLURM job through submitit instead of local workers (README,
"Scaling out").
"""

if __name__ == "__main__":  # first, so a stop signal during the imports is one line too
    from lab.common.signals import exit_at_once

    exit_at_once("sweep.py")

import argparse
import json
import os
import shlex
import signal
import sys
import threading
import time
from multiprocessing import get_context
from pathlib import Path

import torch
from tqdm import tqdm

from lab.common.config import ConfigError
from lab.common.files import atomic_write
from lab.common.machine import describe, machine_info
from lab.common.signals import run_program
from lab.sweeps.cluster import (
    CLUSTERS,
    ClusterOptions,
    cluster_executor,
    submit_all,
)
from lab.sweeps.sweep import RunSpec, expand, load_sweep, prepare_out_dir, run_one
from lab.sweeps.workers import MAX_WORKERS, run_in_processes, stop_on_signals

CONFIGS = Path(__file__).parent / "configs"


STOPPED = (
    "finished runs are kept and stopped ones saved a checkpoint; run the same command again to "
    "resume and write the report (finished runs are skipped)"
)
"""What a stop signal outside the guarded sections leaves, said after its one line (see
:func:`lab.common.signals.run_main`)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="sweep file (default configs/ablation.yaml)")
    parser.add_argument("--quick", action="store_true", help="use configs/quick.yaml")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="parallel runs (default: one per GPU, else one per CPU core; never more than "
        "the runs, at most 256)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="retrain the runs in out_dir that were trained with other settings (each is "
        "replaced under its folder's lock, after every check)",
    )
    parser.add_argument(
        "--launcher",
        choices=["local", *CLUSTERS],
        default="local",
        help="local: worker processes here (default); slurm: one SLURM job per run "
        "(submitit); submitit-local: the slurm path with jobs as local processes",
    )
    slurm = parser.add_argument_group("slurm (with --launcher slurm or submitit-local)")
    for flag, dest, kind, default, text in (
        ("partition", "partition", str, None, "partition (default: the cluster's)"),
        ("time", "time_min", int, 60, "minutes per job (default 60)"),
        ("gpus", "gpus", int, 1, "GPUs per job (default 1)"),
        ("cpus", "cpus", int, 4, "CPU cores per job, also its threads (default 4)"),
        ("account", "account", str, None, "account to charge (optional)"),
        ("qos", "qos", str, None, "quality of service (optional)"),
    ):
        slurm.add_argument(
            f"--slurm.{flag}",
            dest=dest,
            type=kind,
            default=default,
            metavar=flag.upper(),
            help=text,
        )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="e.g. position=rope,alibi task=copy seed=0,1,2 train.steps=500 out_dir=runs/x",
    )
    args = parser.parse_intermixed_args(argv)
    path = args.config or CONFIGS / ("quick.yaml" if args.quick else "ablation.yaml")
    try:
        if args.config and args.quick:
            raise ConfigError("give --config or --quick, not both")
        if not 0 <= args.workers <= MAX_WORKERS:
            raise ConfigError(
                f"--workers={args.workers} is invalid; it must be >= 0 (0 = auto) and <= "
                f"{MAX_WORKERS}"
            )
        cluster = ClusterOptions(
            args.partition, args.time_min, args.gpus, args.cpus, args.account, args.qos
        )
        sweep = load_sweep(path, args.overrides)
        specs = expand(sweep)
        collapsed = [alias for spec in specs for alias in spec.aliases]
        if collapsed:
            print(
                f"{len(collapsed)} grid point(s) resolve to a run already in the grid and are "
                f"one run with it (another task's options, or a value spelled differently): "
                f"{'; '.join(collapsed[:3])}{' ...' if len(collapsed) > 3 else ''}"
            )
        prepare_out_dir(sweep, specs, args.overwrite)
        if args.launcher != "local":
            executor = cluster_executor(args.launcher, sweep.out_dir, cluster)
    except (ConfigError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    if args.quick:
        print("--quick is a smoke test: short training, small evaluation sets; draw no conclusions")
    if args.launcher != "local":
        workers = len(specs)  # one job each
        records, signum = submit_all(specs, executor, cluster)
        if signum is not None:  # the jobs go on; submit_all said so
            return 128 + signum
    else:
        workers = min(len(specs), args.workers or torch.cuda.device_count() or os.cpu_count() or 1)
        print(f"{len(specs)} runs into {sweep.out_dir}/ with {workers} worker(s)")
        records, signum = run_all(specs, workers, torch.cuda.device_count())
    if signum is not None:
        print(
            "\ninterrupted: finished runs are kept and running ones saved a checkpoint; "
            f"run the same command again to resume: {shlex.join(['python', *sys.argv])}",
            file=sys.stderr,
        )
        return 128 + signum
    seconds = time.perf_counter() - started
    return report(records, Path(sweep.out_dir), seconds, workers)


def run_all(specs: list[RunSpec], workers: int, gpus: int) -> tuple[list[dict], int | None]:
    """Run every spec: in this process, in order, with one worker; else one spawned process per
    run, ``workers`` at a time (see :mod:`lab.sweeps.workers`).

    SIGINT, SIGTERM and SIGHUP stop the sweep: running trainings save a checkpoint (status
    ``interrupted``) and runs not yet started are ``cancelled``.

    Returns:
        ``(records, signum)``: one record per spec, in spec order, and the signal that stopped
        the sweep (None when it ran to the end).
    """
    bar = tqdm(total=len(specs), desc="sweep", unit="run")
    stop = get_context("spawn").Event() if workers > 1 else threading.Event()
    with stop_on_signals(stop) as received:
        if workers > 1:
            threads = max(1, (os.cpu_count() or 1) // workers)
            devices = [f"cuda:{i % gpus}" if gpus else "cpu" for i in range(workers)]
            records = run_in_processes(
                run_one, specs, devices, threads, stop, lambda _: bar.update()
            )
        else:
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
    bar.close()
    return records, received[0] if received else None


def report(records: list[dict], out_dir: Path, seconds: float, workers: int = 1) -> int:
    """Write the comparison report and ``sweep.json`` (wall time, workers, machine), print the
    table and where everything is.

    Returns:
        0, or 1 when a run failed or was stopped on its own (a signal sent to one worker):
        such runs are named, never left out silently.
    """
    from lab.reporting.report import write_reports
    from lab.reporting.sweep_tensorboard import tensorboard_url, write_sweep_tensorboard
    from lab.reporting.tables import summary_table

    results = [x for r in records for x in r.get("results") or [r["result"]] if x is not None]
    failed = [r for r in records if r["status"] == "failed"]
    stopped = [r for r in records if r["status"] == "interrupted"]
    paths, unwritten = {}, None
    try:  # a folder or link planted in out_dir since the sweep began: refused, one line
        paths = write_reports(results, out_dir) if results else {}
    except (OSError, ValueError) as error:
        unwritten = f"error: the report was not written: {error}"
    if results and not unwritten:
        paths["timing"] = write_timing(records, out_dir, seconds, workers)
        try:
            paths["tensorboard_means"] = write_sweep_tensorboard(results, out_dir)
        except (OSError, ValueError) as error:
            unwritten = f"error: the TensorBoard mean runs were not written: {error}"
    print()
    if results:
        print(summary_table(results, out_dir))
    count = {s: sum(r["status"] == s for r in records) for s in ("trained", "evaluated", "skipped")}
    print(
        f"\n{count['trained']} run(s) trained, {count['evaluated']} only re-evaluated, "
        f"{count['skipped']} skipped (already finished), {len(failed)} failed, "
        f"{len(stopped)} interrupted, in {seconds / 60:.1f} min"
    )
    for record in failed:
        print(f"FAILED {record['name']}: {record['error']}", file=sys.stderr)
    for record in stopped:
        print(
            f"INTERRUPTED {record['name']}: its worker was stopped; a checkpoint was saved and "
            "the same command resumes it",
            file=sys.stderr,
        )
    for name, path in paths.items():
        print(f"{name}: {path}")
    if unwritten:
        print(unwritten, file=sys.stderr)
    print(f"TensorBoard: tensorboard --logdir {shlex.quote(str(out_dir))}")
    if "tensorboard_means" in paths:
        print(f"  one line per scheme (mean over seeds), smoothing 0: {tensorboard_url()}")
    return 1 if failed or stopped or unwritten else 0


def write_timing(records: list[dict], out_dir: Path, seconds: float, workers: int) -> Path:
    """Write ``OUT_DIR/sweep.json``: seconds, workers, runs by status, and the machine."""
    info = machine_info()
    timing = {
        "seconds": round(seconds, 1),
        "workers": workers,
        "runs": {s: sum(r["status"] == s for r in records) for s in {r["status"] for r in records}},
        "machine": describe(info),
        "machine_info": info,
    }
    return atomic_write(out_dir / "sweep.json", json.dumps(timing, indent=2) + "\n")


if __name__ == "__main__":
    run_program("sweep.py", main, STOPPED)
