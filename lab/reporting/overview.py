"""The sweep's ``report.md``: headline table, significance, shortcut baselines, literature
findings, exact-match per length over seeds, and the per-run table.

Shape of the document (every figure computed from the runs' ``eval.json`` dicts):

1. per task, exact-match in distribution and at 1.25x, 1.5x, 2x and 4x the longest training
   length, mean over seeds with a 95% t-interval (:mod:`lab.reporting.aggregate`);
2. the significantly different scheme pairs at those multiples, paired by seed
   (:mod:`lab.stats.seed_stats`), and the share of seeds at or above 50% per cell;
3. on ``svo``, the shortcut rules' accuracy on the same evaluation sequences
   (:mod:`data.shortcuts`);
4. the findings against the literature (:mod:`lab.reporting.findings`);
5. per task, exact-match and minimal pairs at every evaluated length, mean over seeds with a
   t-interval;
6. when runs hold a passkey depth x length grid (:mod:`lab.lm.passkey`), the passkey table and
   the heatmaps (``passkey_grid.png``); sweeps without one have no such section;
7. one row per run, and the runs' notes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from data.shortcuts import SHORTCUTS, shortcut_accuracy
from data.streams import evaluation_set
from lab.common.config import config_from_dict
from lab.common.outputs import PASSKEY_FIGURE
from lab.diagnostics.report import diagnostics_section
from lab.evaluation.labels import run_label
from lab.evaluation.learned import LEARNED
from lab.lm.passkey import grouped, passkey_table
from lab.reporting.aggregate import (
    differences_table,
    groups,
    headline_table,
    left_out_line,
    lengths_table,
    share_table,
    significance_lines,
    tasks,
)
from lab.reporting.findings import findings
from lab.reporting.tables import DASH, position_options, summary_table, task_options
from lab.stats.verdicts import SMOKE_NOTE

Result = dict[str, Any]

EXPLANATION = (
    "Cells are the mean over seeds with a 95% Student-t interval over seeds (mean +- "
    "t(0.975, n-1) s / sqrt(n), clipped to 0..100 for display; per-run 95% Wilson intervals "
    "are in each eval.json and describe one checkpoint's evaluation sample, not the scheme). "
    "In-distribution: mean exact-match over grid lengths inside the training range. 1.25x ... "
    "4x: exact-match at those multiples of the longest training length. Pairs: share of "
    "minimal pairs (two prompt items swapped, same bag of tokens, different answer) with both "
    "members right; an order-blind model scores 0. Order-blind: the next-token distribution at "
    "`<sep>` does not move (< 1e-5 total variation) when the prompt is shuffled. Scheme "
    "differences: the seed is the unit of evidence. Runs pair by seed (every scheme of a seed "
    "sees the same data and evaluation sequences); the per-seed differences give a mean with "
    "its 95% t-interval, and a difference is significant when both the paired t-test and the "
    "exact sign-flip test reject after Holm's correction over every comparison of the report "
    "(below 6 seeds the sign-flip test cannot reject). Findings are three-valued (agrees, "
    "disagrees, inconclusive) and decided by intervals against a stated margin, never by a "
    "point estimate (lab/reporting/findings.py). Seed shares: seeds with exact-match >= 50%, "
    "with an exact (Clopper-Pearson) interval; a star marks a cell whose seeds split, whose "
    "mean summarises it badly. Learned: training reached train.target_accuracy at every "
    f"training length and the test set's in-distribution exact-match is >= {LEARNED:.0%}; "
    "seeds counts the learned runs, which alone enter the means, tests and findings on "
    f"extrapolation ('not learned' counts the others). {DASH}: not applicable or unsupported."
)


def shortcut_line(results: list[Result]) -> str | None:
    """Mean accuracy of every shortcut rule on the ``svo`` runs' in-distribution evaluation
    sequences (one task and range: the first ``svo`` run's; every seed's sets), or None."""
    runs = [r for runs in groups(results, "svo").values() for r in runs]
    if not runs:
        return None
    config = config_from_dict(runs[0]["config"])
    task = config.data.build_task()
    low, high = runs[0]["train_lengths"]
    lengths = [n for n in runs[0]["grid_lengths"] if low <= n <= high]
    totals = dict.fromkeys(SHORTCUTS, 0.0)
    seeds = sorted({r["seed"] for r in runs})
    for seed in seeds:
        for length in lengths:
            batch = evaluation_set(task, seed, length, config.eval.samples)
            for name, value in shortcut_accuracy(task, batch).items():
                totals[name] += value / (len(seeds) * len(lengths))
    figures = ", ".join(f"`{name}` {100 * value:.1f}%" for name, value in totals.items())
    return (
        f"Shortcut baselines on svo, on the evaluation sequences of lengths {lengths} "
        f"(seeds {', '.join(map(str, seeds))}): {figures}."
    )


def answer(
    results: list[Result], heading: Callable[[str], list[str]], smoke: bool = False
) -> list[str]:
    """The ablation's answer as Markdown lines: per task the headline table, then the
    significant differences, the shortcut baselines and the findings against the literature,
    each under the lines ``heading(title)`` (``report.md`` and the README style them apart);
    for a ``smoke`` sweep the tables and :data:`lab.stats.verdicts.SMOKE_NOTE`, no tests."""
    lines = [SMOKE_NOTE, ""] if smoke else []
    for task in tasks(results):
        lines += heading(f"{task}: exact-match at multiples of the longest training length")
        lines += [headline_table(results, task), ""]
    left_out = left_out_line(results)
    if left_out:
        lines += [left_out, ""]
    if smoke:
        return lines
    lines += heading("Significant differences between schemes (seed level, Holm)")
    for task in tasks(results):
        lines += significance_lines(results, task)
    lines.append("")
    for task in tasks(results):
        lines += heading(f"{task}: seeds with exact-match >= 50% (exact 95% interval)")
        lines += [share_table(results, task), ""]
    shortcut = shortcut_line(results)
    if shortcut:
        lines += [*heading("Shortcut baselines"), shortcut, ""]
    return [*lines, *heading("Findings against the literature"), *findings(results), ""]


DIFFERENCES_NOTE = (
    "Every comparison the report makes: scheme a minus scheme b, exact-match points, paired by "
    "seed over the learned runs; the 95% t-interval over seeds, its half-width (+-), the seeds "
    "a +-10-point half-width would need at the observed spread, the paired t-test's and the "
    "exact sign-flip test's p-values, and Holm's adjusted p over the whole table. Significant: "
    "Holm p < 0.05, with both tests rejecting."
)


def passkey_section(results: list[Result]) -> list[str]:
    """The "Passkey retrieval" section of ``report.md`` as Markdown lines: the table of
    :func:`lab.lm.passkey.passkey_table` and the heatmaps; empty when no run holds a grid."""
    table = passkey_table(results)
    if not table:
        return []
    return [
        "## Passkey retrieval",
        "",
        "Exact-match of the key in percent, per scheme and evaluation rule (mean over seeds), "
        "at each multiple of the longest training length: the mean over the key's depths, and "
        "the depth with the lowest mean over the lengths (its mean in brackets; a dash when "
        "every depth scores alike). Heatmaps: one cell per depth and length.",
        "",
        table,
        "",
        *(  # drawn only from learned runs: none learned, no heatmaps
            [f"![passkey exact-match by depth and length]({PASSKEY_FIGURE})", ""]
            if grouped(results)
            else ["No heatmaps: no passkey run learned its task within its budget.", ""]
        ),
    ]


def markdown_report(
    results: list[Result], out_dir: str | Path | None = None, smoke: bool = False
) -> str:
    """The whole ``report.md`` text for ``results`` (``eval.json`` dicts, any order); a
    ``smoke`` report has :data:`lab.stats.verdicts.SMOKE_NOTE` instead of tests and findings."""
    lines = ["# Evaluation report", ""]
    lines += answer(results, lambda title: [f"## {title}", ""], smoke)
    for task in tasks(results):
        lines += [f"## {task}: exact-match by length", "", lengths_table(results, task), ""]
        pairs = lengths_table(results, task, "pair_accuracy")
        lines += [f"## {task}: minimal pairs with both members right, by length", "", pairs, ""]
    if not smoke:
        lines += ["## Paired differences over seeds", "", DIFFERENCES_NOTE, ""]
        lines += [differences_table(results), ""]
    lines += passkey_section(results)
    lines += diagnostics_section(results)
    lines += ["## Runs", "", summary_table(results, out_dir), ""]
    lines += ["## Position options", "", *position_options(results, out_dir), ""]
    lines += ["## Task options", "", *task_options(results), ""]
    notes = [(run_label(r, out_dir), n) for r in results for n in r["summary"]["notes"]]
    if notes:
        lines += ["## Notes", "", *(f"- {run}: {note}" for run, note in notes), ""]
    lines += [EXPLANATION, "", "![exact-match against length](accuracy_vs_length.png)", ""]
    lines += ["![training steps to the target per scheme](learning_speed.png)", ""]
    lines += ["![minimal-pair accuracy per scheme](order_sensitivity.png)", ""]
    return "\n".join(lines)
