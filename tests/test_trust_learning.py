"""Early stopping and every "learned" label.

- The periodic evaluation validates every training length, and early stopping needs the
  target at each of them (the minimum), so it is never weaker than the test set's
  in-distribution figure (a mean over training lengths).
- A run that ends at its step cap below the target, or below 95% in distribution on the test
  set, is marked not learned in every table and figure, and the means, tests and findings on
  extrapolation leave it out with a line saying how many and why.
- A stop during a periodic evaluation is recorded in the checkpoint, and ``--resume`` redoes
  that evaluation first: the resumed run stops where the uninterrupted one does, with the
  same weights and each TensorBoard point once.
"""

from __future__ import annotations

import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import STEPS, tiny_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_findings import run as finding_run
from test_findings import sweep

import lab.training.run_logs
from lab.common.checkpoint import load_checkpoint
from lab.common.config import ConfigError, load_config
from lab.evaluation.extrapolation import LengthResult
from lab.evaluation.figure import plot_accuracy_vs_length
from lab.evaluation.learned import LEARNED, left_out_count, not_learned_reason
from lab.reporting.aggregate import headline_table, left_out_line, lengths_table
from lab.reporting.findings import findings
from lab.reporting.overview import markdown_report
from lab.reporting.sweep_figures import learning_speed_figure, order_sensitivity_figure
from lab.reporting.tables import csv_rows, summary_table
from lab.training.resume import resume_config
from lab.training.run_logs import loss_lengths, periodic_lengths, reached_target
from lab.training.trainer import TrainingInterrupted, train

# ---------------------------------------------------------------------------------------------
# Periodic evaluation and early stopping
# ---------------------------------------------------------------------------------------------


def test_periodic_lengths_cover_every_training_length() -> None:
    copy = load_config(None, ["data.task=copy"])  # copy's training lengths: 2..10
    assert periodic_lengths(copy) == {"in_dist": list(range(2, 11)), "2x": [20], "4x": [40]}
    assert loss_lengths(copy) == [2, 6, 10]  # the logged loss keeps its three lengths
    svo = load_config(None, ["data.task=svo", "data.train_max_length=7"])  # 3..7
    assert periodic_lengths(svo)["in_dist"] == [3, 4, 5, 6, 7]


def test_reached_target_reads_the_minimum_over_lengths() -> None:
    assert reached_target({"in_dist": 0.99, "in_dist_min": 0.99}, 0.99)
    assert not reached_target({"in_dist": 0.99, "in_dist_min": 0.98}, 0.9899)
    assert not reached_target({"in_dist": 1.0}, 0.5)  # no minimum: never reached
    assert not reached_target({"in_dist": 1.0, "in_dist_min": 1.0}, None)  # no target


def scored_by_length(monkeypatch: pytest.MonkeyPatch, weak: dict[int, float]) -> None:
    """The periodic evaluation scores every length 100%, except the lengths in ``weak``."""

    def fake(model, batch, *args) -> LengthResult:
        em = weak.get(batch.length, 1.0)
        return LengthResult(batch.length, batch.inputs.shape[1], 16, em, em, em, em)

    monkeypatch.setattr(lab.training.run_logs, "evaluate_batch", fake)


