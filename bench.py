"""Benchmark every position scheme: ``python bench.py [--threads N] [--device auto]``.

Measures, per scheme, training tokens/s and MFU at the standard configuration (vocab 64,
d_model 128, 4 layers, 4 heads, d_ff 512, sequence 64, batch 64; fp32 on CPU unless
``--precision bf16``) and at the default ablation's size, plus evaluation tokens/s and peak
memory at lengths 64 to 4096.
Prints tables and writes ``bench.json``. Numbers are medians; the machine is noisy.
"""

if __name__ == "__main__":  # first, so a stop signal during the imports is one line too
    from lab.common.signals import exit_at_once

    exit_at_once("bench.py")

import argparse
import json
import sys

import torch

from lab.bench.baselines import LIBRARIES, Baseline, baselines, library_versions
from lab.bench.benchmark import (
    ABLATION,
    STANDARD,
    STANDARD_LENGTH,
    check_counts,
    check_schemes,
    ours_vs_theirs,
    run_benchmark,
)
from lab.common.files import atomic_write, output_file
from lab.common.runtime import check_precision, configure_threads, resolve_device
from lab.common.signals import exit_code, run_program
from lab.reporting.tables import format_table

STOPPED = "nothing was written (bench.json is written whole at the end)"
"""What a stop signal outside the guarded sections leaves, said after its one line (see
:func:`lab.common.signals.run_main`)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
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
    args = parser.parse_args(argv)
    try:
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
        out = output_file(args.out)  # checked before minutes of timing, not after
        libraries = list(dict.fromkeys(name for name in args.baselines.split(",") if name))
        peers = baselines(STANDARD, libraries)
    except (ValueError, ImportError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        results = measure(args, device, lengths, schemes, peers)
        results["peer_versions"] = library_versions(libraries)
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM or SIGHUP (see lab.common.signals)
        print(f"\ninterrupted: nothing written to {args.out}", file=sys.stderr)
        return exit_code(stop)  # 128 + the signal: 143 for SIGTERM, not always 130
    atomic_write(out, json.dumps(results, indent=2))
    print(f"\nwrote {args.out}")
    return 0


def measure(
    args: argparse.Namespace,
    device: torch.device,
    lengths: list[int],
    schemes: list[str],
    peers: list[Baseline],
) -> dict:
    """Run the benchmark at both sizes, print its tables, and return the results by size."""
    results = {}
    for name, config, batch, seq_len, eval_lengths, others in (
        ("standard", STANDARD, args.batch, STANDARD_LENGTH, lengths, peers),
        ("ablation", ABLATION, args.batch, 24, [], None),
    ):
        results[name] = run_benchmark(
            config,
            batch,
            seq_len,
            eval_lengths,
            args.batch_tokens,
            device,
            args.repeats,
            others,
            args.precision,
            args.compile,
            schemes,
            lambda line, name=name: print(f"{name}: {line}", file=sys.stderr, flush=True),
        )
        r = results[name]
        print(
            f"\n{name}: {r['device_name']}, {r['threads']} threads, torch {r['torch']}, "
            f"{r['precision']}{', compiled' if r['compile'] else ''}, "
            f"matmul peak {r['matmul_peak_gflops']:.1f} GFLOP/s, batch {batch} x {seq_len}"
        )
        rows = [
            [
                t["name"],
                f"{t['tokens_per_s']:,.0f}",
                f"{t['step_ms']:.1f}",
                f"{t['mfu']:.1%}",
                f"{t['vs_none']:.2f}",
            ]
            for t in r["train"]
        ]
        print(format_table(["model", "train tok/s", "step ms", "MFU", "vs none"], rows))
        if r["eval"]:
            rows = [
                [
                    e["name"],
                    str(e["length"]),
                    str(e["batch"]),
                    f"{e['tokens_per_s']:,.0f}",
                    f"{e['peak_mib']:.0f}",
                ]
                for e in r["eval"]
            ]
            print(format_table(["model", "length", "batch", "eval tok/s", "peak MiB"], rows))
        pairs = ours_vs_theirs(r)
        if pairs:
            heads = ["scheme", "baseline", "train"] + [f"eval {n}" for n in eval_lengths]
            rows = [
                [p["position"], p["baseline"], f"{p['train']:.2f}"]
                + [f"{p['eval'][n]:.2f}" for n in eval_lengths]
                for p in pairs
            ]
            print("\nours / theirs (tokens/s, same run):")
            print(format_table(heads, rows))
    return results


if __name__ == "__main__":
    run_program("bench.py", main, STOPPED)
