"""Passkey heatmaps: exact-match by depth (rows) and length (columns), the picture of
needle-in-a-haystack tests (e.g. Chen et al. 2024, LongLoRA; Ding et al. 2024, LongRoPE), one
per run (``RUN/passkey.png``, next to its ``eval.json``) and one panel per scheme and
evaluation rule for a sweep (:func:`passkey_figure`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lab.common.files import atomic_writer
from lab.common.outputs import HEATMAP_NAME
from lab.evaluation.labels import scheme_label
from lab.lm.passkey import grouped, mean_grid

PANELS_PER_ROW = 4
"""Heatmaps per row of a sweep's figure."""

CMAP = "RdYlGn"
"""Colour map: red at 0, green at 1 (the convention of the needle-in-a-haystack pictures)."""


def draw_heatmap(axes: Axes, grid: dict[str, Any], accuracy: list[list[float | None]]) -> Any:
    """Draw ``accuracy`` (depth rows x length columns, 0..1, None: unsupported) on ``axes``,
    each cell annotated in percent (``n/a`` when unsupported, on grey), rows and columns
    labelled from ``grid`` (a ``passkey`` entry of ``eval.json``); returns the image."""
    values = [[math.nan if v is None else v for v in row] for row in accuracy]
    axes.set_facecolor("0.85")
    image = axes.imshow(values, cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto")
    for i, row in enumerate(accuracy):
        for j, value in enumerate(row):
            text = "n/a" if value is None else f"{100 * value:.0f}"
            axes.text(j, i, text, ha="center", va="center", fontsize=7)
    columns = [f"{x}\n{n}" for x, n in zip(grid["labels"], grid["lengths"], strict=True)]
    axes.set_xticks(range(len(columns)), columns, fontsize=8)
    axes.set_yticks(range(len(grid["depths"])), [f"{d:.0%}" for d in grid["depths"]], fontsize=8)
    axes.set_xlabel("prompt length (tokens)")
    axes.set_ylabel("depth of the key")
    return image


def run_heatmap(result: dict[str, Any]) -> Figure:
    """The heatmap of one ``eval.json`` dict with a ``passkey`` entry."""
    figure = Figure(figsize=(4.2, 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    grid = result["passkey"]
    image = draw_heatmap(axes, grid, grid["accuracy"])
    axes.set_title(f"{scheme_label(result)}, seed {result['seed']}", fontsize=9)
    figure.colorbar(image, ax=axes, label="exact-match", shrink=0.8)
    return figure


def write_heatmap(result: dict[str, Any], folder: str | Path) -> Path:
    """Write :func:`run_heatmap` to ``FOLDER/passkey.png`` (atomically); returns the path."""
    return _save(run_heatmap(result), Path(folder) / HEATMAP_NAME)


def passkey_figure(results: list[dict[str, Any]], path: str | Path | None = None) -> Figure:
    """One heatmap per scheme and evaluation rule (:func:`lab.lm.passkey.grouped`: the mean
    over its seeds), :data:`PANELS_PER_ROW` to a row, written to ``path`` as PNG when given.

    Raises:
        ValueError: no result has a ``passkey`` entry.
    """
    groups = grouped(results)
    if not groups:
        raise ValueError("no result has a passkey grid; evaluate runs of data.task=passkey")
    columns = min(PANELS_PER_ROW, len(groups))
    rows = math.ceil(len(groups) / columns)
    figure = Figure(figsize=(3.6 * columns + 1, 4.2 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    panels = figure.subplots(rows, columns, squeeze=False).ravel()
    image = None
    for axes, (label, runs) in zip(panels, groups.items(), strict=False):
        image = draw_heatmap(axes, runs[0]["passkey"], mean_grid(runs))
        seeds = f"{len(runs)} seeds" if len(runs) > 1 else f"seed {runs[0]['seed']}"
        axes.set_title(f"{label} ({seeds})", fontsize=9)
    for axes in panels[len(groups) :]:
        axes.set_visible(False)
    figure.colorbar(image, ax=list(panels), label="exact-match", shrink=0.6)
    if path is not None:
        _save(figure, path)
    return figure


def _save(figure: Figure, path: Path | str) -> Path:
    """Write ``figure`` as PNG to ``path`` atomically."""
    with atomic_writer(path) as handle:
        figure.savefig(handle, format="png", dpi=100)
    return Path(path)
