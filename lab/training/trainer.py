"""The training loop: AdamW, warmup + cosine, clipping, TensorBoard, atomic checkpoints.

:func:`train` locks the run folder, builds or restores the run (:func:`start_run`) and hands it
to :func:`run_loop`, which reads as setup, step, log, evaluate, save: :func:`open_loop`,
:func:`take_step` (one :func:`lab.training.step.train_step`), :func:`log_step`,
:func:`periodic_check`, :meth:`lab.training.run.Run.save`, and :func:`finish` at the end.

What survives what:

- SIGINT (Ctrl-C), SIGTERM, ``should_stop()`` turning true (checked before every step), or
  under ``torchrun`` the death of the launcher
  (:meth:`lab.training.distributed.Group.launcher_gone`) finishes the current step, saves a
  checkpoint and raises :class:`lab.training.run.TrainingInterrupted`. Saves and the final
  writes of a finished run complete even if a second signal arrives; a second signal in the
  middle of a step stops at once, without saving (the last checkpoint stays).
- A stop during a periodic evaluation saves its step with the evaluation marked pending, and
  ``resume`` redoes it before the next step (its TensorBoard point, samples and early-stopping
  test), so a resumed run stops at the step and with the weights of an uninterrupted one.
- Events of steps after the checkpoint a run resumes from are dropped (``purge_step``, and
  removed from the event files: :func:`lab.common.events.files.drop_events_after`), and a fresh
  start clears the files of a run stopped before its first checkpoint (and every event file in
  the sweep's events folder of a ``log_dir=sweep`` run, :func:`lab.common.checkpoint.clear_events`),
  so every step is in the event files once; the writer's file is named to be read after the
  earlier ones (:func:`lab.common.events.writer.open_summary_writer`). The events go to
  :func:`lab.common.events.place.events_folder` (the run folder unless ``log_dir=sweep``, as a
  sweep sets it).
- On resume, the config must equal the saved config except for
  :data:`lab.common.config.RESUME_KEYS` (see :func:`lab.training.resume.resume_config`); a
  change is saved into ``config.yaml`` and the checkpoint, and listed in the checkpoint's
  ``history``. A larger ``train.steps`` extends the run, finished or not: the cosine schedule is
  recomputed for the new budget (it is stretched, not restarted), so from the resumed step on
  the learning rate follows the longer schedule, which is higher than the old one at that step.
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from data import Batch, Task
from data.streams import training_batch
from lab.common.checkpoint import (
    check_fresh_start,
    check_trainer_paths,
    clear_events,
    clear_run,
    find_checkpoint,
    load_checkpoint,
    remove_partial_writes,
)
from lab.common.config import Config, ConfigError, save_config
from lab.common.events.files import drop_events_after
from lab.common.events.place import check_run_events, events_folder
from lab.common.events.writer import open_summary_writer
from lab.common.runlock import removed_if_refused, run_lock
from lab.common.runtime import (
    Interrupt,
    configure_threads,
    deferred_interrupt,
    resolve_device,
    seed_everything,
)
from lab.evaluation.metrics import AnswerScores, score_answers
from lab.lm.perplexity import lm_plan
from lab.training.distributed import Group, join_group
from lab.training.resume import restore, resume_history
from lab.training.run import Run, TrainingDiverged, TrainingInterrupted, TrainResult
from lab.training.run_logs import (
    periodic_eval,
    reached_target,
    write_hparams,
    write_layout,
    write_samples,
)
from lab.training.schedule import warmup_cosine
from lab.training.step import train_step
from model import Transformer

__all__ = [
    "Run",
    "TrainResult",
    "TrainingDiverged",
    "TrainingInterrupted",
    "build_model",
    "build_optimizer",
    "start_run",
    "train",
    "train_step",
]


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
    check: Callable[[], None] | None = None,
) -> TrainResult:
    """Train ``config`` into ``config.run_dir``, or continue it there when ``resume``.

    ``check`` is called first thing under the folder's lock (a sweep's test that the run
    there is still the one it asks for, :func:`lab.sweeps.sweep.run_one`); what it raises
    stops the training before anything is read, deleted or written.

    Everything that can fail at start-up (device, threads, the folder's lock, a readable
    checkpoint, building the model) is checked before ``overwrite`` deletes anything. The
    folder is locked for the whole run (:func:`lab.common.runlock.run_lock`). Under
    ``torchrun`` every rank calls this; rank 0 alone holds the lock and writes files (see
    :mod:`lab.training.distributed`), and a stop on any rank stops all at the same step. Stop
    signals, resume and event files: see "What survives what" in :mod:`lab.training.trainer`.

    Writes ``config.yaml``, ``checkpoint.pt`` (every ``train.checkpoint_every`` steps, at the end
    and on interruption) and TensorBoard events into the run folder.

    Raises:
        FileExistsError: not ``resume``/``overwrite``, and ``run_dir`` already holds a
            checkpoint, or files the project writes but no run (a run stopped before its first
            checkpoint is cleared instead, see :func:`lab.common.checkpoint.check_fresh_start`);
            or ``overwrite`` of a folder that holds no run (nothing deleted).
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
    with removed_if_refused(run_dir, group.is_main), lock, deferred_interrupt() as interrupt:
        if check is not None:
            check()
        run = prepare_run(config, resume, overwrite, device, group)
        if run.result.finished:
            return run.result
        if group.is_main:
            save_config(run.config, run_dir / "config.yaml")
        run_loop(run, device, interrupt, should_stop)
        run.result.seconds = time.perf_counter() - started
    return run.result


