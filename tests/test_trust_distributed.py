"""Data-parallel loss on tasks with padded answers: two gloo ranks follow one process.

A rank's rows of ``selective_copy`` or ``binary_addition`` hold more or fewer answer tokens than
the other's, so the mean of the ranks' token means is not the global token mean (it was off by
2.5e-2 relative in the gradients at step 0). The ranks run as two spawned processes joined
through a file (no ports), each taking the real :func:`lab.training.step.train_step` on its
shard of the global batch inside DDP, exactly as :func:`lab.training.trainer.run_loop` does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from data.streams import training_batch
from lab.training.distributed import Group
from lab.training.trainer import start_run, train, train_step
from tests.conftest import TINY_RUN, tiny_config
from tests.test_distributed import EXACT, ROOT, TIMEOUT_S

STEPS = 3
PADDED = {
    "selective_copy": ["data.train_min_length=4", "data.train_max_length=8"],
    "binary_addition": ["data.train_min_length=3", "data.train_max_length=6"],
}
"""Tasks whose answers vary in length within a batch, with training lengths they accept."""


def steps(group: Group, task: str) -> dict[str, list]:
    """:data:`STEPS` training steps of the tiny run on ``task`` (no dropout) by this rank of
    ``group``: the logged (rank-averaged) loss, gradient norm, answer tokens of this rank's
    shard, and the clipped gradients each step leaves on the parameters."""
    torch.set_num_threads(1)
    config = tiny_config(Path("unused"), f"data.task={task}", "model.dropout=0", *PADDED[task])
    cpu = torch.device("cpu")
    run = start_run(config, None, cpu, group)
    model = group.wrap(run.model, cpu)
    data = config.data.build_task()
    lengths = range(config.data.train_min_length, config.data.train_max_length + 1)
    out: dict[str, list] = {"loss": [], "grad_norm": [], "tokens": [], "grads": []}
    for step in range(STEPS):
        batch = training_batch(data, config.seed, step, config.train.batch_size, lengths)
        batch = group.shard(batch)
        clip = config.train.grad_clip
        _, loss, norm, _ = train_step(
            model, run.optimizer, run.scheduler, batch, clip, cpu, step, group=group
        )
        out["loss"] += group.mean([loss])  # as run_loop logs it
        out["grad_norm"].append(norm)
        out["tokens"].append(int(batch.answer_mask.sum()))
        out["grads"].append([p.grad.clone() for p in run.model.parameters()])
    return out


def _rank(rank: int, world_size: int, rendezvous: str, task: str, out: str) -> None:
    """Body of a spawned rank: join the gloo group through the file ``rendezvous``, train,
    rank 0 saves its record to ``out`` (the gradients are the same on every rank after DDP)."""
    init = f"file://{rendezvous}"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
    try:
        record = steps(Group(rank, world_size), task)
        tokens = record["tokens"]
        gathered = [torch.zeros(len(tokens), dtype=torch.long) for _ in range(world_size)]
        dist.all_gather(gathered, torch.tensor(tokens))
        record["tokens"] = [g.tolist() for g in gathered]  # per rank, per step
        if rank == 0:
            torch.save(record, out)
        dist.barrier()  # both ranks done with gloo before either tears its group down
    finally:
        dist.destroy_process_group()


def two_ranks(tmp_path: Path, task: str) -> dict[str, list]:
    """The record of :func:`steps` from two spawned gloo ranks."""
    out = tmp_path / f"{task}.pt"
    mp.spawn(_rank, args=(2, str(tmp_path / "rendezvous"), task, str(out)), nprocs=2)
    return torch.load(out)


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(PADDED))
def test_two_ranks_follow_one_process_on_a_padded_task(tmp_path: Path, task: str) -> None:
    alone = steps(Group(), task)
    ranks = two_ranks(tmp_path, task)
    # the case at stake: the ranks hold different numbers of answer tokens
    per_rank = list(zip(*ranks["tokens"], strict=True))
    assert any(a != b for a, b in per_rank), per_rank
    assert [a + b for a, b in per_rank] == alone["tokens"]
    assert ranks["loss"] == pytest.approx(alone["loss"], rel=1e-6, abs=0)
    assert ranks["grad_norm"] == pytest.approx(alone["grad_norm"], rel=1e-5, abs=0)
    for step in range(STEPS):
        for ours, theirs in zip(ranks["grads"][step], alone["grads"][step], strict=True):
            # float32 sums in another order: rounding of a few ulps of the largest entry
            assert torch.allclose(ours, theirs, rtol=0, atol=1e-5 * theirs.abs().max() + 1e-9)


def test_one_process_keeps_the_plain_token_mean() -> None:
    """One process computes ``F.cross_entropy``'s mean as before (the committed results depend
    on it bit for bit), and :meth:`Group.token_mean` of one rank is sum over count."""
    total, count = torch.tensor(7.0), torch.tensor(4)
    assert Group().token_mean(total, count).item() == 1.75
    assert Group().sum([1, 2.5]) == [1, 2.5]


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(PADDED))
def test_torchrun_logs_the_one_process_loss_on_a_padded_task(tmp_path: Path, task: str) -> None:
    """``torchrun --nproc_per_node 2 train.py`` end to end: its TensorBoard loss is the one
    process's (it was 4.1e-3 off by step 5 on ``selective_copy``)."""
    options = [*EXACT, f"data.task={task}", *PADDED[task], "train.steps=6", "train.eval_every=6"]
    options.append("eval.samples=16")  # binary_addition has 64 sequences at length 3
    alone = train(tiny_config(tmp_path / "alone", *options)).losses
    run_dir = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    command += ["--standalone", str(ROOT / "train.py"), *TINY_RUN, *options, f"run_dir={run_dir}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    logged = [e.value for e in EventAccumulator(str(run_dir)).Reload().Scalars("train/loss")]
    assert len(logged) == 6
    assert logged == pytest.approx(alone, rel=1e-5, abs=0)
