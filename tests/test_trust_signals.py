"""Stop signals at every moment of every command: one line on stderr, exit code 128 + signal.

Each case runs the real command in a child process that pauses at a moment the test controls
(no timing guesses): during its imports (``tests/import_pause``), inside the atomic write of a
report file (``tests/paused_entry.py``), or at a training step (``tests/paused_train.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import bench
import eval as eval_cli
import properties
import sweep
import train
from lab.common.checkpoint import load_checkpoint
from lab.common.signals import STOP_SIGNALS, Stopped, deferred, run_main
from lab.sweeps.cluster import still_running
from lab.training.trainer import train as train_run
from tests.conftest import TINY_RUN, tiny_config
from tests.foreground import foreground

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 120
STOPPED = {
    "train.py": train.STOPPED,
    "eval.py": eval_cli.STOPPED,
    "sweep.py": sweep.STOPPED,
    "properties.py": properties.STOPPED,
    "bench.py": bench.STOPPED,
}
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


@pytest.fixture
def handlers() -> Iterator[None]:
    """Give this process its stop-signal handlers back after an in-process test; during it,
    the actions of a foreground process (a runner started in the background has SIGINT
    ignored, which the code under test rightly leaves alone)."""
    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in STOP_SIGNALS:
        if signum != signal.SIGINT:
            signal.signal(signum, signal.SIG_DFL)
    yield
    for signum, action in saved.items():
        signal.signal(signum, action)


def start(command: list[str], tmp_path: Path, **env: str) -> subprocess.Popen:
    """``command`` in the repository, its own session, stdout and stderr piped."""
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=foreground,
    )


def wait_for(path: Path, process: subprocess.Popen) -> None:
    """Wait until ``path`` exists; fail with the process's output if it ends first."""
    deadline = time.monotonic() + TIMEOUT_S
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            out, err = process.communicate(timeout=TIMEOUT_S)
            pytest.fail(f"never reached {path.name} (rc {process.returncode}): {out}{err}")
        time.sleep(0.02)


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    """Wait for ``process``; return ``(rc, stdout, stderr)``."""
    try:
        out, err = process.communicate(timeout=TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, out, err


@pytest.mark.parametrize("name", sorted(SIGNALS))
@pytest.mark.parametrize("program", sorted(STOPPED))
def test_a_stop_signal_during_the_imports_is_one_line(tmp_path: Path, program: str, name: str):
    flags = tmp_path / "flags"
    flags.mkdir()
    hook = str(ROOT / "tests" / "import_pause")
    env = {"PAUSE_FLAGS": str(flags), "PYTHONPATH": hook}
    process = start([sys.executable, program, "--help"], tmp_path, **env)
    wait_for(flags / "paused", process)  # paused inside `import torch`
    process.send_signal(SIGNALS[name])
    rc, out, err = finish(process)
    assert rc == 128 + SIGNALS[name]
    assert err == f"{program}: interrupted by {name} during start-up; nothing was written\n"
    assert out == ""


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run to evaluate (do not write into it)."""
    run_dir = tmp_path_factory.mktemp("run") / "tiny"
    train_run(tiny_config(run_dir, "train.steps=6", "train.eval_every=6"))
    return run_dir


def paused_entry(tmp_path: Path, file: str, *command: str) -> tuple[subprocess.Popen, Path]:
    """``command`` (entry point and arguments) pausing inside the write of ``file``."""
    flags = tmp_path / "flags"
    flags.mkdir()
    entry = [sys.executable, str(ROOT / "tests" / "paused_entry.py"), str(flags), file]
    process = start([*entry, *command], tmp_path)
    wait_for(flags / "paused", process)
    return process, flags


@pytest.mark.parametrize("name", sorted(SIGNALS))
def test_a_stop_while_eval_writes_its_report_leaves_no_partial_file(
    tmp_path: Path, tiny_run: Path, name: str
) -> None:
    out = tmp_path / "out"
    command = ["eval.py", str(tiny_run), "--out", str(out), "--no-progress"]
    command += ["eval.samples=8", "eval.lengths=[2,4]"]
    process, _ = paused_entry(tmp_path, "results.csv", *command)
    process.send_signal(SIGNALS[name])
    rc, _, err = finish(process)
    assert rc == 128 + SIGNALS[name]
    assert err == f"eval.py: interrupted by {name}; {eval_cli.STOPPED}\n"
    assert (out / "eval.json").is_file()  # written before the report: complete
    assert not (out / "results.csv").exists()  # the interrupted write did not land
    assert not list(out.glob(".*.tmp"))  # nor did its temporary file stay


def test_sigterm_while_properties_writes_its_report_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "props"
    command = ["properties.py", "--position", "none", "--out", str(out)]
    process, _ = paused_entry(tmp_path, "properties.md", *command)
    process.send_signal(signal.SIGTERM)
    rc, _, err = finish(process)
    assert rc == 143
    assert err == f"properties.py: interrupted by SIGTERM; {properties.STOPPED}\n"
    assert not (out / "properties.md").exists()
    assert not list(out.glob(".*.tmp"))


@pytest.mark.slow  # trains the run, then the re-run evaluates it: two commands
def test_sigterm_while_a_sweep_writes_its_report_is_one_line_and_the_rerun_writes_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sweep"
    tiny = [o for o in TINY_RUN if o.split("=")[0] not in ("device", "train.progress")]
    grid = ["--workers", "1", f"out_dir={out}", "position=none", "task=copy", "seed=0"]
    command = ["sweep.py", "--quick", *grid, *tiny, "train.steps=6", "train.eval_every=6"]
    process, _ = paused_entry(tmp_path, "report.md", *command)
    process.send_signal(signal.SIGTERM)
    rc, _, err = finish(process)
    assert rc == 143
    again_line = shlex.join(["python", *command])  # the command to resume with, as elsewhere
    assert (
        err.splitlines()[-1] == f"sweep.py: interrupted by SIGTERM; {sweep.STOPPED}: {again_line}"
    )
    assert "Traceback" not in err
    assert not (out / "report.md").exists() and not list(out.glob(".*.tmp"))
    again = subprocess.run(
        [sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert again.returncode == 0, again.stderr
    assert "1 skipped (already finished)" in again.stdout
    assert (out / "report.md").is_file()


def test_a_sweep_or_study_whose_workers_caught_the_stop_ends_with_the_one_documented_line(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Workers that caught SIGINT hand it back: the sweep's and the extend study's last line is
    the one a stop caught by the main process prints (``sweep.py: interrupted by SIGINT;``),
    naming the command that resumes (the study's said only "interrupted: ...")."""
    import lab.lm.extend_study as study

    monkeypatch.setattr(sweep, "run_all", lambda *args, **kwargs: ([], signal.SIGINT))
    monkeypatch.setattr(study, "run_study", lambda *args, **kwargs: ([], signal.SIGINT))
    grid = [f"out_dir={tmp_path / 'sweep'}", "position=none", "task=copy", "seed=0"]
    assert sweep.main(["--quick", "--workers", "1", *grid]) == 130
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"sweep.py: interrupted by SIGINT; {sweep.STOPPED}: python "), last
    argv = [str(ROOT / "configs" / "lm_extend.yaml"), f"out_dir={tmp_path / 'study'}"]
    assert study.main(argv) == 130
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == f"sweep.py: interrupted by SIGINT; {sweep.STOPPED}: python sweep.py " + (
        f"--extend-study {argv[0]} {argv[1]}"
    )


