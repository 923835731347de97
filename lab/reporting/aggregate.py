"""Runs grouped over seeds: means with t-intervals, the fixed-multiple headline, and paired
comparisons between schemes over seeds (the seed is the unit of evidence).

Every function takes the ``eval.json`` dicts of a sweep (see :data:`lab.evaluation.record.SCHEMA`)
and groups them by (task, scheme); a cell is the mean over seeds with its 95% t-interval
(:func:`lab.stats.intervals.t_interval`), shown in percent and clipped to 0..100 for display. The
tables' means and the significance tests use the learned runs only (:mod:`lab.evaluation.learned`);
:func:`left_out_line` says which runs were left out and why.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any

from lab.evaluation.labels import (
    ordered,
    run_label,
    scheme_label,
    split_by_settings,
    task_options_label,
)
from lab.evaluation.learned import learned_only, not_learned_reason
from lab.evaluation.record import length_row, pair_values
from lab.evaluation.size import parameters_cell
from lab.reporting.tables import DASH, format_table
from lab.stats.intervals import t_interval
from lab.stats.seed_stats import ALPHA, Paired, holm, paired, seeds_for_half_width, share

HEADLINE = ("1.25x", "1.5x", "2x", "4x")
"""Multiples of the longest training length in the headline table."""
PLANNED_HALF_WIDTH = 0.10
"""The half-width (exact-match, 10 points) the seed plan of a comparison is stated for."""

Result = dict[str, Any]


def groups(results: list[Result], task: str) -> dict[str, list[Result]]:
    """Scheme label -> runs (one per seed) of ``task``, in the canonical scheme order; runs of
    one label whose configs differ beyond seed and folder are arms of their own, named by the
    settings that differ (:func:`lab.evaluation.labels.split_by_settings`)."""
    grouped: dict[str, list[Result]] = defaultdict(list)
    for r in ordered(results):
        if r["task"] == task:
            grouped[scheme_label(r)].append(r)
    return {
        arm: runs
        for label, every in grouped.items()
        for arm, runs in split_by_settings(label, every).items()
    }


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
    ``parameters`` is the scheme's trainable parameter count
    (:func:`lab.evaluation.size.parameters_cell`), ``seeds`` counts the learned runs, and
    ``not learned`` the others (left out)."""
    rows = []
    for scheme, every in groups(results, task).items():
        runs = learned_only(every)
        summaries = [r["summary"] for r in runs]
        blind = {r["order"]["order_blind"] for r in runs} or {None}
        rows.append(
            [scheme, parameters_cell(every), str(len(runs)), str(len(every) - len(runs))]
            + [cell([s["in_dist"] for s in summaries])]
            + [cell([s["at"].get(label) for s in summaries]) for label in HEADLINE]
            + [cell(pair_values(runs, "in_dist")), cell(pair_values(runs, "2x"))]
            + [DASH if None in blind else ("yes" if blind == {True} else "no")]
        )
    headers = ["scheme", "parameters", "seeds", "not learned", "in-distribution", *HEADLINE]
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


def seed_values(runs: list[Result], label: str) -> dict[int, float]:
    """Seed -> exact-match at multiple ``label`` (``'in_dist'``: the in-distribution mean) of
    each run in ``runs`` that has it."""
    values = {}
    for run in runs:
        summary = run["summary"]
        value = summary["in_dist"] if label == "in_dist" else summary.get("at", {}).get(label)
        if value is not None:
            values[run["seed"]] = value
    return values


def comparison(
    results: list[Result], task: str, a: str, b: str, label: str, alpha: float = ALPHA
) -> Paired | None:
    """Scheme ``a`` minus ``b`` on ``task`` at multiple ``label`` (or ``'in_dist'``), paired
    by seed over the learned runs (:func:`lab.stats.seed_stats.paired`: mean difference with
    its ``1 - alpha`` t-interval over seeds, paired t and sign-flip p-values); None without
    shared seeds."""
    grouped = groups(learned_only(results), task)
    values = [seed_values(grouped.get(scheme, []), label) for scheme in (a, b)]
    return paired(*values, alpha=alpha)


def comparable_pairs(results: list[Result], task: str) -> list[tuple[str, str]]:
    """The scheme pairs of ``task`` a report compares: learned groups whose task options agree
    (groups whose options differ answer different questions)."""
    grouped = groups(learned_only(results), task)
    options = {scheme: task_options_label(runs[0]) for scheme, runs in grouped.items()}
    return [(a, b) for a, b in combinations(grouped, 2) if options[a] == options[b]]


