"""The sweep report's learning-speed and order-sensitivity figures, drawn from the committed
results of the default ablation (docs/results/ablation/results.json: 30 runs)."""

import copy
import json
from pathlib import Path

import pytest
from matplotlib.container import BarContainer

from lab.evaluation.learned import not_learned_reason
from lab.reporting.sweep_figures import learning_speed_figure, order_sensitivity_figure, save

RESULTS = json.loads(
    (Path(__file__).parents[1] / "docs" / "results" / "ablation" / "results.json").read_text()
)


def bars(ax) -> list[float]:
    return [p.get_height() for c in ax.containers if isinstance(c, BarContainer) for p in c]


def test_learning_speed_has_a_bar_per_scheme_and_a_mark_per_run(tmp_path: Path):
    results = copy.deepcopy(RESULTS)
    unlearned = next(r for r in results if r["task"] == "copy" and r["position"] == "sinusoidal")
    unlearned["summary"]["in_dist"] = 0.846  # below 95%: marked as not learned
    figure = learning_speed_figure(results)
    copy_ax, svo_ax = figure.axes
    assert copy_ax.get_title() == "copy" and svo_ax.get_title() == "svo"
    heights = bars(copy_ax)
    assert len(heights) == 5
    steps = [r["train_steps"] for r in results if r["task"] == "copy" and r["position"] == "none"]
    assert heights[0] == pytest.approx(sum(steps) / len(steps))  # none first, mean over seeds
    markers = [line.get_marker() for line in copy_ax.lines]
    left_out = [r for r in results if r["task"] == "copy" and not_learned_reason(r) is not None]
    assert len(left_out) == 2  # the run marked above and sinusoidal-copy-seed1 (at its cap)
    assert len(markers) == 15 and markers.count("x") == len(left_out)
    assert save(figure, tmp_path / "speed.png").read_bytes()[:4] == b"\x89PNG"


def test_order_sensitivity_shows_pairs_in_distribution_and_at_2x():
    figure = order_sensitivity_figure(RESULTS)
    svo = figure.axes[1]
    heights = bars(svo)
    assert len(heights) == 10  # five schemes x (in distribution, 2x)
    assert all(0 <= h <= 1 for h in heights)
    assert sum(len(line.get_xdata()) for line in svo.lines) == 30  # 15 runs x 2 places


def test_runs_evaluated_short_of_2x_or_outside_the_training_range_draw(tmp_path: Path):
    """A run evaluated with eval.max_length_factor under 2 has no 2x length, and one evaluated
    only past its training range has no in-distribution figure: both are drawn as missing."""
    results = copy.deepcopy(RESULTS)
    short, outside = results[0], results[1]
    short["config"]["eval"]["max_length_factor"] = 1.5
    outside["summary"]["in_dist"] = None
    speed = learning_speed_figure(results)
    order = order_sensitivity_figure(results)
    assert len(speed.axes) == len(order.axes) == 2
    assert save(order, tmp_path / "order.png").read_bytes()[:4] == b"\x89PNG"
