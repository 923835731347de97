"""The two figures of a language-model report: perplexity against evaluation length, and mean
loss against token position, one line per scheme (mean over seeds), the training length marked.

Both use a log x axis, as the papers that report them do (Press et al. 2022, fig. 1; Chen et al.
2023, fig. 1). A scheme's perplexity line stops where it cannot encode the length (a learned
table too short), and its loss line where its longest supported evaluation length ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from lab.common.files import atomic_writer
from lab.lm.aggregate import cell, length_labels, length_row
from lab.reporting.aggregate import groups, tasks

Result = dict[str, Any]
POSITION_BINS = 200
"""Log-spaced bins of token positions in the loss-against-position curves (figure, TensorBoard)."""


def log_binned(loss: list[float], bins: int = POSITION_BINS) -> tuple[np.ndarray, np.ndarray]:
    """Mean loss over log-spaced bins of token positions.

    Args:
        loss: mean loss at positions ``0 .. n-1`` (nats/token).
        bins: at most this many bins; every position of the first ones is a bin of its own.

    Returns:
        ``(positions, means)``: int64 last position of each bin (0-based, increasing) and the
        float64 mean loss over the bin's positions; both of shape ``(k,)``, ``k <= bins``.

    Raises:
        ValueError: ``loss`` is empty or ``bins < 1``.
    """
    if not loss or bins < 1:
        raise ValueError(f"log_binned needs positions and bins >= 1, got {len(loss)}, {bins}")
    values = np.asarray(loss, dtype=np.float64)
    ends = np.unique(np.geomspace(1, len(values), num=bins).round().astype(np.int64))
    starts = np.concatenate([[0], ends[:-1]])
    means = np.array([values[s:e].mean() for s, e in zip(starts, ends, strict=True)])
    return ends - 1, means


def _panels(results: list[Result]) -> tuple[Figure, list[tuple[Any, str]]]:
    """A figure with one panel per task of ``results``, side by side."""
    names = tasks(results)
    figure = Figure(figsize=(8 * len(names), 4.6), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(names), squeeze=False)[0]
    return figure, list(zip(axes, names, strict=True))


def _mark_training(ax: Any, runs: list[Result]) -> None:
    """A dashed vertical line at each longest training length of ``runs``."""
    for length in sorted({r["train_lengths"][1] for r in runs}):
        ax.axvline(
            length, color="0.4", linestyle="--", linewidth=1, label=f"training length {length}"
        )


def perplexity_figure(results: list[Result]) -> Figure:
    """Perplexity against evaluation length (tokens), log-log, one line per scheme: the mean over
    seeds with its 95% interval shaded (t over seeds, or the run's bootstrap over windows)."""
    figure, panels = _panels(results)
    for ax, task in panels:
        runs = [r for r in results if r["task"] == task]
        _mark_training(ax, runs)
        for i, (label, group) in enumerate(groups(runs, task).items()):
            points = []
            for name in length_labels(group):
                value = cell(group, name)
                if value.mean is not None:
                    length = length_row(group[0], name)["length"]
                    low, high = value.low or value.mean, value.high or value.mean
                    points.append((length, value.mean, max(low, 1e-9), high))
            if not points:
                continue
            xs, means, lows, highs = zip(*points, strict=True)
            seeds = f" (mean of {len(group)})" if len(group) > 1 else ""
            ax.plot(xs, means, marker="o", color=f"C{i}", label=f"{label}{seeds}")
            ax.fill_between(xs, lows, highs, color=f"C{i}", alpha=0.2, linewidth=0)
        _plain_log_axes(ax, y=True)
        ax.set(title=task, xlabel="evaluation length (tokens)", ylabel="perplexity")
        ax.legend(
            fontsize="small",
            title="shaded: 95% interval",
            title_fontsize="small",
            loc="upper left",
            bbox_to_anchor=(1.01, 1),
        )
    return figure


def position_figure(results: list[Result]) -> Figure:
    """Mean loss (nats/token) against token position, log x, one line per scheme (mean over
    seeds of each run's ``positions.loss``, over log-spaced bins of positions,
    :func:`log_binned`)."""
    figure, panels = _panels(results)
    for ax, task in panels:
        runs = [r for r in results if r["task"] == task]
        _mark_training(ax, runs)
        for i, (label, group) in enumerate(groups(runs, task).items()):
            curves = [r["positions"]["loss"] for r in group if r["positions"]["loss"]]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            mean = np.mean([c[:n] for c in curves], axis=0)
            positions, binned = log_binned(mean.tolist())
            seeds = f" (mean of {len(curves)})" if len(curves) > 1 else ""
            ax.plot(positions + 1, binned, color=f"C{i}", label=f"{label}{seeds}")
        _plain_log_axes(ax, y=False)
        ax.set(title=task, xlabel="token position (1 = first)", ylabel="mean loss (nats/token)")
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    return figure


def _plain_log_axes(ax: Any, y: bool) -> None:
    """Log x (base 2) and, when ``y``, log y, with ticks written as plain numbers (64, not 2^6)."""
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(plain)
    if y:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)


def save(figure: Figure, path: str | Path) -> Path:
    """Write ``figure`` as PNG to ``path`` atomically; returns the path."""
    with atomic_writer(path) as handle:
        figure.savefig(handle, format="png", dpi=100)
    return Path(path)
