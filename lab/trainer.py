"""The training loop: AdamW, warmup + cosine, clipping, TensorBoard, atomic checkpoints."""

from __future__ import annotations

import math
import random
import shlex
import signal
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
from lab.checkpoint import (
    checkpoint_path,
    clear_run,
    find_checkpoint,
    load_checkpoint,
    load_model_state,
    remove_partial_writes,
    save_checkpoint,
)
from lab.config import (
    RESUME_KEYS,
    Config,
    ConfigError,
    changed_keys,
    config_from_dict,
    config_to_dict,
    save_config,
    with_overrides,
)
from lab.extrapolation import evaluate_length, unsupported_reason
from lab.metrics import score_answers
from lab.runlock import run_lock
from lab.runtime import (
    Interrupt,
    autocast,
    configure_threads,
    deferred_interrupt,
    resolve_device,
    seed_everything,
)
from lab.schedule import warmup_cosine
from model import Transformer


class TrainingDiverged(RuntimeError):
    """The loss or the gradient norm became NaN or infinite; the weights were not updated and
    the last good checkpoint is kept."""


class TrainingInterrupted(KeyboardInterrupt):
    """The run stopped on a signal or on ``should_stop()``; ``str()`` says what is on disk.

    Attributes:
        signum: the stop signal (``SIGINT`` or ``SIGTERM``), None for ``should_stop()``.
        saved_step: step of the checkpoint on disk, None when the run has none.
    """

    def __init__(self, message: str, signum: int | None, saved_step: int | None) -> None:
        super().__init__(message)
        self.signum = signum
        self.saved_step = saved_step


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


@dataclass
class Run:
    """The live state of a run being trained: what a checkpoint saves, plus where it goes.

    Attributes:
        config: the run's config (after any change made on resume).
        model, optimizer, scheduler: the training objects.
        step: optimizer steps completed.
        saved_step: step of the checkpoint on disk (None before the first one).
        history: one entry per resume that changed settings, ``{"step", "changed"}``.
        result: what the run reports so far.
    """

    config: Config
    model: Transformer
    optimizer: torch.optim.AdamW
    scheduler: torch.optim.lr_scheduler.LambdaLR
    step: int = 0
    saved_step: int | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    result: TrainResult | None = None

    def save(self) -> None:
        """Write the checkpoint of the current step.

        Raises:
            TrainingDiverged: a weight is NaN or infinite (nothing is written).
            OSError: the file cannot be written (the previous checkpoint is kept).
        """
        if not all(torch.isfinite(p).all() for p in self.model.parameters()):
            kept = f"the checkpoint of step {self.saved_step} is kept"
            if self.saved_step is None:
                kept = "no checkpoint on disk"
            raise TrainingDiverged(f"non-finite weights at step {self.step}; not saved, {kept}")
        r = self.result
        save_checkpoint(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "step": self.step,
                "rng": capture_rng(),
                "config": config_to_dict(self.config),
                "finished": r.finished,
                "final_loss": r.final_loss,
                "eval": r.eval,
                "history": self.history,
            },
            checkpoint_path(self.config.run_dir),
        )
        self.saved_step = self.step


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


