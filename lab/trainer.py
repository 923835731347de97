"""The training loop: AdamW, warmup + cosine, clipping, TensorBoard, atomic checkpoints."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams as hparams_summary
from tqdm import tqdm

from data import Batch, Task
from lab.batches import SAMPLE_STREAM, data_rng, training_batch
from lab.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from lab.config import Config, config_from_dict, config_to_dict, save_config
from lab.extrapolation import evaluate_length, unsupported_reason
from lab.metrics import score_answers
from lab.runtime import (
    autocast,
    configure_threads,
    deferred_interrupt,
    resolve_device,
    seed_everything,
)
from lab.schedule import warmup_cosine
from model import Transformer


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


@dataclass
class TrainResult:
    """What a finished (or stopped) training run reports.

    Attributes:
        run_dir: the run folder.
        step: optimizer steps taken.
        finished: the step budget or the accuracy target was reached.
        final_loss: training loss of the last step.
        eval: latest periodic evaluation, ``{"in_dist": ..., "2x": ..., "4x": ...}`` exact-match.
        seconds: wall time of this invocation.
        losses: training loss of every step taken in this invocation.
    """

    run_dir: Path
    step: int
    finished: bool
    final_loss: float
    eval: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)


def build_model(config: Config, device: torch.device) -> Transformer:
    """A freshly initialised model for ``config`` on ``device`` (seeded by ``config.seed``)."""
    seed_everything(config.seed)
    return Transformer(config.model).to(device)


def build_optimizer(model: Transformer, config: Config, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norms, biases or 1-D tensors)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    t = config.train
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": t.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=t.lr,
        betas=(t.beta1, t.beta2),
        fused=device.type == "cuda",
    )


def periodic_lengths(config: Config) -> dict[str, list[int]]:
    """Lengths of the periodic evaluation: the training range's ends and middle, 2x and 4x."""
    low, high = config.data.train_min_length, config.data.train_max_length
    return {"in_dist": sorted({low, (low + high) // 2, high}), "2x": [2 * high], "4x": [4 * high]}


def train(
    config: Config, resume: bool = False, should_stop: Callable[[], bool] | None = None
) -> TrainResult:
    """Train ``config`` into ``config.run_dir``, or continue it there when ``resume``.

    Ctrl-C, or ``should_stop()`` turning true (checked after every step), saves a checkpoint
    and raises ``KeyboardInterrupt``.

    Writes ``config.yaml``, ``checkpoint.pt`` (every ``train.checkpoint_every`` steps, at the end
    and on Ctrl-C) and TensorBoard events into the run folder.

    Raises:
        FileExistsError: not ``resume``, and ``run_dir`` already holds a checkpoint (one line
            saying how to continue, or to use another folder).
        TrainingDiverged: a NaN or infinite loss (the last good checkpoint stays on disk).
        KeyboardInterrupt: after saving a checkpoint of the last completed step.
        FileNotFoundError: ``resume`` without a checkpoint in the run folder.
    """
    run_dir = Path(config.run_dir)
    device = resolve_device(config.device)
    configure_threads(config.threads)
    if not resume and checkpoint_path(run_dir).is_file():
        raise FileExistsError(
            f"run_dir={str(run_dir)!r} already holds a run; continue it with "
            f"python train.py --resume {run_dir}, pick another run_dir=..., or replace it "
            "with --overwrite"
        )
    state = load_checkpoint(run_dir, device) if resume else None
    if state is not None:
        config = config_from_dict({**state["config"], "run_dir": str(run_dir)})  # may have moved
    task = config.data.build_task()
    model = build_model(config, device)
    optimizer = build_optimizer(model, config, device)
    t = config.train
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, t.warmup_steps, t.steps, t.min_lr / t.lr)
    )
    step = 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step = state["step"]
        restore_rng(state["rng"])
        if state.get("finished"):
            return TrainResult(
                run_dir, step, True, state.get("final_loss", math.nan), state.get("eval", {})
            )
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.yaml")
    compiled = torch.compile(model, dynamic=True) if config.compile else model
    lengths = range(config.data.train_min_length, config.data.train_max_length + 1)

    def checkpoint(finished: bool, final_loss: float, evals: dict[str, float]) -> None:
        save_checkpoint(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "step": step,
                "rng": capture_rng(),
                "config": config_to_dict(config),
                "finished": finished,
                "final_loss": final_loss,
                "eval": evals,
            },
            checkpoint_path(run_dir),
        )

    writer = SummaryWriter(str(run_dir))
    result = TrainResult(run_dir, step, False, math.nan)
    started = time.perf_counter()
    bar = tqdm(total=t.steps, initial=step, disable=not t.progress, desc=run_dir.name, unit="step")
    try:
        with deferred_interrupt() as interrupt:
            while step < t.steps:
                tick = time.perf_counter()
                batch = training_batch(task, config.seed, step, t.batch_size, lengths).to(device)
                logits, loss_value, grad_norm = train_step(
                    compiled, optimizer, scheduler, batch, t.grad_clip, device, step
                )
                step += 1
                result.losses.append(loss_value)
                result.final_loss = loss_value
                scores = score_answers(logits, batch)
                tokens_per_s = batch.inputs.numel() / (time.perf_counter() - tick)
                exact = scores.exact.float().mean().item()
                bar.update(1)
                bar.set_postfix(
                    loss=f"{loss_value:.3f}", acc=f"{exact:.2f}", tok_s=f"{tokens_per_s:,.0f}"
                )
                if step % t.log_every == 0:
                    scalars = {
                        "loss": loss_value,
                        "exact_match": exact,
                        "token_accuracy": scores.correct_tokens.sum().item()
                        / (scores.answer_tokens * len(scores.exact)),
                        "lr": scheduler.get_last_lr()[0],
                        "grad_norm": grad_norm,
                        "tokens_per_s": tokens_per_s,
                    }
                    for name, value in scalars.items():
                        writer.add_scalar(f"train/{name}", value, step)
                if step % t.eval_every == 0 or step == t.steps:
                    result.eval = periodic_eval(model, task, config, writer, step)
                    target = t.target_accuracy
                    if step == t.steps or (target is not None and result.eval["in_dist"] >= target):
                        result.finished = True
                        break
                if interrupt.requested or (should_stop is not None and should_stop()):
                    raise KeyboardInterrupt
                if step % t.checkpoint_every == 0:
                    checkpoint(False, loss_value, result.eval)
        result.step = step
        result.seconds = time.perf_counter() - started
        checkpoint(result.finished, result.final_loss, result.eval)
        write_samples(model, task, config, writer, step)
        write_hparams(writer, config, result.eval, step)
    except KeyboardInterrupt:
        checkpoint(False, result.final_loss, result.eval)
        raise
    finally:
        bar.close()
        writer.close()
    return result


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: Batch,
    grad_clip: float,
    device: torch.device,
    step: int,
) -> tuple[torch.Tensor, float, float]:
    """One optimizer step on the answer tokens of ``batch`` (cross-entropy, clipped gradients).

    Returns:
        ``(logits, loss, grad_norm)``: detached logits ``(B, S - 1, V)``, the loss before the
        step, and the global gradient norm before clipping.

    Raises:
        TrainingDiverged: the loss is NaN or infinite (checked before the weights change).
    """
    model.train()
    with autocast(device):
        logits = model(batch.inputs, prefix_len=batch.answer_start)  # (B, S-1, V)
    answer_logits = logits[:, batch.answer_slice].float()  # (B, A, V)
    loss = F.cross_entropy(answer_logits.flatten(0, 1), batch.answer_targets.flatten())
    loss_value = loss.item()
    if not math.isfinite(loss_value):
        raise TrainingDiverged(
            f"loss is {loss_value} at step {step}; stopped, keeping the last checkpoint on disk "
            f"if any (try a lower train.lr, now {optimizer.defaults['lr']}, or a train.grad_clip "
            f"above 0, now {grad_clip})"
        )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(
        model.parameters(), grad_clip if grad_clip > 0 else math.inf
    )
    optimizer.step()
    scheduler.step()
    return logits.detach(), loss_value, float(grad_norm)


