"""Two figures of the sweep report: learning speed and order sensitivity, per task and scheme,
every seed a dot and the mean a bar (computed from the runs' ``eval.json`` dicts).

- **learning speed**: the training steps each run took (``train_steps``). Runs stop early when
  the validation exact-match reaches ``train.target_accuracy`` at every training length, so
  this is the steps to reach it; a run that is not learned (:mod:`lab.evaluation.learned`: it ran
  to its cap below the target, or is below 95% in distribution on the evaluation set) is drawn as an
  ``x`` and left out of the bar.
- **order sensitivity**: minimal-pair accuracy (both members of a swapped pair right) in
  distribution and at 2x; an order-blind model scores 0. Bars average the learned runs; a
  not-learned run's dot is an ``x``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from lab.common.files import atomic_writer
from lab.evaluation.figure import outside_legend
from lab.evaluation.learned import is_learned
from lab.evaluation.record import pair_values
from lab.reporting.aggregate import groups, tasks

Result = dict[str, Any]


def _panels(results: list[Result], height: float = 3.8) -> tuple[Figure, list]:
    """One panel per task, side by side, each wide enough for a bar group per scheme."""
    names = tasks(results)
    schemes = max(len(groups(results, task)) for task in names)
    width = max(5.5, 0.6 * schemes + 1.5)
    figure = Figure(figsize=(width * len(names), height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, list(zip(figure.subplots(1, len(names), squeeze=False)[0], names, strict=True))


def _scheme_ticks(ax: Any, names: list[str]) -> None:
    """Each bar group named below it, the label slanted and ending at its tick (long labels,
    ``rope [scaling=yarn, scaling_factor=4]``, do not run into each other)."""
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", rotation_mode="anchor")


def _seed_marks() -> dict[str, Any]:
    """Legend entries of the dots: a learned seed, a not-learned one."""
    return {
        "a learned seed": Line2D([], [], marker="o", color="0.3", linestyle="none"),
        "not learned (left out of the bar)": Line2D([], [], marker="x", color="0.3", ls="none"),
    }


def learning_speed_figure(results: list[Result]) -> Figure:
    """Training steps per run, by scheme, one panel per task (see the module docstring)."""
    figure, panels = _panels(results)
    for ax, task in panels:
        by_scheme = groups(results, task)
        for x, runs in enumerate(by_scheme.values()):
            steps = [r["train_steps"] for r in runs if is_learned(r)]
            steps = [n for n in steps if n is not None]
            if steps:
                ax.bar(x, sum(steps) / len(steps), color=f"C{x}", alpha=0.35)
            for i, r in enumerate(runs):
                if r["train_steps"] is None:
                    continue
                learned = is_learned(r)
                offset = 0.12 * (i - (len(runs) - 1) / 2)
                ax.plot(x + offset, r["train_steps"], "o" if learned else "x", color=f"C{x}")
        _scheme_ticks(ax, list(by_scheme))
        ax.set(title=task, ylabel="training steps (early stop at target)")
    figure.suptitle("learning speed (colour: scheme, named below its bar)")
    bar = {"bar: mean over learned seeds": Patch(color="0.6", alpha=0.35)}
    outside_legend(figure, bar | _seed_marks(), max_columns=3)
    return figure


def order_sensitivity_figure(results: list[Result]) -> Figure:
    """Minimal-pair accuracy in distribution and at 2x, by scheme, one panel per task."""
    figure, panels = _panels(results)
    for ax, task in panels:
        by_scheme = groups(results, task)
        for x, runs in enumerate(by_scheme.values()):
            for shift, where, alpha in ((-0.2, "in_dist", 0.8), (0.2, "2x", 0.35)):
                pairs = zip(pair_values(runs, where), map(is_learned, runs), strict=True)
                pairs = [(v, learned) for v, learned in pairs if v is not None]
                kept = [v for v, learned in pairs if learned]
                if kept:
                    ax.bar(x + shift, sum(kept) / len(kept), 0.4, color=f"C{x}", alpha=alpha)
                label = where if x == 0 else None
                for v, learned in pairs:
                    ax.plot(x + shift, v, "k." if learned else "kx", label=label)
                    label = None
        _scheme_ticks(ax, list(by_scheme))
        ax.set(title=task, ylabel="minimal pairs both right", ylim=(0, 1.05))
        ax.set_xlim(-0.6, len(by_scheme) - 0.4)
        if not ax.lines:  # e.g. passkey: the task has no minimal pairs
            ax.text(0.5, 0.5, "no minimal pairs measured", transform=ax.transAxes, ha="center")
    figure.suptitle("order sensitivity (colour: scheme, named below its bars)")
    bars = {
        "left bar: in distribution (mean over learned seeds)": Patch(color="0.4", alpha=0.8),
        "right bar: at 2x (mean over learned seeds)": Patch(color="0.4", alpha=0.35),
    }
    outside_legend(figure, bars | _seed_marks(), max_columns=2)
    return figure


def save(figure: Figure, path: str | Path) -> Path:
    """Write ``figure`` as PNG to ``path`` atomically."""
    with atomic_writer(path) as handle:
        figure.savefig(handle, format="png", dpi=100)
    return Path(path)
