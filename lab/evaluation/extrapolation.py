"""Accuracy at one task length, and the length grid of an extrapolation curve.

The grid always holds fixed multiples of the longest training length (:data:`MULTIPLES`), dense
just past it, so "extrapolates a little" and "not at all" read differently, and runs with
different training ranges compare at the same relative lengths.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch

from data import Batch, Task
from data.streams import evaluation_set
from lab.common.runtime import autocast
from lab.diagnostics.failures import FailureCounts
from lab.evaluation.metrics import score_answers, wilson_interval
from model import Transformer


@dataclass
class LengthResult:
    """Evaluation at one ``length``.

    Attributes:
        length: task length (content items).
        tokens: model input tokens per sequence at this length.
        samples: sequences evaluated (0 when unsupported).
        exact_match: share of sequences whose whole answer is right (None when unsupported).
        exact_match_low, exact_match_high: 95% Wilson interval of ``exact_match``.
        token_accuracy: share of answer tokens right (None when unsupported).
        supported: False when the position scheme cannot encode this length.
        reason: why a length is unsupported.
        correct: one character per sequence, ``"1"`` right and ``"0"`` wrong, in evaluation-set
            order (the same sequences for every run of a seed, so two schemes can be compared
            sequence by sequence); None when unsupported.
        pairs: swapped pairs probed at this length (0 when the task has none).
        pair_accuracy: share of swapped pairs with both members right (see
            :func:`lab.evaluation.order.minimal_pair_accuracy`); None when not probed.
        failures: the split of the sequences by failure mode and oracle-length exact-match
            (:meth:`lab.diagnostics.failures.FailureCounts.to_dict`); None when not diagnosed.
        attention: attention statistics and solver alignment per layer and head
            (:func:`lab.diagnostics.measure.attention_diagnostics`); None when not diagnosed.
    """

    length: int
    tokens: int
    samples: int
    exact_match: float | None
    exact_match_low: float | None
    exact_match_high: float | None
    token_accuracy: float | None
    supported: bool = True
    reason: str | None = None
    correct: str | None = None
    pairs: int = 0
    pair_accuracy: float | None = None
    failures: dict | None = None
    attention: dict | None = None

    def to_dict(self) -> dict:
        """Plain dict for JSON and CSV."""
        return asdict(self)


def unsupported_reason(model: torch.nn.Module, tokens: int) -> str | None:
    """Why ``model``'s position scheme cannot encode ``tokens`` input positions, or None."""
    limit = model.position.max_length()
    if limit is not None and tokens > limit:
        return (
            f"needs {tokens} positions; the {model.config.position} table has max_positions={limit}"
        )
    return None


def evaluate_length(
    model: Transformer,
    task: Task,
    length: int,
    samples: int,
    seed: int,
    batch_tokens: int = 32768,
    precision: str = "auto",
) -> LengthResult:
    """Teacher-forced exact-match of ``model`` on the ``samples`` test sequences at ``length``
    (:func:`data.streams.evaluation_set`: the same for every model of a seed), forward
    passes in ``precision`` (:func:`lab.common.runtime.autocast`)."""
    batch = evaluation_set(task, seed, length, samples)
    return evaluate_batch(model, batch, batch_tokens, precision=precision)


class EvaluationStopped(Exception):
    """``should_stop()`` turned true between two chunks of an evaluation."""


@torch.inference_mode()
def evaluate_batch(
    model: Transformer,
    batch: Batch,
    batch_tokens: int = 32768,
    should_stop: Callable[[], bool] | None = None,
    precision: str = "auto",
    failures: FailureCounts | None = None,
) -> LengthResult:
    """Teacher-forced exact-match and per-token accuracy of ``model`` on ``batch``'s rows,
    forward passes in ``precision`` (:func:`lab.common.runtime.autocast`: ``auto`` is bf16 on
    CUDA, float32 elsewhere); ``failures``, when given, counts the failure modes of the same
    logits (no extra forward pass).

    Rows are scored in chunks of about ``batch_tokens`` tokens, so memory stays bounded at any
    length. Returns an unsupported :class:`LengthResult` (with the reason) when the position
    scheme cannot encode the sequences.

    Raises:
        EvaluationStopped: ``should_stop()`` turned true before a chunk (the model is back in
            its training mode).
    """
    device = next(model.parameters()).device
    samples, tokens = batch.inputs.shape
    reason = unsupported_reason(model, tokens)
    if reason is not None:
        return LengthResult(batch.length, tokens, 0, None, None, None, None, False, reason)
    rows = max(1, batch_tokens // tokens)
    was_training = model.training
    model.eval()
    hits, correct, answer_tokens = [], 0, 0
    for start in range(0, samples, rows):
        if should_stop is not None and should_stop():
            model.train(was_training)
            raise EvaluationStopped
        chunk = batch.rows(slice(start, start + rows)).to(device)
        with autocast(device, precision):
            logits = model(chunk.inputs, prefix_len=chunk.answer_start)
            scores = score_answers(logits, chunk)
        if failures is not None:
            failures.add(logits[:, chunk.answer_slice], chunk.answer_targets, chunk.answer_mask)
        hits.append(scores.exact.cpu())
        correct += int(scores.correct_tokens.sum())
        answer_tokens += int(scores.answer_tokens.sum())
    model.train(was_training)
    exact = torch.cat(hits)  # (samples,) bool
    right = int(exact.sum())
    low, high = wilson_interval(right, samples)
    return LengthResult(
        batch.length,
        tokens,
        samples,
        right / samples,
        low,
        high,
        correct / answer_tokens,
        correct="".join("1" if hit else "0" for hit in exact.tolist()),
    )


MULTIPLES = (1.1, 1.25, 1.5, 2.0, 3.0, 4.0)
"""Multiples of the longest training length that every default grid evaluates."""


def multiple_label(multiple: float) -> str:
    """``1.25 -> '1.25x'``, ``2.0 -> '2x'``."""
    return f"{multiple:g}x"


def multiple_lengths(train_max: int, factor: float) -> dict[str, int]:
    """``{label: length}`` of the :data:`MULTIPLES` up to ``factor``: ``m * train_max`` rounded
    half up, at least ``train_max + 1`` (so every multiple lies past training)."""
    return {
        multiple_label(m): max(train_max + 1, math.floor(m * train_max + 0.5))
        for m in MULTIPLES
        if m <= factor
    }


def default_lengths(train_min: int, train_max: int, factor: float) -> list[int]:
    """The default grid: 4 lengths spread over the training range, then the lengths of
    :func:`multiple_lengths` (1.1x, 1.25x, 1.5x, 2x, 3x, 4x, up to ``factor``)."""
    inside = np.linspace(train_min, train_max, 4).round().astype(int).tolist()
    return sorted({*inside, *multiple_lengths(train_max, factor).values()})
