"""Answer accuracy from one teacher-forced forward pass, and confidence intervals.

Exact-match of a sequence under teacher forcing equals exact-match under greedy decoding: if
every answer position's argmax is the target given the true prefix, greedy decoding reproduces
the true prefix at each step and so the whole answer; and at the first wrong argmax greedy
decoding emits that wrong token. ``tests/test_eval.py`` checks this against a real decoder.
"""

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from data import Batch


@dataclass
class AnswerScores:
    """Per-row results of one batch.

    Attributes:
        exact: bool ``(B,)``: every answer token (and ``<eos>``) predicted right.
        correct_tokens: int64 ``(B,)``: answer tokens predicted right.
        answer_tokens: int64 ``(B,)``: real answer tokens per row (pads excluded).
        predictions: int64 ``(B, A)``: argmax at each answer position (pads included).
    """

    exact: Tensor
    correct_tokens: Tensor
    answer_tokens: Tensor
    predictions: Tensor


def score_answers(logits: Tensor, batch: Batch) -> AnswerScores:
    """Score the answer positions of ``logits`` ``(B, S - 1, V)`` against ``batch``; positions
    whose target is ``<pad>`` (:attr:`data.Batch.answer_mask`) count neither way."""
    predictions = logits[:, batch.answer_slice].argmax(dim=-1)  # (B, A)
    real = batch.answer_mask  # (B, A)
    hits = (predictions == batch.answer_targets) & real  # (B, A)
    return AnswerScores((hits | ~real).all(dim=1), hits.sum(dim=1), real.sum(dim=1), predictions)


@torch.no_grad()
def greedy_decode(model: torch.nn.Module, prompt: Tensor, n_tokens: int) -> Tensor:
    """Generate ``n_tokens`` greedily after ``prompt`` (int64 ``(B, P)``), re-running the model.

    The slow, obviously correct decoder used to check teacher-forced exact-match.

    Returns:
        int64 ``(B, n_tokens)``.
    """
    tokens = prompt
    for _ in range(n_tokens):
        logits = model(tokens, prefix_len=prompt.shape[1])  # (B, T, V)
        next_token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)
    return tokens[:, prompt.shape[1] :]


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson 1927); 95% for ``z = 1.96``.

    Returns:
        ``(low, high)`` with ``0 <= low <= successes / trials <= high <= 1``; ``(0.0, 1.0)``
        when ``trials`` is 0. The bound at an extreme estimate is exact (0 successes: low 0.0;
        all successes: high 1.0), where rounding would otherwise land just inside it.
    """
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    low = 0.0 if successes == 0 else min(p, max(0.0, centre - half))
    high = 1.0 if successes == trials else max(p, min(1.0, centre + half))
    return low, high
