"""Reproducible data streams: every batch is a pure function of (seed, stream, index).

Training batch ``step``, and the evaluation, validation and probe sets of ``length``, each get
their own generator, so a resumed run sees exactly the batches an uninterrupted one would, and
evaluation sets are the same for every run with the same seed, whatever was trained before.
The validation set (early stopping and periodic evaluation) is drawn from its own stream and
never holds a sequence of the evaluation set, so stopping never reads the test data.
"""

from dataclasses import replace

import numpy as np
import torch

from data.base import Batch, Task

TRAIN_STREAM, EVAL_STREAM, PROBE_STREAM, SAMPLE_STREAM, VALID_STREAM = 0, 1, 2, 3, 4
MAX_DRAWS = 64
"""Batches of ``n`` a validation set may draw before giving up (see :func:`validation_set`)."""


def data_rng(seed: int, stream: int, index: int) -> np.random.Generator:
    """Independent generator for item ``index`` of ``stream`` under ``seed`` (a SeedSequence)."""
    return np.random.default_rng([seed, stream, index])


def training_batch(task: Task, seed: int, step: int, batch_size: int, lengths: range) -> Batch:
    """The batch of optimizer step ``step``: one length drawn uniformly from ``lengths``."""
    rng = data_rng(seed, TRAIN_STREAM, step)
    length = int(rng.integers(lengths.start, lengths.stop))
    return task.sample(rng, length, batch_size)


def evaluation_set(task: Task, seed: int, length: int, n: int) -> Batch:
    """The ``n`` test sequences at ``length`` (stream ``EVAL_STREAM``, index ``length``)."""
    return task.sample(data_rng(seed, EVAL_STREAM, length), length, n)


def validation_set(task: Task, seed: int, length: int, n: int, held_out: int) -> Batch:
    """``n`` sequences at ``length`` from ``VALID_STREAM``, none equal to any of the
    ``held_out`` sequences of :func:`evaluation_set` (rows that are get redrawn).

    Raises:
        ValueError: ``MAX_DRAWS`` batches did not yield ``n`` such rows (the task has too few
            distinct sequences at this length), naming the length and the counts.
    """
    test = {tuple(row) for row in evaluation_set(task, seed, length, held_out).tokens.tolist()}
    rng = data_rng(seed, VALID_STREAM, length)
    rows: list[list[int]] = []
    for _ in range(MAX_DRAWS):
        batch = task.sample(rng, length, n)
        rows += [row for row in batch.tokens.tolist() if tuple(row) not in test]
        if len(rows) >= n:
            return replace(batch, tokens=torch.tensor(rows[:n]))
    raise ValueError(
        f"task {task.name!r} at length {length} has too few distinct sequences for {n} "
        f"validation sequences outside the {held_out} evaluation ones; raise "
        "data.train_min_length or lower train.eval_samples / eval.samples"
    )
