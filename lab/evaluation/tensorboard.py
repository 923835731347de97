"""One evaluation written into its run's TensorBoard folder: accuracy against length as scalars
(step = length) and as a figure, and the HParams tab's ``headline/*`` metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.common.events.files import EventLog
from lab.common.events.tags import LENGTH_COMPARE, LENGTH_CURVES, RUN_FIGURE
from lab.diagnostics.tensorboard import write_diagnostics
from lab.evaluation.figure import plot_accuracy_vs_length
from lab.evaluation.labels import run_label, scheme_label
from lab.evaluation.record import pair_values
from lab.lm.tensorboard import write_lm_tensorboard

EVAL_EVENTS = ".extrapolation"
"""Suffix of the TensorBoard event file that ``eval.py`` writes into a run folder."""


def write_tensorboard(result: dict[str, Any], run_dir: str | Path) -> None:
    """Log one evaluation into ``run_dir``'s TensorBoard run, replacing an earlier one.

    - ``by_length_set_smoothing_0/exact_match`` and ``.../token_accuracy`` (step = length,
      supported lengths), mirrored as ``compare/TASK/exact_match_by_length_set_smoothing_0``
      for the task's Custom Scalars group (:mod:`lab.common.events.tags`: the name says
      smoothing must be 0, since the step is a length);
    - the same curve as a figure, ``figures/accuracy_vs_length`` (Images tab; no smoothing);
    - the test-set ``headline/*`` metrics of the HParams tab (:func:`headline_scalars`);
    - the diagnostics against length and their figure
      (:func:`lab.diagnostics.tensorboard.write_diagnostics`), when the evaluation has them.

    A language-model evaluation (``kind == "lm"``) writes its own curves instead
    (:func:`lab.lm.tensorboard.write_lm_tensorboard`).

    Raises:
        OSError: the event file cannot be written (one line, :meth:`EventLog.write`); the
            earlier evaluation's file is kept and no partial file is left.
    """
    if result.get("kind") == "lm":
        write_lm_tensorboard(result, run_dir)
        return
    writer = EventLog()  # written at once, atomically: a full disk is one line, no torn file
    compare = f"compare/{result['task']}/{LENGTH_COMPARE}"  # lab.training.run_logs' layout
    for row in result["lengths"]:
        if row["supported"]:
            writer.add_scalar(f"{LENGTH_CURVES}/exact_match", row["exact_match"], row["length"])
            writer.add_scalar(
                f"{LENGTH_CURVES}/token_accuracy", row["token_accuracy"], row["length"]
            )
            writer.add_scalar(compare, row["exact_match"], row["length"])
    if any(row["supported"] for row in result["lengths"]):
        figure = plot_accuracy_vs_length([result], None)
        figure.suptitle(f"{run_label(result)}: {scheme_label(result)} on {result['task']}")
        writer.add_figure(RUN_FIGURE, figure, result.get("train_steps") or 0, close=False)
    for tag, value in headline_scalars(result).items():
        writer.add_scalar(tag, value, 0)
    write_diagnostics(writer, result)
    writer.write(run_dir, EVAL_EVENTS)  # the latest evaluation replaces earlier ones


def headline_scalars(result: dict[str, Any]) -> dict[str, float]:
    """The ``headline/*`` metrics of the HParams tab (:data:`lab.training.run_logs.HEADLINE`) that
    this evaluation has: exact-match in distribution and at 1.25x, 1.5x, 2x, 4x, minimal pairs in
    distribution, permutation TVD (test set), and ``reached_target`` (1 or 0) when
    ``eval.json`` records whether the training reached its target."""
    summary = result["summary"]
    values = {"headline/exact_match_in_dist": summary.get("in_dist")}
    for label in ("1.25x", "1.5x", "2x", "4x"):
        values[f"headline/exact_match_{label}"] = summary["at"].get(label)
    values["headline/pair_accuracy_in_dist"] = pair_values([result], "in_dist")[0]
    values["headline/permutation_tvd"] = result.get("order", {}).get("permutation_tvd")
    reached = result.get("reached_target")  # set by the training, when it records it
    values["headline/reached_target"] = None if reached is None else float(reached)
    return {tag: value for tag, value in values.items() if value is not None}
