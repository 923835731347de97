"""Benchmark every position scheme: ``python bench.py [--threads N] [--device auto]``.

Measures, per scheme, training tokens/s and MFU at the standard configuration (vocab 64,
d_model 128, 4 layers, 4 heads, d_ff 512, sequence 64, batch 64; fp32 on CPU unless
``--precision bf16``) and at the default ablation's size, plus evaluation tokens/s and peak
memory at lengths 64 to 4096.
Prints tables and writes ``bench.json``. Numbers are medians; the machine is noisy.
``python bench.py --publish BENCH_JSON`` files a run's results into ``docs/`` and rewrites the
benchmark pages; ``python bench.py --block-sweep`` times the blocked attention path's block size.
"""

if __name__ == "__main__":  # first, so a stop signal during the imports is one line too
    from lab.common.signals import exit_at_once

    exit_at_once("bench.py")

import argparse
import json
import shlex
import sys
import time

from lab.bench.baselines import LIBRARIES, baselines, library_versions
from lab.bench.benchmark import STANDARD, check_counts, check_schemes
from lab.bench.run import measure
from lab.common.commands import Programs, hand_off, list_programs
from lab.common.files import atomic_write, json_with_keys
from lab.common.machine import machine_info
from lab.common.outputs import output_file_in_place
from lab.common.runtime import check_precision, configure_threads, resolve_device
from lab.common.signals import exit_code, run_program

STOPPED = "nothing was written (bench.json is written whole at the end)"
"""What a stop signal outside the guarded sections leaves, said after its one line (see
:func:`lab.common.signals.run_main`)."""

PROGRAMS: Programs = {
    "--publish": (
        "lab.bench.report",
        "[--check] [BENCH_JSON ...]: file bench.py results into docs/ and rewrite the "
        "benchmark pages (--publish --help)",
    ),
    "--block-sweep": (
        "lab.bench.block_sweep",
        "[--device D] [--pairs P] [--lengths L] [--out F]: time the blocked attention path's "
        "block size against NoPE (--block-sweep --help)",
    ),
}
"""Flags that run another program: given first, the rest of the command line goes to that
module's ``main(argv)`` and its exit code is this program's."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    handed = hand_off("bench.py", argv, PROGRAMS)
    if handed is not None:
        return handed
    args = build_parser().parse_args(argv)
    try:
        device, lengths, schemes, out, libraries = check_arguments(args)
        peers = baselines(STANDARD, libraries)
    except (ValueError, ImportError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        results = measure(
            device,
            lengths,
            schemes,
            peers,
            batch=args.batch,
            batch_tokens=args.batch_tokens,
            repeats=args.repeats,
            precision=args.precision,
            compile=args.compile,
        )
        results["peer_versions"] = library_versions(libraries)
        results["run"] = {  # what the results page states about how they were made
            "command": shlex.join(["python", "bench.py", *argv]),
            "wall_seconds": round(time.monotonic() - started, 1),
            "machine": machine_info(),
        }
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM or SIGHUP (see lab.common.signals)
        print(f"\ninterrupted: nothing written to {args.out}", file=sys.stderr)
        return exit_code(stop)  # 128 + the signal: 143 for SIGTERM, not always 130
    atomic_write(out, json.dumps(results, indent=2))
    print(f"\nwrote {args.out}")
    return 0


def check_arguments(args: argparse.Namespace) -> tuple:
    """Check the arguments before minutes of timing, set the threads, and return ``(device,
    lengths, schemes, out, libraries)``: the device, the evaluation lengths, the schemes asked
    for (empty: all), the output path, and the peer libraries asked for.

    Raises:
        ValueError, OSError: one line naming the flag, its value and what is allowed.
    """
    try:
        lengths = list(dict.fromkeys(int(n) for n in args.lengths.split(",") if n.strip()))
    except ValueError:
        raise ValueError(
            f"--lengths={args.lengths!r} is not a comma-separated list of integers"
        ) from None
    counts = {"--repeats": [args.repeats], "--batch": [args.batch], "--lengths": lengths}
    counts |= {"--batch-tokens": [args.batch_tokens], "--threads": [args.threads]}
    check_counts(counts)
    device = resolve_device(args.device)
    configure_threads(args.threads)
    check_precision(args.precision)
    schemes = [name.strip() for name in args.schemes.split(",") if name.strip()]
    check_schemes(schemes, "--schemes")
    # checked before minutes of timing; replaces only an earlier bench.py JSON
    out = output_file_in_place(args.out, ours=json_with_keys("standard"))
    libraries = list(dict.fromkeys(name for name in args.baselines.split(",") if name))
    return device, lengths, schemes, out, libraries


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``bench.py`` (the flags of :data:`PROGRAMS` are listed, and handled
    before parsing)."""
    parser = argparse.ArgumentParser(  # no abbreviations: --publ must not run the ablation
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0 = PyTorch default)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=20,
        help="interleaved rounds timed: training steps per model (evaluation passes: "
        "max(5, repeats // 2))",
    )
    parser.add_argument(
        "--lengths", default="64,256,1024,4096", help="evaluation lengths ('' for none)"
    )
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=8192,
        help="evaluation batch, in tokens (32768 ran out of 24 GiB at 4096 tokens, where CoPE "
        "and x-transformers' T5 build (B, H, T, T) tensors)",
    )
    parser.add_argument(
        "--precision",
        default="auto",
        help="training precision: auto (bf16 on CUDA, fp32 elsewhere), fp32 or bf16",
    )
    parser.add_argument(
        "--schemes",
        default="",
        help="comma-separated schemes to time (default: all; none, the reference, always is)",
    )
    parser.add_argument("--batch", type=int, default=64, help="training batch, in sequences")
    parser.add_argument(
        "--compile", action="store_true", help="pass every model through torch.compile"
    )
    parser.add_argument("--out", default="bench.json", help="where to write the JSON results")
    parser.add_argument(
        "--baselines",
        nargs="?",
        const=",".join(LIBRARIES),
        default="",
        metavar="LIBS",
        help="also time peer models of the same size, in the same run: hf (Hugging Face GPT-2 "
        "and Llama; needs transformers), x-transformers (each position option that matches one "
        "of ours; needs x-transformers); a comma-separated list, default: both",
    )
    list_programs(parser, PROGRAMS)
    return parser


if __name__ == "__main__":
    run_program("bench.py", main, STOPPED)
