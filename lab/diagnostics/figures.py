"""Figures of the diagnostics: across schemes (a sweep's ``attention_vs_length.png``) and per
run (TensorBoard's Images tab): attention entropy, sink mass and solver alignment against
length, the longest training length marked."""

from __future__ import annotations

from statistics import mean
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lab.diagnostics.summary import mean_points
from lab.evaluation.figure import line_style, outside_legend
from lab.evaluation.learned import learned_only
from lab.reporting.aggregate import groups, tasks

Result = dict[str, Any]

PANELS = {
    "entropy_norm": "entropy / log(keys seen)",
    "sink_mass": "mass on the first token (sink)",
    "aligned_mass": "aligned head's mass on the solver's positions",
}
"""The sweep figure's columns: a statistic (mean over layers and heads; the aligned head's for
the alignment) -> its axis label."""
TRAINED = "longest training length"
"""The legend's name of the dashed line at the longest training length."""


def _layer_means(run: Result, statistic: str) -> dict[int, list[float]]:
    """Length -> the mean over heads of ``statistic`` per layer, at the diagnosed lengths."""
    return {
        row["length"]: [mean(heads) for heads in row["attention"][statistic]]
        for row in run["lengths"]
        if row.get("attention")
    }


def _curve(runs: list[Result], statistic: str) -> tuple[list[float], list[float]]:
    """``(length / train_max, value)`` means over ``runs`` at every length they share."""
    high = runs[0]["train_lengths"][1]
    if statistic == "aligned_mass":
        points = [p for p in mean_points(runs) if p.aligned_mass is not None]
        return [p.length / high for p in points], [p.aligned_mass for p in points]
    per_run = [_layer_means(run, statistic) for run in runs]
    common = sorted(set.intersection(*(set(m) for m in per_run)))
    return [n / high for n in common], [mean(mean(m[n]) for m in per_run) for n in common]


def attention_figure(results: list[Result]) -> Figure:
    """One row per task, one column per :data:`PANELS` entry, one line per scheme (means over
    its learned runs, or all its runs when none learned); x is the length over the longest
    training length, the dashed line at 1; one legend right of the panels names every line."""
    names = tasks(results)
    styles: dict[str, dict] = {}  # one look per scheme across the tasks
    figure = Figure(figsize=(15, 3.6 * len(names)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(names), len(PANELS), squeeze=False)
    for row, task in zip(axes, names, strict=True):
        for ax in row:
            ax.axvline(1.0, color="grey", linestyle="--", linewidth=1, label=TRAINED)
        for scheme, runs in groups(results, task).items():
            style = styles.setdefault(scheme, line_style(len(styles)))
            for ax, statistic in zip(row, PANELS, strict=True):
                x, y = _curve(learned_only(runs) or runs, statistic)
                if x:
                    ax.plot(
                        x,
                        y,
                        color=style["color"],
                        marker=style["marker"],
                        linestyle=style["linestyle"],
                        label=scheme,
                        markersize=3,
                    )
        for ax, label in zip(row, PANELS.values(), strict=True):
            ax.set(title=f"{task}: {label}", xlabel="length / longest training length")
    figure.suptitle("attention against length (answer queries; means over seeds)")
    outside_legend(figure, side="right")
    return figure


def run_figure(result: Result) -> Figure:
    """One run: entropy over ``log`` of the keys seen, and sink mass, per layer (mean over
    heads) against length; the longest training length dashed."""
    figure = Figure(figsize=(10, 3.6), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 2)
    high = result["train_lengths"][1]
    for ax, statistic in zip(axes, ("entropy_norm", "sink_mass"), strict=True):
        by_length = _layer_means(result, statistic)
        lengths = sorted(by_length)
        for layer in range(len(by_length[lengths[0]]) if lengths else 0):
            values = [by_length[n][layer] for n in lengths]
            style = line_style(layer)
            ax.plot(
                lengths,
                values,
                color=style["color"],
                marker=style["marker"],
                linestyle=style["linestyle"],
                label=f"layer {layer}",
            )
        ax.axvline(high, color="grey", linestyle="--", linewidth=1, label=TRAINED)
        ax.set(title=PANELS[statistic], xlabel="length")
    outside_legend(figure, side="right")
    return figure
