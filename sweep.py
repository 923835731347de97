"""Run a sweep of position schemes: ``python sweep.py [--quick] [key=v1,v2 ...]``.

With no arguments it runs the default ablation (``configs/ablation.yaml``: five position
schemes on ``svo`` and ``copy``, three seeds) into ``runs/ablation/`` and prints the comparison
table; ``python sweep.py --publish runs/ablation`` then puts its results into ``docs/`` and
the README. ``--quick`` runs ``configs/quick.yaml``, a smoke test of the pipeline (a few minutes).
``--launcher
slurm`` runs every run as a SLURM job through submitit instead of local workers
(docs/sweeps.md). ``task=all`` or ``position=all`` sweeps every registered task or scheme.
"""

if __name__ == "__main__":  # first, so a stop signal during the imports is one line too
    from lab.common.signals import exit_at_once

    exit_at_once("sweep.py")

import argparse
import contextlib
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from lab.common.commands import Programs, hand_off, list_programs
from lab.common.config import ConfigError
from lab.common.outputs import sweep_file_record
from lab.common.runlock import RunLocked
from lab.common.signals import run_program
from lab.stats.verdicts import SMOKE_NOTE
from lab.sweeps.cluster import CLUSTERS, ClusterOptions, cluster_executor, submit_all
from lab.sweeps.local import STOPPED, parallel_runs, run_all, stopped_line
from lab.sweeps.summary import report, write_timing
from lab.sweeps.sweep import RunSpec, Sweep, expand, load_sweep, prepare_out_dir
from lab.sweeps.workers import MAX_WORKERS

CONFIGS = Path(__file__).parent / "configs"


