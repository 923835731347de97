"""Time the blocked attention path's block size: ``python bench.py --block-sweep [--device
cuda]``.

Sequences longer than 256 tokens whose mask would be a ``(T, T)`` tensor are attended in blocks
of queries (:mod:`model.blocked_attention`); how many queries a block holds is a rule per device
(:func:`model.blocked_attention.block_rows`). This sweep times evaluation of each scheme with that
rule (``default``) and with fixed budgets of (query, key) pairs per block for every mask
(:func:`model.blocked_attention.fixed_block_pairs`), NoPE (no mask, no blocks) as the reference,
all models of a
length interleaved in the same rounds (:func:`lab.bench.benchmark.eval_rows`), at the benchmark's
standard size. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import torch

from lab.bench.benchmark import (
    STANDARD,
    Entry,
    check_counts,
    check_schemes,
    device_name,
    eval_rows,
    our_model,
)
from lab.common.files import atomic_write, json_with_keys
from lab.common.outputs import output_file_in_place
from lab.common.runtime import configure_threads, resolve_device
from lab.reporting.tables import format_table
from model import ModelConfig
from model.blocked_attention import BLOCK_ROWS, fixed_block_pairs
from model.position import available_schemes, scheme_class


def biased_schemes() -> list[str]:
    """Registered schemes with a mask at default positions in a causal model (a shared bias or
    a per-layer bias built per window), so with blocks past 256 tokens, in registry order."""
    classes = {name: scheme_class(name) for name in available_schemes()}
    return [n for n, c in classes.items() if c.shared_bias or c.windowed_layer_bias]


class BlockBudget(torch.nn.Module):
    """``model`` whose forward passes attend in blocks of ``pairs`` (query, key) pairs (None:
    the device's rule), set around each pass (:func:`fixed_block_pairs`), so that models with
    other budgets can be timed in the same rounds."""

    def __init__(self, model: torch.nn.Module, pairs: int | None) -> None:
        super().__init__()
        self.model, self.pairs = model, pairs

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        with fixed_block_pairs(self.pairs):
            return self.model(idx)


def with_block_pairs(
    build: Callable[[int], torch.nn.Module], pairs: int | None
) -> Callable[[int], torch.nn.Module]:
    """``build`` whose models attend in blocks of ``pairs`` (query, key) pairs (None: the
    device's rule)."""

    def built(max_length: int) -> torch.nn.Module:
        return BlockBudget(build(max_length), pairs)

    return built


def sweep_entries(
    config: ModelConfig, schemes: list[str], pairs: list[int]
) -> list[tuple[Entry, int | None]]:
    """NoPE, then each scheme with the default rule (budget None) and with each budget in
    ``pairs``: ``(entry, budget)``."""
    entries: list[tuple[Entry, int | None]] = [
        (Entry("none", "none", False, our_model(config, "none")), None)
    ]
    for scheme in schemes:
        for budget in [None, *pairs]:
            label = "default" if budget is None else f"2^{budget.bit_length() - 1}"
            build = with_block_pairs(our_model(config, scheme), budget)
            entries.append((Entry(f"{scheme} {label}", scheme, False, build), budget))
    return entries


def run_sweep(
    schemes: list[str],
    pairs: list[int],
    lengths: list[int],
    batch_tokens: int,
    device: torch.device,
    repeats: int,
    progress: Callable[[str], None] = lambda line: None,
) -> dict:
    """Evaluation tokens/s and peak memory growth (MiB) of every sweep entry at each length
    (forward passes of ``batch_tokens`` tokens in the device's default precision), with its
    ratio to NoPE at that length.

    Raises:
        ValueError: an unknown scheme (one line naming the known ones).
    """
    check_schemes(schemes, "--schemes")
    entries, budgets = zip(*sweep_entries(STANDARD, schemes, pairs), strict=True)
    rows = []
    for length in lengths:
        results = eval_rows(
            list(entries), STANDARD, length, batch_tokens, device, repeats, "auto", False, progress
        )
        nope = results[0]["tokens_per_s"]
        for budget, result in zip(budgets, results, strict=True):
            rows.append({**result, "block_pairs": budget, "vs_none": result["tokens_per_s"] / nope})
    return {
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "batch_tokens": batch_tokens,
        "repeats": repeats,
        "precision": "auto (bf16 autocast on CUDA, float32 elsewhere)",
        "timing": "interleaved rounds per length, shuffled order, medians; an untimed pass "
        "before each timed one",
        "results": rows,
    }


def sweep_table(result: dict) -> str:
    """One row per model and length: tokens/s, ratio to NoPE, peak memory growth."""
    rows = [
        [
            r["name"],
            str(r["length"]),
            f"{r['tokens_per_s']:,.0f}",
            f"{r['vs_none']:.2f}",
            f"{r['peak_mib']:,.0f}",
        ]
        for r in result["results"]
    ]
    return format_table(["model", "length", "eval tok/s", "vs NoPE", "peak MiB"], rows)


def ratio_table(result: dict, length: int) -> str:
    """Evaluation throughput over NoPE's at ``length``: a row per scheme, a column per budget
    (``default`` first), as the README shows it."""
    rows = [r for r in result["results"] if r["length"] == length and r["position"] != "none"]
    labels = list(dict.fromkeys(r["name"].split(" ", 1)[1] for r in rows))
    ratios = {(r["position"], r["name"].split(" ", 1)[1]): r["vs_none"] for r in rows}
    schemes = list(dict.fromkeys(r["position"] for r in rows))
    body = [[s, *(f"{ratios[s, label]:.2f}" for label in labels)] for s in schemes]
    return format_table([f"vs NoPE at {length}", *labels], body)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command line of the sweep (argparse exits 2 on a malformed one)."""
    parser = argparse.ArgumentParser(
        prog="python bench.py --block-sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0 = PyTorch default)")
    parser.add_argument(
        "--schemes", default=",".join(biased_schemes()), help="comma-separated schemes"
    )
    parser.add_argument(
        "--pairs", default="19,20,21,22,23,24", help="budgets to time, as powers of two"
    )
    parser.add_argument("--lengths", default="1024,4096", help="evaluation lengths")
    parser.add_argument("--batch-tokens", type=int, default=65536, help="tokens per pass")
    parser.add_argument("--repeats", type=int, default=9, help="timed passes per model")
    parser.add_argument("--out", default="block_sweep.json", help="where to write the JSON")
    return parser.parse_args(argv)


def checked_lists(args: argparse.Namespace) -> tuple[list[str], list[int], list[int]]:
    """``(schemes, powers of two, lengths)`` of the command line, each checked.

    Raises:
        ValueError: one line naming the flag, its value and what is allowed.
    """
    schemes = list(dict.fromkeys(n.strip() for n in args.schemes.split(",") if n.strip()))
    check_schemes(schemes, "--schemes")
    if not schemes or "none" in schemes:
        raise ValueError(
            f"--schemes={args.schemes!r} must name schemes other than none, the reference "
            "every sweep times"
        )
    try:
        powers = list(dict.fromkeys(int(n) for n in args.pairs.split(",") if n.strip()))
        lengths = list(dict.fromkeys(int(n) for n in args.lengths.split(",") if n.strip()))
    except ValueError:
        raise ValueError(
            f"--pairs={args.pairs!r} and --lengths={args.lengths!r} must be "
            "comma-separated lists of integers"
        ) from None
    if any(not 0 <= n <= 40 for n in powers):
        raise ValueError(f"--pairs={args.pairs!r}: each power of two must lie in [0, 40]")
    counts = {"--lengths": lengths, "--batch-tokens": [args.batch_tokens]}
    counts["--repeats"] = [args.repeats]
    for flag, values in counts.items():
        if not values or min(values) < 1:
            raise ValueError(f"{flag}={','.join(map(str, values))!r} needs values >= 1")
    check_counts(counts)  # the maxima bench.py has
    if min(lengths) <= BLOCK_ROWS:
        raise ValueError(
            f"--lengths={args.lengths!r}: every length must exceed {BLOCK_ROWS}; shorter "
            "sequences are attended at once, without blocks"
        )
    return schemes, powers, lengths


def main(argv: list[str] | None = None) -> int:
    """Run the sweep from the command line ``argv``: prints its tables and writes its JSON.

    Returns:
        0; 2 for a bad argument (one line on stderr, before anything is timed); 130 when
        interrupted (nothing written).
    """
    args = parse_arguments(argv)
    try:
        device = resolve_device(args.device)
        configure_threads(args.threads)
        schemes, powers, lengths = checked_lists(args)
        out = output_file_in_place(args.out, ours=json_with_keys("timing", "results"))
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        result = run_sweep(
            schemes,
            [2**n for n in powers],
            lengths,
            args.batch_tokens,
            device,
            args.repeats,
            lambda line: print(line, file=sys.stderr, flush=True),
        )
    except KeyboardInterrupt:
        print(f"\ninterrupted: nothing written to {args.out}", file=sys.stderr)
        return 130
    print(sweep_table(result))
    for length in lengths:
        print(f"\n{ratio_table(result, length)}")
    atomic_write(out, json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
