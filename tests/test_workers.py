"""lab.sweeps.workers: workers take one run after another; a killed worker fails its run alone;
signals stop every worker cleanly; a worker whose parent is killed stops and exits."""

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from lab.sweeps.workers import run_in_processes, stop_on_signals


@dataclass
class Spec:
    name: str
    folder: str = ""


def job(spec: Spec, device: str, threads: int, should_stop) -> dict:
    """A stand-in for lab.sweeps.sweep.run_one: ``dies`` is killed as the OOM killer would;
    ``loops`` runs until told to stop; others return at once."""
    folder = Path(spec.folder)
    if spec.name == "dies":
        os.kill(os.getpid(), signal.SIGKILL)
    if spec.name.startswith("loops"):
        (folder / f"{spec.name}.started").write_text(str(os.getpid()))
        while not should_stop():
            time.sleep(0.05)
        (folder / f"{spec.name}.stopped").write_text(str(os.getpid()))
        return {"name": spec.name, "status": "interrupted", "error": None}
    sigint_ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # from birth, see below
    return {
        "name": spec.name,
        "status": "trained",
        "device": device,
        "t": threads,
        "ignored": sigint_ignored,
        "pid": os.getpid(),
    }


def wait_for(path: Path, timeout: float = 60.0, message: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared; " + (
            message.read_text() if message else ""
        )
        time.sleep(0.05)


def test_a_killed_worker_fails_alone(tmp_path):
    specs = [Spec(n, str(tmp_path)) for n in ("a", "dies", "b", "c")]
    records = run_in_processes(job, specs, ["cpu", "cpu"], 3, get_context("spawn").Event())
    assert [r["name"] for r in records] == ["a", "dies", "b", "c"]
    assert [r["status"] for r in records] == ["trained", "failed", "trained", "trained"]
    assert "killed by signal 9" in records[1]["error"] and "out of memory?" in records[1]["error"]
    assert all(r["t"] == 3 and r["device"] == "cpu" for r in records if r["name"] != "dies")
    # a worker is born ignoring SIGINT (the sweep relays a stop through its event), so a
    # terminal Ctrl-C that reaches it while it still imports prints no traceback
    assert all(r["ignored"] for r in records if r["name"] != "dies")


def test_two_workers_take_six_runs_one_after_another(tmp_path):
    """Six runs on two slots start two worker processes, not six (each run's imports cost a
    fresh process seconds); every record comes back in spec order."""
    specs = [Spec(f"r{i}", str(tmp_path)) for i in range(6)]
    records = run_in_processes(job, specs, ["cpu", "cpu"], 1, get_context("spawn").Event())
    assert [r["name"] for r in records] == [f"r{i}" for i in range(6)]
    assert all(r["status"] == "trained" and r["ignored"] for r in records)
    assert len({r["pid"] for r in records}) == 2


def test_sigterm_stops_running_workers_and_cancels_queued_runs(tmp_path):
    specs = [Spec(n, str(tmp_path)) for n in ("loops1", "loops2", "queued")]

    def terminate_when_both_run() -> None:
        wait_for(tmp_path / "loops1.started")
        wait_for(tmp_path / "loops2.started")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_when_both_run, daemon=True).start()
    stop = get_context("spawn").Event()
    with stop_on_signals(stop) as received:
        records = run_in_processes(job, specs, ["cpu", "cpu"], 1, stop)
    assert received == [signal.SIGTERM]
    assert [r["status"] for r in records] == ["interrupted", "interrupted", "cancelled"]
    assert (tmp_path / "loops1.stopped").exists() and (tmp_path / "loops2.stopped").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored


PARENT = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]
from multiprocessing import get_context
from test_workers import Spec, job
from lab.sweeps.workers import run_in_processes
run_in_processes(job, [Spec("loops1", {folder!r})], ["cpu"], 1, get_context("spawn").Event())
"""


def test_a_worker_whose_parent_is_killed_stops_and_exits(tmp_path):
    tests, root = str(Path(__file__).parent), str(Path(__file__).parents[1])
    script = PARENT.format(tests=tests, root=root, folder=str(tmp_path))
    # The killed parent's semaphores are reported (and cleaned up) by multiprocessing's resource
    # tracker on its stderr: keep that out of the test output, but at hand for a failure.
    log = tmp_path / "parent.err"
    parent = subprocess.Popen([sys.executable, "-c", script], stderr=log.open("w"))
    try:
        wait_for(tmp_path / "loops1.started", message=log)
        child = int((tmp_path / "loops1.started").read_text())
        parent.kill()  # kill -9: no handler runs in the parent
        parent.wait()
        wait_for(tmp_path / "loops1.stopped", timeout=30)  # it noticed and stopped its job
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child}").exists() and _alive(child):
            assert time.monotonic() < deadline, "the orphaned worker is still running"
            time.sleep(0.1)
    finally:
        parent.kill()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
