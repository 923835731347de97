"""Run a sweep of position schemes: ``python sweep.py [--quick] [key=v1,v2 ...]``.

With no arguments it runs the default ablation (``configs/ablation.yaml``: five position
schemes on ``svo`` and ``copy``, three seeds) into ``runs/ablation/`` and prints the comparison
table; ``python -m lab.readme runs/ablation`` then puts its results into ``docs/`` and the README.
``--quick`` runs ``configs/quick.yaml``, a one-minute smoke test of the pipeline.
"""

import argparse
import json
import os
import platform
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import torch
from tqdm import tqdm

from lab.config import ConfigError
from lab.files import atomic_write
from lab.sweep import RunSpec, expand, init_worker, load_sweep, run_one

CONFIGS = Path(__file__).parent / "configs"


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
        help="parallel runs (default: one per GPU, else one per CPU core)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="e.g. position=rope,alibi task=copy seed=0,1,2 train.steps=500 out_dir=runs/x",
    )
    args = parser.parse_intermixed_args(argv)
    if args.config and args.quick:
        print("error: give --config or --quick, not both", file=sys.stderr)
        return 2
    path = args.config or CONFIGS / ("quick.yaml" if args.quick else "ablation.yaml")
    try:
        sweep = load_sweep(path, args.overrides)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.workers < 0:
        print(
            f"error: --workers={args.workers} is invalid; it must be >= 0 (0 = auto)",
            file=sys.stderr,
        )
        return 2
    specs = expand(sweep)
    gpus = torch.cuda.device_count()
    workers = args.workers or min(len(specs), gpus or os.cpu_count() or 1)
    started = time.perf_counter()
    print(f"{len(specs)} runs into {sweep.out_dir}/ with {workers} worker(s)")
    if args.quick:
        print("--quick is a smoke test: short training, small evaluation sets; draw no conclusions")
    records = run_all(specs, workers, gpus)
    if any(r["status"] in ("interrupted", "cancelled") for r in records):
        print(
            "\ninterrupted: finished runs are kept and running ones saved a checkpoint; "
            f"run the same command again to resume ({sweep.out_dir}/)",
            file=sys.stderr,
        )
        return 130
    seconds = time.perf_counter() - started
    return report(records, Path(sweep.out_dir), seconds, workers)


def run_all(specs: list[RunSpec], workers: int, gpus: int) -> list[dict]:
    """Run every spec, in order with one worker, else in a process pool (spawned workers).

    On Ctrl-C every running training saves a checkpoint and stops, runs not yet started are
    cancelled, and the records say which (statuses ``interrupted`` and ``cancelled``).
    """
    if workers == 1:
        records = []
        for spec in tqdm(specs, desc="sweep", unit="run"):
            records.append(run_one(spec))
            if records[-1]["status"] == "interrupted":
                break
        return records
    threads = max(1, (os.cpu_count() or 1) // workers)
    context = get_context("spawn")
    stop = context.Event()
    records = []
    with ProcessPoolExecutor(workers, context, init_worker, (stop,)) as pool:
        futures = [
            pool.submit(run_one, spec, f"cuda:{i % gpus}" if gpus else "cpu", threads)
            for i, spec in enumerate(specs)
        ]
        try:
            for future in tqdm(as_completed(futures), total=len(specs), desc="sweep", unit="run"):
                records.append(future.result())
        except KeyboardInterrupt:
            stop.set()  # running trainings checkpoint and stop; queued runs return at once
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the wait below is seconds long
            print("\nstopping: running trainings save a checkpoint first", file=sys.stderr)
            records = [future.result() for future in futures]
    order = {spec.name: i for i, spec in enumerate(specs)}
    return sorted(records, key=lambda record: order[record["name"]])


def report(records: list[dict], out_dir: Path, seconds: float, workers: int = 1) -> int:
    """Write the comparison report and ``sweep.json`` (wall time, workers, machine), print the
    table and where everything is; exit 1 if a run failed."""
    from lab.report import summary_table, write_reports

    results = [r["result"] for r in records if r["result"] is not None]
    failed = [r for r in records if r["status"] == "failed"]
    paths = write_reports(results, out_dir) if results else {}
    if results:
        paths["timing"] = write_timing(records, out_dir, seconds, workers)
    print()
    if results:
        print(summary_table(results, out_dir))
    count = {s: sum(r["status"] == s for r in records) for s in ("trained", "evaluated", "skipped")}
    print(
        f"\n{count['trained']} run(s) trained, {count['evaluated']} only re-evaluated, "
        f"{count['skipped']} skipped (already finished), {len(failed)} failed, "
        f"in {seconds / 60:.1f} min"
    )
    for record in failed:
        print(f"FAILED {record['name']}: {record['error']}", file=sys.stderr)
    for name, path in paths.items():
        print(f"{name}: {path}")
    print(f"TensorBoard: tensorboard --logdir {out_dir}")
    return 1 if failed else 0


def write_timing(records: list[dict], out_dir: Path, seconds: float, workers: int) -> Path:
    """Write ``OUT_DIR/sweep.json``: seconds, workers, runs by status, and the machine."""
    cpu = platform.processor() or platform.machine()
    machine = f"{os.cpu_count()} CPU core(s) ({cpu}), torch {torch.__version__}"
    if torch.cuda.is_available():
        machine += f", GPU {torch.cuda.get_device_name(0)}"
    timing = {
        "seconds": round(seconds, 1),
        "workers": workers,
        "runs": {s: sum(r["status"] == s for r in records) for s in {r["status"] for r in records}},
        "machine": machine,
    }
    return atomic_write(out_dir / "sweep.json", json.dumps(timing, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