def family(results: list[Result]) -> list[tuple[str, str, str, str, Paired, float]]:
    """Every pairwise comparison the report makes, ``(task, multiple, a, b, paired, holm_p)``:
    each task's comparable pairs at each :data:`HEADLINE` multiple, with Holm's adjusted
    p-value over the whole family (:func:`lab.stats.seed_stats.holm`)."""
    rows = []
    for task in tasks(results):
        for label in HEADLINE:
            for a, b in comparable_pairs(results, task):
                c = comparison(results, task, a, b, label)
                if c is not None and c.n >= 2:
                    rows.append((task, label, a, b, c))
    adjusted = holm([row[4].p_value for row in rows])
    return [(*row, p) for row, p in zip(rows, adjusted, strict=True)]


def _points(value: float) -> str:
    return f"{100 * value:+.1f}"


def difference_words(c: Paired) -> str:
    """``'+52.2 points [-36.6, +141.0] over 3 seeds, t p=0.13, sign-flip p=0.25'``."""
    if c.low is None:
        return f"{_points(c.mean)} points at 1 seed (no interval)"
    p_t = f"{c.p_t:.2g}" if c.p_t is not None else "n/a"
    return (
        f"{_points(c.mean)} points [{_points(c.low)}, {_points(c.high)}] over {c.n} seeds, "
        f"t p={p_t}, sign-flip p={c.p_sign_flip:.2g}"
    )


def oriented(a: str, b: str, c: Paired, p: float) -> tuple[str, str, Paired, float]:
    """The comparison of ``a`` and ``b`` written with the larger scheme first."""
    return (a, b, c, p) if c.mean >= 0 else (b, a, c.flipped(), p)


def significance_lines(results: list[Result], task: str) -> list[str]:
    """One line per :data:`HEADLINE` multiple naming the scheme pairs of ``task`` whose paired
    difference over seeds is significant after Holm's correction over every comparison of the
    report (:func:`family`: both the paired t and the sign-flip test reject), learned runs
    only; otherwise the largest difference with its interval."""
    every = family(results)
    rows = [row for row in every if row[0] == task]
    lines = []
    for label in HEADLINE:
        here = [row for row in rows if row[1] == label]
        found = [
            f"{x} > {y} ({difference_words(d)}, Holm p={p:.2g})"
            for x, y, d, p in (oriented(a, b, c, p) for _, _, a, b, c, p in here)
            if p < ALPHA
        ]
        if not found and here:
            a, b, c, p = oriented(*max(here, key=lambda row: abs(row[4].mean))[2:])
            found = [
                f"none significant after Holm over {len(every)} comparisons; "
                f"largest {a} - {b} {difference_words(c)}, Holm p={p:.2g}"
            ]
        lines.append(f"- {task} at {label}: " + ("; ".join(found) or "no pair to compare"))
    return lines


def differences_table(results: list[Result]) -> str:
    """Every comparison of :func:`family` as a Markdown table: the paired mean difference in
    points with its 95% t-interval over seeds, the half-width and the seeds a +-10-point
    half-width needs at the observed spread, both tests' p-values and Holm's."""
    rows = []
    for task, label, a, b, c, p in family(results):
        sd = c.sd or 0.0
        needed = seeds_for_half_width(sd, PLANNED_HALF_WIDTH) if sd > 0 else 2
        rows.append(
            [
                task,
                label,
                f"{a} - {b}",
                _points(c.mean),
                f"[{_points(c.low)}, {_points(c.high)}]",
                f"{100 * c.half_width:.1f}",
                str(c.n),
                DASH if needed is None else str(needed),
                f"{c.p_t:.2g}",
                f"{c.p_sign_flip:.2g}",
                f"{p:.2g}",
                "yes" if p < ALPHA else "no",
            ]
        )
    if not rows:
        return "No comparison: no pair of schemes shares two or more learned seeds."
    headers = ["task", "at", "a - b", "mean", "95% t over seeds", "+-", "seeds"]
    headers += [f"seeds for +-{100 * PLANNED_HALF_WIDTH:.0f}", "t p", "sign-flip p", "Holm p"]
    return format_table([*headers, "significant"], rows)


SPLIT_AT = 0.5
"""Exact-match at or above which a seed counts as extrapolating in the seed-share table."""


def share_table(results: list[Result], task: str) -> str:
    """Per scheme and :data:`HEADLINE` multiple: the learned seeds whose exact-match is at
    least :data:`SPLIT_AT`, ``k/n`` with its exact 95% interval (Clopper-Pearson), starred
    where the seeds split; the mean of a split cell is a poor summary of it."""
    rows = []
    for scheme, every in groups(results, task).items():
        runs = learned_only(every)
        cells = []
        for label in HEADLINE:
            values = list(seed_values(runs, label).values())
            if not values:
                cells.append(DASH)
                continue
            s = share(sum(v >= SPLIT_AT for v in values), len(values))
            cells.append(s.words() + (" *" if s.split else ""))
        rows.append([scheme, *cells])
    return format_table(["scheme", *HEADLINE], rows)
