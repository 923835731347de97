"""What ``python bench.py`` measures: :func:`lab.bench.benchmark.run_benchmark` at the standard
size (with the evaluation lengths and the peer models) and at the default ablation's size,
each followed by its printed tables."""

from __future__ import annotations

import sys

import torch

from lab.bench.baselines import Baseline
from lab.bench.benchmark import ABLATION, STANDARD, STANDARD_LENGTH, ours_vs_theirs, run_benchmark
from lab.reporting.tables import format_table

ABLATION_LENGTH = 24
"""Training sequence length timed at the ablation's size."""


def measure(
    device: torch.device,
    lengths: list[int],
    schemes: list[str],
    peers: list[Baseline],
    *,
    batch: int,
    batch_tokens: int,
    repeats: int,
    precision: str,
    compile: bool,
) -> dict:
    """Run the benchmark at both sizes (``standard``: ``STANDARD`` at ``STANDARD_LENGTH``
    tokens, evaluated at ``lengths``, with ``peers``; ``ablation``: ``ABLATION`` at
    :data:`ABLATION_LENGTH` tokens, training only), print each one's tables, and return the
    results by size. Progress lines go to stderr. ``KeyboardInterrupt`` passes through."""
    results = {}
    for name, config, seq_len, eval_lengths, others in (
        ("standard", STANDARD, STANDARD_LENGTH, lengths, peers),
        ("ablation", ABLATION, ABLATION_LENGTH, [], None),
    ):
        results[name] = run_benchmark(
            config,
            batch,
            seq_len,
            eval_lengths,
            batch_tokens,
            device,
            repeats,
            others,
            precision,
            compile,
            schemes,
            lambda line, name=name: print(f"{name}: {line}", file=sys.stderr, flush=True),
        )
        print_tables(name, results[name], eval_lengths)
    return results


def print_tables(name: str, result: dict, eval_lengths: list[int]) -> None:
    """Print one size's header line and tables: training, evaluation (if any lengths), and
    ours against theirs (if peer models were timed)."""
    r = result
    print(
        f"\n{name}: {r['device_name']}, {r['threads']} threads, torch {r['torch']}, "
        f"{r['precision']}{', compiled' if r['compile'] else ''}, "
        f"matmul peak {r['matmul_peak_gflops']:.1f} GFLOP/s, batch {r['batch']} x {r['seq_len']}"
    )
    rows = [
        [t["name"], f"{t['tokens_per_s']:,.0f}", f"{t['step_ms']:.1f}", f"{t['mfu']:.1%}"]
        + [f"{t['vs_none']:.2f}"]
        for t in r["train"]
    ]
    print(format_table(["model", "train tok/s", "step ms", "MFU", "vs none"], rows))
    if r["eval"]:
        rows = [
            [e["name"], str(e["length"]), str(e["batch"]), f"{e['tokens_per_s']:,.0f}"]
            + [f"{e['peak_mib']:.0f}"]
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
