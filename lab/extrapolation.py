"""Accuracy at one task length, and the length grid of an extrapolation curve."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from data import Task
from lab.batches import EVAL_STREAM, data_rng
from lab.metrics import score_answers, wilson_interval
from lab.runtime import autocast
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


@torch.inference_mode()
def evaluate_length(
    model: Transformer, task: Task, length: int, samples: int, seed: int, batch_tokens: int = 32768
) -> LengthResult:
    """Teacher-forced exact-match and per-token accuracy of ``model`` at ``length``.

    The ``samples`` sequences come from the evaluation stream of ``seed`` at this length, the
    same for every model. Batches hold about ``batch_tokens`` tokens, so memory stays bounded
    at any length.
    """
    device = next(model.parameters()).device
    rng = data_rng(seed, EVAL_STREAM, length)
    probe = task.sample(rng, length, 1)
    tokens = probe.inputs.shape[1]
    reason = unsupported_reason(model, tokens)
    if reason is not None:
        return LengthResult(length, tokens, 0, None, None, None, None, False, reason)
    rows = max(1, batch_tokens // tokens)
    was_training = model.training
    model.eval()
    exact = correct = 0
    remaining = samples
    while remaining > 0:
        batch = task.sample(rng, length, min(rows, remaining)).to(device)
        with autocast(device):
            scores = score_answers(model(batch.inputs, prefix_len=batch.answer_start), batch)
        exact += int(scores.exact.sum())
        correct += int(scores.correct_tokens.sum())
        remaining -= batch.tokens.shape[0]
        answer_tokens = scores.answer_tokens
    model.train(was_training)
    low, high = wilson_interval(exact, samples)
    return LengthResult(
        length, tokens, samples, exact / samples, low, high, correct / (samples * answer_tokens)
    )


def default_lengths(train_min: int, train_max: int, factor: float) -> list[int]:
    """The default grid: 4 lengths spread over the training range, then 8 evenly spaced ones
    from just past ``train_max`` up to ``factor * train_max``."""
    inside = np.linspace(train_min, train_max, 4).round().astype(int).tolist()
    longest = int(round(factor * train_max))
    beyond = np.linspace(train_max, longest, 9)[1:].round().astype(int).tolist()
    return sorted({*inside, *(n for n in beyond if n > train_max)})
