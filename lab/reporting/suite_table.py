"""The task suite's table (``docs/results/suite.md``): per task and scheme, exact-match in
distribution and at 2x.

Computed from a suite sweep's ``results.json`` (``docs/results/suite/results.json``) and its
``sweep.json`` timings (``sweep.json``, and ``quick_sweep.json`` for
``configs/suite_quick.yaml``); :mod:`lab.reporting.pages` writes it into its page.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from lab.evaluation.learned import LEARNED, is_learned
from lab.reporting.aggregate import groups, tasks
from lab.reporting.tables import DASH, format_table
from model.position import available_schemes

Result = dict[str, Any]


def percent(value: float | None) -> str:
    """``'97.3'``: a fraction in percent with one decimal, or a dash for None."""
    return DASH if value is None else f"{100 * value:.1f}"


def learned_by(runs: dict[str, list[Result]]) -> str:
    """The schemes whose every run learned (:func:`lab.evaluation.learned.is_learned`: reached its
    training target, and :data:`lab.evaluation.learned.LEARNED` in distribution), or ``'none'``."""
    passing = [scheme for scheme, group in runs.items() if all(map(is_learned, group))]
    return ", ".join(f"`{s}`" for s in passing) or "none"


def suite_table(results: list[Result]) -> str:
    """Markdown table: one row per task (its training lengths, then ``in-dist / 2x`` exact-match
    in percent per scheme, mean over seeds, then the schemes that learned it), schemes in
    registration order; a dash for a scheme not run on a task."""
    rank = {name: i for i, name in enumerate(available_schemes())}
    labels = {label for task in tasks(results) for label in groups(results, task)}
    schemes = sorted(labels, key=lambda label: (rank.get(label.split()[0], len(rank)), label))
    rows = []
    for task in tasks(results):
        runs = groups(results, task)
        low, high = next(iter(runs.values()))[0]["train_lengths"]
        cells = [cell(runs[scheme]) if scheme in runs else DASH for scheme in schemes]
        rows.append([f"`{task}`", f"{low}..{high}", *cells, learned_by(runs)])
    headers = ["task", "lengths", *schemes, f"in-dist >= {LEARNED:.0%}"]
    return format_table(headers, rows)


def cell(runs: list[Result]) -> str:
    """``'99.6 / 12.5'``: exact-match in distribution and at 2x in percent, mean over ``runs``."""
    in_dist = mean([r["summary"]["in_dist"] for r in runs])
    return f"{percent(in_dist)} / {percent(mean([r['summary']['at'].get('2x') for r in runs]))}"


def mean(values: list[float | None]) -> float | None:
    """Mean of ``values``; None when empty or when any is None (not evaluated)."""
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)


def timing(sweep: dict[str, Any]) -> str:
    """``'70 runs in 41.2 min with 1 worker(s) on MACHINE'`` from a ``sweep.json``."""
    runs = sum(sweep["runs"].values())
    return (
        f"{runs} runs in **{sweep['seconds'] / 60:.1f} min** with {sweep['workers']} worker(s) "
        f"on {sweep['machine']}"
    )


def joined(results: list[Result], read: Callable[[Result], Any]) -> str:
    """The distinct values of ``read(run)`` over ``results``, sorted, joined by commas."""
    return ", ".join(str(v) for v in sorted({read(r) for r in results}))


def settings(results: list[Result]) -> str:
    """``'10 tasks x 5 schemes, seed 0, a 3000-step cap, 256 test sequences per length'``: the
    grid and budget the runs of ``results`` had."""
    return (
        f"{len(tasks(results))} tasks x {len({r['position'] for r in results})} schemes, seed "
        f"{joined(results, lambda r: r['seed'])}, a "
        f"{joined(results, lambda r: r['config']['train']['steps'])}-step cap, "
        f"{joined(results, lambda r: r['config']['eval']['samples'])} test sequences per length"
    )


def steps_range(steps: list[int]) -> str:
    """``'200 to 5000, median 3200'`` (the median of an even count is the mean of the middle
    two, :func:`statistics.median`); ``'not recorded'`` for no steps."""
    if not steps:
        return "not recorded"
    return f"{min(steps)} to {max(steps)}, median {statistics.median(steps):g}"


def suite_section(
    results: list[Result],
    sweep: dict[str, Any],
    quick: dict[str, Any],
    commands: tuple[str, str],
) -> str:
    """The body of the task suite's page: its settings and timing, then the table;
    ``commands`` are the full sweep's and the smoke test's, as the page names them
    (:func:`lab.reporting.pages.command_text`)."""
    steps = [r["train_steps"] for r in results if r["train_steps"] is not None]
    return "\n".join(
        [
            f"{commands[0]}: {settings(results)}; {timing(sweep)}. Training steps per run "
            f"(early stopping at the validation target, or the cap): {steps_range(steps)}. "
            f"{commands[1]} (the smoke test): {timing(quick)}.",
            "",
            "Exact-match on the test sequences in percent, `in distribution / 2x` (in "
            "distribution: the mean over the evaluated lengths inside the training range; 2x: "
            f"twice the longest training length); {DASH}: not run or not evaluated. Last "
            f"column: the schemes reaching {LEARNED:.0%} in distribution.",
            "",
            suite_table(results),
        ]
    )
