"""Tests of the training loop: learning, exact resume, Ctrl-C, divergence, CLI errors, logs.

The tiny runs (a few hundred milliseconds each) use a 2-layer, 32-wide model on ``copy`` at
lengths 2..4 for 20 steps, with dropout so that resuming must restore the torch generator.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import CHECKPOINT_EVERY, STEPS, TINY_RUN, interrupt_at, tiny_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_break_learning import scored_by_tokens

import lab.training.trainer
from data import build_task
from lab.common.checkpoint import checkpoint_path, load_checkpoint
from lab.common.config import Config, config_from_dict, load_config
from lab.evaluation.extrapolation import evaluate_length
from lab.training.resume import resume_config
from lab.training.schedule import warmup_cosine
from lab.training.trainer import (
    TrainingDiverged,
    TrainingInterrupted,
    TrainResult,
    build_model,
    train,
)

ROOT = Path(__file__).resolve().parent.parent
INTERRUPT_AT = 7
COPY_RUN = [
    "data.task=copy",
    "data.train_min_length=2",
    "data.train_max_length=6",
    "model.d_model=64",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.d_ff=256",
    "train.lr=3e-3",
    "train.batch_size=64",
    "train.steps=1000",
    "train.warmup_steps=50",
    "train.eval_every=50",
    "train.target_accuracy=1.0",
    "train.progress=false",
    "device=cpu",
    "threads=1",
]
SCALARS = [
    "train/loss",
    "train/exact_match",
    "train/token_accuracy",
    "train/lr",
    "train/grad_norm",
    "train/tokens_per_s",
    "eval/exact_match_in_dist",
    "eval/exact_match_2x",
    "eval/exact_match_4x",
]


def assert_same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


# ---------------------------------------------------------------------------------------------
# Learning
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_small_model_learns_copy_at_its_training_lengths(tmp_path: Path) -> None:
    config = load_config(None, [*COPY_RUN, f"run_dir={tmp_path}"])
    started = time.perf_counter()
    result = train(config)
    seconds = time.perf_counter() - started
    assert result.finished
    assert result.eval["in_dist"] >= 0.95
    assert result.eval["in_dist"] >= config.train.target_accuracy or result.step == 1000
    assert result.final_loss < 0.1
    # An independent check on other samples (another seed's evaluation stream), every length.
    model = build_model(config, torch.device("cpu"))
    model.load_state_dict(load_checkpoint(tmp_path)["model"])
    task = build_task("copy")
    lengths = range(config.data.train_min_length, config.data.train_max_length + 1)
    checks = {n: evaluate_length(model, task, n, 256, seed=12345) for n in lengths}
    by_length = {n: r.exact_match for n, r in checks.items()}
    print(f"copy: {result.step} steps in {seconds:.1f}s, {result.eval}, by length {by_length}")
    for length, scores in checks.items():
        assert scores.samples == 256
        assert scores.exact_match >= 0.95, (length, scores)
        assert scores.token_accuracy >= scores.exact_match


# ---------------------------------------------------------------------------------------------
# Resume, Ctrl-C, divergence
# ---------------------------------------------------------------------------------------------


def test_resume_equals_uninterrupted(
    straight: tuple[Config, TrainResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, full = straight
    assert full.step == STEPS and len(full.losses) == STEPS and full.finished
    interrupted = tiny_config(tmp_path)
    with monkeypatch.context() as patch:
        interrupt_at(patch, INTERRUPT_AT)
        with pytest.raises(KeyboardInterrupt):
            train(interrupted)
    resumed = train(interrupted, resume=True)
    assert resumed.step == STEPS and resumed.finished
    assert resumed.losses == full.losses[INTERRUPT_AT:]  # exact float equality
    assert resumed.final_loss == full.final_loss
    assert resumed.eval == full.eval
    final_full = load_checkpoint(config.run_dir)
    final_resumed = load_checkpoint(tmp_path)
    assert final_resumed["step"] == final_full["step"] == STEPS
    assert_same_state(final_full["model"], final_resumed["model"])
    assert final_full["scheduler"] == final_resumed["scheduler"]
    for a, b in zip(
        final_full["optimizer"]["state"].values(),
        final_resumed["optimizer"]["state"].values(),
        strict=True,
    ):
        assert_same_state(a, b)


def test_resume_from_a_periodic_checkpoint_equals_uninterrupted(
    straight: tuple[Config, TrainResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between checkpoints (no Ctrl-C save) resumes from the last periodic one."""
    _, full = straight
    real = lab.training.trainer.training_batch

    def crash(task, seed, index, *args):
        if index == 13:
            raise RuntimeError("crash")
        return real(task, seed, index, *args)

    with monkeypatch.context() as patch:
        patch.setattr(lab.training.trainer, "training_batch", crash)
        with pytest.raises(RuntimeError, match="crash"):
            train(tiny_config(tmp_path))
    assert load_checkpoint(tmp_path)["step"] == 10
    resumed = train(tiny_config(tmp_path), resume=True)
    assert resumed.losses == full.losses[10:]