def test_one_length_below_target_keeps_training_though_the_mean_is_above(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scored_by_length(monkeypatch, {3: 0.5})  # lengths 2..4: mean 2.5 / 3 = 0.833 > 0.8
    result = train(tiny_config(tmp_path, "train.target_accuracy=0.8"))
    assert result.step == STEPS and result.finished and not result.reached_target
    assert result.eval["in_dist"] == pytest.approx(2.5 / 3) and result.eval["in_dist_min"] == 0.5
    state = load_checkpoint(tmp_path)
    assert state["reached_target"] is False and state["eval_pending"] is False
    events = EventAccumulator(str(tmp_path)).Reload()
    assert [(e.step, e.value) for e in events.Scalars("eval/exact_match_in_dist_min")] == [
        (10, 0.5),
        (20, 0.5),
    ]


def test_every_length_at_target_stops_at_the_first_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scored_by_length(monkeypatch, {3: 0.8})
    result = train(tiny_config(tmp_path, "train.target_accuracy=0.8"))
    assert result.step == 10 and result.finished and result.reached_target
    assert load_checkpoint(tmp_path)["reached_target"] is True


def extrapolation_steps(run_dir: Path) -> dict[str, list[int]]:
    """Steps at which the run logged its validation exact-match, per length group."""
    events = EventAccumulator(str(run_dir)).Reload()
    return {g: [e.step for e in events.Scalars(f"eval/exact_match_{g}")] for g in ("in_dist", "4x")}


def test_extrapolation_every_thins_the_2x_4x_checks_and_changes_no_result(tmp_path: Path) -> None:
    """With eval_every=5 and extrapolation_every=10 over 25 steps (no target), 2x and 4x are
    scored at steps 10 and 20 and at the last check (25), the training lengths at every check;
    the weights, the stop step and the final evaluation are those of a run that scores every
    length at every check (early stopping never reads 2x or 4x)."""
    common = ("train.steps=25", "train.eval_every=5")
    every = train(tiny_config(tmp_path / "every", *common))
    thinned = train(tiny_config(tmp_path / "thin", *common, "train.extrapolation_every=10"))
    assert extrapolation_steps(tmp_path / "every") == {
        "in_dist": [5, 10, 15, 20, 25], "4x": [5, 10, 15, 20, 25],
    }  # fmt: skip
    assert extrapolation_steps(tmp_path / "thin") == {
        "in_dist": [5, 10, 15, 20, 25], "4x": [10, 20, 25],
    }  # fmt: skip
    assert (thinned.step, thinned.eval) == (every.step, every.eval)
    assert same_weights(tmp_path / "every", tmp_path / "thin")


def test_a_run_stopped_by_its_target_between_extrapolation_checks_scores_them_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that reaches its target at step 10, off the extrapolation_every=30 grid, still
    scores 2x and 4x at that last check (the HParams tab and the summary line read them)."""
    scored_by_length(monkeypatch, {})
    overrides = ("train.eval_every=10", "train.extrapolation_every=30", "train.target_accuracy=0.9")
    result = train(tiny_config(tmp_path, *overrides))
    assert result.step == 10 and result.reached_target
    assert {"2x", "4x"} <= result.eval.keys()
    assert extrapolation_steps(tmp_path)["4x"] == [10]


@pytest.mark.parametrize("value", ["7", "-10", "15"])
def test_extrapolation_every_off_the_evaluation_grid_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=rf"train.extrapolation_every={value} is invalid"):
        load_config(None, ["train.eval_every=10", f"train.extrapolation_every={value}"])


# ---------------------------------------------------------------------------------------------
# A stop during a periodic evaluation (item 10)
# ---------------------------------------------------------------------------------------------


def token_scored(monkeypatch: pytest.MonkeyPatch, sigterm_at: int | None = None) -> list[int]:
    """Score the periodic evaluation by token accuracy (the tiny run's exact-match is still 0
    at step 10, so a target could not be met), from the real model; with ``sigterm_at``, send
    this process a real SIGTERM when that evaluation starts (once). Returns the list of
    evaluated lengths, appended to as they are scored."""
    real, seen, calls = lab.training.run_logs.evaluate_batch, [], []

    def scored(model, batch, *args) -> LengthResult:
        calls.append(batch.length)
        if sigterm_at is not None and not seen and len(calls) == sigterm_at:
            seen.append(1)
            os.kill(os.getpid(), signal.SIGTERM)  # the run's handler turns it into a stop
        result = real(model, batch, *args)
        return replace(result, exact_match=result.token_accuracy)

    monkeypatch.setattr(lab.training.run_logs, "evaluate_batch", scored)
    return calls


def same_weights(a: Path, b: Path) -> bool:
    first, second = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def logged_steps(run_dir: Path) -> tuple[list[int], list[int], list[int]]:
    """Steps of the validation exact-match, the validation loss and the text samples."""
    events = EventAccumulator(str(run_dir)).Reload()
    tag = (
        "samples/text_summary" if "samples/text_summary" in events.Tags()["tensors"] else "samples"
    )
    return (
        [e.step for e in events.Scalars("eval/exact_match_in_dist")],
        [e.step for e in events.Scalars("eval/loss_in_dist")],
        [e.step for e in events.Tensors(tag)],
    )


@pytest.mark.parametrize(
    ("target", "stop_step"),
    [("0.001", 10), ("1.0", STEPS)],  # stops at the interrupted evaluation / trains on after it
)
def test_resume_redoes_an_evaluation_a_stop_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, stop_step: int
) -> None:
    overrides = [f"train.target_accuracy={target}", "train.checkpoint_every=100"]
    token_scored(monkeypatch)
    straight = train(tiny_config(tmp_path / "straight", *overrides))
    assert straight.step == stop_step
    token_scored(monkeypatch, sigterm_at=2)  # during the step-10 evaluation, at its 2nd length
    run_dir = tmp_path / "stopped"
    with pytest.raises(TrainingInterrupted) as stop:
        train(tiny_config(run_dir, *overrides))
    assert stop.value.signum == signal.SIGTERM
    assert "at step 10; checkpoint of step 10 saved" in str(stop.value)
    state = load_checkpoint(run_dir)
    assert state["step"] == 10 and state["eval_pending"] is True and not state["finished"]
    resumed = train(resume_config(run_dir), resume=True)
    assert (resumed.step, resumed.finished) == (straight.step, True)
    assert resumed.reached_target == straight.reached_target == (stop_step == 10)
    assert resumed.eval == straight.eval
    assert same_weights(tmp_path / "straight", run_dir)
    assert load_checkpoint(run_dir)["eval_pending"] is False
    every = list(range(10, stop_step + 1, 10))
    assert logged_steps(run_dir) == logged_steps(tmp_path / "straight") == (every, every, every)


def test_a_second_stop_during_the_redone_evaluation_keeps_it_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = ["train.target_accuracy=0.001", "train.checkpoint_every=100"]
    token_scored(monkeypatch, sigterm_at=1)
    with pytest.raises(TrainingInterrupted):
        train(tiny_config(tmp_path, *overrides))
    token_scored(monkeypatch, sigterm_at=1)  # the redo is stopped too
    with pytest.raises(TrainingInterrupted) as stop:
        train(resume_config(tmp_path), resume=True)
    assert "the checkpoint of step 10 is kept" in str(stop.value)
    assert load_checkpoint(tmp_path)["eval_pending"] is True
    token_scored(monkeypatch)
    assert train(resume_config(tmp_path), resume=True).step == 10  # the third try stops there


# ---------------------------------------------------------------------------------------------
# "Not learned" in every table, figure and finding (item 1), and significance in words (item 8)
# ---------------------------------------------------------------------------------------------


def complete(results: list[dict]) -> list[dict]:
    """:func:`test_findings.sweep`'s hand-made runs with the fields the reports also read."""
    for r in results:
        r["config"]["data"] = {"task": "copy", "options": {}}
        r["config"]["train"] = {"steps": 4000, "target_accuracy": 0.99}  # one recipe, as a sweep's
        for row in r["lengths"]:
            em = row["exact_match"]
            row.update(tokens=2 * row["length"] + 2, samples=100, supported=True)
            row.update(exact_match_low=em, exact_match_high=em, token_accuracy=em)
    return results


def capped(result: dict, steps: int = 4000) -> dict:
    """``result`` as a run that ended at its ``steps`` cap below a 0.99 target."""
    result["config"]["train"] = {"steps": steps, "target_accuracy": 0.99}
    result.update(train_steps=steps, reached_target=False)
    return result


def test_the_not_learned_rule_names_its_reason() -> None:
    assert not_learned_reason(finding_run("alibi", 0, 90)) is None
    assert not_learned_reason(capped(finding_run("alibi", 0, 90))) == (
        "ended at its 4000-step cap below train.target_accuracy=0.99"
    )
    low = finding_run("rope", 1, 0, in_dist=0.891)
    assert not_learned_reason(low) == "in-distribution exact-match 89.1% on the test set, below 95%"
    reached = finding_run("rope", 1, 0, in_dist=LEARNED) | {"reached_target": True}
    assert not_learned_reason(reached) is None  # 95% exactly is learned


def test_an_evaluation_under_other_position_options_is_judged_by_its_training() -> None:
    """Train once, evaluate many: linear RoPE scaling drops copy to 0% in distribution; that
    is the measurement, not a run that failed to learn. A capped training still counts."""
    scaled = finding_run("rope", 0, 0, in_dist=0.0) | {"reached_target": True}
    scaled["config"]["eval"] = {"position_options": {"scaling": "linear", "scaling_factor": 2}}
    assert not_learned_reason(scaled) is None
    assert not_learned_reason(capped(scaled)).startswith("ended at its")
    plain = finding_run("rope", 0, 0, in_dist=0.0) | {"reached_target": True}
    assert not_learned_reason(plain).startswith("in-distribution exact-match 0.0%")
    untargeted = scaled | {"reached_target": None}  # train.target_accuracy=null: no training
    assert not_learned_reason(untargeted).startswith("in-distribution exact-match 0.0%")


def test_a_capped_run_is_marked_not_learned_and_left_out(tmp_path: Path) -> None:
    results = complete(sweep((90, 85, 95), (10, 5, 0)))  # alibi x 3, none x 3, learned x 3...
    capped(results[1])  # alibi seed 1: at 1.25x 85 of 100 right, but never met its target
    results[7]["summary"]["in_dist"] = 0.707  # learned seed 1
    assert [not_learned_reason(r) is None for r in results].count(False) == 2
    # the headline table: means over the two learned alibi seeds (90 and 95), 1 not learned
    table = headline_table(results, "copy")
    alibi = next(line for line in table.splitlines() if line.startswith("| alibi"))
    cells = [c.strip() for c in alibi.strip("|").split("|")]
    assert cells[2:4] == ["2", "1"] and cells[5].startswith("92.5 [")
    assert "not learned" in table.splitlines()[0]
    line = left_out_line(results)
    assert line.startswith("Left out as not learned: 2 of 15 runs (")
    assert "alibi-copy-seed1: ended at its 4000-step cap below train.target_accuracy=0.99" in line
    assert "learned-copy-seed1: in-distribution exact-match 70.7% on the test set" in line
    # findings: one line counts them, the extrapolation findings read the learned runs only
    lines = findings(results)
    assert lines[0] == (
        "- 2 of 15 runs left out as not learned (1 ended below its training target, 1 below 95% "
        "in distribution on the test set); the extrapolation findings leave them out."
    )
    press = next(x for x in lines if x.startswith("- Press"))
    assert "at 2 seeds the interval" in press  # alibi's capped seed 1 is not among them
    # the per-run table, the CSV and the length table
    runs = summary_table(results).splitlines()
    assert runs[0].rstrip(" |").endswith("learned")
    assert [r.rstrip(" |").split()[-1] for r in runs[2:]].count("no") == 2
    assert {row["learned"] for row in csv_rows(results) if "seed1" in row["run"]} == {True, False}
    by_length = lengths_table(results, "copy").splitlines()
    column = [c.strip() for c in by_length[0].split("|")].index("alibi")
    at_20 = next(line for line in by_length if line.startswith("| 20 "))
    assert at_20.split("|")[column].strip().startswith("92.5 [")
    report = markdown_report(results)
    assert line in report and lines[0] in report


def test_figures_draw_not_learned_runs_apart() -> None:
    results = complete(sweep((90, 85, 95), (10, 5, 0)))
    for r in results:
        r["train_steps"] = 1000
    capped(results[1])
    figure = plot_accuracy_vs_length(results, None)
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert "alibi seed 1: not learned" in legend and "alibi (mean of 2)" in legend
    assert "none (mean of 3)" in legend
    speed = learning_speed_figure(results)
    bars = [p.get_height() for p in speed.axes[0].patches]
    assert bars == [1000] * 5  # the capped run (4000 steps) is left out of alibi's bar
    markers = [line.get_marker() for line in speed.axes[0].lines]
    assert markers.count("x") == 1 and markers.count("o") == 14
    order = order_sensitivity_figure(results)
    assert [line.get_marker() for line in order.axes[0].lines].count("x") == 2  # in_dist and 2x


def test_left_out_count_is_none_when_every_run_learned() -> None:
    results = sweep((90, 85, 95), (10, 5, 0))
    assert left_out_count(results) is None and left_out_line(results) is None
    assert not findings(results)[0].startswith("- 0 of")
