"""What a run survives: signals, kills, a full disk, a second writer, untrusted checkpoints,
--overwrite, resume with other settings, non-finite gradients. Each test is one row of the
README's "What survives what" table.
"""

from __future__ import annotations

import errno
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import CHECKPOINT_EVERY, STEPS, TINY_RUN, crash_at, interrupt_at, tiny_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import lab.common.checkpoint
import lab.training.trainer
import train as train_cli
from lab.common.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from lab.common.config import Config, ConfigError, load_config
from lab.common.runlock import RunLocked, run_lock
from lab.evaluation.evaluate import load_run
from lab.training.resume import resume_config
from lab.training.schedule import warmup_cosine
from lab.training.trainer import TrainingDiverged, TrainingInterrupted, TrainResult, train

ROOT = Path(__file__).resolve().parent.parent
SHORT = ["train.steps=6", "train.eval_every=6"]  # a finished run in 6 steps


def cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    """``train.py argv`` in this process: exit code and stderr, asserted to be at most one line
    and no traceback."""
    code = train_cli.main(list(argv))
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return code, err


def sigint_twice() -> None:
    """Ctrl-C pressed twice, delivered to this (main) thread now."""
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)


def assert_consistent(state: dict, step: int) -> None:
    """The checkpoint's step, schedule and optimizer state all say ``step`` updates."""
    assert state["step"] == step
    assert state["scheduler"]["last_epoch"] == step
    for param_state in state["optimizer"]["state"].values():
        assert int(param_state["step"]) == step


# ---------------------------------------------------------------------------------------------
# Untrusted checkpoints
# ---------------------------------------------------------------------------------------------


class WritesAMarker:
    """Unpickling this calls ``open(marker, "w")``: what a hostile checkpoint could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


class RunsAShellCommand:
    """Unpickling it runs ``touch MARKER`` through ``os.system``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


@pytest.mark.parametrize(
    ("payload", "name"), [(WritesAMarker, "io.open"), (RunsAShellCommand, ".system")]
)
def test_a_checkpoint_that_would_run_code_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture, payload: type, name: str
) -> None:
    """torch words the refusal of the two objects differently; both give the same one line."""
    run_dir, marker = tmp_path / "run", tmp_path / "marker"
    run_dir.mkdir()
    torch.save({"model": payload(marker), "config": {}}, checkpoint_path(run_dir))
    code, err = cli(capsys, "--resume", str(run_dir))
    assert code == 2
    assert err.startswith("error: ") and "refused: it holds Python objects" in err
    assert name in err and "weights_only" not in err
    with pytest.raises(ValueError, match="refused: it holds Python objects") as error:
        load_run(run_dir, torch.device("cpu"))
    assert "\n" not in str(error.value)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# --overwrite
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["device=cuda:99", "threads=-1", "train.beta1=1.5", "seed=-1", "train.lr=inf"]
)
def test_overwrite_validates_before_it_deletes(
    tmp_path: Path, capsys: pytest.CaptureFixture, bad: str
) -> None:
    run_dir = tmp_path / "run"
    train(tiny_config(run_dir, *SHORT))
    saved = checkpoint_path(run_dir).read_bytes()
    code, err = cli(capsys, *TINY_RUN, *SHORT, f"run_dir={run_dir}", "--overwrite", bad)
    assert code == 2 and bad.split("=")[0] in err
    assert checkpoint_path(run_dir).read_bytes() == saved
    assert (run_dir / "config.yaml").is_file()


def test_overwrite_refuses_a_folder_that_holds_no_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("my own file")
    (folder / "config.yaml").write_text("not: a run config\n")
    code, err = cli(capsys, *TINY_RUN, f"run_dir={folder}", "--overwrite")
    assert code == 2 and "holds files but no run" in err and "nothing was deleted" in err
    assert (folder / "notes.txt").read_text() == "my own file"
    assert (folder / "config.yaml").read_text() == "not: a run config\n"
    assert not checkpoint_path(folder).exists()


