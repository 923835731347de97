"""The two figures of a language-model report: perplexity against evaluation length, and mean
loss against token position, one line per scheme (mean over seeds), the training length marked.

Both use a log x axis, as the papers that report them do (Press et al. 2022, fig. 1; Chen et al.
2023, fig. 1). A scheme's perplexity line stops where it cannot encode the length (a learned
table too short), and its loss line where its longest supported evaluation length ends.

The extend study's figure (:func:`extend_figure`): held-out perplexity against evaluation
length, one named line per arm (:func:`lab.lm.extend_report.grouped`): RoPE as trained, each
zero-shot rule, each fine-tuned rule and the from-scratch run; both training lengths marked.

A line is the geometric mean over the arm's seeds (``exp`` of the mean log perplexity, as the
report's table gives it) at every length each of its seeds scores; every seed's own perplexity
is a faint dot beside it. A zero-shot rule and its fine-tuned run share a colour (dashed: zero-
shot; solid: fine-tuned). Lengths use a log x axis (base 2), as in Press et al. 2022 (fig. 1)
and Chen et al. 2023 (fig. 1); perplexity a log y axis when it spans a factor of
:data:`LOG_Y_RATIO` or more.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from lab.common.files import atomic_writer
from lab.evaluation.figure import line_style, outside_legend
from lab.lm.aggregate import cell, corpus_parts, length_labels, length_row, row_at
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


def _panels(results: list[Result]) -> tuple[Figure, list[tuple[Any, str, list[Result]]]]:
    """A figure with one panel per task of ``results`` and corpus it scored
    (:func:`lab.lm.aggregate.corpus_parts`: runs of two corpora scored other windows and never
    share a panel), side by side: ``(figure, [(axes, title, runs)])``."""
    parts = [part for task in tasks(results) for part in corpus_parts(results, task)]
    figure = Figure(figsize=(8 * len(parts), 4.6), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(parts), squeeze=False)[0]
    return figure, [(ax, title, runs) for ax, (title, runs) in zip(axes, parts, strict=True)]


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
    for ax, title, runs in panels:
        task = runs[0]["task"]
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
            style = line_style(i)  # past ten lines, markers and dashes change too
            ax.plot(
                xs,
                means,
                marker=style["marker"],
                linestyle=style["linestyle"],
                color=style["color"],
                label=f"{label}{seeds}",
            )
            ax.fill_between(xs, lows, highs, color=style["color"], alpha=0.2, linewidth=0)
        _plain_log_axes(ax, y=True)
        ax.set(title=title, xlabel="evaluation length (tokens)", ylabel="perplexity")
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
    for ax, title, runs in panels:
        task = runs[0]["task"]
        _mark_training(ax, runs)
        for i, (label, group) in enumerate(groups(runs, task).items()):
            curves = [r["positions"]["loss"] for r in group if r["positions"]["loss"]]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            mean = np.mean([c[:n] for c in curves], axis=0)
            positions, binned = log_binned(mean.tolist())
            seeds = f" (mean of {len(curves)})" if len(curves) > 1 else ""
            style = line_style(i)
            ax.plot(
                positions + 1,
                binned,
                color=style["color"],
                linestyle=style["linestyle"],
                label=f"{label}{seeds}",
            )
        _plain_log_axes(ax, y=False)
        ax.set(title=title, xlabel="token position (1 = first)", ylabel="mean loss (nats/token)")
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


# --- the extend study's figure ---------------------------------------------------------

LOG_Y_RATIO = 3.0
"""The perplexity axis is logarithmic when its largest value is this many times its smallest."""
Y_TICKS = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)
"""Where the log perplexity axis is labelled, per decade (4, 5, ..., 10, 12, 15, 20, ...)."""
STYLES = {  # kind -> (line style, marker)
    "as trained": ("-", "o"),
    "zero-shot": ("--", "s"),
    "fine-tuned": ("-", "^"),
    "from scratch": (":", "D"),
}
FIXED_COLOURS = {"as trained": "black", "from scratch": "0.45"}
"""Arms drawn in one colour whatever their rule; the others take one colour per rule."""


def arm_label(kind: str, rule: str, seeds: int) -> str:
    """An arm's name in the legend, as the report's tables write it, with its seed count:
    ``"zero-shot yarn s=4 (mean of 2 seeds)"``, ``"as trained (seed 0 only)"``."""
    name = f"{kind} {rule}" if rule else kind
    return f"{name} (mean of {seeds} seeds)" if seeds > 1 else f"{name} (1 seed)"


def _points(runs: dict[int, Result]) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """``(means, seeds)``: ``(length, perplexity)`` of the geometric mean over the seeds at each
    length every seed scores, and of every seed at each length it scores."""
    by_length: dict[int, list[float]] = {}
    for run in runs.values():
        for length in sorted({row["length"] for row in run["lengths"]}):
            row = row_at(run, length)
            if row is not None:
                by_length.setdefault(length, []).append(row["perplexity"])
    means = [
        (n, math.exp(sum(map(math.log, values)) / len(values)))
        for n, values in sorted(by_length.items())
        if len(values) == len(runs)
    ]
    seeds = [(n, value) for n, values in sorted(by_length.items()) for value in values]
    return means, seeds


def _training_lengths(groups: dict[tuple[str, str], dict[int, Result]]) -> dict[int, list[str]]:
    """Training length (tokens) -> the kinds of arm trained at it, in :data:`STYLES` order."""
    lengths: dict[int, list[str]] = {}
    for (kind, _), runs in groups.items():
        trained = "parents" if kind in ("as trained", "zero-shot") else kind
        for run in runs.values():
            kinds = lengths.setdefault(run["train_lengths"][1], [])
            if trained not in kinds:
                kinds.append(trained)
    return dict(sorted(lengths.items()))


def extend_figure(original: int, groups: dict[tuple[str, str], dict[int, Result]]) -> Figure:
    """Held-out perplexity (y; ``exp`` of the mean loss in nats/token) against evaluation
    length (x, tokens, log base 2, ticks also naming the multiple of the parents' training
    length ``L``) for every arm of the study: one line per arm, the geometric mean over its
    seeds, each seed a faint dot; a vertical line at each training length (the parents' ``L``,
    the fine-tuning and from-scratch lengths), named in the legend with the arms; the legend
    outside the axes, right (:func:`lab.evaluation.figure.outside_legend`).

    Args:
        original: the parents' training length ``L`` in tokens, and
        groups: ``{(kind, rule): {seed: record}}``, both as
            :func:`lab.lm.extend_report.grouped` gives them.

    Returns:
        The figure; its one axes holds one labelled line per arm (label :func:`arm_label`) and
        one labelled vertical line per training length.

    Raises:
        ValueError: no arm has a supported length with per-window losses (nothing to draw).
    """
    figure = Figure(figsize=(7.5, 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    colours: dict[str, str] = {}
    drawn, lengths, values = 0, set(), []
    for (kind, rule), runs in groups.items():
        means, seeds = _points(runs)
        if not seeds:
            continue
        family = rule.split()[0] if rule else ""
        colour = FIXED_COLOURS.get(kind) or colours.setdefault(family, f"C{len(colours) % 10}")
        style, marker = STYLES[kind]
        if means:
            xs, ys = zip(*means, strict=True)
            label = arm_label(kind, rule, len(runs))
            ax.plot(xs, ys, linestyle=style, marker=marker, color=colour, label=label)
            drawn += 1
        xs, ys = zip(*seeds, strict=True)
        ax.plot(xs, ys, linestyle="none", marker=marker, color=colour, alpha=0.3, markersize=4)
        lengths |= set(xs)
        values += ys
    if not drawn:
        raise ValueError("no arm has a supported length with per-window losses: nothing to draw")
    _training_lines(ax, groups)
    _axes(ax, sorted(lengths), original, max(values) / min(values) >= LOG_Y_RATIO)
    ax.set_title(
        f"Extend, then fine-tune: held-out perplexity by length (L = {original} tokens)",
        fontsize="medium",
    )
    outside_legend(figure, side="right", title="line: geometric mean over seeds\nfaint: each seed")
    return figure


def _training_lines(ax: Any, groups: dict[tuple[str, str], dict[int, Result]]) -> None:
    """A named vertical line at each training length (dashed: the parents')."""
    for length, kinds in _training_lengths(groups).items():
        style = "--" if "parents" in kinds else "-."
        label = f"training length {length}: " + ", ".join(kinds)
        ax.axvline(length, color="0.35", linestyle=style, linewidth=1, label=label, zorder=2)


def _axes(ax: Any, lengths: list[int], original: int, log_y: bool) -> None:
    """Log-2 x with a tick at each evaluated length (``256`` over ``4x``); log y when ``log_y``,
    ticks as plain numbers."""
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [f"{n}\n{n / original:g}x" for n in lengths])
    ax.xaxis.set_minor_formatter(NullFormatter())
    if log_y:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=Y_TICKS))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set(xlabel="evaluation length (tokens; multiple of L)", ylabel="perplexity (held out)")
    ax.grid(True, axis="y", which="major", color="0.9", linewidth=0.6)


def write_extend_figure(
    original: int, groups: dict[tuple[str, str], dict[int, Result]], path: str | Path
) -> Path:
    """Write :func:`extend_figure` as PNG to ``path`` (atomically); returns the path.

    Raises:
        ValueError: as :func:`extend_figure`.
    """
    path = Path(path)
    figure = extend_figure(original, groups)
    with atomic_writer(path) as handle:
        figure.savefig(handle, format="png", dpi=100)
    return path
