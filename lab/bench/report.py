"""The README's benchmark tables, made from ``bench.py``'s JSON.

``python -m lab.bench.report docs/bench_cpu.json`` prints them (likewise for the GPU runs,
``docs/bench_cuda*.json``); ``tests/test_readme.py`` checks that the README holds exactly these
tables for every committed JSON, so the figures cannot drift from the measurement.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lab.bench.benchmark import ours_vs_theirs
from lab.reporting.tables import format_table


def scheme_table(results: dict) -> str:
    """Per scheme: training tokens/s, MFU and ratio to NoPE at the standard size and at the
    ablation's size; evaluation tokens/s at the two longest lengths and the longest one's ratio
    to NoPE, where evaluation was measured. (Peak memory stays in the JSON: in one process,
    memory freed by an earlier model is reused without raising the resident set, so it is
    measured in fresh processes instead.)"""
    standard, ablation = results["standard"], results["ablation"]
    lengths = sorted({e["length"] for e in standard["eval"]})[-2:]
    ours = {(e["name"], e["length"]): e["tokens_per_s"] for e in standard["eval"]}
    longest = lengths[-1:]  # [] without evaluation
    rows = []
    for t in standard["train"]:
        if t["baseline"]:
            continue
        small = next(a for a in ablation["train"] if a["name"] == t["name"])
        rows.append(
            [
                t["name"],
                f"{t['tokens_per_s']:,.0f}",
                f"{t['mfu']:.1%}",
                f"{t['vs_none']:.2f}",
                f"{small['tokens_per_s']:,.0f}",
                f"{small['vs_none']:.2f}",
                *(f"{ours[t['name'], n]:,.0f}" for n in lengths),
                *(f"{ours[t['name'], n] / ours['none', n]:.2f}" for n in longest),
            ]
        )
    heads = [
        "scheme",
        "standard: train tok/s",
        "MFU",
        "vs NoPE",
        "ablation size: train tok/s",
        "vs NoPE",
        *(f"eval tok/s at {n}" for n in lengths),
        *(f"eval vs NoPE at {n}" for n in longest),
    ]
    return format_table(heads, rows)


def peer_table(results: dict) -> str:
    """Per peer model with a matching scheme of ours: its training tokens/s and MFU, and ours
    over theirs for training and for evaluation at every benchmarked length (same run)."""
    standard = results["standard"]
    lengths = sorted({e["length"] for e in standard["eval"]})
    rows = []
    for pair in ours_vs_theirs(standard):
        theirs = next(t for t in standard["train"] if t["name"] == pair["baseline"])
        rows.append(
            [
                pair["position"],
                pair["baseline"],
                f"{theirs['tokens_per_s']:,.0f}",
                f"{theirs['mfu']:.1%}",
                f"{pair['train']:.2f}",
                *(f"{pair['eval'][n]:.2f}" for n in lengths),
            ]
        )
    heads = [
        "scheme",
        "peer",
        "peer train tok/s",
        "peer MFU",
        "ours / theirs: train",
        *(f"eval {n}" for n in lengths),
    ]
    return format_table(heads, rows)


def main(argv: list[str]) -> int:
    """Print both tables for the JSON file named in ``argv``."""
    usage = "usage: python -m lab.bench.report BENCH_JSON"
    if argv in (["-h"], ["--help"]):
        print(f"{usage}\n\n{__doc__.strip()}")
        return 0
    if len(argv) != 1:
        print(usage, file=sys.stderr)
        return 2
    try:
        results = json.loads(Path(argv[0]).read_text())
        tables = [scheme_table(results)]
        if any(t["baseline"] for t in results["standard"]["train"]):
            tables.append(peer_table(results))
    except (OSError, ValueError) as error:
        print(f"error: {argv[0]}: {error}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, StopIteration, ZeroDivisionError, RecursionError) as error:
        what = f"missing {error}" if isinstance(error, KeyError) else type(error).__name__
        print(
            f"error: {argv[0]} is not a bench.py JSON of this version ({what}); "
            "re-run python bench.py",
            file=sys.stderr,
        )
        return 2
    print("\n\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
