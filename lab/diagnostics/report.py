"""The diagnostics' part of a sweep's ``report.md``: a generated "where it fails" line per
scheme and task, and the failure-mode table by length (means over the runs of each scheme)."""

from __future__ import annotations

from statistics import mean, median
from typing import Any

from lab.common.outputs import ATTENTION_FIGURE
from lab.diagnostics.summary import frame, group_line
from lab.evaluation.learned import learned_only
from lab.reporting.aggregate import groups, tasks
from lab.reporting.tables import DASH, format_table, percent

Result = dict[str, Any]

FAILURE_COLUMNS = {
    "right": "exact-match",
    "oracle_exact_match": "oracle length",
    "early_eos": "early `<eos>`",
    "late_eos": "late `<eos>`",
    "content": "content",
}
"""Failure-table columns (shares of sequences) -> headers."""


def diagnosed(results: list[Result]) -> list[Result]:
    """The runs of ``results`` whose ``eval.json`` holds diagnostics."""
    return [r for r in results if r.get("diagnostics")]


def where_it_fails_lines(results: list[Result]) -> list[str]:
    """One bullet per task and scheme: ``- copy, rope: fails at 1.1x ...``
    (:func:`lab.diagnostics.summary.group_line` over its learned runs, or over all its runs
    when none learned)."""
    lines = []
    for task in tasks(results):
        for scheme, runs in groups(results, task).items():
            chosen = learned_only(runs) or runs
            seeds = f"{len(chosen)} run{'s' * (len(chosen) != 1)}"
            lines.append(f"- {task}, {scheme} ({seeds}): {group_line(chosen)}")
    return lines


def failure_table(results: list[Result], task: str) -> str:
    """Rows scheme x length past training (and 1x, the longest training length): the shares of
    :data:`FAILURE_COLUMNS` and the median first wrong answer token, means over runs."""
    rows = []
    for scheme, runs in groups(results, task).items():
        high, named = runs[0]["train_lengths"][1], frame(runs[0], None)
        lengths = sorted({row["length"] for row in runs[0]["lengths"] if row["length"] >= high})
        for length in lengths:
            found = [_row(run, length) for run in runs]
            label = f"{named.label(length)} ({length})"
            if None in found:  # unsupported (or not diagnosed) in some run
                rows.append([scheme, label, "unsupported", *[DASH] * len(FAILURE_COLUMNS)])
                continue
            cells = [percent(mean(f[key] for f in found)) for key in FAILURE_COLUMNS]
            medians = [f["first_error_median"] for f in found if f["first_error_median"]]
            first = f"{mean(medians):.1f}" if medians else DASH
            rows.append([scheme, label, *cells, first])
    headers = ["scheme", "length", *FAILURE_COLUMNS.values(), "first error (token)"]
    return format_table(headers, rows)


def _row(run: Result, length: int) -> dict[str, Any] | None:
    """The ``failures`` of ``run`` at ``length``, or None."""
    row = next((r for r in run["lengths"] if r["length"] == length), None)
    return row.get("failures") if row else None


def cost_line(runs: list[Result]) -> str:
    """``'The attention passes took a median 11.2% of a run's evaluation time (range 8.1% to
    14.0%, 30 runs).'``: each run's ``diagnostics.seconds`` over its ``eval_seconds``."""
    timed = [r for r in runs if r["eval_seconds"] > 0]
    shares = sorted(r["diagnostics"]["seconds"] / r["eval_seconds"] for r in timed)
    if not shares:
        return "The runs record no evaluation time."
    return (
        f"The attention passes took a median {median(shares):.1%} of a run's evaluation time "
        f"(range {shares[0]:.1%} to {shares[-1]:.1%}, {len(shares)} "
        f"run{'s' * (len(shares) != 1)})."
    )


def diagnostics_section(results: list[Result], figure: str = ATTENTION_FIGURE) -> list[str]:
    """The report's lines: where it fails, then a failure table per task, then the attention
    figure (at the relative path ``figure``); empty when no run has diagnostics."""
    runs = diagnosed(results)
    if not runs:
        return []
    lines = ["## Where it fails", "", *where_it_fails_lines(runs), ""]
    for task in tasks(runs):
        lines += [f"## {task}: failure modes by length", "", failure_table(runs, task), ""]
    lines += [cost_line(runs), ""]
    lines += [
        "Shares of the test sequences at each length (means over seeds): exact-match, "
        "exact-match with the length given (oracle length: `<eos>` forbidden until the right "
        "length), and the wrong sequences by their first error: `<eos>` too early, `<eos>` "
        "missed, or a wrong answer token; the first error is the median 1-based answer token "
        "(docs/diagnostics.md).",
        "",
        f"![attention entropy, sink mass and solver alignment against length]({figure})",
        "",
    ]
    return lines