PROGRAMS: Programs = {
    "--publish": (
        "lab.reporting.readme",
        "[RUNS_DIR] [--suite DIR ...] [--check]: copy finished sweeps' results into docs/ and "
        "rewrite the result pages and the README's generated parts (--publish --help)",
    ),
    "--extend-study": (
        "lab.lm.extend_study",
        "[STUDY.yaml] [--workers N] [key=value ...]: parents, zero-shot extension rules, "
        "fine-tuned children and a run from scratch at the longer length, compared with paired "
        "tests (configs/lm_extend.yaml; --extend-study --help)",
    ),
    "--select-lr": (
        "lab.sweeps.select_lr",
        "[--config SWEEP.yaml] [--lrs 3e-4,1e-3,3e-3] [--seeds 100] [key=value ...]: choose "
        "each scheme's learning rate on in-distribution validation at an equal budget and "
        "write a sweep file that uses them (--select-lr --help)",
    ),
    "--compare": (
        "lab.reporting.reproducibility",
        "A.json B.json [--labels A B] [--kind machine|setting] [--out PAGE.md]: compare two "
        "machines' (or settings') results.json of one sweep, run by run (--compare --help)",
    ),
}
"""Flags that run another program: given first, the rest of the command line goes to that
module's ``main(argv)`` and its exit code is this program's."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    handed = hand_off("sweep.py", argv, PROGRAMS)
    if handed is not None:
        return handed
    args = build_parser().parse_intermixed_args(argv)
    with contextlib.ExitStack() as held:  # out_dir's lock, until the sweep ends
        try:
            sweep, specs = plan(args, held)
            cluster = ClusterOptions(
                args.partition, args.time_min, args.gpus, args.cpus, args.account, args.qos
            )
            executor = None  # the local launcher runs workers here
            if args.launcher != "local":
                executor = cluster_executor(args.launcher, sweep.out_dir, cluster)
        except (ConfigError, OSError, ValueError, RunLocked) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        return execute(args, argv, sweep, specs, cluster, executor)


def execute(
    args: argparse.Namespace,
    argv: list[str],
    sweep: Sweep,
    specs: list[RunSpec],
    cluster: ClusterOptions,
    executor: Any,
) -> int:
    """Run the planned sweep (locally or through ``executor``), then write its report and
    timing; the exit code (``128 + signal`` when a signal stopped it)."""
    started = time.perf_counter()
    read = sweep_file_record(  # as it was read, before any run: sweep.json records it
        args.config or CONFIGS / ("quick.yaml" if args.quick else "ablation.yaml")
    )
    if sweep.smoke:
        print(f"{SMOKE_NOTE.replace('**', '')} Draw no conclusions from it.")
    if args.launcher != "local":
        workers = len(specs)  # one job each; submitit's local executor: one per worker slot
        at_once = None
        if args.launcher == "submitit-local":  # each job runs --slurm.cpus threads
            slots = max(1, (os.cpu_count() or 1) // cluster.cpus)
            at_once = workers = parallel_runs(len(specs), args.workers or slots, 0, 0, slots)
        records, signum = submit_all(specs, executor, cluster, at_once)
        if signum is not None:  # the jobs go on; submit_all said so
            return 128 + signum
    else:
        gpus, cpus = torch.cuda.device_count(), os.cpu_count() or 1
        workers = parallel_runs(len(specs), args.workers, args.runs_per_device, gpus, cpus)
        print(f"{len(specs)} runs into {sweep.out_dir}/ with {workers} worker(s)")
        records, signum = run_all(specs, workers, torch.cuda.device_count())
    seconds = time.perf_counter() - started
    command = shlex.join(["python", "sweep.py", *argv])  # recorded in sweep.json
    if signum is not None:  # its time and counts, so the pass that goes on adds to them
        write_timing(records, Path(sweep.out_dir), seconds, workers, sweep.smoke, command, (), read)
        print("\n" + stopped_line(signum, shlex.join(["python", *sys.argv])), file=sys.stderr)
        return 128 + signum
    return report(records, Path(sweep.out_dir), seconds, workers, sweep.smoke, command, read)


def plan(args: argparse.Namespace, held: contextlib.ExitStack) -> tuple[Sweep, list[RunSpec]]:
    """The sweep the arguments ask for and its runs, checked before any run starts (the sweep
    file, every run config, ``out_dir`` and the runs already there; see
    :func:`lab.sweeps.sweep.prepare_out_dir`); prints how many grid points are one run. The
    lock of ``out_dir`` is taken into ``held`` before its runs are looked at: one sweep at a
    time writes a folder's runs and reports.

    Raises:
        ConfigError, OSError, ValueError: one line naming the value and what is allowed.
        RunLocked: another sweep holds ``out_dir`` (one line naming its process).
    """
    if args.config and args.quick:
        raise ConfigError("give --config or --quick, not both")
    for flag, value in (("--workers", args.workers), ("--runs-per-device", args.runs_per_device)):
        if not 0 <= value <= MAX_WORKERS:
            raise ConfigError(
                f"{flag}={value} is invalid; it must be >= 0 (0 = auto) and <= {MAX_WORKERS}"
            )
    path = args.config or CONFIGS / ("quick.yaml" if args.quick else "ablation.yaml")
    sweep = load_sweep(path, args.overrides)
    specs = expand(sweep)
    collapsed = [alias for spec in specs for alias in spec.aliases]
    if collapsed:
        print(
            f"{len(collapsed)} grid point(s) resolve to a run already in the grid and are "
            f"one run with it (another task's options, or a value spelled differently): "
            f"{'; '.join(collapsed[:3])}{' ...' if len(collapsed) > 3 else ''}"
        )
    prepare_out_dir(sweep, specs, args.overwrite, held=held)
    return sweep, specs


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``sweep.py`` (the flags of :data:`PROGRAMS` are listed, and handled
    before parsing)."""
    parser = argparse.ArgumentParser(  # no abbreviations: --publ must not run the ablation
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--config", help="sweep file (default configs/ablation.yaml)")
    parser.add_argument("--quick", action="store_true", help="use configs/quick.yaml")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="parallel runs (default: --runs-per-device on each device; never more than "
        "the runs, at most 256)",
    )
    parser.add_argument(
        "--runs-per-device",
        type=int,
        default=0,
        help="parallel runs on each device when --workers is not given (default: 4 per GPU, "
        "at most one per CPU core; without a GPU one per CPU core)",
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
        "(submitit); submitit-local: the slurm path with jobs as local processes, at most "
        "--workers at a time (default: cores / --slurm.cpus)",
    )
    _slurm_arguments(parser)
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="e.g. position=rope,alibi task=copy seed=0,1,2 train.steps=500 out_dir=runs/x; "
        "task=all and position=all: every registered task or scheme",
    )
    list_programs(parser, PROGRAMS)
    return parser


def _slurm_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``--slurm.*`` options (:class:`lab.sweeps.cluster.ClusterOptions`)."""
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


REPORTING = {
    "--publish": "pages are rendered before any is written; run it again, or --publish --check "
    "to see whether docs/ is current",
    "--compare": "it writes its page at the end; run it again",
}
"""What a stop signal leaves of the programs that train nothing (the others resume: STOPPED)."""


def stop_hint(argv: list[str]) -> str:
    """The line a stop signal ends ``sweep.py ARGV`` with: how to go on."""
    again = shlex.join(["python", "sweep.py", *argv])
    return REPORTING.get(argv[0] if argv else "", f"{STOPPED}: {again}")


if __name__ == "__main__":  # a stop between runs, or in the report, names the command again
    run_program("sweep.py", main, stop_hint(sys.argv[1:]))
