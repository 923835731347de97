"""The state of a run being trained and how it ends: :class:`Run` (what a checkpoint saves, and
its save), :class:`TrainResult` (what a run reports), and the two ways a run stops early
(:class:`TrainingDiverged`, :class:`TrainingInterrupted`).

The loop (:mod:`lab.training.trainer`) and resuming (:mod:`lab.training.resume`) both import
it; neither imports the other's internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lab.common.checkpoint import checkpoint_path, save_checkpoint
from lab.common.config import Config, config_to_dict
from lab.common.runtime import capture_rng
from lab.training.distributed import Group
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
        eval: latest periodic evaluation, ``{"in_dist", "in_dist_min", "2x", "4x"}`` ->
            exact-match (:func:`lab.training.run_logs.periodic_eval`).
        reached_target: the latest periodic evaluation met ``train.target_accuracy`` (its
            minimum over the training lengths, :func:`lab.training.run_logs.reached_target`); False
            for a run that ended at its step cap below the target, or has no target.
        target_streak: consecutive periodic evaluations up to now that met the target (the run
            stops when it reaches ``train.target_checks``).
        seconds: wall time of this invocation.
        losses: training loss of every step taken in this invocation.
    """

    run_dir: Path
    step: int
    finished: bool
    final_loss: float
    eval: dict[str, float] = field(default_factory=dict)
    reached_target: bool = False
    target_streak: int = 0
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
            saved in the checkpoint, and redone first on resume
            (:func:`lab.training.trainer.periodic_check`). Also set by a resume whose
            ``train.steps`` is exactly the steps taken: the final evaluation of that cap is due
            (:func:`lab.training.resume.restore`).
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
        task = self.config.data.build_task()  # a language model's corpus: resume checks it
        corpus = {"corpus": task.corpus.record()} if task.language_model else {}
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
                "target_streak": r.target_streak,
                "eval_pending": self.eval_pending,
                "history": self.history,
                **corpus,
            },
            checkpoint_path(self.config.run_dir),
        )
        self.saved_step = self.step
        self.group.barrier()
