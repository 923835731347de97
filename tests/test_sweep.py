"""The sweep: one command trains and evaluates a grid, reports it, resumes, survives failures."""

import json
from pathlib import Path

import pytest
import torch

import sweep
from lab.config import ConfigError
from lab.sweep import expand, load_sweep

TINY = [
    "task=copy",
    "data.train_min_length=2",
    "data.train_max_length=3",
    "model.d_model=32",
    "model.n_layers=1",
    "model.d_ff=64",
    "train.steps=6",
    "train.warmup_steps=1",
    "train.eval_every=6",
    "train.eval_samples=8",
    "train.progress=false",
    "eval.samples=8",
    "eval.probe_samples=8",
    "threads=1",
]
CONFIG = str(Path(__file__).parents[1] / "configs" / "quick.yaml")


def run_sweep(out_dir: Path, *overrides: str, workers: int = 1) -> int:
    argv = ["--config", CONFIG, "--workers", str(workers), f"out_dir={out_dir}", *TINY]
    return sweep.main([*argv, *overrides])


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, int]:
    out_dir = tmp_path_factory.mktemp("sweep")
    return out_dir, run_sweep(out_dir, "position=none,rope", "seed=0")


def test_sweep_writes_every_promised_file(finished):
    out_dir, code = finished
    assert code == 0
    for name in ("report.md", "results.csv", "results.json", "accuracy_vs_length.png"):
        assert (out_dir / name).is_file(), name
    assert (out_dir / "accuracy_vs_length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = sorted(p.name for p in out_dir.iterdir() if p.is_dir())
    assert runs == ["none-copy-seed0", "rope-copy-seed0"]
    for run in runs:
        for name in ("config.yaml", "checkpoint.pt", "eval.json"):
            assert (out_dir / run / name).is_file(), (run, name)
        assert list((out_dir / run).glob("events.out.tfevents.*"))
    results = json.loads((out_dir / "results.json").read_text())
    assert sorted(r["position"] for r in results) == ["none", "rope"]
    report = (out_dir / "report.md").read_text()
    assert "none-copy-seed0" in report and "rope-copy-seed0" in report


def test_resumed_sweep_skips_finished_runs(finished, capsys):
    out_dir, _ = finished
    before = {p: p.stat().st_mtime_ns for p in out_dir.glob("*/checkpoint.pt")}
    assert run_sweep(out_dir, "position=none,rope", "seed=0") == 0
    assert "0 run(s) trained, 0 only re-evaluated, 2 skipped" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out_dir.glob("*/checkpoint.pt")} == before


def test_failing_run_is_reported_and_others_finish(tmp_path, capsys):
    # a learned table of 6 rows cannot hold a length-3 copy sequence (8 tokens): that run fails
    rows = "model.options.learned.max_positions=6"
    code = run_sweep(tmp_path, "position=learned,alibi", rows, workers=2)
    captured = capsys.readouterr()
    assert code == 1
    assert "FAILED learned-copy-seed0: ValueError" in captured.err
    assert "max_positions=6" in captured.err
    assert (tmp_path / "alibi-copy-seed0" / "eval.json").is_file()
    assert [r["position"] for r in json.loads((tmp_path / "results.json").read_text())] == ["alibi"]


def test_grid_override_from_the_command_line():
    runs = expand(load_sweep(CONFIG, ["position=rope,alibi", "task=svo", "seed=0,1"]))
    assert [r.name for r in runs] == [
        "rope-svo-seed0",
        "rope-svo-seed1",
        "alibi-svo-seed0",
        "alibi-svo-seed1",
    ]
    assert "data.train_max_length=12" in runs[0].overrides  # the `when: data.task=svo` block
    assert runs[3].overrides[-1].endswith("alibi-svo-seed1")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("position=rope,foo", "model.position='foo' is not a known scheme"),
        ("model.dmodel=3", "unknown config key 'model.dmodel'"),
        ("train.lr", "not key=value"),
    ],
)
def test_bad_override_fails_with_one_line(override, message, tmp_path, capsys):
    with pytest.raises(ConfigError, match=message):
        load_sweep(CONFIG, [override])
    assert sweep.main(["--config", CONFIG, f"out_dir={tmp_path}", override]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err
    assert not any(tmp_path.iterdir())  # nothing trained


def test_missing_sweep_file(capsys):
    assert sweep.main(["--config", "configs/nope.yaml"]) == 2
    assert "sweep file 'configs/nope.yaml' does not exist" in capsys.readouterr().err


def test_interrupted_sweep_checkpoints_and_resumes(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the first run's training: it saves a checkpoint, the rest never start,
    the command exits 130; the same command then finishes everything."""
    import lab.trainer

    real_batch = lab.trainer.training_batch

    def interrupt_at_step_3(task, seed, step, *args):
        if step == 3:
            raise KeyboardInterrupt
        return real_batch(task, seed, step, *args)

    with monkeypatch.context() as patch:
        patch.setattr(lab.trainer, "training_batch", interrupt_at_step_3)
        assert run_sweep(tmp_path, "position=none,rope", "seed=0") == 130
    assert "interrupted" in capsys.readouterr().err
    assert torch.load(tmp_path / "none-copy-seed0" / "checkpoint.pt")["step"] == 3
    assert not (tmp_path / "rope-copy-seed0").exists()
    assert run_sweep(tmp_path, "position=none,rope", "seed=0") == 0
    assert "2 run(s) trained" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("override", "message"),
    [("run_dir=x", "use out_dir=... instead"), ("position=rope,,alibi", "empty value")],
)
def test_sweep_only_overrides_are_checked(override, message):
    with pytest.raises(ConfigError, match=message):
        load_sweep(CONFIG, [override])
