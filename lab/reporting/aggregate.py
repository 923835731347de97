"""Runs grouped over seeds: means with t-intervals, the fixed-multiple headline, significance.

Every function takes the ``eval.json`` dicts of a sweep (see :data:`lab.evaluation.record.SCHEMA`)
and groups them by (task, scheme); a cell is the mean over seeds with its 95% t-interval
(:func:`lab.common.stats.t_interval`), shown in percent and clipped to 0..100 for display. The
tables' means and the significance tests use the learned runs only (:mod:`lab.evaluation.learned`);
:func:`left_out_line` says which runs were left out and why.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any

from lab.common.stats import ALPHA, Comparison, compare, t_interval
from lab.evaluation.labels import ordered, run_label, scheme_label, task_options_label
from lab.evaluation.learned import learned_only, not_learned_reason
from lab.evaluation.record import at_multiple, length_row, pair_values
from lab.reporting.tables import DASH, format_table

HEADLINE = ("1.25x", "1.5x", "2x", "4x")
"""Multiples of the longest training length in the headline table."""

Result = dict[str, Any]


def groups(results: list[Result], task: str) -> dict[str, list[Result]]:
    """Scheme label -> runs (one per seed) of ``task``, in the canonical scheme order."""
    grouped: dict[str, list[Result]] = defaultdict(list)
    for r in ordered(results):
        if r["task"] == task:
            grouped[scheme_label(r)].append(r)
    return dict(grouped)


def tasks(results: list[Result]) -> list[str]:
    """Tasks of ``results``, sorted."""
    return sorted({r["task"] for r in results})


def cell(values: list[float | None]) -> str:
    """``'97.3 [95.1, 99.4]'``: mean and 95% t-interval in percent; a dash when any is None."""
    if not values or any(v is None for v in values):
        return DASH
    interval = t_interval(values)
    if interval.low is None:
        return f"{100 * interval.mean:.1f}"
    low, high = max(0.0, interval.low), min(1.0, interval.high)
    return f"{100 * interval.mean:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def left_out_line(results: list[Result], out_dir: str | Path | None = None) -> str | None:
    """One line naming the runs left out of the tables' means, the significance tests and the
    findings on extrapolation as not learned (:func:`lab.evaluation.learned.not_learned_reason`),
    with the reason of each; None when every run learned."""
    left = [(run_label(r, out_dir), not_learned_reason(r)) for r in ordered(results)]
    left = [(label, reason) for label, reason in left if reason is not None]
    if not left:
        return None
    named = "; ".join(f"{label}: {reason}" for label, reason in left)
    return (
        f"Left out as not learned: {len(left)} of {len(results)} runs ({named}). The tables' "
        "means, the significance tests and the findings on extrapolation use the other runs; "
        "the Runs table and the figures mark these."
    )


def headline_table(results: list[Result], task: str) -> str:
    """Per scheme: exact-match in distribution and at :data:`HEADLINE` multiples, and pair
    accuracy in distribution and at 2x; mean over the learned seeds with a 95% t-interval.
    ``seeds`` counts the learned runs, and ``not learned`` the others (left out)."""
    rows = []
    for scheme, every in groups(results, task).items():
        runs = learned_only(every)
        summaries = [r["summary"] for r in runs]
        blind = {r["order"]["order_blind"] for r in runs} or {None}
        rows.append(
            [scheme, str(len(runs)), str(len(every) - len(runs))]
            + [cell([s["in_dist"] for s in summaries])]
            + [cell([s["at"].get(label) for s in summaries]) for label in HEADLINE]
            + [cell(pair_values(runs, "in_dist")), cell(pair_values(runs, "2x"))]
            + [DASH if None in blind else ("yes" if blind == {True} else "no")]
        )
    headers = ["scheme", "seeds", "not learned", "in-distribution", *HEADLINE]
    headers += ["pairs in-dist", "pairs 2x", "order-blind"]
    return format_table(headers, rows)


def lengths_table(results: list[Result], task: str, key: str = "exact_match") -> str:
    """``key`` (``exact_match``, or ``pair_accuracy``: minimal pairs with both members right)
    per length (rows) and scheme (columns), mean over the learned seeds with a 95%
    t-interval (a dash where a scheme has none)."""
    grouped = groups(results, task)
    lengths = sorted(
        {row["length"] for runs in grouped.values() for r in runs for row in r["lengths"]}
    )
    rows = []
    for length in lengths:
        cells = []
        for runs in grouped.values():
            found = [length_row(r, length) for r in learned_only(runs)]
            cells.append(cell([row[key] if row else None for row in found]))
        rows.append([str(length), *cells])
    return format_table(["length", *grouped], rows)


def comparison(results: list[Result], task: str, a: str, b: str, label: str) -> Comparison | None:
    """Scheme ``a`` against ``b`` on ``task`` at multiple ``label`` (or ``'in_dist'``: the
    longest training length), paired by seed and sequence, learned runs only; None without
    shared seeds."""
    grouped = groups(learned_only(results), task)
    bits = []
    for scheme in (a, b):
        by_seed = {}
        for run in grouped.get(scheme, []):
            length = run["train_lengths"][1] if label == "in_dist" else at_multiple(run, label)
            row = length_row(run, length)
            if row is not None and row["correct"] is not None:
                by_seed[run["seed"]] = row["correct"]
        bits.append(by_seed)
    return compare(*bits)


def significance_lines(results: list[Result], task: str) -> list[str]:
    """One line per :data:`HEADLINE` multiple listing the significantly different scheme
    pairs (exact McNemar p < 0.05 pooled over seeds, same sign in every seed), learned runs
    only. Groups whose task options differ (:func:`lab.reporting.report.task_options_label`) answer
    different questions and are not compared."""
    grouped = groups(learned_only(results), task)
    options = {scheme: task_options_label(runs[0]) for scheme, runs in grouped.items()}
    pairs = [(a, b) for a, b in combinations(grouped, 2) if options[a] == options[b]]
    lines = []
    for label in HEADLINE:
        found = []
        for a, b in pairs:
            c = comparison(results, task, a, b, label)
            if c is not None and c.significant:
                winner, loser = (a, b) if c.difference > 0 else (b, a)
                found.append(
                    f"{winner} > {loser} ({100 * abs(c.difference):.1f} points, p={c.p_value:.1e})"
                )
        lines.append(f"- {task} at {label}: " + ("; ".join(found) or "no significant difference"))
    return lines


def significance_words(c: Comparison) -> str:
    """``c``'s p-value and verdict in words, with the reason when it is not significant (the
    rule of :attr:`lab.common.stats.Comparison.significant`): ``"p=1.3e-03, significant"``;
    ``"p=0.21, not significant (needs p < 0.05)"``; or ``"p=3.6e-04, not significant: below
    0.05, but the difference is not of one sign in every seed (per seed +4.7, -0.8, +1.2
    points)"``.
    """
    if c.significant:
        return f"p={c.p_value:.1e}, significant"
    if c.p_value >= ALPHA:
        return f"p={c.p_value:.1e}, not significant (needs p < {ALPHA})"
    per_seed = ", ".join(f"{100 * d:+.1f}" for d in c.seed_differences)
    return (
        f"p={c.p_value:.1e}, not significant: below {ALPHA}, but the difference is not of one "
        f"sign in every seed (per seed {per_seed} points)"
    )
