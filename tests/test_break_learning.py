"""Break-test regressions: a SECOND stop signal during a periodic evaluation (an impatient
Ctrl-C, or a scheduler's SIGTERM after the user's) raises KeyboardInterrupt at once; the
checkpoint that stop saves must still mark the evaluation pending, and the resumed run must
stop where the uninterrupted one does, with each TensorBoard point once."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import interrupt_at, tiny_config
from test_trust_learning import logged_steps, same_weights

import lab.training.run_logs
from lab.common.checkpoint import EVENTS, clear_run, is_run, load_checkpoint
from lab.training.resume import resume_config
from lab.training.trainer import TrainingInterrupted, train

OVERRIDES = ["train.target_accuracy=0.001", "train.checkpoint_every=100"]


def scored_by_tokens(monkeypatch: pytest.MonkeyPatch, twice_at: str | None = None) -> None:
    """Score the periodic evaluation by token accuracy (see test_trust_learning); with
    ``twice_at`` ("eval": at the step-10 evaluation's 2nd length, "loss": at its validation
    loss, after the exact-match scalars are logged), send this process two SIGTERMs there."""
    real_eval, real_loss, sent = (
        lab.training.run_logs.evaluate_batch,
        lab.training.run_logs.validation_loss,
        [],
    )
    calls = []

    def two_signals() -> None:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # the second one raises KeyboardInterrupt

    def scored(model, batch, *args):
        calls.append(batch.length)
        if twice_at == "eval" and not sent and len(calls) == 2:
            two_signals()
        result = real_eval(model, batch, *args)
        return replace(result, exact_match=result.token_accuracy)

    def loss(*args):
        if twice_at == "loss" and not sent:
            two_signals()
        return real_loss(*args)

    monkeypatch.setattr(lab.training.run_logs, "evaluate_batch", scored)
    monkeypatch.setattr(lab.training.run_logs, "validation_loss", loss)


@pytest.mark.parametrize("where", ["eval", "loss"])
def test_a_second_signal_during_an_evaluation_keeps_it_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    scored_by_tokens(monkeypatch)
    straight = train(tiny_config(tmp_path / "straight", *OVERRIDES))
    assert straight.step == 10 and straight.reached_target
    run_dir = tmp_path / "stopped"
    scored_by_tokens(monkeypatch, twice_at=where)
    with pytest.raises(TrainingInterrupted):
        train(tiny_config(run_dir, *OVERRIDES))
    state = load_checkpoint(run_dir)
    assert state["step"] == 10 and state["eval_pending"] is True and not state["finished"]
    scored_by_tokens(monkeypatch)
    resumed = train(resume_config(run_dir), resume=True)
    assert (resumed.step, resumed.finished, resumed.reached_target) == (10, True, True)
    assert resumed.eval == straight.eval
    assert same_weights(tmp_path / "straight", run_dir)
    assert logged_steps(run_dir) == logged_steps(tmp_path / "straight") == ([10], [10], [10])


@pytest.mark.parametrize("stop_at", [15, 10])  # between evaluations / right after one
def test_a_resume_at_exactly_its_budget_ends_with_one_final_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_at: int
) -> None:
    """``--resume RUN train.steps=N`` with N the steps taken: the run's cap is this step, so its
    final periodic evaluation (and early-stopping test) must run at it, as in a run whose budget
    was N, and its TensorBoard points be there once (the final samples were logged twice at an
    evaluation step; between evaluations the run ended on an older step's evaluation)."""
    interrupt_at(monkeypatch, stop_at)
    with pytest.raises(TrainingInterrupted):
        train(tiny_config(tmp_path, "train.target_accuracy=1.0"))
    monkeypatch.undo()
    assert load_checkpoint(tmp_path)["step"] == stop_at
    result = train(resume_config(tmp_path, [f"train.steps={stop_at}"]), resume=True)
    assert (result.step, result.finished, result.reached_target) == (stop_at, True, False)
    state = load_checkpoint(tmp_path)
    assert state["finished"] is True and state["eval_pending"] is False
    assert logged_steps(tmp_path) == ([10, stop_at] if stop_at != 10 else [10],) * 3


def test_a_clear_cut_short_leaves_a_folder_that_can_be_cleared_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh start (or ``--overwrite``) clears a crashed run's files; if that is cut short
    (a failing delete, a kill), the folder must still be one the next start can clear: the
    files proving it is a run (``config.yaml`` and the events) are deleted last. They were
    deleted first (alphabetical), leaving events or reports that neither a fresh start nor
    ``--overwrite`` would touch."""
    train(tiny_config(tmp_path))
    envelope = {"schema_version": 4, "run_dir": str(tmp_path), "config": {}, "lengths": []}
    (tmp_path / "eval.json").write_text(json.dumps(envelope))  # one the project wrote
    real_unlink = Path.unlink

    def unlink(path: Path, missing_ok: bool = False) -> None:
        if path.match(EVENTS):
            raise PermissionError(f"cannot delete {path}")
        real_unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(PermissionError):
        clear_run(tmp_path)
    monkeypatch.undo()
    assert is_run(tmp_path)  # config.yaml and the events are still there
    assert not (tmp_path / "eval.json").exists()
    clear_run(tmp_path)
    assert [p.name for p in tmp_path.iterdir() if p.name != ".lock"] == []