def prepare_run(
    config: Config, resume: bool, overwrite: bool, device: torch.device, group: Group
) -> Run:
    """The run to train, with its folder made ready (inside the lock): the paths checked, the
    checkpoint loaded when resuming, the run built (:func:`start_run`), then (rank 0) the files
    of a replaced or crashed run cleared, partial writes removed, and events logged after the
    checkpoint dropped. Nothing is deleted before the run is built.

    Raises:
        See :func:`train`.
    """
    run_dir = Path(config.run_dir)
    events = events_folder(run_dir, config.log_dir, config.data.task)
    task = config.data.build_task()
    if task.language_model:  # the evaluation's own checks, so a finished run can be evaluated
        lm_plan(config, config.eval, task)
    if group.is_main:
        check_trainer_paths(run_dir)  # before anything is deleted or trained
        if events.exists() and not events.is_dir():
            raise NotADirectoryError(
                f"log_dir={config.log_dir!r} is {str(events)!r}, not a folder; the run writes "
                "its TensorBoard events there (nothing was deleted or trained)"
            )
        check_run_events(run_dir, config.log_dir, config.data.task)
    leftovers = not (resume or overwrite) and check_fresh_start(run_dir, group.is_main)
    state = load_checkpoint(run_dir, device) if resume else None
    run = start_run(config, state, device, group)
    if group.is_main:
        if overwrite or leftovers:  # a fresh start never mixes with a crashed run's logs
            clear_run(run_dir)
        check_run_events(run_dir, config.log_dir, config.data.task, claim=True)
        if state is None and config.log_dir:  # nor with the events of an earlier run
            clear_events(events)  # left in its own log_dir (the run folder was gone)
        remove_partial_writes(run_dir)
        if state is not None:  # steps a killed process logged after its checkpoint, and
            drop_events_after(events, run.step, run.eval_pending)  # a cut-short evaluation
    return run


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


@dataclass
class Loop:
    """What the loop holds besides the run: the task, the model it steps (wrapped for several
    ranks, compiled when ``compile``), the training lengths, the TensorBoard writer (rank 0,
    else None) and the progress bar.

    Attributes:
        in_step: True while a step runs: the weights may hold an update the step counter lacks
            (a stop then saves nothing, :func:`stopped`).
    """

    task: Task
    model: torch.nn.Module
    lengths: range
    writer: SummaryWriter | None
    bar: tqdm
    in_step: bool = False

    def close(self) -> None:
        """Close the bar and the writer (however the loop ended)."""
        self.bar.close()
        if self.writer is not None:
            self.writer.close()


def open_loop(run: Run, device: torch.device) -> Loop:
    """Setup: the task, the wrapped (and compiled) model, the TensorBoard writer (events after
    ``run.step`` purged, the chart layout written) and the progress bar."""
    config, t, group = run.config, run.config.train, run.group
    run_dir = Path(config.run_dir)
    events = events_folder(run_dir, config.log_dir, config.data.task)
    task = config.data.build_task()
    compiled = group.wrap(run.model, device)
    compiled = torch.compile(compiled, dynamic=True) if config.compile else compiled
    lengths = range(config.data.train_min_length, config.data.train_max_length + 1)
    writer = open_summary_writer(events, purge_step=run.step + 1) if group.is_main else None
    if writer is not None:
        write_layout(writer, config)
    bar = tqdm(
        total=t.steps,
        initial=run.step,
        disable=not (t.progress and group.is_main),
        desc=run_dir.name,
        unit="step",
    )
    return Loop(task, compiled, lengths, writer, bar)


def run_loop(
    run: Run,
    device: torch.device,
    interrupt: Interrupt,
    should_stop: Callable[[], bool] | None,
) -> None:
    """Train ``run`` until its budget or accuracy target, then save and write the final logs:
    setup, then per step: step, log, evaluate (when due), save (when due).

    Raises:
        TrainingInterrupted: a stop signal or ``should_stop()`` (see :func:`train`).
        TrainingDiverged: see :func:`lab.training.step.train_step`.
    """
    t, group = run.config.train, run.group
    loop = open_loop(run, device)

    def stop_asked() -> bool:
        return interrupt.requested or (should_stop is not None and should_stop())

    try:
        done = False
        if run.eval_pending:  # the saved step's evaluation was stopped: redo it first
            done = periodic_check(run, loop.task, loop.writer, stop_asked)
            if not done:  # record that it is done (a finished run is saved below)
                with interrupt.shield():
                    run.save()
        while run.step < t.steps and not done:
            if group.any(stop_asked()):
                raise KeyboardInterrupt
            tick = time.perf_counter()
            batch, logits, grad_norm, lr = take_step(run, loop, device)
            log_step(run, loop, batch, score_answers(logits, batch), grad_norm, lr, tick)
            due = run.step % t.eval_every == 0 or run.step == t.steps
            if due and periodic_check(run, loop.task, loop.writer, stop_asked):
                break
            if run.step % t.checkpoint_every == 0:
                with interrupt.shield():
                    run.save()
        finish(run, loop, interrupt)
    except KeyboardInterrupt:
        raise stopped(run, interrupt, loop.in_step) from None
    finally:
        loop.close()


