"""One optimizer step: the forward pass in the run's precision, the loss on the answer tokens,
clipped gradients, and the divergence checks made before the weights change."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from data import Batch
from lab.common.runtime import autocast
from lab.training.distributed import Group
from lab.training.run import TrainingDiverged

IGNORED = -100
"""Target id that the loss skips: ``<pad>`` targets are replaced by it."""


def answer_loss(logits: torch.Tensor, batch: Batch, group: Group | None = None) -> torch.Tensor:
    """Cross-entropy of ``logits`` ``(B, S - 1, V)`` on ``batch``'s answer tokens (``<pad>``
    targets skipped), computed in float32; a scalar tensor.

    One process (or ``group`` None or inactive): the mean over the answer tokens. With several
    ranks (``batch`` is this rank's shard): this rank's token sum over the global answer-token
    count, times the number of ranks (:meth:`lab.training.distributed.Group.token_mean`), so
    DDP's gradient average is the gradient of the global batch's token mean.
    """
    answer_logits = logits[:, batch.answer_slice].float()  # (B, A, V)
    targets = batch.answer_targets.masked_fill(~batch.answer_mask, IGNORED)  # (B, A)
    flat_logits, flat_targets = answer_logits.flatten(0, 1), targets.flatten()  # (B*A, V), (B*A,)
    if group is None or not group.active:
        return F.cross_entropy(flat_logits, flat_targets, ignore_index=IGNORED)
    total = F.cross_entropy(flat_logits, flat_targets, ignore_index=IGNORED, reduction="sum")
    return group.token_mean(total, (flat_targets != IGNORED).sum())


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: Batch,
    grad_clip: float,
    device: torch.device,
    step: int,
    precision: str = "auto",
    group: Group | None = None,
) -> tuple[torch.Tensor, float, float, float]:
    """One optimizer step on the answer tokens of ``batch`` (cross-entropy, clipped gradients),
    forward pass in ``precision`` (:func:`lab.common.runtime.autocast`).

    With several ranks (``group.active``, ``batch`` is this rank's shard, ``model`` wrapped in
    DDP), the loss is :func:`answer_loss`'s share of the global token mean; one process
    computes the plain mean.

    Returns:
        ``(logits, loss, grad_norm, lr)``: detached logits ``(B, S - 1, V)``, the loss before
        the step (with several ranks, this rank's share: their mean is the global mean), the
        global gradient norm before clipping, and the learning rate this step used (the first
        parameter group's, read before ``scheduler.step()``).

    Raises:
        TrainingDiverged: the loss or the global gradient norm is NaN or infinite (checked
            before the weights change, whatever ``grad_clip`` is).
    """
    model.train()
    with autocast(device, precision):
        logits = model(batch.inputs, prefix_len=batch.answer_start)  # (B, S-1, V)
    loss = answer_loss(logits, batch, group)
    loss_value = loss.item()
    if not math.isfinite(loss_value):
        raise TrainingDiverged(
            f"loss is {loss_value} at step {step}; stopped, keeping the last checkpoint on disk "
            f"if any (try a lower train.lr, now {optimizer.defaults['lr']}, or a train.grad_clip "
            f"above 0, now {grad_clip})"
        )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = float(
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip if grad_clip > 0 else math.inf)
    )
    if not math.isfinite(grad_norm):
        raise TrainingDiverged(
            f"gradient norm is {grad_norm} at step {step} (loss {loss_value:.4g}); stopped before "
            "the optimizer step, keeping the last checkpoint on disk if any (try a lower "
            f"train.lr, now {optimizer.defaults['lr']})"
        )
    lr = optimizer.param_groups[0]["lr"]
    optimizer.step()
    scheduler.step()
    return logits.detach(), loss_value, grad_norm, lr
