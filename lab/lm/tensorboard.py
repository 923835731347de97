"""One language-model evaluation written into its run's TensorBoard folder.

- ``lm/perplexity`` (step = evaluation length in tokens, supported lengths) and
  ``lm/loss_at_position`` (step = token position, 0-based; the mean loss over log-spaced bins of
  positions ending there, at most :data:`lab.lm.figures.POSITION_BINS` points,
  :func:`lab.lm.figures.log_binned`);
- the same two curves mirrored as ``compare/TASK/lm_perplexity_by_length_set_smoothing_0`` and
  ``compare/TASK/lm_loss_by_position_set_smoothing_0``, which the Custom Scalars group
  ``task TASK: language model`` (:func:`lm_layout`) draws with one line per run, so the schemes of
  one task compare on one chart (the step is not a training step: set Smoothing to 0,
  :mod:`lab.common.events.tags`); the run's layout also keeps the training's group
  (:func:`lab.training.run_logs.comparison_layout`), since TensorBoard reads one layout per run;
- the two figures of the run (``figures/perplexity_vs_length``, ``figures/loss_vs_position``) in
  the Images tab, which no smoothing slider changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.common.events.files import EventLog
from lab.common.events.tags import LENGTH_CURVES
from lab.lm.figures import log_binned, perplexity_figure, position_figure
from lab.training.run_logs import comparison_layout

LM_EVENTS = ".lm_evaluation"
"""Suffix of the TensorBoard event file of an LM evaluation in a run folder."""
PERPLEXITY = "lm/perplexity"
LOSS_AT_POSITION = "lm/loss_at_position"
COMPARE_LEAVES = {
    PERPLEXITY: f"lm_perplexity_{LENGTH_CURVES}",
    LOSS_AT_POSITION: f"lm_loss_by_position_{LENGTH_CURVES.removeprefix('by_length_')}",
}
"""Tag of a run's curve -> leaf of its ``compare/TASK/LEAF`` mirror."""
CHARTS = {
    "perplexity, x = evaluation length in tokens (eval.py; set Smoothing to 0)": PERPLEXITY,
    "mean loss, x = token position (eval.py; set Smoothing to 0)": LOSS_AT_POSITION,
}
"""Title of a Custom Scalars chart -> the curve it compares."""


def lm_layout(task: str) -> dict[str, dict[str, list]]:
    """The Custom Scalars group ``task TASK: language model``: one Multiline chart per curve of
    :data:`CHARTS`, matching the ``compare/TASK/...`` mirrors of every run of ``task``."""
    return {
        f"task {task}: language model": {
            title: ["Multiline", [f"^compare/{task}/{COMPARE_LEAVES[tag]}$"]]
            for title, tag in CHARTS.items()
        }
    }


def lm_scalars(result: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """Tag -> ``(step, value)`` points of one LM ``eval.json`` dict: the perplexity at every
    supported length (step = length in tokens) and the binned loss at token positions."""
    points = {
        PERPLEXITY: [
            (row["length"], row["perplexity"]) for row in result["lengths"] if row["supported"]
        ]
    }
    loss = result["positions"]["loss"]
    if loss:
        positions, means = log_binned(loss)
        points[LOSS_AT_POSITION] = [
            (int(p), float(m)) for p, m in zip(positions, means, strict=True)
        ]
    return points


def write_lm_tensorboard(result: dict[str, Any], folder: str | Path) -> None:
    """Log one LM evaluation into ``folder``'s TensorBoard run (module docstring), replacing an
    earlier one (event files ending in :data:`LM_EVENTS`).

    Raises:
        OSError: the event file cannot be written (one line,
            :meth:`lab.common.events.files.EventLog.write`); the earlier file is kept.
    """
    writer = EventLog()  # written at once, atomically: a full disk is one line, no torn file
    for tag, points in lm_scalars(result).items():
        mirror = f"compare/{result['task']}/{COMPARE_LEAVES[tag]}"
        for step, value in points:
            writer.add_scalar(tag, value, step)
            writer.add_scalar(mirror, value, step)
    # a run keeps one layout, the last written: the training's group and the LM group together
    writer.add_custom_scalars(comparison_layout(result["task"]) | lm_layout(result["task"]))
    steps = result.get("train_steps") or 0
    if any(row["supported"] for row in result["lengths"]):
        writer.add_figure("figures/perplexity_vs_length", perplexity_figure([result]), steps)
    if result["positions"]["loss"]:
        writer.add_figure("figures/loss_vs_position", position_figure([result]), steps)
    writer.write(folder, LM_EVENTS)
