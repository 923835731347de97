"""A sweep's cross-run report folder: ``results.csv`` (one row per run x length), ``results.json``
(the list of ``eval.json`` dicts), ``report.md`` and its three figures, and the passkey heatmaps
when runs hold a passkey grid; language-model runs get their own files beside them
(:mod:`lab.lm.report`)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from lab.common.files import atomic_write, atomic_writer, check_not_folders
from lab.common.outputs import (
    ATTENTION_FIGURE,
    PASSKEY_FIGURE,
    SYNTHETIC_REPORT_NAMES,
    is_ours,
)
from lab.diagnostics.figures import attention_figure
from lab.diagnostics.report import diagnosed
from lab.evaluation.figure import plot_accuracy_vs_length
from lab.evaluation.labels import one_run_twice, ordered
from lab.lm.passkey import grouped
from lab.lm.passkey_figure import passkey_figure
from lab.lm.report import LM_REPORT_NAMES, write_lm_reports
from lab.reporting import sweep_figures
from lab.reporting.overview import markdown_report
from lab.reporting.tables import CSV_COLUMNS, csv_rows

REPORT_NAMES = SYNTHETIC_REPORT_NAMES
"""The files :func:`write_synthetic_reports` writes into its folder, from the project's one list
(:mod:`lab.common.outputs`; the passkey heatmaps only when a run holds a passkey grid, the
attention figure only when a run holds diagnostics)."""


def write_reports(
    results: list[dict[str, Any]], out_dir: str | Path, smoke: bool = False
) -> dict[str, Path]:
    """Write the synthetic runs' ``results.csv``, ``results.json``, ``report.md`` and figures,
    and hand the language-model runs (``kind == "lm"``) to
    :func:`lab.lm.report.write_lm_reports`; a kind with no runs writes no files.

    Args:
        results: ``eval.json`` dicts (from :func:`lab.evaluation.evaluate.evaluate_run`), at least
        one.
        out_dir: destination folder (created if needed).
        smoke: the runs are a smoke test: the reports carry
            :data:`lab.stats.verdicts.SMOKE_NOTE` instead of significance tests and findings.

    Returns:
        ``{"csv", "json", "markdown", "plot", "learning_speed", "order_sensitivity"}`` -> path
        written (synthetic runs; ``"passkey"`` too when a run holds a passkey grid), and the
        keys of :func:`lab.lm.report.write_lm_reports` (LM runs).

    Raises:
        IsADirectoryError: a folder stands where one of :data:`REPORT_NAMES` or
            :data:`lab.lm.report.LM_REPORT_NAMES` goes (checked before any is written).
        ValueError: two results are one run (:func:`lab.evaluation.labels.one_run_twice`),
            which the tables would count as two seeds (one line naming both folders).
    """
    check_not_folders(Path(out_dir), REPORT_NAMES + LM_REPORT_NAMES)
    twice = one_run_twice(results)
    if twice is not None:
        first, second = (results[i] for i in twice)
        raise ValueError(
            f"{first['run_dir']} and {second['run_dir']} are one run ({second['position']}, "
            f"{second['task']}, seed {second['seed']}, the same settings): a report would count "
            "it as two seeds; evaluate one of them"
        )
    synthetic = [r for r in results if r.get("kind") != "lm"]
    lm = [r for r in results if r.get("kind") == "lm"]
    paths = write_synthetic_reports(synthetic, out_dir, smoke) if synthetic else {}
    paths |= write_lm_reports(lm, out_dir, smoke) if lm else {}
    remove_stale(Path(out_dir), {Path(p).name for p in paths.values()})
    return paths


def remove_stale(out_dir: Path, written: set[str]) -> None:
    """Delete the report files in ``out_dir`` that this report did not write but an earlier one
    did (:func:`lab.common.outputs.is_ours`: a user's file of such a name stays): a sweep re-run
    with another task, or without passkey grids or diagnostics, leaves no report of runs that
    are gone beside its own, for ``--publish`` to take as current."""
    for name in (*REPORT_NAMES, *LM_REPORT_NAMES):
        if name not in written and is_ours(out_dir / name):
            (out_dir / name).unlink()


def write_synthetic_reports(
    results: list[dict[str, Any]], out_dir: str | Path, smoke: bool = False
) -> dict[str, Path]:
    """Write :data:`REPORT_NAMES` for synthetic ``eval.json`` dicts (:func:`write_reports`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = ordered(results)
    paths = {
        "csv": out / "results.csv",
        "json": out / "results.json",
        "markdown": out / "report.md",
        "plot": out / "accuracy_vs_length.png",
    }
    with atomic_writer(paths["csv"], "w") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(csv_rows(results, out))
    atomic_write(paths["json"], json.dumps(results, indent=2, allow_nan=False) + "\n")
    plot_accuracy_vs_length(results, paths["plot"])

    paths["learning_speed"] = sweep_figures.save(
        sweep_figures.learning_speed_figure(results), out / "learning_speed.png"
    )
    paths["order_sensitivity"] = sweep_figures.save(
        sweep_figures.order_sensitivity_figure(results), out / "order_sensitivity.png"
    )

    if grouped(results):  # a learned run's grid to draw (a run not learned measures none)
        passkey_figure(results, out / PASSKEY_FIGURE)
        paths["passkey"] = out / PASSKEY_FIGURE
    if diagnosed(results):
        paths["attention"] = sweep_figures.save(
            attention_figure(diagnosed(results)), out / ATTENTION_FIGURE
        )
    atomic_write(paths["markdown"], markdown_report(results, out, smoke))
    return paths
