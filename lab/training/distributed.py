"""Data-parallel training under ``torchrun``: one model, the global batch split across ranks.

``torchrun --nproc_per_node N train.py ...`` starts N processes with ``RANK``, ``LOCAL_RANK``
and ``WORLD_SIZE`` set; :func:`join_group` turns them into a process group (NCCL on CUDA,
gloo on the CPU) and a :class:`Group` that the training loop asks everything rank-dependent.
A plain ``python train.py`` gets the one-process group, whose collectives return their input.

Reproducibility: every rank draws the *global* batch of a step from ``(seed, step)`` exactly as
one process does and keeps rows ``[r * B / N, (r + 1) * B / N)`` (:meth:`Group.shard`). The
loss is the mean over the answer tokens of the global batch on every task: a rank's rows may
hold more or fewer answer tokens than another's (padded answers, as in ``selective_copy``), so
each rank differentiates its token sum times ``N`` over the global token count
(:meth:`Group.token_mean`), and DDP's average of the ranks' gradients is the gradient of the
global mean. A run therefore follows the one-process loss curve up to float rounding, and
resuming with another N is the same run. Dropout masks are the exception: each rank draws its
own from torch's generator, seeded per rank (:meth:`Group.seed_dropout`).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from data import Batch
from lab.common.runtime import restore_rng

TIMEOUT = datetime.timedelta(minutes=10)
"""How long a rank waits in a collective for the others before it fails with an error (instead
of hanging) when a rank died without ``torchrun`` noticing; rank 0's periodic evaluation and
checkpoint saves, which the other ranks wait for, must fit in it."""

DROPOUT_SEED_STRIDE = 1_000_003
"""Rank ``r > 0`` seeds torch's generator with ``seed + r * DROPOUT_SEED_STRIDE`` after the
model is built, so ranks draw different dropout masks (rank 0 keeps the one-process stream)."""


@dataclass(frozen=True)
class Group:
    """This process's place among the ranks training one model.

    Attributes:
        rank: global rank, 0 is the one that writes files and prints.
        world_size: number of ranks (1 without ``torchrun``).
        local_rank: rank on this machine; picks the GPU.
        launcher_pid: under ``torchrun``, the process id of the launcher that started this
            rank (its parent when the group was joined); None otherwise.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    launcher_pid: int | None = None

    @property
    def is_main(self) -> bool:
        """This rank writes checkpoints, TensorBoard events and the config, and prints."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        """More than one rank: collectives communicate."""
        return self.world_size > 1

    def launcher_gone(self) -> bool:
        """Under ``torchrun``: the launcher that started this rank has died (``kill -9``), so
        this rank was re-parented and nobody would stop it or collect it. One ``getppid`` call:
        cheap enough to ask before every step."""
        return self.launcher_pid is not None and os.getppid() != self.launcher_pid

    def stop_check(self, should_stop: Callable[[], bool] | None) -> Callable[[], bool]:
        """``should_stop`` (None: never) that also turns true once :meth:`launcher_gone`: a rank
        whose launcher died stops at its next step with a checkpoint, releasing the run's
        lock, instead of training on as an orphan."""

        def check() -> bool:
            return self.launcher_gone() or (should_stop is not None and should_stop())

        return check

    def check_batch_size(self, batch_size: int) -> None:
        """Raise ``ValueError`` (one line) unless ``batch_size`` splits evenly across ranks."""
        if batch_size % self.world_size:
            raise ValueError(
                f"train.batch_size={batch_size} does not split across {self.world_size} "
                f"processes; give a multiple of {self.world_size}"
            )

    def shard(self, batch: Batch) -> Batch:
        """This rank's rows of the global ``batch``: ``(B, S)`` -> ``(B / N, S)``, rows
        ``[r * B / N, (r + 1) * B / N)``."""
        rows = batch.tokens.shape[0] // self.world_size
        return batch.rows(slice(self.rank * rows, (self.rank + 1) * rows))

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """``model`` in :class:`DistributedDataParallel` when several ranks train (gradients
        are averaged during ``backward``), else ``model`` itself. Checkpoints keep saving the
        unwrapped module, so their keys have no ``module.`` prefix."""
        if not self.active:
            return model
        ids = [device] if device.type == "cuda" else None
        # Buffers are position caches that grow with the longest length seen (rank 0's
        # evaluation grows them alone), computed from the config: never broadcast them.
        return DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=False)

    def seed_dropout(self, seed: int) -> None:
        """Give rank ``r > 0`` its own torch generator stream (see :data:`DROPOUT_SEED_STRIDE`)."""
        if self.rank:
            torch.manual_seed(seed + self.rank * DROPOUT_SEED_STRIDE)

    def restore_rng(self, states: list[dict[str, Any]] | None, seed: int) -> None:
        """On resume, give rank ``r > 0`` the generator state it saved (``states`` is the
        checkpoint's ``rank_rng``, one entry per rank, rank 0's already restored); when the
        run was saved with another number of ranks, reseed as at the start instead
        (:meth:`seed_dropout`), so only dropout masks of ranks > 0 differ from an
        uninterrupted run."""
        if not self.rank:
            return
        if states is not None and len(states) == self.world_size:
            restore_rng(states[self.rank])
        else:
            self.seed_dropout(seed)

    def mean(self, values: list[float]) -> list[float]:
        """Element-wise mean of ``values`` over the ranks (float64 all-reduce)."""
        if not self.active:
            return list(values)
        total = torch.tensor(values, dtype=torch.float64, device=_collective_device())
        dist.all_reduce(total)
        return (total / self.world_size).tolist()

    def token_mean(self, total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """This rank's share of a mean over the tokens of every rank.

        Args:
            total: scalar, the sum of a per-token value (the loss) over this rank's tokens.
            count: scalar, how many tokens ``total`` sums over (may differ between ranks).

        Returns:
            ``total * N / (count summed over the ranks)``: averaged over the ranks (as DDP
            averages gradients, and :meth:`mean` the logged values) it is the global token
            mean; with one process, ``total / count``.
        """
        if not self.active:
            return total / count
        counts = count.detach().to(_collective_device(), torch.float64)
        dist.all_reduce(counts)
        return total * (self.world_size / counts.item())

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over the ranks (float64 all-reduce)."""
        if not self.active:
            return list(values)
        total = torch.tensor(values, dtype=torch.float64, device=_collective_device())
        dist.all_reduce(total)
        return total.tolist()

    def any(self, flag: bool) -> bool:
        """True on every rank if ``flag`` is true on any rank (so all stop at the same step)."""
        if not self.active:
            return flag
        value = torch.tensor([int(flag)], device=_collective_device())
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def from_main(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (the other ranks wait here for rank 0)."""
        if not self.active:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        """Wait until every rank is here (so no rank leaves the group while rank 0 writes)."""
        if self.active:
            dist.barrier()

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` in rank order on rank 0, None on the others."""
        if not self.active:
            return [obj]
        out = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out


def _collective_device() -> torch.device:
    """Where collective tensors live: the current GPU under NCCL, the CPU under gloo."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def join_group(device: torch.device) -> tuple[Group, torch.device]:
    """The process group ``torchrun`` describes in the environment, and this rank's device.

    Without ``WORLD_SIZE`` (or with 1) it returns the one-process group and ``device``. Under
    ``torchrun`` a CUDA ``device`` becomes ``cuda:LOCAL_RANK`` with the NCCL backend, the CPU
    uses gloo. Joining twice in one process returns the same group. Under ``torchrun`` (its
    ``TORCHELASTIC_RUN_ID`` is set) the group remembers the launcher (:meth:`Group.launcher_gone`).

    Raises:
        ValueError: ``device`` is MPS (no multi-process backend), or more local ranks than GPUs.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    launcher = os.getppid() if "TORCHELASTIC_RUN_ID" in os.environ else None  # set by torchrun
    if world_size == 1:
        return Group(launcher_pid=launcher), device
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "mps":
        raise ValueError("device=mps cannot train with torchrun; use device=cpu or a CUDA machine")
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise ValueError(
                f"LOCAL_RANK={local_rank} but this machine has {torch.cuda.device_count()} "
                "GPU(s); give torchrun --nproc_per_node at most that many"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=TIMEOUT)
    return Group(rank, world_size, local_rank, launcher), device


def is_main_process() -> bool:
    """This process is rank 0 of a ``torchrun`` job, or runs alone (read from ``RANK``)."""
    return os.environ.get("RANK", "0") == "0"


def leave_group() -> None:
    """Destroy the process group if this process joined one (a no-op otherwise)."""
    if dist.is_initialized():
        dist.destroy_process_group()
