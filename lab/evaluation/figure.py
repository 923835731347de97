"""Exact-match against length: the figure of one run (TensorBoard) and of a sweep; and the
legend every figure of the project uses.

One legend per figure, outside its axes, never cut off (:func:`outside_legend`): it goes beside
or below the axes under the constrained layout, takes as many columns as fit the figure's
width, and grows the figure by its size, so at any number of labels it lies inside the saved
PNG. :func:`line_style` gives the ``i``-th line a look of its own past the ten colours of
matplotlib's cycle (the eleventh line is not the first one again).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend

from lab.common.files import atomic_writer
from lab.evaluation.labels import scheme_label
from lab.evaluation.learned import is_learned
from lab.stats.intervals import t_interval
from model.position import available_schemes

MARGIN = 0.15
"""Inches kept between the legend and the figure's edge when the figure is grown to fit it."""
MARKERS = ("o", "s", "^", "D", "v", "P")
"""Markers of lines 0-9, 10-19, ... (:func:`line_style`)."""
DASHES = ("-", "--", "-.", ":")
"""Line styles of lines 0-9, 10-19, ... (:func:`line_style`)."""
CROSSES = ("x", "+", "1", "*")
"""Markers of lines 0-9, 10-19, ... where a cross means "not learned" (:func:`line_style`)."""


def line_style(i: int) -> dict[str, str]:
    """The look of a figure's ``i``-th line (``i >= 0``): ``color`` (``C0`` .. ``C9``, the
    colour cycle), and ``marker``, ``cross`` (a cross-like marker) and ``linestyle``, which
    change every ten lines, so up to 40 lines differ in colour, marker or dashes. Pass the keys
    that are free to change (``ax.plot(x, y, color=s["color"], marker=s["marker"])``)."""
    decade = i // 10
    return {
        "color": f"C{i % 10}",
        "marker": MARKERS[decade % len(MARKERS)],
        "cross": CROSSES[decade % len(CROSSES)],
        "linestyle": DASHES[decade % len(DASHES)],
    }


def labelled_handles(figure: Figure) -> dict[str, Any]:
    """Label -> artist of every labelled artist on the figure's axes, each label once (its
    first artist), in drawing order; labels starting with ``_`` (matplotlib's unlabelled) are
    left out."""
    handles: dict[str, Any] = {}
    for ax in figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    return handles


def outside_legend(
    figure: Figure,
    handles: dict[str, Any] | None = None,
    *,
    side: str = "bottom",
    title: str | None = None,
    max_columns: int = 4,
    fontsize: str | float = "small",
) -> Legend | None:
    """Add one legend naming ``handles`` (label -> artist; default :func:`labelled_handles`)
    outside the axes of ``figure``, which must use the constrained layout.

    ``side="bottom"``: below the axes, in the most columns (at most ``max_columns``) whose
    width fits the figure's; the figure grows taller by the legend's height (and wider, when
    one column is wider than the figure). ``side="right"``: one column right of the axes; the
    figure grows wider by the legend's width (and taller, when the legend is taller than it).

    Returns:
        The legend, or None when there is nothing to name.

    Raises:
        ValueError: ``side`` is neither ``"bottom"`` nor ``"right"``, or ``figure`` does not
            use the constrained layout (``Figure(layout="constrained")``).
    """
    if side not in ("bottom", "right"):
        raise ValueError(f"side must be 'bottom' or 'right', not {side!r}")
    engine = figure.get_layout_engine()
    if engine is None or type(engine).__name__ != "ConstrainedLayoutEngine":
        raise ValueError("outside_legend needs a figure with layout='constrained'")
    handles = labelled_handles(figure) if handles is None else handles
    if not handles:
        return None
    if not hasattr(figure.canvas, "get_renderer"):  # a bare Figure: give it an Agg canvas
        FigureCanvasAgg(figure)
    width, height = figure.get_size_inches()
    options = {"fontsize": fontsize, "title": title, "title_fontsize": fontsize}
    if side == "right":
        legend = figure.legend(
            list(handles.values()), list(handles), loc="outside right upper", ncols=1, **options
        )
        size = _size(figure, legend)
        figure.set_size_inches(width + size[0] + MARGIN, max(height, size[1] + 2 * MARGIN))
        return legend
    for columns in range(min(max_columns, len(handles)), 0, -1):
        legend = figure.legend(
            list(handles.values()),
            list(handles),
            loc="outside lower center",
            ncols=columns,
            **options,
        )
        size = _size(figure, legend)
        if size[0] + 2 * MARGIN <= width or columns == 1:
            break
        legend.remove()
    figure.set_size_inches(max(width, size[0] + 2 * MARGIN), height + size[1] + MARGIN)
    return legend


def _size(figure: Figure, legend: Legend) -> tuple[float, float]:
    """``(width, height)`` of ``legend`` in inches (its size does not depend on where it is)."""
    box = legend.get_window_extent(figure.canvas.get_renderer())
    return box.width / figure.dpi, box.height / figure.dpi


PANELS_PER_ROW = 4
"""Task panels per row of the accuracy-against-length figure."""


def _not_learned_label(result: dict[str, Any]) -> str:
    """The legend label of a not-learned run's own line: ``"sinusoidal seed 2: not learned"``."""
    return f"{scheme_label(result)} seed {result['seed']}: not learned"


def _line_order(item: tuple[str, list[dict[str, Any]]], labels: list[str]) -> tuple[int, str]:
    """Sort key of a plotted line: its scheme's place in ``labels``, then its name."""
    return labels.index(scheme_label(item[1][0])), item[0]