def test_overwrite_deletes_only_what_a_run_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    train(tiny_config(run_dir, *SHORT))
    (run_dir / "notes.txt").write_text("keep me")
    orphans = [run_dir / ".checkpoint.pt.x1.tmp", run_dir / ".eval.json.x2.tmp"]
    for orphan in orphans:
        orphan.write_bytes(b"half a file")
    code, _ = cli(capsys, *TINY_RUN, *SHORT, f"run_dir={run_dir}", "--overwrite", "seed=1")
    assert code == 0
    assert (run_dir / "notes.txt").read_text() == "keep me"
    assert not any(orphan.exists() for orphan in orphans)
    assert load_checkpoint(run_dir)["config"]["seed"] == 1


def test_resume_removes_an_interrupted_checkpoint_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        interrupt_at(patch, 7)
        with pytest.raises(KeyboardInterrupt):
            train(tiny_config(tmp_path))
    orphan = tmp_path / ".checkpoint.pt.abc123.tmp"  # what a kill -9 during a save leaves
    orphan.write_bytes(b"half a checkpoint")
    assert train(resume_config(tmp_path), resume=True).finished
    assert not orphan.exists()


# ---------------------------------------------------------------------------------------------
# Signals (real processes for SIGTERM and a second Ctrl-C; in-process for the other moments)
# ---------------------------------------------------------------------------------------------


