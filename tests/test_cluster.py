"""Sweeps through submitit: the cluster path end to end with submitit's local executor (each
job a process on this machine), and its one-line errors."""

import json
import shutil
import sys
from pathlib import Path

import pytest

import sweep
from tests.test_sweep import CONFIG, TINY

LOCAL = ["--launcher", "submitit-local", "--slurm.gpus", "0", "--slurm.cpus", "1"]


@pytest.mark.slow
def test_submitit_sweep_trains_reports_then_skips_finished_runs(tmp_path: Path, capsys) -> None:
    argv = ["--config", CONFIG, *LOCAL, f"out_dir={tmp_path}", *TINY, "position=none,rope"]
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    assert "submitted 2 job(s)" in out
    assert "2 run(s) trained, 0 only re-evaluated, 0 skipped" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert sorted(r["position"] for r in results) == ["none", "rope"]
    logs = list((tmp_path / ".submitit").glob("*/*_log.out"))
    assert len(logs) == 2  # one job each, its output kept beside the runs
    before = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/checkpoint.pt")}
    assert sweep.main(argv) == 0  # the same command again: every run is skipped
    assert "0 run(s) trained, 0 only re-evaluated, 2 skipped" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/checkpoint.pt")} == before


def test_slurm_without_slurm_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    if shutil.which("srun"):
        monkeypatch.setenv("PATH", str(tmp_path))  # hide this machine's SLURM
    argv = ["--config", CONFIG, "--launcher", "slurm", f"out_dir={tmp_path / 'x'}", *TINY]
    assert sweep.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --launcher slurm: ") and "\n" not in err
    assert "--launcher local" in err


def test_missing_submitit_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit raises ImportError
    argv = ["--config", CONFIG, *LOCAL, f"out_dir={tmp_path}", *TINY]
    assert sweep.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: --launcher submitit-local needs submitit; pip install -r requirements-cluster.txt"
    )


@pytest.mark.parametrize(
    ("flag", "value", "low"), [("time", "0", 1), ("gpus", "-1", 0), ("cpus", "0", 1)]
)
def test_bad_slurm_resources_are_one_line(tmp_path: Path, capsys, flag, value, low) -> None:
    argv = ["--config", CONFIG, *LOCAL, f"--slurm.{flag}", value, f"out_dir={tmp_path}", *TINY]
    assert sweep.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: --slurm.{flag}={value} is invalid; it must be >= {low}"