def plot_accuracy_vs_length(results: list[dict[str, Any]], path: str | Path | None) -> Figure:
    """Exact-match against length: one panel per task, one line per scheme (mean over its
    learned seeds, each seed a hollow dot), and a dotted line with ``x`` markers, labelled
    ``not learned`` and without error bars, for each run that did not learn its task
    (:mod:`lab.evaluation.learned`).

    Error bars are the 95% Wilson interval for a single run and the 95% t-interval over seeds
    (:func:`lab.stats.intervals.t_interval`, clipped to [0, 1]) for several. The training range is
    shaded, and a dashed line marks the longest training length.
    Unsupported lengths are left out, so a line stops where its scheme stops.

    Returns:
        The figure (``len(figure.axes[i].containers)`` is the number of lines in panel ``i``:
        its schemes with a learned run, plus its not-learned runs);
        saved as PNG to ``path`` unless ``path`` is None.
    """
    tasks = sorted({r["task"] for r in results})
    order = {name: i for i, name in enumerate(available_schemes())}
    labels = sorted(
        {scheme_label(r) for r in results}, key=lambda s: (order.get(s.split()[0], 99), s)
    )
    styles = {label: line_style(i) for i, label in enumerate(labels)}  # one per scheme, all panels
    ncols = min(len(tasks), PANELS_PER_ROW)
    nrows = -(-len(tasks) // ncols)
    figure = Figure(figsize=(6 * ncols, 4.6 * nrows), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(nrows, ncols, squeeze=False).flatten()
    for ax in axes[len(tasks) :]:  # the last row's empty cells
        figure.delaxes(ax)
    for ax, task in zip(axes, tasks, strict=False):
        _task_panel(ax, task, [r for r in results if r["task"] == task], labels, styles)
    _legend(figure)
    if path is not None:
        with atomic_writer(path) as file:
            figure.savefig(file, format="png", dpi=120)
    return figure


def _task_panel(
    ax: Any, task: str, runs: list[dict[str, Any]], labels: list[str], styles: dict[str, dict]
) -> None:
    """Draw one task's panel: the shaded training range, a dashed line at each longest
    training length, and a line per scheme (learned runs) or per not-learned run, in the
    order of ``labels``."""
    lows, highs = zip(*(r["train_lengths"] for r in runs), strict=True)
    ax.axvspan(min(lows), max(highs), color="0.85", label="training range")
    for high in sorted(set(highs)):
        ax.axvline(high, color="0.4", linestyle="--", linewidth=1, label="longest training length")
    by_scheme: dict[str, list[dict]] = defaultdict(list)
    for r in runs:  # learned runs are averaged; each not-learned run is a line of its own
        by_scheme[scheme_label(r) if is_learned(r) else _not_learned_label(r)].append(r)
    for name, group in sorted(by_scheme.items(), key=lambda item: _line_order(item, labels)):
        xs, means, below, above = _mean_and_interval(group)
        learned = is_learned(group[0])
        label = name if len(group) == 1 else f"{name} (mean of {len(group)})"
        style = styles[scheme_label(group[0])]
        ax.errorbar(
            xs,
            means,
            yerr=[below, above] if learned else None,
            marker=style["marker"] if learned else style["cross"],
            linestyle="-" if learned else ":",
            capsize=3,
            label=label,
            color=style["color"],
        )
        if learned and len(group) > 1:
            _seed_dots(ax, group, style["color"])
    ax.set(title=task, xlabel="length (content items)", ylabel="exact-match", ylim=(-0.02, 1.02))


def _seed_dots(ax: Any, group: list[dict[str, Any]], color: str) -> None:
    """Every seed's exact-match as a small hollow dot beside its scheme's mean, so a cell whose
    seeds split (some extrapolate, some do not) shows as two clusters, not one wide bar."""
    xs, ys = [], []
    for r in group:
        for row in r["lengths"]:
            if row["supported"]:
                xs.append(row["length"])
                ys.append(row["exact_match"])
    ax.scatter(xs, ys, s=14, facecolors="none", edgecolors=color, linewidths=0.8, alpha=0.8)


def _mean_and_interval(
    group: list[dict[str, Any]],
) -> tuple[list[int], list[float], list[float], list[float]]:
    """``(lengths, mean exact-match, mean - low, high - mean)`` over the runs of ``group`` at
    each length they all support: the 95% Wilson interval for one run, the 95% t-interval over
    seeds (clipped to [0, 1]) for several."""
    points: dict[int, list[dict]] = defaultdict(list)
    for r in group:
        for row in r["lengths"]:
            if row["supported"]:
                points[row["length"]].append(row)
    xs = sorted(points)
    means, below, above = [], [], []
    for x in xs:
        values = [p["exact_match"] for p in points[x]]
        mean = sum(values) / len(values)
        interval = t_interval(values)  # over seeds; None bounds for one run
        if interval.low is None:  # one run: its 95% Wilson interval
            low, high = points[x][0]["exact_match_low"], points[x][0]["exact_match_high"]
        else:
            low, high = max(0.0, interval.low), min(1.0, interval.high)
        means.append(mean)
        below.append(mean - low)
        above.append(high - mean)
    return xs, means, below, above


def _legend(figure: Figure) -> None:
    """One legend for all panels, below them, naming every line once
    (:func:`lab.reporting.legend.outside_legend`: never cut off, at any number of lines)."""
    outside_legend(
        figure,
        title="error bars: 95% Wilson interval (one run), 95% t-interval over seeds (several)\n"
        "hollow dots: each seed",
        max_columns=4,
    )