def periodic_eval(
    model: Transformer, task: Task, config: Config, writer: SummaryWriter, step: int
) -> dict[str, float]:
    """Exact-match and per-token accuracy at the periodic lengths, logged under ``eval/``."""
    summary = {}
    for name, lengths in periodic_lengths(config).items():
        results = [
            evaluate_length(
                model, task, n, config.train.eval_samples, config.seed, config.eval.batch_tokens
            )
            for n in lengths
        ]
        results = [r for r in results if r.supported]
        if not results:
            continue
        summary[name] = sum(r.exact_match for r in results) / len(results)
        token_accuracy = sum(r.token_accuracy for r in results) / len(results)
        writer.add_scalar(f"eval/exact_match_{name}", summary[name], step)
        writer.add_scalar(f"eval/token_accuracy_{name}", token_accuracy, step)
    return summary


@torch.inference_mode()
def write_samples(
    model: Transformer, task: Task, config: Config, writer: SummaryWriter, step: int, n: int = 3
) -> None:
    """Log a few decoded predictions, in distribution and at 2x, as TensorBoard text."""
    device = next(model.parameters()).device
    model.eval()
    lines = []
    for name, lengths in periodic_lengths(config).items():
        if name == "4x":
            continue
        batch = task.sample(data_rng(config.seed, SAMPLE_STREAM, step), lengths[-1], n).to(device)
        if unsupported_reason(model, batch.inputs.shape[1]) is not None:
            continue
        predictions = score_answers(
            model(batch.inputs, prefix_len=batch.answer_start), batch
        ).predictions
        for row, predicted in zip(batch.tokens, predictions, strict=True):
            prompt = task.decode(row[: batch.answer_start])
            target = task.decode(row[batch.answer_start :])
            mark = "right" if torch.equal(predicted, row[batch.answer_start :]) else "WRONG"
            lines.append(
                f"| {name} | `{prompt}` | `{target}` | `{task.decode(predicted)}` | {mark} |"
            )
    table = "| lengths | prompt | target | predicted | |\n|---|---|---|---|---|\n" + "\n".join(
        lines
    )
    writer.add_text("samples", table, step)


