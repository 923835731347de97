"""Break tests of stop signals after a command returned (phase 3 of
:mod:`lab.common.signals`): Python's interpreter shutdown sets every handler back to the default
action and then takes seconds to tear torch down (measured 1.8-2.8 s after a tiny ``train.py``), so
a
SIGTERM in that time killed the command without a line. :func:`lab.common.signals.run_program` ends
the process itself once the exit handlers ran."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.foreground import foreground

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 60

PROGRAM = """
import atexit, os, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from lab.common.signals import run_program

flags = Path({flags!r})


def pause(name):
    (flags / name).touch()
    deadline = time.monotonic() + {timeout}
    while not (flags / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


class PausesAtTeardown:
    def __del__(self):  # runs when the interpreter tears the modules down
        pause("teardown")


keep = PausesAtTeardown()
if {at_exit!r}:
    atexit.register(pause, "atexit")


def main():
    print("done", flush=True)
    return {status}


run_program("x.py", main, "what is kept")
"""


def start(tmp_path: Path, status: object = 0, at_exit: bool = False) -> subprocess.Popen:
    flags = tmp_path / "flags"
    flags.mkdir()
    code = PROGRAM.format(
        root=str(ROOT), flags=str(flags), timeout=TIMEOUT_S, at_exit=at_exit, status=status
    )
    script = tmp_path / "x.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=foreground,
    )


def wait_for_flag_or_exit(process: subprocess.Popen, flag: Path) -> bool:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if flag.exists():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.01)
    process.kill()
    pytest.fail("neither paused nor ended")


def test_the_process_ends_without_the_interpreters_teardown(tmp_path: Path) -> None:
    """No module teardown after the command returned, so no moment where a stop signal kills
    the process silently (a signal paused in the teardown gave rc -15 and no line)."""
    process = start(tmp_path)
    if wait_for_flag_or_exit(process, tmp_path / "flags" / "teardown"):
        process.send_signal(signal.SIGTERM)  # the old way: killed with no line
    out, err = process.communicate(timeout=TIMEOUT_S)
    assert (process.returncode, out, err) == (0, "done\n", "")
    assert not (tmp_path / "flags" / "teardown").exists()


def test_a_stop_signal_in_the_exit_handlers_is_one_line(tmp_path: Path) -> None:
    process = start(tmp_path, at_exit=True)
    assert wait_for_flag_or_exit(process, tmp_path / "flags" / "atexit")
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 143
    assert err == "x.py: interrupted by SIGTERM while exiting\n"
    assert out == "done\n"  # flushed before the exit


@pytest.mark.parametrize("status", [0, 2, 143])
def test_the_exit_status_is_mains(tmp_path: Path, status: int) -> None:
    process = start(tmp_path, status=status)
    out, err = process.communicate(timeout=TIMEOUT_S)
    assert (process.returncode, out, err) == (status, "done\n", "")


def test_a_usage_error_keeps_argparses_status_and_message() -> None:
    done = subprocess.run(
        [sys.executable, "train.py", "--no-such-flag"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S * 2,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "train.py: error: unrecognized arguments: --no-such-flag"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_bench_stopped_by_a_signal_exits_with_128_plus_it(tmp_path, monkeypatch, capsys, signum):
    """``bench.py`` caught the stop itself and returned 130 whatever the signal (SIGTERM from
    ``timeout`` gave 130, not 143)."""
    import bench
    from lab.bench import run
    from lab.common.signals import Stopped

    def stopped(*args, **kwargs):
        raise Stopped(signum)

    monkeypatch.setattr(run, "run_benchmark", stopped)
    out = tmp_path / "bench.json"
    assert bench.main(["--out", str(out), "--threads", "1"]) == 128 + signum
    assert not out.exists()
    assert capsys.readouterr().err.strip() == f"interrupted: nothing written to {out}"


TWICE = """
import atexit, os, signal, sys, time
sys.path.insert(0, {root!r})
from lab.common.signals import run_program


def second_signal():  # arrives while the process ends (e.g. a second Ctrl-C)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)


atexit.register(second_signal)


def main():
    if {by_main!r}:  # main reports its own stop (train.py, sweep.py) and returns its code
        print("x.py: stopped by SIGTERM", file=sys.stderr)
        return 143
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)


run_program("x.py", main, "what is kept")
"""


@pytest.mark.parametrize("by_main", [False, True])
def test_a_second_signal_while_stopping_adds_no_line_nor_changes_the_code(
    tmp_path: Path, by_main: bool
) -> None:
    """SIGTERM then SIGINT: one line and 143 (it printed a second "interrupted by SIGINT while
    exiting" line and exited 130)."""
    script = tmp_path / "x.py"
    script.write_text(textwrap.dedent(TWICE.format(root=str(ROOT), by_main=by_main)))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 143
    first = "x.py: stopped by SIGTERM" if by_main else "x.py: interrupted by SIGTERM; what is kept"
    assert done.stderr == first + "\n"


class _Job:
    def __init__(self, job_id: str, finishes_after: int) -> None:
        self.job_id, self.polls = job_id, finishes_after

    def done(self) -> bool:
        self.polls -= 1
        return self.polls < 0


class _Executor:
    def __init__(self, cluster: str) -> None:
        self.cluster = cluster


def test_a_stopped_sweep_names_only_the_local_jobs_still_running() -> None:
    """Ctrl-C in a terminal reaches submitit's local jobs too (same process group): those that
    end within the grace time are not named as running; SLURM jobs are always named."""
    from lab.sweeps.cluster import alive

    jobs = [_Job("11", finishes_after=1), _Job("12", finishes_after=10**6)]
    assert alive(jobs, _Executor("local"), grace=1.0) == ["12"]
    assert alive([_Job("21", 0), _Job("22", 0)], _Executor("local"), grace=1.0) == []
    assert alive([_Job("31", 0)], _Executor("slurm")) == ["31"]