def test_ctrl_c_saves_a_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    interrupt_at(monkeypatch, INTERRUPT_AT)
    config = tiny_config(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        train(config)
    assert checkpoint_path(tmp_path).is_file()
    state = load_checkpoint(tmp_path)
    assert state["step"] == INTERRUPT_AT  # not the periodic checkpoint of step 5
    assert state["finished"] is False
    assert math.isfinite(state["final_loss"])
    assert config_from_dict(state["config"]) == config
    assert state["scheduler"]["last_epoch"] == INTERRUPT_AT
    assert not list(tmp_path.glob(".checkpoint.pt.*"))  # no temporary files left


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(
    straight: tuple[Config, TrainResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, full = straight
    real = torch.nn.functional.cross_entropy
    calls = []

    def nan_from_step_7(*args, **kwargs):
        calls.append(1)
        loss = real(*args, **kwargs)
        return loss * math.nan if len(calls) > 7 else loss

    monkeypatch.setattr(lab.training.trainer.torch.nn.functional, "cross_entropy", nan_from_step_7)
    with pytest.raises(TrainingDiverged, match=r"loss is nan at step 7\b"):
        train(tiny_config(tmp_path))
    state = load_checkpoint(tmp_path)
    assert state["step"] == CHECKPOINT_EVERY  # step 5, before the NaN
    assert state["finished"] is False
    assert state["final_loss"] == full.losses[CHECKPOINT_EVERY - 1]
    assert all(torch.isfinite(p).all() for p in state["model"].values())


def test_resume_without_checkpoint_fails(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(tiny_config(tmp_path), resume=True)


def test_resuming_a_finished_run_trains_nothing(straight: tuple[Config, TrainResult]) -> None:
    config, full = straight
    again = train(config, resume=True)
    assert again.finished and again.step == STEPS
    assert again.losses == []
    assert again.final_loss == full.final_loss
    assert again.eval == full.eval


# ---------------------------------------------------------------------------------------------
# Determinism, the command line, and what a run writes
# ---------------------------------------------------------------------------------------------


def test_same_config_gives_identical_losses(
    straight: tuple[Config, TrainResult], tmp_path: Path
) -> None:
    config, full = straight
    again = train(tiny_config(tmp_path))
    assert again.losses == full.losses
    assert_same_state(load_checkpoint(config.run_dir)["model"], load_checkpoint(tmp_path)["model"])
    other_seed = train(tiny_config(tmp_path / "seed1", "seed=1"))
    assert other_seed.losses != full.losses


def test_bad_config_key_fails_on_the_command_line() -> None:
    process = subprocess.run(
        [sys.executable, "train.py", "model.dmodel=3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 2
    assert process.stdout == ""
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1, process.stderr
    assert lines[0].startswith("error:")
    assert "model.dmodel" in lines[0]
    assert "allowed keys" in lines[0] and "model.d_model" in lines[0]
    assert "Traceback" not in process.stderr


def test_tensorboard_events_hold_the_documented_tags(
    straight: tuple[Config, TrainResult],
) -> None:
    config, full = straight
    run_dir = Path(config.run_dir)
    events = EventAccumulator(str(run_dir))
    tags = events.Reload().Tags()
    for tag in SCALARS:
        assert tag in tags["scalars"], tag
    assert "samples" in tags["tensors"] or "samples/text_summary" in tags["tensors"]
    # The logged values are the run's: losses every log_every steps, the schedule's lr.
    log_every = config.train.log_every
    loss_events = events.Scalars("train/loss")
    assert [e.step for e in loss_events] == list(range(log_every, STEPS + 1, log_every))
    assert [e.value for e in loss_events] == pytest.approx(full.losses[log_every - 1 :: log_every])
    # train/lr at logged step s is the rate that step s (0-based index s - 1) used; the last
    # one, at the end of the cosine, is above min_lr (min_lr is the rate after the last step).
    t = config.train
    assert [e.value for e in events.Scalars("train/lr")] == pytest.approx(
        [
            t.lr * warmup_cosine(e.step - 1, t.warmup_steps, t.steps, t.min_lr / t.lr)
            for e in loss_events
        ]
    )
    assert events.Scalars("train/lr")[-1].value > t.min_lr
    assert all(0 <= e.value <= 1 for e in events.Scalars("train/exact_match"))
    assert [e.step for e in events.Scalars("eval/exact_match_4x")] == [10, 20]
    assert events.Scalars("eval/exact_match_in_dist")[-1].value == pytest.approx(
        full.eval["in_dist"]
    )
    samples_tag = "samples/text_summary" if "samples/text_summary" in tags["tensors"] else "samples"
    text = events.Tensors(samples_tag)[-1].tensor_proto.string_val[0].decode()
    assert "| in_dist |" in text and "| 2x |" in text and "<sep>" in text
    # HParams tab: the run's own event file holds the hparams plugin data and final metrics
    hparams = events.PluginTagToContent("hparams")
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(hparams)
    assert events.Scalars("hparam/validation_exact_match_in_dist")[-1].value == pytest.approx(
        full.eval["in_dist"]
    )
    assert not (run_dir / "hparams").exists()  # no second TensorBoard run per run


def test_config_yaml_is_written_and_reloads(straight: tuple[Config, TrainResult]) -> None:
    config, _ = straight
    path = Path(config.run_dir) / "config.yaml"
    assert path.is_file()
    assert load_config(path) == config
    assert config_from_dict(load_checkpoint(config.run_dir)["config"]) == config


def test_a_new_run_never_overwrites_an_existing_one(tmp_path: Path, capsys) -> None:
    import train as train_cli

    config = tiny_config(tmp_path / "run", "train.steps=6", "train.eval_every=6")
    train(config)
    saved = checkpoint_path(config.run_dir).read_bytes()
    with pytest.raises(FileExistsError, match="already holds a run; continue it with"):
        train(config)
    argv = [*TINY_RUN, "train.steps=6", "train.eval_every=6", f"run_dir={config.run_dir}"]
    assert train_cli.main(argv) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert checkpoint_path(config.run_dir).read_bytes() == saved
    assert train_cli.main([*argv, "--overwrite", "seed=1"]) == 0
    assert load_checkpoint(config.run_dir)["config"]["seed"] == 1
    assert len(list(Path(config.run_dir).glob("events.out.tfevents.*"))) == 1  # old ones gone


def test_resume_follows_a_moved_run_folder(tmp_path: Path) -> None:
    config = tiny_config(tmp_path / "before", "train.steps=8", "train.eval_every=8")
    with pytest.raises(KeyboardInterrupt), pytest.MonkeyPatch.context() as patch:
        real = lab.training.trainer.training_batch

        def stop_at_4(task, seed, step, *args):
            if step == 4:
                raise KeyboardInterrupt
            return real(task, seed, step, *args)

        patch.setattr(lab.training.trainer, "training_batch", stop_at_4)
        train(config)
    moved = tmp_path / "after"
    Path(config.run_dir).rename(moved)
    result = train(resume_config(moved), resume=True)
    assert result.finished and result.run_dir == moved
    assert load_checkpoint(moved)["step"] == 8
    assert not (tmp_path / "before").exists()


def test_run_dir_007_trains_into_the_folder_007(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import train as train_cli

    monkeypatch.chdir(tmp_path)
    assert train_cli.main([*TINY_RUN, "train.steps=2", "train.warmup_steps=1", "run_dir=007"]) == 0
    assert load_checkpoint(tmp_path / "007")["config"]["run_dir"] == "007"
    assert not (tmp_path / "7").exists()


def test_target_checks_needs_the_target_held_over_consecutive_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a target every check meets (0.001): with 1 check the run stops at its first evaluation
    # (step eval_every); with 3 it stops at the third, and a run stopped between them and
    # resumed stops at the same step with the same weights
    scored_by_tokens(monkeypatch)  # token accuracy is above 0.001 from the start
    every = ["train.target_accuracy=0.001", "train.eval_every=5", "train.steps=100"]
    once = train(tiny_config(tmp_path / "once", *every))
    assert once.step == 5 and once.reached_target
    held = train(tiny_config(tmp_path / "held", *every, "train.target_checks=3"))
    assert held.step == 15 and held.reached_target and held.target_streak == 3
    config = tiny_config(tmp_path / "split", *every, "train.target_checks=3")
    with monkeypatch.context() as patch:
        interrupt_at(patch, 8)  # between the first check (step 5) and the second (step 10)
        with pytest.raises(TrainingInterrupted):
            train(config)
    assert load_checkpoint(config.run_dir)["target_streak"] == 1
    resumed = train(config, resume=True)
    assert resumed.step == 15 and resumed.target_streak == 3
    a = load_checkpoint(tmp_path / "held")["model"]
    b = load_checkpoint(config.run_dir)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