def test_an_orphaned_torchrun_rank_stops_at_its_next_step(tmp_path: Path) -> None:
    """``kill -9`` of the launcher: the rank (here alone, as ``torchrun --nproc_per_node 1``
    starts it) notices at its next step that it was re-parented, saves and stops."""
    flags, run_dir, log = tmp_path / "flags", tmp_path / "run", tmp_path / "rank.err"
    flags.mkdir()
    rank = [sys.executable, str(ROOT / "tests" / "paused_train.py"), "batch", "3", str(flags)]
    rank += [*TINY_RUN, f"run_dir={run_dir}", "train.steps=1000"]
    launcher = "import subprocess, sys; subprocess.Popen(sys.argv[1:]).wait()"
    with open(log, "w") as err:
        parent = subprocess.Popen(
            [sys.executable, "-c", launcher, *rank],
            cwd=ROOT,
            env={**os.environ, "TORCHELASTIC_RUN_ID": "test", "OMP_NUM_THREADS": "1"},
            stderr=err,
            start_new_session=True,
            preexec_fn=foreground,
        )
    try:
        wait_for(flags / "paused", parent)
        pid = int((flags / "paused").read_text())
        parent.kill()  # the launcher dies without a word to its rank
        parent.wait()
        (flags / "go").touch()
        deadline = time.monotonic() + TIMEOUT_S
        while running(pid):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
    # step 4 ran (its check passed before the pause), then the check before step 5 stopped it
    assert load_checkpoint(run_dir)["step"] == 4
    assert "interrupted by a stop request at step 4; checkpoint of step 4 saved" in log.read_text()


