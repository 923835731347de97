"""Sweeps through submitit: the cluster path end to end with submitit's local executor (each
job a process on this machine), its one-line errors, and how ended jobs are reported."""

import json
import os
import shutil
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import lab.training.trainer
import sweep
from lab.common.checkpoint import load_checkpoint
from lab.sweeps import cluster
from lab.sweeps.cluster import job_record, run_job
from lab.sweeps.sweep import RunSpec
from tests.conftest import TINY_RUN
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


class EndedJob:
    """What ``job_record`` reads of a submitit job: its id, log paths and result."""

    job_id = "7_1"
    paths = SimpleNamespace(stderr=Path("out/.submitit/7_1/7_1_0_log.err"))

    def __init__(self, record: dict | None = None, error: Exception | None = None) -> None:
        self.record, self.error = record, error

    def result(self) -> dict:
        if self.error is not None:
            raise self.error
        return self.record


def test_a_job_stopped_at_its_time_limit_is_reported_with_how_to_continue() -> None:
    spec = RunSpec("rope-copy-seed0", [])
    record = {"name": spec.name, "status": "interrupted", "signal": 15, "error": None}
    out = job_record(spec, EndedJob(record))
    assert out["status"] == "failed"
    assert out["error"] == (
        "job 7_1 was stopped by a signal (its time limit?); a checkpoint was saved: run the "
        "same command again to continue it"
    )


def test_a_job_that_died_without_a_record_is_failed_naming_its_log() -> None:
    spec = RunSpec("rope-copy-seed0", [])
    out = job_record(spec, EndedJob(error=RuntimeError("Job 7_1 (task: 0) failed\nmore")))
    assert out == {
        "name": "rope-copy-seed0",
        "status": "failed",
        "error": "job 7_1 ended without a result (Job 7_1 (task: 0) failed); "
        "see out/.submitit/7_1/7_1_0_log.err",
        "result": None,
    }


def test_slurms_time_limit_warning_stops_training_with_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = lab.training.trainer.training_batch

    def batch_then_warning(task, seed, index, *args):
        if index == 3:  # SIGUSR2, as SLURM sends it 90 s before the limit, during step 4
            os.kill(os.getpid(), signal.SIGUSR2)
        return real(task, seed, index, *args)

    monkeypatch.setattr(lab.training.trainer, "training_batch", batch_then_warning)
    spec = RunSpec("run", [*TINY_RUN, f"run_dir={tmp_path}"])
    record = run_job(spec, "cpu", 1)
    assert (record["status"], record["signal"]) == ("interrupted", signal.SIGTERM)
    assert load_checkpoint(tmp_path)["step"] == 4  # the step under way finished and was saved
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL  # the handler is given back


class LocalExecutor:
    """submitit's local executor as submit_in_turn sees it: every job it is given starts at
    once; a job finishes after it has been polled ``lifetime`` times."""

    cluster = "local"

    def __init__(self, lifetime: int = 3) -> None:
        self.lifetime, self.jobs, self.most = lifetime, [], 0

    def submit(self, fn, spec, *args):
        executor = self

        class Job:
            job_id = str(len(self.jobs))
            polls = 0

            def done(self) -> bool:
                self.polls += 1
                return self.polls > executor.lifetime

        self.jobs.append(Job())
        running = sum(job.polls <= self.lifetime for job in self.jobs)
        self.most = max(self.most, running)
        return self.jobs[-1]


@pytest.mark.parametrize("at_once", [1, 2, 3])
def test_local_jobs_run_at_most_the_workers_at_a_time(monkeypatch, capsys, at_once) -> None:
    """submitit-local once started all 10 jobs of a sweep at once on 2 cores."""
    monkeypatch.setattr(cluster, "POLL_SECONDS", 0.0)
    executor, jobs = LocalExecutor(), []
    specs = [RunSpec(f"run{i}", []) for i in range(7)]
    cluster.submit_in_turn(specs, executor, ("cpu", 1), at_once, jobs)
    assert len(jobs) == 7 and executor.most == at_once
    assert capsys.readouterr().out.splitlines()[0] == "submitted job 0 (run0)"
