"""The training loop: AdamW, warmup + cosine, clipping, TensorBoard, atomic checkpoints."""

from __future__ import annotations

import contextlib
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from data import Batch, Task
from lab.common.batches import training_batch
from lab.common.checkpoint import (
    check_fresh_start,
    check_trainer_paths,
    checkpoint_path,
    clear_run,
    find_checkpoint,
    load_checkpoint,
    remove_partial_writes,
    save_checkpoint,
)
from lab.common.config import Config, ConfigError, config_to_dict, save_config
from lab.common.event_files import drop_events_after
from lab.common.runlock import run_lock
from lab.common.runtime import (
    Interrupt,
    autocast,
    capture_rng,
    configure_threads,
    deferred_interrupt,
    resolve_device,
    seed_everything,
)
from lab.evaluation.metrics import score_answers
from lab.training.distributed import Group, join_group
from lab.training.resume import restore, resume_history
from lab.training.run_logs import (
    periodic_eval,
    reached_target,
    write_hparams,
    write_layout,
    write_samples,
)
from lab.training.schedule import warmup_cosine
from model import Transformer

IGNORED = -100
"""Target id that the loss skips: ``<pad>`` targets are replaced by it."""


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
        eval: latest periodic evaluation, ``{"in_dist", "in_dist_min", "2x", "4x"}`` ->
            exact-match (:func:`lab.training.run_logs.periodic_eval`).
        reached_target: the latest periodic evaluation met ``train.target_accuracy`` (its
            minimum over the training lengths, :func:`lab.training.run_logs.reached_target`); False
            for
            a run that ended at its step cap below the target, or has no target.
        seconds: wall time of this invocation.
        losses: training loss of every step taken in this invocation.
    """

    run_dir: Path
    step: int
    finished: bool
    final_loss: float
    eval: dict[str, float] = field(default_factory=dict)
    reached_target: bool = False
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
        group: the ranks training this model (one process without ``torchrun``).
        eval_pending: the periodic evaluation of ``step`` was stopped before it finished;
            saved in the checkpoint, and redone first on resume (:func:`periodic_check`). Also
            set by a resume whose ``train.steps`` is exactly the steps taken: the final
            evaluation of that cap is due (:func:`lab.training.resume.restore`).
    """

    config: Config
    model: Transformer
    optimizer: torch.optim.AdamW
    scheduler: torch.optim.lr_scheduler.LambdaLR
    step: int = 0
    saved_step: int | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    result: TrainResult | None = None
    group: Group = field(default_factory=Group)
    eval_pending: bool = False

    def save(self) -> None:
        """Write the checkpoint of the current step (rank 0 writes; every rank calls it, and
        the generator states of all ranks are saved).

        Raises:
            TrainingDiverged: a weight is NaN or infinite (nothing is written).
            OSError: the file cannot be written (the previous checkpoint is kept).
        """
        if not all(torch.isfinite(p).all() for p in self.model.parameters()):
            kept = f"the checkpoint of step {self.saved_step} is kept"
            if self.saved_step is None:
                kept = "no checkpoint on disk"
            raise TrainingDiverged(f"non-finite weights at step {self.step}; not saved, {kept}")
        rngs = self.group.gather(capture_rng())
        if not self.group.is_main:
            self.saved_step = self.step
            self.group.barrier()  # rank 0 is writing
            return
        r = self.result
        save_checkpoint(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "step": self.step,
                "rng": rngs[0],
                **({"rank_rng": rngs} if self.group.active else {}),
                "config": config_to_dict(self.config),
                "finished": r.finished,
                "final_loss": r.final_loss,
                "eval": r.eval,
                "reached_target": r.reached_target,
                "eval_pending": self.eval_pending,
                "history": self.history,
            },
            checkpoint_path(self.config.run_dir),
        )
        self.saved_step = self.step
        self.group.barrier()


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


