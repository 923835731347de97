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

from lab.common.files import atomic_writer
from lab.evaluation.learned import is_learned
from lab.evaluation.record import pair_values
from lab.reporting.aggregate import groups, tasks

Result = dict[str, Any]


def _panels(results: list[Result], height: float = 3.8) -> tuple[Figure, list]:
    names = tasks(results)
    figure = Figure(figsize=(5.5 * len(names), height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, list(zip(figure.subplots(1, len(names), squeeze=False)[0], names, strict=True))


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
        ax.set_xticks(range(len(by_scheme)), list(by_scheme), rotation=30)
        ax.set(title=task, ylabel="training steps (early stop at target)")
    figure.suptitle("learning speed: bar = mean over learned seeds, x = not learned")
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
        ax.set_xticks(range(len(by_scheme)), list(by_scheme), rotation=30)
        ax.set(title=task, ylabel="minimal pairs both right", ylim=(0, 1.05))
    figure.suptitle(
        "order sensitivity: left bar in distribution, right bar 2x (learned seeds); "
        "dots = seeds, x = not learned"
    )
    return figure


def save(figure: Figure, path: str | Path) -> Path:
    """Write ``figure`` as PNG to ``path`` atomically."""
    with atomic_writer(path) as handle:
        figure.savefig(handle, format="png", dpi=100)
    return Path(path)
