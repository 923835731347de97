"""A sweep's own TensorBoard runs, written by its report: the comparison that
``tensorboard --logdir OUT_DIR`` opens on.

- ``OUT_DIR/_sweep/mean/SCHEME``: one run per scheme holding, for every task, the mean over its
  seeds: ``TASK/exact_match_in_dist`` (``_2x``, ``_4x``) and ``TASK/validation_loss`` (the
  periodic validation, step = training step, at the steps every seed logged, so the curve ends
  where the first seed stopped early), and ``TASK/exact_match_by_length_set_smoothing_0`` and
  ``TASK/token_accuracy_by_length_set_smoothing_0`` (the test set, ``eval.json``, step = length,
  at the lengths every seed could encode). The task comes first: TensorBoard's Time Series tab
  groups the charts by it (and opens the first two groups), and a chart's title, cut from the
  left when long, keeps its group's name above it. A chart of one of these tags holds one line
  per scheme, in one colour per scheme in every task (one run each), and the Custom Scalars group
  ``task TASK: mean over seeds (one line per scheme)`` gathers them.
- ``OUT_DIR/_sweep/figures``: the report's figures in the Images tab (``sweep/accuracy_vs_length``,
  ``sweep/learning_speed``, ``sweep/order_sensitivity``, and ``sweep/attention_vs_length`` when
  the runs hold diagnostics), which no smoothing slider changes.

These are the only runs below ``OUT_DIR`` (the runs' own events are beside it,
:func:`lab.common.events.place.runs_root`): as many as schemes plus one, however many tasks and
seeds, so TensorBoard's Scalars, Custom Scalars and Images tabs select them all when they open
(those tabs select no run when there are more than :data:`AUTO_SELECTED`).
:func:`tensorboard_url` gives a link that opens the Time Series tab on them with smoothing 0.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lab.common.checkpoint import saved_events_folder
from lab.common.events.files import EventLog
from lab.common.events.tags import LENGTH_CURVES
from lab.common.files import safe_folder
from lab.common.outputs import SWEEP_RUNS
from lab.diagnostics.figures import attention_figure
from lab.diagnostics.report import diagnosed
from lab.evaluation.figure import plot_accuracy_vs_length
from lab.evaluation.labels import run_label
from lab.evaluation.learned import learned_only, not_learned_reason
from lab.reporting.aggregate import groups, tasks
from lab.reporting.sweep_figures import learning_speed_figure, order_sensitivity_figure
from lab.training.run_logs import COMPARE_CHARTS

Result = dict[str, Any]


SUFFIX = ".sweep_report"
"""Suffix of the event files written here; a new report deletes only files with it."""

VALIDATION = ("exact_match_in_dist", "exact_match_2x", "exact_match_4x", "validation_loss")
"""Leaves of the runs' ``compare/TASK/...`` tags (:func:`lab.training.run_logs.periodic_eval`) whose
mean over seeds a mean run holds, under ``TASK/LEAF``."""

BY_LENGTH = {"exact_match": f"exact_match_{LENGTH_CURVES}"}
BY_LENGTH["token_accuracy"] = f"token_accuracy_{LENGTH_CURVES}"
"""``eval.json`` length-row key -> leaf of its mean curve, ``TASK/LEAF`` (step = length)."""


def write_sweep_tensorboard(results: list[Result], out_dir: str | Path) -> Path:
    """Write the mean runs and the figures run (module docstring) under ``OUT_DIR/_sweep``,
    replacing the ones an earlier report wrote.

    Returns:
        The ``OUT_DIR/_sweep`` folder.

    Raises:
        OSError: ``OUT_DIR/_sweep`` or a folder below it is a symlink or not a folder (every
            folder is checked, and created, before anything is written: writes never follow a
            link out of ``OUT_DIR``).
    """
    root = clear(Path(out_dir) / SWEEP_RUNS)
    schemes: dict[str, dict[str, list[Result]]] = {}  # label -> task -> runs
    for task in tasks(results):
        for label, runs in groups(results, task).items():
            schemes.setdefault(label, {})[task] = runs
    used: set[str] = set()
    folders = {label: root / "mean" / folder_name(label, used) for label in schemes}
    for folder in [root / "figures", *folders.values()]:
        safe_folder(folder, out_dir)
    writer = EventLog()  # written whole or not at all: a full disk is one line, no thread
    writer.add_figure("sweep/accuracy_vs_length", plot_accuracy_vs_length(results, None), 0)
    writer.add_figure("sweep/learning_speed", learning_speed_figure(results), 0)
    writer.add_figure("sweep/order_sensitivity", order_sensitivity_figure(results), 0)
    if diagnosed(results):
        writer.add_figure("sweep/attention_vs_length", attention_figure(diagnosed(results)), 0)
    writer.write(root / "figures", SUFFIX)
    for label, by_task in schemes.items():
        write_mean_run(label, by_task, folders[label], out_dir)
    return root


def clear(root: Path) -> Path:
    """Delete the event files an earlier report wrote under ``root`` (only files named with
    :data:`SUFFIX`, never through a symlink) and the folders left empty; returns ``root``."""
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise OSError(f"{root} is a symlink or a file; the sweep writes its TensorBoard runs there")
    for path in root.rglob(f"events.out.tfevents.*{SUFFIX}"):  # (rglob enters no symlink)
        if path.is_file() and not path.is_symlink():
            path.unlink()
    for folder in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
            folder.rmdir()
    return root


def folder_name(label: str, used: set[str]) -> str:
    """A folder name for scheme ``label`` (e.g. ``rope [scaling=yarn]`` ->
    ``rope_scaling=yarn``), made unique among ``used`` (which it joins)."""
    name = re.sub(r"[^A-Za-z0-9.=+-]+", "_", label).strip("_") or "scheme"
    unique, n = name, 2
    while unique in used:
        unique, n = f"{name}_{n}", n + 1
    used.add(unique)
    return unique


def mean_by_length(runs: list[Result]) -> dict[str, dict[int, float]]:
    """:data:`BY_LENGTH` leaf -> {length: mean over ``runs``} at the lengths every run has a
    supported value for."""
    per_run = [{row["length"]: row for row in r["lengths"] if row["supported"]} for r in runs]
    common = sorted(set.intersection(*(set(rows) for rows in per_run)))
    return {
        leaf: {n: sum(rows[n][key] for rows in per_run) / len(per_run) for n in common}
        for key, leaf in BY_LENGTH.items()
    }


def mean_validation(runs: list[Result], task: str) -> dict[str, dict[int, float]]:
    """:data:`VALIDATION` leaf -> {training step: mean over ``runs``} at the steps every run
    logged (read from the runs' event files; a step logged twice counts its last value). A leaf
    some run lacks (no folder, no events) is left out."""
    curves: dict[str, dict[int, float]] = {}
    per_run = [read_scalars(r.get("run_dir"), task) for r in runs]
    for leaf in VALIDATION:
        series = [values.get(leaf) for values in per_run]
        if not series or any(not s for s in series):
            continue
        common = sorted(set.intersection(*(set(s) for s in series)))
        curves[leaf] = {step: sum(s[step] for s in series) / len(series) for step in common}
    return curves


def read_scalars(run_dir: str | None, task: str) -> dict[str, dict[int, float]]:
    """Leaf -> {step: value} of the ``compare/TASK/LEAF`` scalars of the run in ``run_dir``,
    read from its events folder (:func:`lab.common.checkpoint.saved_events_folder`: its
    ``log_dir``, or the folder itself); empty when there is no such folder (with a warning
    when a file stands in its place)."""
    if not run_dir or not Path(run_dir).is_dir():
        return {}
    folder = saved_events_folder(run_dir)
    if not folder.is_dir():
        why = "is a file" if folder.exists() else "is missing (a sweep copied without it?)"
        print(
            f"warning: {run_dir}: its TensorBoard events folder {str(folder)!r} {why}; its "
            "curves are left out of the mean run",
            file=sys.stderr,
        )
        return {}
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 1}).Reload()
    prefix = f"compare/{task}/"
    return {
        tag.removeprefix(prefix): {e.step: e.value for e in events.Scalars(tag)}
        for tag in events.Tags()["scalars"]
        if tag.startswith(prefix)
    }


def mean_tag(task: str, leaf: str) -> str:
    """The tag of a mean run's curve: ``TASK/LEAF`` (the task first: module docstring)."""
    return f"{task}/{leaf}"


def write_mean_run(
    label: str, by_task: dict[str, list[Result]], folder: Path, out_dir: str | Path
) -> None:
    """One scheme's mean run (module docstring): for each task, the mean over its learned
    runs (:mod:`lab.evaluation.learned`; all of them when none learned), a text note
    ``about/TASK`` naming the runs it averages and those it left out, and the Custom Scalars
    group ``task TASK: mean over seeds``."""
    layout = {}
    writer = EventLog()
    for task, runs in by_task.items():
        learned = learned_only(runs)
        used = learned or runs
        curves = mean_validation(used, task) | mean_by_length(used)
        for leaf, points in curves.items():
            for step, value in points.items():
                writer.add_scalar(mean_tag(task, leaf), value, step)
        left_out = [r for r in runs if r not in used]
        note = (
            f"**{label}** on **{task}**: mean of {len(used)} run(s): "
            + ", ".join(f"`{run_label(r, out_dir)}`" for r in used)
            + ("" if learned else " (none learned: the mean of every run)")
            + "".join(
                f"; left out as not learned: `{run_label(r, out_dir)}` ({not_learned_reason(r)})"
                for r in left_out
            )
            + "."
        )
        writer.add_text(f"about/{task}", note, 0)
        charts = dict(COMPARE_CHARTS)
        charts["token accuracy, x = length (eval.py; set Smoothing to 0)"] = BY_LENGTH[
            "token_accuracy"
        ]
        layout[f"task {task}: mean over seeds (one line per scheme)"] = {
            f"{task}: {title}": ["Multiline", [f"^{re.escape(mean_tag(task, leaf))}$"]]
            for title, leaf in charts.items()
        }
    writer.add_custom_scalars(layout)
    writer.write(folder, SUFFIX)


AUTO_SELECTED = 40
"""The most runs TensorBoard's Scalars, Custom Scalars and Images tabs select when they open
(``maxNamesToEnableByDefault`` of its run selector): with more, every run starts unchecked and
every chart empty. A sweep keeps below ``OUT_DIR`` at most as many (module docstring)."""


def tensorboard_url(port: int = 6006) -> str:
    """A link to TensorBoard's Time Series tab, opened on ``tensorboard --logdir OUT_DIR``:
    the mean runs and figures only (``runFilter``, for a folder that also holds the runs of an
    older sweep, or a parent folder opened instead), smoothing 0. Its first two tag groups, the
    first two tasks, open expanded: one chart per figure, one line per scheme. (TensorBoard
    takes "ignore outliers" from the browser's settings only, never from a link.)"""
    query = {"smoothing": "0", "runFilter": f"{SWEEP_RUNS}/"}
    encoded = "&".join(f"{key}={quote(value, safe='')}" for key, value in query.items())
    return f"http://localhost:{port}/?{encoded}#timeseries"
