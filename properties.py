"""The property report of position schemes: ``python properties.py [--position NAME ...]
[--run RUN_DIR] [--out DIR]``.

For every registered scheme (or the named ones), with fresh weights: uniqueness, boundedness,
relativity, extrapolation and determinism, each a measured number with its test stated, plus
the classic demonstrations (sinusoidal table and distance by gap, RoPE's equal scores at equal
distance and its long-range decay for bases 10,000 and 1,000,000, score bias per head, the
permutation demonstration). Writes ``properties.md``, ``properties.json``, PNGs and TensorBoard
images into ``--out`` (default ``runs/properties``). ``--run`` adds the run's scheme on its
trained weights, its exact-match at 2x and attention maps at the training length and at 4x.
"""

if __name__ == "__main__":  # first, so a stop signal during the imports is one line too
    from lab.common.signals import exit_at_once

    exit_at_once("properties.py")

import argparse
import contextlib
import sys

import torch

from lab.common.checkpoint import find_checkpoint
from lab.common.files import writable_folder
from lab.common.outputs import output_problem
from lab.common.runlock import RunLocked, run_lock
from lab.common.signals import run_program
from lab.properties.report import check_replaceable, write_report
from model.position import available_schemes

STOPPED = (
    "files already written are complete (every write is atomic); run the same command again for "
    "the whole report"
)
"""What a stop signal outside the guarded sections leaves, said after its one line (see
:func:`lab.common.signals.run_main`)."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 on bad input)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--position",
        nargs="+",
        metavar="NAME",
        default=list(available_schemes()),
        help=f"schemes to measure (default: all: {', '.join(available_schemes())})",
    )
    parser.add_argument("--run", metavar="RUN_DIR", help="also measure this trained run")
    parser.add_argument("--out", default="runs/properties", help="output folder")
    args = parser.parse_args(argv)
    unknown = [n for n in args.position if n not in available_schemes()]
    if unknown:
        print(
            f"error: --position {unknown[0]!r} is not a registered scheme; "
            f"choose from {', '.join(available_schemes())}",
            file=sys.stderr,
        )
        return 2
    torch.set_num_threads(1)
    try:
        with contextlib.ExitStack() as held:
            if args.run is not None:
                find_checkpoint(args.run)  # a bad --run writes nothing, not even an empty --out
                held.enter_context(run_lock(args.run, "--run"))  # no run still in training
            problem = output_problem(args.out, "--out")  # not a run's or a sweep's folder
            if problem:
                raise ValueError(problem)
            writable_folder(args.out)
            check_replaceable(args.out)
            paths = write_report(list(dict.fromkeys(args.position)), args.out, args.run)
    except (OSError, ValueError, RunLocked) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(paths["properties.md"].read_text())
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    run_program("properties.py", main, STOPPED)
