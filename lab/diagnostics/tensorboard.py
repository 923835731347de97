"""The diagnostics of one evaluation in its run's TensorBoard: scalars against length (step =
length, like the accuracy curves) and the per-run attention figure."""

from __future__ import annotations

from typing import Any

from lab.common.events.tags import LENGTH_CURVES
from lab.diagnostics.columns import diagnostic_fields
from lab.diagnostics.figures import run_figure

DIAGNOSTICS_FIGURE = "figures/attention_vs_length"
"""Image tag of the per-run figure (:func:`lab.diagnostics.figures.run_figure`)."""


def write_diagnostics(writer: Any, result: dict[str, Any]) -> None:
    """Add ``LENGTH_CURVES/diagnostics/COLUMN`` scalars (each column of
    :func:`lab.diagnostics.columns.diagnostic_fields` a run has, step = length) and the attention
    figure to ``writer`` (a :class:`torch.utils.tensorboard.SummaryWriter`); nothing for an
    evaluation without diagnostics."""
    if not result.get("diagnostics"):
        return
    for row in result["lengths"]:
        for column, value in diagnostic_fields(result, row).items():
            if value is not None:
                writer.add_scalar(f"{LENGTH_CURVES}/diagnostics/{column}", value, row["length"])
    writer.add_figure(DIAGNOSTICS_FIGURE, run_figure(result), result.get("train_steps") or 0)
