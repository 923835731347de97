"""Run a sweep of position schemes: ``python sweep.py [--quick] [key=v1,v2 ...]``.

With no arguments it runs the default ablation (``configs/ablation.yaml``: five position
schemes on ``svo`` and ``copy``) into ``runs/ablation/`` and prints the comparison table.
``--quick`` runs ``configs/quick.yaml``, a one-minute first look.
"""

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import torch
from tqdm import tqdm

from lab.config import ConfigError
from lab.sweep import expand, load_sweep, run_one

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
    args = parser.parse_args(argv)
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
    records = run_all(specs, workers, gpus)
    seconds = time.perf_counter() - started
    return report(records, Path(sweep.out_dir), seconds)


def run_all(specs, workers: int, gpus: int) -> list[dict]:
    """Run every spec, in order with one worker, else in a process pool (spawned workers)."""
    if workers == 1:
        return [run_one(spec) for spec in tqdm(specs, desc="sweep", unit="run")]
    threads = max(1, (os.cpu_count() or 1) // workers)
    records = [None] * len(specs)
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = {
            pool.submit(run_one, spec, f"cuda:{i % gpus}" if gpus else "cpu", threads): i
            for i, spec in enumerate(specs)
        }
        for future in tqdm(as_completed(futures), total=len(specs), desc="sweep", unit="run"):
            records[futures[future]] = future.result()
    return records


def report(records: list[dict], out_dir: Path, seconds: float) -> int:
    """Write the comparison report, print it and where everything is; exit 1 if a run failed."""
    from lab.report import summary_table, write_reports

    results = [r["result"] for r in records if r["result"] is not None]
    failed = [r for r in records if r["status"] == "failed"]
    paths = write_reports(results, out_dir) if results else {}
    print()
    if results:
        print(summary_table(results, out_dir))
    done = sum(r["status"] == "done" for r in records)
    skipped = sum(r["status"] == "skipped" for r in records)
    print(
        f"\n{done} run(s) trained, {skipped} skipped (already finished), {len(failed)} failed, "
        f"in {seconds / 60:.1f} min"
    )
    for record in failed:
        print(f"FAILED {record['name']}: {record['error']}", file=sys.stderr)
    for name, path in paths.items():
        print(f"{name}: {path}")
    print(f"TensorBoard: tensorboard --logdir {out_dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