def write_hparams(
    writer: SummaryWriter, config: Config, evals: dict[str, float], step: int
) -> None:
    """Record the run's hyperparameters and final exact-match for TensorBoard's HParams tab.

    Written into the run's own event file (``SummaryWriter.add_hparams`` would open a
    subfolder that TensorBoard lists as a second run).
    """
    metrics = {f"hparam/exact_match_{name}": value for name, value in evals.items()}
    for summary in hparams_summary(hparams(config), metrics):
        writer.file_writer.add_summary(summary, step)
    for name, value in metrics.items():
        writer.add_scalar(name, value, step)


def hparams(config: Config) -> dict[str, Any]:
    """The hyperparameters shown in TensorBoard's HPARAMS tab (scalars only)."""
    flat = {}
    for section in ("model", "data", "train"):
        for key, value in config_to_dict(config)[section].items():
            if isinstance(value, (int, float, str, bool)):
                flat[f"{section}.{key}"] = value
    position = config.model.position
    for key, value in config.model.options[position].items():  # the active scheme's options
        flat[f"model.options.{position}.{key}"] = value
    flat["seed"] = config.seed
    return flat


def capture_rng() -> dict[str, Any]:
    """Python and PyTorch generator states (data streams need none: see lab.batches)."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Undo :func:`capture_rng`."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
