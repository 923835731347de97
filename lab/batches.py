"""Reproducible data streams: every batch is a pure function of (seed, stream, index).

Training batch ``step`` and evaluation set ``length`` each get their own generator, so a
resumed run sees exactly the batches an uninterrupted one would, and evaluation sets are the
same for every run with the same seed, whatever was trained before.
"""

import numpy as np

from data import Batch, Task

TRAIN_STREAM, EVAL_STREAM, PROBE_STREAM, SAMPLE_STREAM = 0, 1, 2, 3


def data_rng(seed: int, stream: int, index: int) -> np.random.Generator:
    """Independent generator for item ``index`` of ``stream`` under ``seed`` (a SeedSequence)."""
    return np.random.default_rng([seed, stream, index])


def training_batch(task: Task, seed: int, step: int, batch_size: int, lengths: range) -> Batch:
    """The batch of optimizer step ``step``: one length drawn uniformly from ``lengths``."""
    rng = data_rng(seed, TRAIN_STREAM, step)
    length = int(rng.integers(lengths.start, lengths.stop))
    return task.sample(rng, length, batch_size)