def take_step(
    run: Run, loop: Loop, device: torch.device
) -> tuple[Batch, torch.Tensor, float, float]:
    """Step: draw the batch of ``run.step`` (this rank's shard), take one optimizer step and
    count it; ``loop.in_step`` is True from the step's start until it is counted.

    Returns:
        ``(batch, logits, grad_norm, lr)`` (see :func:`lab.training.step.train_step`); the
        global loss is in ``run.result``.
    """
    config, t, r, group = run.config, run.config.train, run.result, run.group
    batch = training_batch(loop.task, config.seed, run.step, t.batch_size, loop.lengths)
    batch = group.shard(batch).to(device)
    loop.in_step = True
    logits, loss_value, grad_norm, lr = train_step(
        loop.model,
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
    loop.in_step = False
    r.step, r.final_loss = run.step, loss_value
    r.losses.append(loss_value)
    return batch, logits, grad_norm, lr


def log_step(
    run: Run,
    loop: Loop,
    batch: Batch,
    scores: AnswerScores,
    grad_norm: float,
    lr: float,
    tick: float,
) -> None:
    """Log: the progress bar after every step, and every ``train.log_every`` steps the
    ``train/*`` scalars (loss, exact-match and token accuracy over the global batch, learning
    rate, gradient norm, tokens per second since ``tick``)."""
    group, loss_value = run.group, run.result.final_loss
    tokens_per_s = group.world_size * batch.inputs.numel() / (time.perf_counter() - tick)
    exact = scores.exact.float().mean().item()  # this rank's rows (the bar's figure)
    loop.bar.update(1)
    loop.bar.set_postfix(loss=f"{loss_value:.3f}", acc=f"{exact:.2f}", tok_s=f"{tokens_per_s:,.0f}")
    if run.step % run.config.train.log_every != 0:
        return
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
        if loop.writer is not None:
            loop.writer.add_scalar(f"train/{name}", value, run.step)


def finish(run: Run, loop: Loop, interrupt: Interrupt) -> None:
    """Save the last step and write the final samples and hyperparameters, shielded: a finished
    run stays finished, whatever signal arrives now."""
    r = run.result
    r.finished = r.finished or run.step >= run.config.train.steps  # (a resume at its budget)
    with interrupt.shield():
        run.save()
        if loop.writer is not None:
            write_samples(run.model, loop.task, run.config, loop.writer, run.step)
            write_hparams(loop.writer, run.config, r.eval, run.step, r.final_loss, r.reached_target)
        run.group.barrier()


def periodic_check(
    run: Run, task: Task, writer: SummaryWriter | None, stop_asked: Callable[[], bool]
) -> bool:
    """The periodic evaluation of ``run.step`` and its early-stopping test; True when the run
    is done (the target is reached at ``train.target_checks`` consecutive checks,
    :func:`lab.training.run_logs.reached_target`, or the budget ends).

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
        evals = periodic_eval(
            run.model, task, config, writer, run.step, stop_asked, lambda e: extrapolates(run, e)
        )
    evals = group.from_main(evals)
    if evals is None:  # a stop arrived during the evaluation: every rank stops now
        raise KeyboardInterrupt
    r.eval = evals
    r.reached_target = reached_target(evals, config.train.target_accuracy)
    r.target_streak = r.target_streak + 1 if r.reached_target else 0
    if run.step >= config.train.steps or r.target_streak >= config.train.target_checks:
        r.finished = True
        run.eval_pending = False  # (the final samples are written under a shield)
        return True
    if writer is not None:  # samples at every evaluation; the last ones after the loop
        write_samples(run.model, task, config, writer, run.step)
    run.eval_pending = False
    return False


def extrapolates(run: Run, in_dist: dict[str, float]) -> bool:
    """Whether the periodic evaluation of ``run.step`` also scores 2x and 4x: at every
    ``train.extrapolation_every`` steps (0: every check) and at the last check, the one whose
    training-length scores ``in_dist`` (:func:`lab.training.run_logs.periodic_eval`) end the
    run or that the budget ends, so the final logs always hold them."""
    t = run.config.train
    if t.extrapolation_every == 0 or run.step % t.extrapolation_every == 0:
        return True
    streak = run.result.target_streak + 1 if reached_target(in_dist, t.target_accuracy) else 0
    return run.step >= t.steps or streak >= t.target_checks


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
