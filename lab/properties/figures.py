"""Pictures of position schemes (matplotlib, Agg backend): encoding similarity, position-only
scores, the sinusoidal table, RoPE's decay bound, score bias per head, attention maps.

Every function takes numbers computed elsewhere (:mod:`lab.properties.probe`,
:mod:`lab.properties.demos`, :mod:`lab.evaluation.attention_maps`) and returns a Figure; the caller
saves it (PNG) and logs it to TensorBoard.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from torch import Tensor  # noqa: E402

from lab.evaluation.figure import line_style, outside_legend  # noqa: E402
from lab.properties.probe import cosine_similarity  # noqa: E402


def _grid(n: int, width: float = 3.0, layout: str | None = None) -> tuple[Figure, list]:
    cols = min(n, 5)
    rows = math.ceil(n / cols)
    size = (width * cols, width * rows)
    fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False, layout=layout)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.axis("off")
    return fig, flat[:n]


def heatmaps(matrices: dict[str, Tensor], title: str, label: str, cmap: str = "viridis") -> Figure:
    """One ``(T, T)`` heatmap per name (query or position ``m`` down, ``n`` across)."""
    fig, axes = _grid(len(matrices))
    for ax, (name, matrix) in zip(axes, matrices.items(), strict=True):
        image = ax.imshow(matrix.numpy(), cmap=cmap, origin="upper")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("position n", fontsize=8)
        ax.set_ylabel("position m", fontsize=8)
        fig.colorbar(image, ax=ax, fraction=0.046, label=label)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def similarity_figure(scores: dict[str, Tensor]) -> Figure:
    """Cosine similarity of every two positions' encodings (score rows), per scheme."""
    matrices = {name: cosine_similarity(s) for name, s in scores.items()}
    return heatmaps(matrices, "encoding similarity (position x position)", "cosine", "magma")


def scores_figure(scores: dict[str, Tensor]) -> Figure:
    """Head 0's position-only score of query ``m`` for key ``n``, per scheme."""
    return heatmaps(
        {name: s[0] for name, s in scores.items()}, "position-only score, head 0", "score"
    )


def sinusoidal_figure(table: Tensor, demo: dict[str, Any]) -> Figure:
    """The sinusoidal table (positions x dimensions) and distance against gap per start."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5), layout="constrained")
    image = left.imshow(table.numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
    left.set(xlabel="dimension", ylabel="position", title="sinusoidal table")
    fig.colorbar(image, ax=left)
    for i, (start, row) in enumerate(zip(demo["starts"], demo["distance"], strict=True)):
        style = line_style(i)
        right.plot(
            demo["gaps"],
            row,
            color=style["color"],
            marker=style["marker"],
            linestyle=style["linestyle"],
            label=f"from position {start}",
        )
    right.set(xscale="log", xlabel="gap g", ylabel="|PE[m+g] - PE[m]|", title="distance vs gap")
    outside_legend(fig, side="right")
    return fig


def rope_decay_figure(decay: dict[str, Any]) -> Figure:
    """RoPE's relative score upper bound against distance, one line per base."""
    fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    for i, (base, bound) in enumerate(decay["bound"].items()):
        style = line_style(i)
        ax.plot(
            decay["distances"],
            bound,
            color=style["color"],
            linestyle=style["linestyle"],
            label=f"base {int(base):,}",
        )
    ax.set(xscale="log", xlabel="relative distance", ylabel="relative upper bound")
    ax.set_title("RoPE long-range decay (Su et al. 2021, 3.4.3)")
    outside_legend(fig, side="right")
    return fig


def bias_figure(biases: dict[str, list[list[float]]]) -> Figure:
    """Score bias against distance from the last query, one line per head, per scheme."""
    fig, axes = _grid(len(biases), width=3.5, layout="constrained")
    for ax, (name, heads) in zip(axes, biases.items(), strict=True):
        for h, row in enumerate(heads):
            style = line_style(h)  # head h looks the same in every panel: one legend names it
            ax.plot(
                range(len(row)),
                row,
                color=style["color"],
                linestyle=style["linestyle"],
                label=f"head {h}",
            )
        ax.set(title=name, xlabel="distance", ylabel="bias")
    outside_legend(fig, side="bottom", max_columns=8)
    return fig


MAX_PANEL = 12.0
"""Largest side of one attention panel, in inches (a 4x window of a language model is hundreds
of tokens: 0.18 inch a token would make a picture of hundreds of megapixels)."""
MAX_TICKS = 64
"""Most token labels on one axis; a longer input labels every k-th token."""


def attention_figure(maps: list[Tensor], tokens: list[str], title: str) -> Figure:
    """Attention probabilities, layers down and heads across, input tokens on both axes (every
    k-th token past :data:`MAX_TICKS`)."""
    layers, heads = len(maps), maps[0].shape[0]
    size = min(MAX_PANEL, max(2.5, 0.18 * len(tokens)))
    fig, axes = plt.subplots(layers, heads, figsize=(size * heads, size * layers), squeeze=False)
    every = math.ceil(len(tokens) / MAX_TICKS)
    ticks = range(0, len(tokens), every)
    names = tokens[::every]
    small = max(3, 8 - len(names) // 12)
    for layer, probabilities in enumerate(maps):
        for head in range(heads):
            ax = axes[layer][head]
            ax.imshow(probabilities[head].numpy(), cmap="Blues", vmin=0, vmax=1)
            ax.set_title(f"layer {layer} head {head}", fontsize=8)
            ax.set_xticks(ticks, names, rotation=90, fontsize=small)
            ax.set_yticks(ticks, names, fontsize=small)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