def train(
    config: Config,
    resume: bool = False,
    should_stop: Callable[[], bool] | None = None,
    overwrite: bool = False,
) -> TrainResult:
    """Train ``config`` into ``config.run_dir``, or continue it there when ``resume``.

    Everything that can fail at start-up (device, threads, the folder's lock, a readable
    checkpoint, building the model) is checked before ``overwrite`` deletes anything. The
    folder is locked for the whole run (:func:`lab.common.runlock.run_lock`).

    Under ``torchrun`` every rank calls this; rank 0 alone holds the lock and writes files
    (see :mod:`lab.training.distributed`), and a stop on any rank stops all at the same step.

    On resume, ``config`` must equal the saved config except for
    :data:`lab.common.config.RESUME_KEYS` (see :func:`lab.training.resume.resume_config`); a change
    is saved into
    ``config.yaml`` and the checkpoint, and listed in the checkpoint's ``history``. A larger
    ``train.steps`` extends the run, finished or not: the cosine schedule is recomputed for the
    new budget (it is stretched, not restarted), so from the resumed step on the learning rate
    follows the longer schedule, which is higher than the old one at that step.

    SIGINT (Ctrl-C), SIGTERM, ``should_stop()`` turning true (checked before every step), or
    under ``torchrun`` the death of the launcher
    (:meth:`lab.training.distributed.Group.launcher_gone`)
    finishes the current step, saves a checkpoint and raises :class:`TrainingInterrupted`. Saves
    and the final writes of a finished run complete even if a second signal arrives; a second
    signal in the middle of a step stops at once, without saving (the last checkpoint stays).
    A stop during a periodic evaluation saves its step with the evaluation marked pending, and
    ``resume`` redoes it before the next step (its TensorBoard point, samples and early-stopping
    test), so a resumed run stops at the step and with the weights of an uninterrupted one.

    Writes ``config.yaml``, ``checkpoint.pt`` (every ``train.checkpoint_every`` steps, at the end
    and on interruption) and TensorBoard events into the run folder. Events of steps after the
    checkpoint a run resumes from are dropped (``purge_step``, and removed from the event files:
    :func:`lab.common.event_files.drop_events_after`), and a fresh start clears the files of a run
    stopped before its first checkpoint, so every step is in the event files once.

    Raises:
        FileExistsError: not ``resume``/``overwrite``, and ``run_dir`` already holds a
            checkpoint, or files the project writes but no run (a run stopped before its first
            checkpoint is cleared instead, see :func:`lab.common.checkpoint.check_fresh_start`); or
            ``overwrite`` of a folder that holds no run (nothing deleted).
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
    group, device = join_group(resolve_device(config.device))
    group.check_batch_size(config.train.batch_size)
    configure_threads(config.threads)
    if resume:
        find_checkpoint(run_dir)
    should_stop = group.stop_check(should_stop)  # and a rank whose torchrun died stops
    started = time.perf_counter()
    lock = run_lock(run_dir) if group.is_main else contextlib.nullcontext()
    with lock, deferred_interrupt() as interrupt:
        if group.is_main:
            check_trainer_paths(run_dir)  # before anything is deleted or trained
        leftovers = not (resume or overwrite) and check_fresh_start(run_dir, group.is_main)
        state = load_checkpoint(run_dir, device) if resume else None
        run = start_run(config, state, device, group)
        if group.is_main:
            if overwrite or leftovers:  # a fresh start never mixes with a crashed run's logs
                clear_run(run_dir)
            remove_partial_writes(run_dir)
            if state is not None:  # steps a killed process logged after its checkpoint, and
                drop_events_after(run_dir, run.step, run.eval_pending)  # a cut-short evaluation
        if run.result.finished:
            return run.result
        if group.is_main:
            save_config(run.config, run_dir / "config.yaml")
        run_loop(run, device, interrupt, should_stop)
        run.result.seconds = time.perf_counter() - started
    return run.result


def start_run(
    config: Config, state: dict[str, Any] | None, device: torch.device, group: Group | None = None
) -> Run:
    """Build the model, optimizer and schedule of ``config``, restored from ``state`` (a loaded
    checkpoint) when given; ``group`` is the ranks training it (default: this process alone).

    Raises:
        ConfigError, ValueError: see :func:`lab.training.resume.resume_history` and
            :func:`lab.training.resume.restore`.
    """
    run_dir = Path(config.run_dir)
    history = [] if state is None else resume_history(config, state)
    group = group or Group()
    model = build_model(config, device)
    group.seed_dropout(config.seed)
    optimizer = build_optimizer(model, config, device)
    t = config.train
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, t.warmup_steps, t.steps, t.min_lr / t.lr)
    )
    run = Run(config, model, optimizer, scheduler, history=history, group=group)
    run.result = TrainResult(run_dir, 0, False, math.nan)
    if state is not None:
        restore(run, state)
        group.restore_rng(state.get("rank_rng"), config.seed)
    return run


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
    config, t, r, group = run.config, run.config.train, run.result, run.group
    run_dir = Path(config.run_dir)
    task = config.data.build_task()
    compiled = group.wrap(run.model, device)
    compiled = torch.compile(compiled, dynamic=True) if config.compile else compiled
    lengths = range(config.data.train_min_length, config.data.train_max_length + 1)
    writer = SummaryWriter(str(run_dir), purge_step=run.step + 1) if group.is_main else None
    if writer is not None:
        write_layout(writer, config)
    bar = tqdm(
        total=t.steps,
        initial=run.step,
        disable=not (t.progress and group.is_main),
        desc=run_dir.name,
        unit="step",
    )
    in_step = False  # True while a step runs: the weights may hold an update the counter lacks

    def stop_asked() -> bool:
        return interrupt.requested or (should_stop is not None and should_stop())

    try:
        done = False
        if run.eval_pending:  # the saved step's evaluation was stopped: redo it first
            done = periodic_check(run, task, writer, stop_asked)
            if not done:  # record that it is done (a finished run is saved below)
                with interrupt.shield():
                    run.save()
        while run.step < t.steps and not done:
            if group.any(stop_asked()):
                raise KeyboardInterrupt
            tick = time.perf_counter()
            batch = training_batch(task, config.seed, run.step, t.batch_size, lengths)
            batch = group.shard(batch).to(device)
            in_step = True
            logits, loss_value, grad_norm, lr = train_step(
                compiled,
                run.optimizer,
                run.scheduler,
                batch,
                t.grad_clip,
                device,
                run.step,
                precision=config.precision,
                group=group,
            )
            (loss_value,) = group.mean([loss_value])  # token mean over the global batch
            run.step += 1
            in_step = False
            r.step, r.final_loss = run.step, loss_value
            r.losses.append(loss_value)
            scores = score_answers(logits, batch)
            tokens_per_s = group.world_size * batch.inputs.numel() / (time.perf_counter() - tick)
            exact = scores.exact.float().mean().item()  # this rank's rows (the bar's figure)
            bar.update(1)
            bar.set_postfix(
                loss=f"{loss_value:.3f}", acc=f"{exact:.2f}", tok_s=f"{tokens_per_s:,.0f}"
            )
            if run.step % t.log_every == 0:
                (exact_all,) = group.mean([exact])  # every rank holds as many rows
                correct, answers = group.sum(
                    [scores.correct_tokens.sum().item(), scores.answer_tokens.sum().item()]
                )
                token_accuracy = correct / answers  # over the global batch's answer tokens
                scalars = {
                    "loss": loss_value,
                    "exact_match": exact_all,
                    "token_accuracy": token_accuracy,
                    "lr": lr,
                    "grad_norm": grad_norm,
                    "tokens_per_s": tokens_per_s,
                }
                for name, value in scalars.items():
                    if writer is not None:
                        writer.add_scalar(f"train/{name}", value, run.step)
            due = run.step % t.eval_every == 0 or run.step == t.steps
            if due and periodic_check(run, task, writer, stop_asked):
                break
            if run.step % t.checkpoint_every == 0:
                with interrupt.shield():
                    run.save()
        r.finished = r.finished or run.step >= t.steps  # (a resume at exactly its budget)
        with interrupt.shield():  # a finished run stays finished, whatever arrives now
            run.save()
            if writer is not None:
                write_samples(run.model, task, config, writer, run.step)
                write_hparams(writer, config, r.eval, run.step, r.final_loss, r.reached_target)
            group.barrier()
    except KeyboardInterrupt:
        raise stopped(run, interrupt, in_step) from None
    finally:
        bar.close()
        if writer is not None:
            writer.close()


def periodic_check(
    run: Run, task: Task, writer: SummaryWriter | None, stop_asked: Callable[[], bool]
) -> bool:
    """The periodic evaluation of ``run.step`` and its early-stopping test; True when the run
    is done (the target is reached, :func:`lab.training.run_logs.reached_target`, or the budget
    ends).

    A stop during the evaluation marks it pending (``run.eval_pending``, saved in the
    checkpoint) and raises: ``--resume`` redoes it first (:func:`run_loop`), with its
    TensorBoard point and samples, so the resumed run stops where the uninterrupted one does.

    Raises:
        KeyboardInterrupt: a stop arrived during the evaluation (on any rank's word).
    """
    config, r, group = run.config, run.result, run.group
    evals = None
    # pending until its samples are logged: a second signal raises KeyboardInterrupt anywhere
    # in here, and the checkpoint that stop saves must still say the evaluation is to redo
    run.eval_pending = True
    if group.is_main:  # the other ranks wait for its result
        evals = periodic_eval(run.model, task, config, writer, run.step, stop_asked)
    evals = group.from_main(evals)
    if evals is None:  # a stop arrived during the evaluation: every rank stops now
        raise KeyboardInterrupt
    r.eval = evals
    r.reached_target = reached_target(evals, config.train.target_accuracy)
    if run.step >= config.train.steps or r.reached_target:
        r.finished = True
        run.eval_pending = False  # (the final samples are written under a shield)
        return True
    if writer is not None:  # samples at every evaluation; the last ones after the loop
        write_samples(run.model, task, config, writer, run.step)
    run.eval_pending = False
    return False


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
    precision: str = "auto",
    group: Group | None = None,
) -> tuple[torch.Tensor, float, float, float]:
    """One optimizer step on the answer tokens of ``batch`` (cross-entropy, clipped gradients),
    forward pass in ``precision`` (:func:`lab.common.runtime.autocast`).

    With several ranks (``group.active``, ``batch`` is this rank's shard, ``model`` wrapped in
    DDP), this rank's loss is its token sum over the global answer-token count, times the number
    of ranks (:meth:`lab.training.distributed.Group.token_mean`): DDP's gradient average is then the
    gradient of the global batch's token mean, whatever each rank's share of answer tokens. One
    process computes the plain mean, as before.

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
    answer_logits = logits[:, batch.answer_slice].float()  # (B, A, V)
    targets = batch.answer_targets.masked_fill(~batch.answer_mask, IGNORED)  # (B, A)
    flat_logits, flat_targets = answer_logits.flatten(0, 1), targets.flatten()  # (B*A, V), (B*A,)
    if group is None or not group.active:
        loss = F.cross_entropy(flat_logits, flat_targets, ignore_index=IGNORED)
    else:
        total = F.cross_entropy(flat_logits, flat_targets, ignore_index=IGNORED, reduction="sum")
        loss = group.token_mean(total, (flat_targets != IGNORED).sum())
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
