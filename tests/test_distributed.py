"""Data-parallel training under torchrun (two CPU processes, gloo): the same run as one process,
a stop agreed by every rank, resume with another number of processes, a killed rank; and the
rank arithmetic (shards, generators) without processes.

Each torchrun test starts ``python -m torch.distributed.run`` (what ``torchrun`` runs) in a child
process with a timeout, so a hang fails the test instead of blocking the suite.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from data.streams import training_batch
from lab.common.checkpoint import load_checkpoint
from lab.common.runtime import capture_rng
from lab.training.distributed import DROPOUT_SEED_STRIDE, Group
from lab.training.resume import resume_config
from lab.training.trainer import train
from tests.conftest import TINY_RUN, tiny_config

ROOT = Path(__file__).resolve().parent.parent

EXACT = ["model.dropout=0", "train.log_every=1"]  # dropout masks are drawn per rank
TIMEOUT_S = 120


@pytest.fixture
def torchrun(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen, Path]]]:
    """``torchrun(*args)``: two ranks of ``tests/paused_train.py`` (tiny run, :data:`EXACT`)
    under torchrun in a session of their own; returns the agent's process and the file that
    holds its output. Whatever is still running at the end of the test is killed, ranks too."""
    launched = []

    def launch(*args: str) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / "torchrun.log"
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
        command += ["--standalone", str(ROOT / "tests" / "paused_train.py"), *args]
        with open(log, "w") as out:
            process = subprocess.Popen(
                [*command, *TINY_RUN, *EXACT],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        launched.append(process)
        return process, log

    yield launch
    for process in launched:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def wait_for(path: Path, process: subprocess.Popen, log: Path, text: str | None = None) -> None:
    """Wait until ``path`` exists (and holds ``text`` when given); fail, showing ``log``, if
    ``process`` ends first or :data:`TIMEOUT_S` passes."""
    deadline = time.monotonic() + TIMEOUT_S
    while not (path.exists() and (text is None or text in path.read_text())):
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"torchrun did not reach {path.name}: {log.read_text()[-3000:]}")
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_to_torchrun_stops_both_ranks_at_one_step_and_resume_alone_is_the_same_run(
    tmp_path: Path, torchrun: Callable[..., tuple[subprocess.Popen, Path]]
) -> None:
    reference = train(tiny_config(tmp_path / "alone", *EXACT)).losses  # one process
    run_dir, flags = tmp_path / "ddp", tmp_path / "flags"
    flags.mkdir()
    process, log = torchrun("batch", "7", str(flags), f"run_dir={run_dir}")
    wait_for(flags / "paused0", process, log)
    wait_for(flags / "paused1", process, log)
    process.send_signal(signal.SIGTERM)  # to the torchrun agent, which forwards it to the ranks
    wait_for(log, process, log, "closing signal SIGTERM")
    (flags / "go").touch()
    process.wait(timeout=TIMEOUT_S)
    text = log.read_text()
    assert process.returncode != 0, text
    # both ranks finish the step they are in (the 8th) and agree to stop before the 9th
    for rank in (0, 1):
        assert f"[rank {rank}] interrupted by SIGTERM at step 8; checkpoint of step 8" in text
    state = load_checkpoint(run_dir)
    assert state["step"] == 8
    assert not any(key.startswith("module.") for key in state["model"])
    two_ranks = [e.value for e in EventAccumulator(str(run_dir)).Reload().Scalars("train/loss")]
    # the loss is the mean over the global batch: the two ranks' curve is the one-process curve
    assert two_ranks == pytest.approx(reference[:8], abs=1e-5)
    # the global batch does not depend on the number of processes: one process resumes the run
    resumed = train(resume_config(run_dir), resume=True).losses
    assert resumed == pytest.approx(reference[8:], abs=1e-5)


def test_a_killed_rank_ends_the_job_with_torchruns_report_naming_it(
    tmp_path: Path, torchrun: Callable[..., tuple[subprocess.Popen, Path]]
) -> None:
    flags = tmp_path / "flags"
    flags.mkdir()
    process, log = torchrun("batch", "3", str(flags), f"run_dir={tmp_path / 'ddp'}")
    wait_for(flags / "paused0", process, log)
    wait_for(flags / "paused1", process, log)
    os.kill(int((flags / "paused1").read_text()), signal.SIGKILL)  # rank 1 dies, as if OOM-killed
    (flags / "go").touch()
    process.wait(timeout=TIMEOUT_S)  # rank 0 does not wait for it forever
    text = log.read_text()
    assert process.returncode == 1, text
    assert "rank      : 1 (local_rank: 1)" in text
    assert "exitcode  : -9" in text


def test_the_shards_of_all_ranks_are_the_global_batch_in_order() -> None:
    task = tiny_config(Path("unused")).data.build_task()
    batch = training_batch(task, 0, 3, 12, range(2, 5))
    shards = [Group(rank, 3).shard(batch) for rank in range(3)]
    assert [s.tokens.shape[0] for s in shards] == [4, 4, 4]
    assert torch.equal(torch.cat([s.tokens for s in shards]), batch.tokens)
    assert {(s.answer_start, s.length) for s in shards} == {(batch.answer_start, batch.length)}


def test_a_batch_that_does_not_split_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^train.batch_size=10 does not split across 4 "):
        Group(1, 4).check_batch_size(10)


def test_resume_gives_each_rank_its_own_generator_back() -> None:
    states = []
    for seed in (11, 22):  # what ranks 0 and 1 saved
        torch.manual_seed(seed)
        states.append(capture_rng())
    torch.manual_seed(22)
    expected = torch.rand(3)
    Group(1, 2).restore_rng(states, seed=0)
    assert torch.equal(torch.rand(3), expected)
    # saved with another number of ranks: rank 1 starts its stream as a fresh run does
    Group(1, 3).restore_rng(states, seed=0)
    after = torch.rand(3)
    torch.manual_seed(DROPOUT_SEED_STRIDE)
    assert torch.equal(after, torch.rand(3))