def paused_process(tmp_path: Path, where: str, step: int, run_dir: Path) -> subprocess.Popen:
    """``train.py`` (tiny run) in a child process, paused at ``where``/``step``."""
    flags = tmp_path / "flags"
    flags.mkdir()
    command = [sys.executable, str(ROOT / "tests" / "paused_train.py"), where, str(step)]
    process = subprocess.Popen(
        [*command, str(flags), *TINY_RUN, f"run_dir={run_dir}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not (flags / "paused").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"child never paused: {process.communicate()[1]}")
        time.sleep(0.02)
    return process


def resume_child(process: subprocess.Popen, flags: Path) -> tuple[int, str]:
    (flags / "go").touch()
    _, err = process.communicate(timeout=300)
    return process.returncode, err.strip()


def test_sigterm_saves_the_next_step_and_exits_143(
    straight: tuple[Config, TrainResult], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    process = paused_process(tmp_path, "batch", 7, run_dir)  # after 7 steps
    process.send_signal(signal.SIGTERM)
    code, err = resume_child(process, tmp_path / "flags")
    assert code == 128 + signal.SIGTERM == 143
    assert err == (
        "interrupted by SIGTERM at step 8; checkpoint of step 8 saved; "
        f"continue with: python train.py --resume {run_dir}"
    )
    assert_consistent(load_checkpoint(run_dir), 8)
    resumed = train(resume_config(run_dir), resume=True)
    assert resumed.losses == straight[1].losses[8:]  # exact: nothing lost, nothing repeated


def test_a_second_ctrl_c_during_the_save_cannot_split_step_and_optimizer(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    process = paused_process(tmp_path, "save", CHECKPOINT_EVERY, run_dir)  # inside a save
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)
    code, err = resume_child(process, tmp_path / "flags")
    assert code == 130
    assert err.startswith(f"interrupted by SIGINT at step {CHECKPOINT_EVERY}; ")
    assert_consistent(load_checkpoint(run_dir), CHECKPOINT_EVERY)


def test_a_second_ctrl_c_inside_a_step_keeps_the_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = lab.training.trainer.train_step

    def step_then_ctrl_c_twice(*args, **kwargs):
        out = real(*args, **kwargs)  # the weights of step 8 are updated; the counter is not yet
        if args[-1] == 7:
            sigint_twice()
        return out

    monkeypatch.setattr(lab.training.trainer, "train_step", step_then_ctrl_c_twice)
    with pytest.raises(TrainingInterrupted) as stop:
        train(tiny_config(tmp_path))
    assert stop.value.saved_step == CHECKPOINT_EVERY
    assert str(stop.value) == (
        f"interrupted by SIGINT at step 7; the checkpoint of step {CHECKPOINT_EVERY} is kept"
    )
    assert_consistent(load_checkpoint(tmp_path), CHECKPOINT_EVERY)


def test_ctrl_c_during_the_final_writes_leaves_the_run_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = lab.training.trainer.write_samples

    def ctrl_c_twice_then_write(*args):
        sigint_twice()
        return real(*args)

    monkeypatch.setattr(lab.training.trainer, "write_samples", ctrl_c_twice_then_write)
    try:
        result = train(tiny_config(tmp_path, *SHORT))
    except KeyboardInterrupt as stop:  # (pytest would take it for the user's Ctrl-C)
        pytest.fail(f"the finished run was interrupted: {stop}")
    assert result.finished
    state = load_checkpoint(tmp_path)
    assert state["finished"] is True and state["step"] == 6
    events = EventAccumulator(str(tmp_path)).Reload()
    hparams = events.Scalars("hparam/validation_exact_match_in_dist")
    assert [e.step for e in hparams] == [6]  # the writes after the save were completed too


def test_ctrl_c_before_the_first_step_claims_no_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    real = lab.training.trainer.build_model

    def ctrl_c_then_build(*args):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args)

    monkeypatch.setattr(lab.training.trainer, "build_model", ctrl_c_then_build)
    code, err = cli(capsys, *TINY_RUN, f"run_dir={tmp_path}")
    assert code == 130
    assert err == "interrupted by SIGINT at step 0; no checkpoint was saved (no step had completed)"
    assert not checkpoint_path(tmp_path).exists()


def test_should_stop_stops_after_the_current_step(tmp_path: Path) -> None:
    calls = []

    def true_before_the_4th_step() -> bool:  # checked before every step
        calls.append(1)
        return len(calls) == 4

    with pytest.raises(TrainingInterrupted) as stop:
        train(tiny_config(tmp_path), should_stop=true_before_the_4th_step)
    assert stop.value.signum is None and stop.value.saved_step == 3
    assert_consistent(load_checkpoint(tmp_path), 3)


# ---------------------------------------------------------------------------------------------
# Resume: the run's own settings, explicit changes recorded, extending a finished run
# ---------------------------------------------------------------------------------------------


def test_resume_uses_the_runs_threads_not_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    with monkeypatch.context() as patch:
        interrupt_at(patch, 7)
        with pytest.raises(KeyboardInterrupt):
            train(tiny_config(tmp_path, "threads=2"))
    torch.set_num_threads(1)  # what the default threads=1 sets
    code, _ = cli(capsys, "--resume", str(tmp_path))
    assert code == 0
    assert torch.get_num_threads() == 2  # the run's threads=2
    assert (
        load_checkpoint(tmp_path)["step"] == load_checkpoint(tmp_path)["config"]["train"]["steps"]
    )


def test_an_explicit_change_on_resume_is_used_and_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    with monkeypatch.context() as patch:
        interrupt_at(patch, 7)
        with pytest.raises(KeyboardInterrupt):
            train(tiny_config(tmp_path, "device=auto"))
    code, _ = cli(capsys, "--resume", str(tmp_path), "device=cpu")
    assert code == 0
    state = load_checkpoint(tmp_path)
    assert state["config"]["device"] == "cpu"
    assert state["history"] == [{"step": 7, "changed": {"device": ["auto", "cpu"]}}]
    assert load_config(tmp_path / "config.yaml").device == "cpu"


def test_resume_refuses_other_settings_in_one_line(
    straight: tuple[Config, TrainResult], capsys: pytest.CaptureFixture
) -> None:
    code, err = cli(capsys, "--resume", straight[0].run_dir, "model.d_model=8", "seed=3")
    assert code == 2
    assert "model.d_model, seed cannot change on resume" in err
    assert "allowed: device, threads, compile, train.progress, train.steps" in err


def test_resuming_a_finished_run_says_so_without_a_nan_loss(
    straight: tuple[Config, TrainResult], capsys: pytest.CaptureFixture
) -> None:
    code = train_cli.main(["--resume", straight[0].run_dir])
    out = capsys.readouterr().out
    assert code == 0
    assert f"already finished at step {STEPS}; nothing to train" in out
    assert "nan" not in out


def test_a_finished_run_is_extended_by_a_larger_budget(
    straight: tuple[Config, TrainResult], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(straight[0].run_dir, run_dir)
    code, _ = cli(capsys, "--resume", str(run_dir), "train.steps=40")
    assert code == 0
    state = load_checkpoint(run_dir)
    assert state["step"] == 40 and state["finished"] is True
    assert state["history"] == [{"step": STEPS, "changed": {"train.steps": [STEPS, 40]}}]
    # From step 21 on, the rate follows the cosine recomputed for 40 steps (stretched, not
    # restarted): above min_lr, where the 20-step schedule had ended.
    t = straight[0].train
    logged = EventAccumulator(str(run_dir)).Reload().Scalars("train/lr")
    assert [e.step for e in logged] == list(range(5, 41, 5))
    expected = [t.lr * warmup_cosine(s - 1, t.warmup_steps, 40, t.min_lr / t.lr) for s in (25, 30)]
    assert [e.value for e in logged[4:6]] == pytest.approx(expected, rel=1e-6)
    assert logged[4].value > 2 * t.min_lr


def test_a_budget_cut_to_the_steps_taken_finishes_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        interrupt_at(patch, 7)
        with pytest.raises(KeyboardInterrupt):
            train(tiny_config(tmp_path))
    result = train(resume_config(tmp_path, ["train.steps=7"]), resume=True)
    assert result.finished and result.step == 7 and result.losses == []
    assert load_checkpoint(tmp_path)["finished"] is True
    with pytest.raises(ConfigError, match=r"train.steps=6 is below the 7 steps"):
        train(resume_config(tmp_path, ["train.steps=6"]), resume=True)


def test_resume_of_a_checkpoint_without_optimizer_is_one_line(
    straight: tuple[Config, TrainResult], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    state = load_checkpoint(straight[0].run_dir)
    state["finished"] = False
    del state["optimizer"]
    save_checkpoint(state, checkpoint_path(tmp_path))
    code, err = cli(capsys, "--resume", str(tmp_path))
    assert code == 2 and "has no optimizer; it cannot be resumed" in err


def test_resume_of_weights_that_do_not_fit_the_config_is_one_line(
    straight: tuple[Config, TrainResult], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    state = load_checkpoint(straight[0].run_dir)
    state["finished"] = False
    state["config"]["model"]["d_ff"] = 128
    save_checkpoint(state, checkpoint_path(tmp_path))
    code, err = cli(capsys, "--resume", str(tmp_path))
    assert code == 2 and "does not fit its saved model config" in err and "size mismatch" in err


# ---------------------------------------------------------------------------------------------
# Non-finite gradients and weights
# ---------------------------------------------------------------------------------------------


def test_an_infinite_gradient_stops_the_run_before_the_weights_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = {}
    real_model, real_optimizer = (
        lab.training.trainer.build_model,
        lab.training.trainer.build_optimizer,
    )

    def model_with_an_inf_gradient_at_step_7(*args):
        model = built["model"] = real_model(*args)
        calls = []

        def hook(grad: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            return torch.full_like(grad, math.inf) if len(calls) == 8 else grad

        model.token_embedding.weight.register_hook(hook)
        return model

    def keep_optimizer(*args):
        built["optimizer"] = real_optimizer(*args)
        return built["optimizer"]

    monkeypatch.setattr(lab.training.trainer, "build_model", model_with_an_inf_gradient_at_step_7)
    monkeypatch.setattr(lab.training.trainer, "build_optimizer", keep_optimizer)
    with pytest.raises(TrainingDiverged, match=r"gradient norm is inf at step 7 \(loss \d"):
        train(tiny_config(tmp_path, "train.grad_clip=0"))
    assert all(torch.isfinite(p).all() for p in built["model"].parameters())
    states = built["optimizer"].state.values()
    assert {int(s["step"]) for s in states} == {7}  # the 8th update never happened
    assert_consistent(load_checkpoint(tmp_path), CHECKPOINT_EVERY)


def test_non_finite_weights_are_never_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = lab.training.trainer.train_step

    def step_then_poison(model, *args, **kwargs):
        out = real(model, *args, **kwargs)
        if args[-1] == 4:  # the 5th update went wrong; its checkpoint is due next
            with torch.no_grad():
                next(model.parameters())[0, 0] = math.nan
        return out

    monkeypatch.setattr(lab.training.trainer, "train_step", step_then_poison)
    with pytest.raises(TrainingDiverged, match="non-finite weights at step 5; not saved"):
        train(tiny_config(tmp_path))
    assert not checkpoint_path(tmp_path).exists()


# ---------------------------------------------------------------------------------------------
# A second writer, a full disk, TensorBoard after a crash
# ---------------------------------------------------------------------------------------------


def test_a_second_writer_is_refused_naming_the_folder_and_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with run_lock(tmp_path):
        with pytest.raises(RunLocked), run_lock(tmp_path):
            pass
        code, err = cli(capsys, *TINY_RUN, f"run_dir={tmp_path}")
    assert code == 2
    assert f"run_dir={str(tmp_path)!r} is in use by another training process" in err
    assert f"pid {os.getpid()} on " in err
    assert not checkpoint_path(tmp_path).exists()
    assert train(tiny_config(tmp_path, *SHORT)).finished  # released when the holder is done


def test_a_folder_where_the_lock_goes_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    fifo_run = tmp_path / "fifo"  # a FIFO as the lock gave a bare 'Invalid argument'
    fifo_run.mkdir()
    os.mkfifo(fifo_run / ".lock")
    code, err = cli(capsys, *TINY_RUN, f"run_dir={fifo_run}")
    assert code != 0 and "is no regular file (a FIFO or a device), not a lock file" in err
    tmp_path = tmp_path / "folder"
    (tmp_path / ".lock").mkdir(parents=True)
    code, err = cli(capsys, *TINY_RUN, f"run_dir={tmp_path}")
    assert code != 0
    lock = str(tmp_path / ".lock")
    line = f"{lock!r} is a folder, not a lock file; remove it or pick another run_dir"
    assert line in err and "Traceback" not in err
    assert not checkpoint_path(tmp_path).exists()


def test_a_symlink_planted_as_the_lock_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(victim)
    with run_lock(run):
        assert not (run / ".lock").is_symlink()
    assert victim.read_text() == "precious"


class FullDisk:
    """A file that accepts ``room`` bytes, then fails as a full disk does."""

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data) -> int:
        self.room -= len(data)
        if self.room < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.file.write(data)

    def __getattr__(self, name: str):
        return getattr(self.file, name)


def test_a_full_disk_during_a_save_is_one_oserror_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint({"step": 1, "weights": torch.zeros(10)}, path)
    before = path.read_bytes()
    real = lab.common.checkpoint.atomic_writer

    def full_disk_writer(*args, **kwargs):
        writer = real(*args, **kwargs)

        class Context:
            def __enter__(self):
                return FullDisk(writer.__enter__(), room=1000)

            def __exit__(self, *exc):
                return writer.__exit__(*exc)

        return Context()

    monkeypatch.setattr(lab.common.checkpoint, "atomic_writer", full_disk_writer)
    with pytest.raises(OSError) as error:
        save_checkpoint({"step": 2, "weights": torch.zeros(100_000)}, path)
    assert error.value.errno == errno.ENOSPC
    assert str(error.value) == (
        f"[Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}: cannot write {str(path)!r}; "
        "the previous checkpoint is kept"
    )
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temporary file left


def test_tensorboard_logs_every_step_once_after_a_crash_and_resume(
    straight: tuple[Config, TrainResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        crash_at(patch, 13)
        with pytest.raises(RuntimeError, match="killed"):
            train(tiny_config(tmp_path, "train.log_every=1"))  # steps 11..13 logged, then lost
    assert load_checkpoint(tmp_path)["step"] == 10
    train(resume_config(tmp_path), resume=True)
    losses = EventAccumulator(str(tmp_path)).Reload().Scalars("train/loss")
    assert [e.step for e in losses] == list(range(1, STEPS + 1))
    assert [e.value for e in losses] == pytest.approx(straight[1].losses, rel=1e-6)


def test_a_stop_during_a_periodic_evaluation_does_not_wait_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One SIGTERM once waited 88 s for a periodic evaluation of 400,000 samples to end. Now
    the evaluation checks between batches: the stop comes after the first batch, the step it
    followed is saved, and nothing of the unfinished evaluation is logged."""
    import lab.evaluation.extrapolation

    batches = []
    real = lab.evaluation.extrapolation.score_answers

    def count_batches(*args):
        batches.append(1)
        return real(*args)

    monkeypatch.setattr(lab.evaluation.extrapolation, "score_answers", count_batches)
    config = tiny_config(tmp_path, "train.eval_samples=64", "eval.batch_tokens=64")
    with pytest.raises(TrainingInterrupted) as stop:
        train(config, should_stop=lambda: bool(batches))  # true once one batch was scored
    assert len(batches) == 1  # of the 5 lengths x 64 samples in chunks of a few rows
    assert "at step 10; checkpoint of step 10 saved" in str(stop.value)
    assert torch.load(checkpoint_path(tmp_path), weights_only=True)["step"] == 10
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path)).Reload()
    assert not [tag for tag in events.Tags()["scalars"] if tag.startswith("eval/")]


def full_disk_at(patch: pytest.MonkeyPatch, module, room: int) -> None:
    """``module.atomic_writer`` hands out files that fail as a full disk after ``room`` bytes."""
    real = module.atomic_writer

    def full_disk_writer(*args, **kwargs):
        writer = real(*args, **kwargs)

        class Context:
            def __enter__(self):
                return FullDisk(writer.__enter__(), room=room)

            def __exit__(self, *exc):
                return writer.__exit__(*exc)

        return Context()

    patch.setattr(module, "atomic_writer", full_disk_writer)


def test_a_full_disk_during_evals_tensorboard_write_is_one_line_and_no_torn_file(
    finished_run: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    import eval as eval_cli
    import lab.common.events.files

    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    suffix = ".extrapolation"
    before = {p.name: p.read_bytes() for p in run.glob(f"events.out.tfevents.*{suffix}")}
    assert len(before) == 1  # the earlier evaluation's file
    full_disk_at(monkeypatch, lab.common.events.files, room=200)
    code = eval_cli.main([str(run), "--no-progress", "eval.samples=8", "eval.probe_samples=8"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err and "Exception" not in err
    assert (
        err.startswith("error: ")
        and (
            f"[Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}: cannot write "
            f"{str(run / 'events.out.tfevents.')!r}"[:-1]
        )
        in err
    )
    assert err.endswith(f"; the earlier TensorBoard events of {str(run)!r} are kept")
    after = {p.name: p.read_bytes() for p in run.glob(f"events.out.tfevents.*{suffix}")}
    assert after == before  # no truncated file, the earlier one intact
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]  # no temporary file


def test_a_resume_in_the_second_its_killed_run_began_still_logs_every_step_once(
    straight: tuple[Config, TrainResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorBoard reads a folder's event files in name order, and names them by the second
    they opened, then the process and a counter compared as text. The killed run's file is
    given this second and a counter that sorts after the resumed run's: read last, its
    ``purge_step`` marker (step 1) once purged every resumed step."""
    with monkeypatch.context() as patch:
        crash_at(patch, 13)
        with pytest.raises(RuntimeError, match="killed"):
            train(tiny_config(tmp_path, "train.log_every=1"))
    (killed,) = tmp_path.glob("events.out.tfevents.*")
    second = int(time.time()) + 1
    killed.rename(tmp_path / f"events.out.tfevents.{second:010d}.~.0.0")  # "~" sorts last
    train(resume_config(tmp_path), resume=True)
    names = sorted(p.name for p in tmp_path.glob("events.out.tfevents.*"))
    assert len(names) == 2 and names[0].endswith(".~.0.0")  # the killed run's file reads first
    losses = EventAccumulator(str(tmp_path)).Reload().Scalars("train/loss")
    assert [e.step for e in losses] == list(range(1, STEPS + 1))
    assert [e.value for e in losses] == pytest.approx(straight[1].losses, rel=1e-6)
