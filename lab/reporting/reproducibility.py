"""Two results of the same sweep made on different machines, compared: which runs are
bit-identical, how far each cell moved against its seed spread, and which significance claims
and findings hold on both (robust) or on one only (not robust).

Floating-point kernels round differently on different CPUs (MKL and ATen dispatch by
processor), so a seeded run is bit-identical only on the same CPU model, torch build and
settings (:mod:`lab.common.machine`); on another machine the honest claim is "within the seed
spread", and this module measures it. Usage::

    python sweep.py --compare A/results.json B/results.json --labels "AMD" "Intel" [--out F]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

from lab.common.files import atomic_write
from lab.common.stats import t_interval
from lab.evaluation.learned import learned_only
from lab.reporting.aggregate import HEADLINE, comparison, groups, tasks
from lab.reporting.findings import findings

Result = dict[str, Any]
WHERE = ("in_dist", *HEADLINE)
"""The cells compared: in distribution and the headline multiples."""


def run_key(result: Result) -> tuple[str, str, int]:
    """(scheme, task, seed) of an ``eval.json`` dict."""
    return result["position"], result["task"], result["seed"]


def identical(a: Result, b: Result) -> bool:
    """Same training length and the same right/wrong answer on every evaluation sequence."""
    answers = [[row["correct"] for row in r["lengths"]] for r in (a, b)]
    return a["train_steps"] == b["train_steps"] and answers[0] == answers[1]


def cell_values(runs: list[Result], where: str) -> list[float] | None:
    """Exact-match of each seed's run at ``where`` (``'in_dist'`` or a multiple), or None."""
    values = [
        r["summary"]["in_dist"] if where == "in_dist" else r["summary"]["at"].get(where)
        for r in runs
    ]
    return None if not values or any(v is None for v in values) else values


def cell_shifts(a: list[Result], b: list[Result]) -> list[dict[str, Any]]:
    """Per (task, scheme, where): both means over the learned runs (as the report's tables,
    :mod:`lab.evaluation.learned`), the shift of the mean, and the seed spread (the larger 95%
    t-interval half-width of the two, :func:`lab.common.stats.t_interval`).

    Returns:
        Rows with ``task``, ``scheme``, ``where``, ``mean_a``, ``mean_b``, ``shift``,
        ``spread`` (fractions, not percent) and ``within`` (``|shift| <= spread``).
    """
    rows = []
    for task in tasks(a):
        ga, gb = groups(learned_only(a), task), groups(learned_only(b), task)
        for scheme in ga:
            for where in WHERE:
                va, vb = cell_values(ga[scheme], where), cell_values(gb.get(scheme, []), where)
                if va is None or vb is None:
                    continue
                ia, ib = t_interval(va), t_interval(vb)
                spread = max(_half_width(ia), _half_width(ib))
                shift = ib.mean - ia.mean
                rows.append(
                    {"task": task, "scheme": scheme, "where": where, "mean_a": ia.mean,
                     "mean_b": ib.mean, "shift": shift, "spread": spread,
                     "within": abs(shift) <= spread}
                )  # fmt: skip
    return rows


def _half_width(interval: Any) -> float:
    return 0.0 if interval.low is None else (interval.high - interval.low) / 2


def claims(results: list[Result]) -> set[str]:
    """The significance claims of a sweep, e.g. ``'copy at 1.25x: alibi > none'`` (exact
    McNemar p < 0.05 pooled over the learned seeds and the same sign in every seed, as in the
    report, :func:`lab.reporting.aggregate.comparison`)."""
    found = set()
    for task in tasks(results):
        schemes = list(groups(results, task))
        for label in HEADLINE:
            for x, y in combinations(schemes, 2):
                c = comparison(results, task, x, y, label)
                if c is not None and c.significant:
                    winner, loser = (x, y) if c.difference > 0 else (y, x)
                    found.add(f"{task} at {label}: {winner} > {loser}")
    return found


def verdicts(results: list[Result]) -> dict[str, str]:
    """Finding (the text before its verdict) -> ``'agrees'``, ``'disagrees'`` or another word,
    from :func:`lab.reporting.findings.findings`."""
    out = {}
    for line in findings(results):
        match = re.match(r"(?:- )?(.*?): \*\*(\w[\w ]*)\*\*", line)
        if match:
            out[match.group(1)] = match.group(2)
    return out


def compare_sweeps(a: list[Result], b: list[Result]) -> dict[str, Any]:
    """Everything :func:`markdown` prints, JSON-ready.

    Raises:
        ValueError: the two sweeps do not hold the same runs (scheme, task, seed).
    """
    ka, kb = {run_key(r): r for r in a}, {run_key(r): r for r in b}
    if set(ka) != set(kb):
        raise ValueError(f"the sweeps hold different runs: {sorted(set(ka) ^ set(kb))[:4]} ...")
    ca, cb = claims(a), claims(b)
    va, vb = verdicts(a), verdicts(b)
    return {
        "runs": len(ka),
        "identical": sum(identical(ka[k], kb[k]) for k in ka),
        "cells": cell_shifts(a, b),
        "claims_both": sorted(ca & cb),
        "claims_a_only": sorted(ca - cb),
        "claims_b_only": sorted(cb - ca),
        "verdicts": {k: [va[k], vb.get(k)] for k in va},
    }