def running(pid: int) -> bool:
    """Process ``pid`` exists and is not a zombie (an orphan's exit is reaped by init, or not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_a_stop_signal_in_main_is_one_line_and_its_exit_code(handlers, capsys) -> None:
    def main() -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # never reached: the handler raises at once
        return 0

    assert run_main("x.py", main, "what is kept") == 143
    assert capsys.readouterr().err == "x.py: interrupted by SIGTERM; what is kept\n"


def test_deferred_holds_a_signal_until_its_block_ends(handlers) -> None:
    done = []
    with pytest.raises(Stopped) as stop, deferred():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("the block finished")
    assert done == ["the block finished"]
    assert stop.value.signum == signal.SIGINT


def test_a_stopped_sweep_names_the_jobs_that_keep_running_and_how_to_stop_them() -> None:
    class Local:
        cluster = "local"

    class Slurm:
        cluster = "slurm"

    assert (
        "stop them with: kill 41 42 (a training saves a checkpoint at its next step)"
        in still_running(["41", "42"], Local())
    )
    assert "2 job(s) keep running (7_0, 7_1); stop them with: scancel 7_0 7_1" in still_running(
        ["7_0", "7_1"], Slurm()
    )
    assert still_running([], Slurm()).startswith("stopped waiting; no job is left running")


@pytest.mark.slow
def test_sigterm_to_a_submitit_local_sweep_names_its_running_jobs_and_kill_stops_them(
    tmp_path: Path,
) -> None:
    pytest.importorskip("submitit")
    out = tmp_path / "sweep"
    tiny = [o for o in TINY_RUN if o.split("=")[0] not in ("device", "train.progress")]
    command = [sys.executable, "sweep.py", "--quick", "--launcher", "submitit-local"]
    command += ["--slurm.gpus", "0", "--slurm.cpus", "1", f"out_dir={out}", "position=none"]
    command += ["task=copy", "seed=0", *tiny, "train.steps=100000"]  # runs until stopped
    stdout, stderr = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(stdout, "w") as out_file, open(stderr, "w") as err_file:  # the job inherits them:
        process = subprocess.Popen(  # pipes would stay open as long as it runs
            command, cwd=ROOT, stdout=out_file, stderr=err_file, start_new_session=True,
            preexec_fn=foreground,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
    job = None
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while "submitted" not in stdout.read_text():
            assert process.poll() is None and time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.05)
        line = stdout.read_text().split("submitted ")[1].splitlines()[0]
        assert line.startswith("1 job(s): "), line
        job = int(line.split(": ")[1])  # submitit's local job id is its process id
        process.send_signal(signal.SIGTERM)  # while the sweep waits for its job
        assert process.wait(timeout=TIMEOUT_S) == 143
        local = type("Local", (), {"cluster": "local"})()
        assert stderr.read_text().strip() == still_running([str(job)], local)
        assert running(job)  # the job goes on without the sweep
        os.kill(job, signal.SIGTERM)  # what the message says to do
        while running(job):
            assert time.monotonic() < deadline + TIMEOUT_S
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the job is in the sweep's session


def test_a_stopped_sweep_records_its_pass_so_the_resumed_one_adds_its_time(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """A sweep stopped by a signal wrote no sweep.json, so the pass that resumed it recorded
    only its own seconds and its page gave a fraction of the time; the stopped pass writes its
    time and counts, and the resumed pass of the same command adds to them."""
    from lab.sweeps.summary import write_timing

    out = tmp_path / "sweep"
    stopped = [{"name": "a", "status": "trained"}, {"name": "b", "status": "interrupted"}]
    monkeypatch.setattr(sweep, "run_all", lambda *args, **kwargs: (stopped, signal.SIGTERM))
    argv = ["--quick", "--workers", "1", f"out_dir={out}", "position=none", "task=copy"]
    assert sweep.main(argv) == 143
    capsys.readouterr()
    first = json.loads((out / "sweep.json").read_text())
    assert first["runs"] == {"trained": 1, "interrupted": 1} and first["seconds"] >= 0
    done = [{"name": "a", "status": "skipped"}, {"name": "b", "status": "trained"}]
    command = shlex.join(["python", "sweep.py", *argv])
    timing = json.loads(write_timing(done, out, 50.0, 1, command=command).read_text())
    assert timing["passes"] == 2 and timing["seconds"] == round(first["seconds"] + 50.0, 1)