def resume_config(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The config saved in ``RUN_DIR/checkpoint.pt``, with ``run_dir`` set to where the folder
    is now and the explicit ``overrides`` applied (only :data:`lab.config.RESUME_KEYS`).

    Raises:
        ConfigError: an override of another key (one line naming it and the allowed ones), or
            a saved config this version cannot read.
        FileNotFoundError, ValueError: no readable checkpoint (see :func:`load_checkpoint`).
    """
    keys = [item.partition("=")[0] for item in overrides]
    refused = [k for k in keys if k not in RESUME_KEYS]
    if refused:
        raise ConfigError(
            f"--resume keeps the run's saved settings; {', '.join(refused)} cannot change on "
            f"resume (allowed: {', '.join(RESUME_KEYS)}); start a new run for other settings"
        )
    saved = load_checkpoint(run_dir)["config"]
    return with_overrides(config_from_dict({**saved, "run_dir": str(run_dir)}), overrides)


def train(
    config: Config,
    resume: bool = False,
    should_stop: Callable[[], bool] | None = None,
    overwrite: bool = False,
) -> TrainResult:
    """Train ``config`` into ``config.run_dir``, or continue it there when ``resume``.

    Everything that can fail at start-up (device, threads, the folder's lock, a readable
    checkpoint, building the model) is checked before ``overwrite`` deletes anything. The
    folder is locked for the whole run (:func:`lab.runlock.run_lock`).

    On resume, ``config`` must equal the saved config except for
    :data:`lab.config.RESUME_KEYS` (see :func:`resume_config`); a change is saved into
    ``config.yaml`` and the checkpoint, and listed in the checkpoint's ``history``. A larger
    ``train.steps`` extends the run, finished or not: the cosine schedule is recomputed for the
    new budget (it is stretched, not restarted), so from the resumed step on the learning rate
    follows the longer schedule, which is higher than the old one at that step.

    SIGINT (Ctrl-C), SIGTERM, or ``should_stop()`` turning true (checked before every step)
    finishes the current step, saves a checkpoint and raises :class:`TrainingInterrupted`. Saves
    and the final writes of a finished run complete even if a second signal arrives; a second
    signal in the middle of a step stops at once, without saving (the last checkpoint stays).

    Writes ``config.yaml``, ``checkpoint.pt`` (every ``train.checkpoint_every`` steps, at the end
    and on interruption) and TensorBoard events into the run folder. Events of steps after the
    checkpoint a run resumes from are dropped (``purge_step``), so every step is logged once.

    Raises:
        FileExistsError: not ``resume``/``overwrite``, and ``run_dir`` already holds a
            checkpoint; or ``overwrite`` of a folder that holds no run (nothing deleted).
        RunLocked: another process trains into ``run_dir``.
        ConfigError: ``resume`` with ``config`` differing from the saved one in other keys, or
            a ``train.steps`` below the steps already taken.
        TrainingDiverged: a NaN or infinite loss or gradient norm (checked before the weights
            change; the last good checkpoint stays on disk).
        TrainingInterrupted: a stop signal or ``should_stop()``.
        FileNotFoundError, ValueError: ``resume`` without a readable checkpoint of this project.
        OSError: a file cannot be written (one line naming it).
    """
    if resume and overwrite:
        raise ConfigError("--resume continues a run and --overwrite replaces it; give one")
    run_dir = Path(config.run_dir)
    device = resolve_device(config.device)
    configure_threads(config.threads)
    if resume:
        find_checkpoint(run_dir)
    started = time.perf_counter()
    with run_lock(run_dir), deferred_interrupt() as interrupt:
        if not (resume or overwrite) and checkpoint_path(run_dir).is_file():
            raise FileExistsError(
                f"run_dir={str(run_dir)!r} already holds a run; continue it with "
                f"python train.py --resume {shlex.quote(str(run_dir))}, pick another "
                "run_dir=..., or replace it with --overwrite"
            )
        state = load_checkpoint(run_dir, device) if resume else None
        run = start_run(config, state, device)
        if overwrite:
            clear_run(run_dir)
        remove_partial_writes(run_dir)
        if run.result.finished:
            return run.result
        save_config(run.config, run_dir / "config.yaml")
        run_loop(run, device, interrupt, should_stop)
        run.result.seconds = time.perf_counter() - started
    return run.result


def start_run(config: Config, state: dict[str, Any] | None, device: torch.device) -> Run:
    """Build the model, optimizer and schedule of ``config``, restored from ``state`` (a loaded
    checkpoint) when given.

    Raises:
        ConfigError: ``config`` differs from the saved one outside
            :data:`lab.config.RESUME_KEYS`, or asks for fewer steps than were taken.
        ValueError: a checkpoint without training state, or whose weights do not fit it.
    """
    run_dir = Path(config.run_dir)
    history = []
    if state is not None:
        saved = config_from_dict({**state["config"], "run_dir": str(run_dir)})  # may have moved
        changed = changed_keys(saved, config)
        refused = [f"{k}: saved {a!r}, given {b!r}" for k, (a, b) in changed.items()]
        refused = [r for r, k in zip(refused, changed, strict=True) if k not in RESUME_KEYS]
        if refused:
            more = f"; and {len(refused) - 3} more" if len(refused) > 3 else ""
            raise ConfigError(
                f"cannot resume {str(run_dir)!r} with other settings ({'; '.join(refused[:3])}"
                f"{more}); only {', '.join(RESUME_KEYS)} may change on resume"
            )
        missing = [k for k in ("optimizer", "scheduler", "step", "rng") if k not in state]
        if missing:
            raise ValueError(
                f"checkpoint in {str(run_dir)!r} has no {', '.join(missing)}; it cannot be "
                "resumed (evaluate it with eval.py, or train a new run)"
            )
        if config.train.steps < state["step"]:
            raise ConfigError(
                f"train.steps={config.train.steps} is below the {state['step']} steps "
                f"{str(run_dir)!r} has taken; give train.steps >= {state['step']}"
            )
        history = list(state.get("history", []))
        if changed:
            change = {k: list(values) for k, values in changed.items()}
            history.append({"step": state["step"], "changed": change})
    model = build_model(config, device)
    optimizer = build_optimizer(model, config, device)
    t = config.train
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, t.warmup_steps, t.steps, t.min_lr / t.lr)
    )
    run = Run(config, model, optimizer, scheduler, history=history)
    run.result = TrainResult(run_dir, 0, False, math.nan)
    if state is not None:
        restore(run, state)
    return run


def restore(run: Run, state: dict[str, Any]) -> None:
    """Load a checkpoint into ``run``: weights, optimizer, schedule (recomputed for
    ``run.config.train.steps``), step, generators and results so far.

    Raises:
        ValueError: the weights or the optimizer state do not fit the saved config (one line).
    """
    run_dir = run.config.run_dir
    load_model_state(run.model, state["model"], run_dir)
    try:
        run.optimizer.load_state_dict(state["optimizer"])
        run.scheduler.load_state_dict(state["scheduler"])
    except (KeyError, ValueError) as error:
        raise ValueError(
            f"checkpoint in {str(run_dir)!r}: optimizer state does not fit its model ({error})"
        ) from None
    step = run.step = run.saved_step = state["step"]
    for group, base, rule in zip(
        run.optimizer.param_groups, run.scheduler.base_lrs, run.scheduler.lr_lambdas, strict=True
    ):
        group["lr"] = base * rule(step)  # as LambdaLR computes it; differs only if steps changed
    restore_rng(state["rng"])
    old_budget = state["config"]["train"]["steps"]
    extended = run.config.train.steps > old_budget
    r = run.result
    r.step, r.final_loss, r.eval = step, state.get("final_loss", math.nan), state.get("eval", {})
    r.finished = bool(state.get("finished")) and not extended


def run_loop(
    run: Run,
    device: torch.device,
    interrupt: Interrupt,
    should_stop: Callable[[], bool] | None,
) -> None:
    """Train ``run`` until its budget or accuracy target, then save and write the final logs.

    Raises:
        TrainingInterrupted: a stop signal or ``should_stop()`` (see :func:`train`).
        TrainingDiverged: see :func:`train_step`.
    """
    config, t, r = run.config, run.config.train, run.result
    run_dir = Path(config.run_dir)
    task = config.data.build_task()
    compiled = torch.compile(run.model, dynamic=True) if config.compile else run.model
    lengths = range(config.data.train_min_length, config.data.train_max_length + 1)
    writer = SummaryWriter(str(run_dir), purge_step=run.step + 1)
    bar = tqdm(
        total=t.steps, initial=run.step, disable=not t.progress, desc=run_dir.name, unit="step"
    )
    in_step = False  # True from the first weight change of a step until the step is counted
    try:
        while run.step < t.steps:
            if interrupt.requested or (should_stop is not None and should_stop()):
                raise KeyboardInterrupt
            tick = time.perf_counter()
            batch = training_batch(task, config.seed, run.step, t.batch_size, lengths).to(device)
            in_step = True
            logits, loss_value, grad_norm, lr = train_step(
                compiled, run.optimizer, run.scheduler, batch, t.grad_clip, device, run.step
            )
            run.step += 1
            in_step = False
            r.step, r.final_loss = run.step, loss_value
            r.losses.append(loss_value)
            scores = score_answers(logits, batch)
            tokens_per_s = batch.inputs.numel() / (time.perf_counter() - tick)
            exact = scores.exact.float().mean().item()
            bar.update(1)
            bar.set_postfix(
                loss=f"{loss_value:.3f}", acc=f"{exact:.2f}", tok_s=f"{tokens_per_s:,.0f}"
            )
            if run.step % t.log_every == 0:
                scalars = {
                    "loss": loss_value,
                    "exact_match": exact,
                    "token_accuracy": scores.correct_tokens.sum().item()
                    / (scores.answer_tokens * len(scores.exact)),
                    "lr": lr,
                    "grad_norm": grad_norm,
                    "tokens_per_s": tokens_per_s,
                }
                for name, value in scalars.items():
                    writer.add_scalar(f"train/{name}", value, run.step)
            if run.step % t.eval_every == 0 or run.step == t.steps:
                r.eval = periodic_eval(run.model, task, config, writer, run.step)
                target = t.target_accuracy
                if run.step == t.steps or (target is not None and r.eval["in_dist"] >= target):
                    r.finished = True
                    break
            if run.step % t.checkpoint_every == 0:
                with interrupt.shield():
                    run.save()
        with interrupt.shield():  # a finished run stays finished, whatever arrives now
            run.save()
            write_samples(run.model, task, config, writer, run.step)
            write_hparams(writer, config, r.eval, run.step)
    except KeyboardInterrupt:
        raise stopped(run, interrupt, in_step) from None
    finally:
        bar.close()
        writer.close()


def stopped(run: Run, interrupt: Interrupt, in_step: bool) -> TrainingInterrupted:
    """Save what can be saved after a stop request, and say what is on disk.

    A stop between steps saves the last completed step (unless it is already on disk). A
    second signal inside a step (``in_step``) saves nothing: the weights may hold an update
    that the step counter does not, and the last checkpoint stays as it was.
    """
    how = signal.Signals(interrupt.signum).name if interrupt.requested else "a stop request"
    if not in_step and run.step > 0 and run.saved_step != run.step:
        with interrupt.shield():
            run.save()
        kept = f"checkpoint of step {run.step} saved"
    elif run.saved_step is not None:
        kept = f"the checkpoint of step {run.saved_step} is kept"
    else:
        kept = "no checkpoint was saved (no step had completed)"
    message = f"interrupted by {how} at step {run.step}; {kept}"
    return TrainingInterrupted(message, interrupt.signum, run.saved_step)


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: Batch,
    grad_clip: float,
    device: torch.device,
    step: int,
) -> tuple[torch.Tensor, float, float, float]:
    """One optimizer step on the answer tokens of ``batch`` (cross-entropy, clipped gradients).

    Returns:
        ``(logits, loss, grad_norm, lr)``: detached logits ``(B, S - 1, V)``, the loss before
        the step, the global gradient norm before clipping, and the learning rate this step
        used (the first parameter group's, read before ``scheduler.step()``).

    Raises:
        TrainingDiverged: the loss or the global gradient norm is NaN or infinite (checked
            before the weights change, whatever ``grad_clip`` is).
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