def markdown(comparison_: dict[str, Any], label_a: str, label_b: str, note: str = "") -> str:
    """The comparison as a Markdown page; ``note`` (how both sweeps were made) under the title.

    Raises:
        ValueError: no cell to compare (no run learned in both sweeps).
    """
    c, cells = comparison_, comparison_["cells"]
    if not cells:
        raise ValueError(
            "no cell holds learned runs in both sweeps (in distribution and at "
            f"{', '.join(HEADLINE)}): nothing to compare"
        )
    within = sum(row["within"] for row in cells)
    worst = max(cells, key=lambda row: abs(row["shift"]))
    shifts = sorted(abs(row["shift"]) for row in cells)
    lines = [
        f"# The same sweep on two machines: {label_a} (A) and {label_b} (B)",
        "",
        *([note, ""] if note else []),
        f"- Bit-identical runs (same steps, same answer on every sequence): "
        f"**{c['identical']} of {c['runs']}**.",
        f"- Cells (task, scheme, in distribution and {', '.join(HEADLINE)}) whose mean moved "
        f"by no more than the seed spread (the larger 95% t-interval half-width): "
        f"**{within} of {len(cells)}**; median shift {100 * shifts[len(shifts) // 2]:.1f} "
        f"points, largest {worst['task']} {worst['scheme']} at {worst['where']}: "
        f"{100 * worst['mean_a']:.1f}% -> {100 * worst['mean_b']:.1f}% (seed spread "
        f"{100 * worst['spread']:.1f} points).",
        f"- Significance claims on both machines (robust): {len(c['claims_both'])}; on A only "
        f"(not robust): {len(c['claims_a_only'])}; on B only (not robust): "
        f"{len(c['claims_b_only'])}.",
        "",
        "## Findings against the literature",
        "",
        "| finding | A | B | robust |",
        "|---|---|---|---|",
    ]
    for name, (x, y) in c["verdicts"].items():
        lines.append(f"| {name} | {x} | {y} | {'yes' if x == y else '**no**'} |")
    lines += ["", "## Significance claims that hold on one machine only (not robust)", ""]
    lines += [f"- {claim} (A only)" for claim in c["claims_a_only"]]
    lines += [f"- {claim} (B only)" for claim in c["claims_b_only"]]
    lines += ["", "## Cells that moved by more than the seed spread", ""]
    lines += ["| task | scheme | where | A | B | shift | spread |", "|---|---|---|---|---|---|---|"]
    for row in cells:
        if not row["within"]:
            lines.append(
                f"| {row['task']} | {row['scheme']} | {row['where']} | {100 * row['mean_a']:.1f} "
                f"| {100 * row['mean_b']:.1f} | {100 * row['shift']:+.1f} "
                f"| {100 * row['spread']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def read_results(path: Path) -> list[Result]:
    """A sweep's ``results.json``: the list of its ``eval.json`` dicts.

    Raises:
        ValueError: the file cannot be read, is not JSON, holds no results or is not such a
            list (one line naming it).
    """
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as error:
        problem = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{path} is not a readable JSON file ({problem})") from None
    keys = {"position", "task", "seed", "lengths", "summary", "train_steps", "config"}
    if not isinstance(results, list) or not all(
        isinstance(r, dict)
        and keys <= set(r)
        and isinstance(r["position"], str)
        and isinstance(r["task"], str)
        and isinstance(r["seed"], int)
        for r in results
    ):
        raise ValueError(f"{path} is not a sweep's results.json (a list of eval.json results)")
    if not results:
        raise ValueError(f"{path} holds no results (an empty list); give a finished sweep's")
    return results


def main(argv: list[str] | None = None) -> int:
    """CLI of ``python sweep.py --compare``: print (and with ``--out`` write) the comparison
    page; 2 and one line on stderr naming the file for a file that is not a sweep's
    ``results.json``, two sweeps that cannot be compared, or an ``--out`` that cannot be
    written (a folder, say)."""
    parser = argparse.ArgumentParser(
        prog="python sweep.py --compare", description=__doc__.splitlines()[0]
    )
    parser.add_argument("results", nargs=2, type=Path, help="two results.json files")
    parser.add_argument("--labels", nargs=2, default=["A", "B"], help="the two machines' names")
    parser.add_argument("--out", type=Path, help="write the Markdown page here")
    parser.add_argument("--note", default="", help="how both sweeps were made (under the title)")
    args = parser.parse_args(argv)
    try:
        if args.out is not None and args.out.is_dir():
            raise ValueError(
                f"--out {args.out} is a folder; give the file for the Markdown page, e.g. "
                f"--out {args.out / 'cross_machine.md'}"
            )
        a, b = (read_results(p) for p in args.results)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        page = markdown(compare_sweeps(a, b), *args.labels, args.note)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        a_path, b_path = args.results
        print(f"error: cannot compare {a_path} with {b_path}: {error}", file=sys.stderr)
        return 2
    if args.out:
        try:
            atomic_write(args.out, page)
        except OSError as error:
            print(f"error: cannot write --out {args.out}: {error}", file=sys.stderr)
            return 2
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
