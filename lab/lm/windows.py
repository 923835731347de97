"""Held-out windows of a language-model task: the evaluation windows (the same tokens for every
length, scheme and seed) and the validation windows of the training's periodic check.

Evaluation scores the first ``N`` tokens after the held-out split's first token, where ``N`` is
``eval.lm_tokens`` rounded down to a multiple of the longest evaluated length, so every length
scores exactly the same targets (held-out bytes ``1 .. N``). A window of ``length`` holds
``length + 1`` tokens: the model reads the first ``length`` and predicts the last ``length``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from data import Batch
from data.streams import VALID_STREAM, data_rng
from data.text import Corpus
from lab.common.config import ConfigError


@dataclass(frozen=True)
class Windows:
    """Evaluation windows of one length.

    Attributes:
        tokens: int64 ``(W, length + 1)``: held-out bytes; row ``i`` starts at ``starts[i]``.
        starts: int64 ``(W,)``: offset of each window in the held-out split.
        first_scored: int64 ``(W,)``: each window scores its targets ``first_scored[i] ..
            length - 1`` (0 for non-overlapping windows and for the first sliding one).
        length: model inputs per window.
    """

    tokens: Tensor
    starts: Tensor
    first_scored: Tensor
    length: int

    @property
    def scored_tokens(self) -> int:
        """Targets scored over all windows."""
        return int((self.length - self.first_scored).sum())


def scored_tokens(corpus: Corpus, lm_tokens: int, lengths: list[int]) -> int:
    """``N``: the held-out targets every length scores: ``lm_tokens`` rounded down to a multiple
    of the longest of ``lengths``.

    Raises:
        ConfigError: ``lm_tokens`` is shorter than the longest length, or longer than the
            held-out split (one line naming both and what to set).
    """
    longest, available = max(lengths), corpus.heldout.size - 1
    if lm_tokens > available:
        raise ConfigError(
            f"eval.lm_tokens={lm_tokens} is more than the {available} tokens the corpus "
            f"{corpus.source!r} holds out; give eval.lm_tokens <= {available}"
        )
    if lm_tokens < longest:
        raise ConfigError(
            f"eval.lm_tokens={lm_tokens} is shorter than the longest evaluation length "
            f"({longest} tokens); give eval.lm_tokens >= {longest} (or a lower "
            "eval.max_length_factor)"
        )
    return lm_tokens // longest * longest


MAX_WINDOW_TOKENS = 2**24
"""Most model input tokens (windows x length) evaluated at one length: what non-overlapping
windows over the most ``eval.lm_tokens`` (2**24) read. A small ``eval.stride`` multiplies the
tokens by about ``length / stride``, so it is refused past this."""


def window_count(n_tokens: int, length: int, stride: int | None) -> int:
    """The windows :func:`window_starts` makes, without making them."""
    if stride is None:
        return n_tokens // length
    span = n_tokens - length  # the last window starts here
    return span // stride + 1 + (1 if span % stride else 0)


def check_window_tokens(n_tokens: int, lengths: dict[str, int], stride: int | None) -> None:
    """Check that every length's windows hold at most :data:`MAX_WINDOW_TOKENS` input tokens.

    Raises:
        ConfigError: one line naming ``eval.stride``, the windows and tokens it makes at the
            first length over the limit, the limit, and the smallest stride that fits at every
            length.
    """
    if stride is None:
        return
    over = [
        (label, length, window_count(n_tokens, length, stride))
        for label, length in lengths.items()
        if window_count(n_tokens, length, stride) * length > MAX_WINDOW_TOKENS
    ]
    if not over:
        return
    smallest = [
        next(
            (s for s in range(stride, length + 1)
             if window_count(n_tokens, length, s) * length <= MAX_WINDOW_TOKENS),
            None,
        )
        for _, length, _ in over
    ]  # fmt: skip
    label, length, windows = over[0]
    fits = (
        f"give eval.stride >= {max(smallest)}, a lower"
        if None not in smallest
        else "no stride fits every length: give a lower"
    )
    raise ConfigError(
        f"eval.stride={stride} is too small: at {label} (length {length}) it makes "
        f"{windows:,} windows, {windows * length:,} input tokens to evaluate; the maximum is "
        f"{MAX_WINDOW_TOKENS:,} per length: {fits} eval.lm_tokens or eval.max_length_factor"
    )


def window_starts(n_tokens: int, length: int, stride: int | None) -> tuple[np.ndarray, ...]:
    """``(starts, first_scored)`` of the windows of ``length`` that score targets
    ``1 .. n_tokens`` once each: non-overlapping (``stride`` None), or sliding by ``stride``
    (Press et al. 2022, "Train Short, Test Long", appendix B: each window scores its last ``stride``
    targets, the first window all of them; the last window ends at ``n_tokens`` and scores the
    targets its predecessor did not).

    Raises:
        ValueError: ``n_tokens`` is not a multiple of ``length``, or ``stride`` > ``length``.
    """
    if n_tokens % length:
        raise ValueError(f"{n_tokens} scored tokens are not a multiple of length {length}")
    if stride is None:
        starts = np.arange(0, n_tokens, length)
        return starts, np.zeros_like(starts)
    if stride > length:
        raise ValueError(
            f"eval.stride={stride} is longer than the evaluation length {length}: windows "
            f"would skip tokens; give eval.stride <= {length}"
        )
    starts = list(range(0, n_tokens - length + 1, stride))
    if starts[-1] != n_tokens - length:
        starts.append(n_tokens - length)
    ends = np.asarray(starts) + length  # (W,): one past the last target of each window
    first = np.concatenate([[0], ends[:-1] - np.asarray(starts[1:])])  # (W,)
    return np.asarray(starts), first


def evaluation_windows(corpus: Corpus, n_tokens: int, length: int, stride: int | None) -> Windows:
    """The windows of ``length`` over the first ``n_tokens + 1`` held-out bytes (see
    :func:`window_starts`); the same for every model, scheme and seed."""
    starts, first = window_starts(n_tokens, length, stride)
    tokens = corpus.heldout[starts[:, None] + np.arange(length + 1)]  # (W, length + 1)
    return Windows(
        torch.from_numpy(tokens.astype(np.int64)),
        torch.from_numpy(starts.astype(np.int64)),
        torch.from_numpy(first.astype(np.int64)),
        length,
    )


def validation_windows(corpus: Corpus, seed: int, length: int, n: int, skip: int) -> Batch:
    """``n`` held-out windows of ``length + 1`` bytes for the training's periodic check: starts
    drawn from ``VALID_STREAM`` (index ``length``) after the first ``skip + 1`` bytes (the
    evaluation's, ``eval.lm_tokens``) when the split holds enough after them, else anywhere in it.

    Returns:
        ``Batch(tokens int64 (n, length + 1), answer_start=1, length=length)``.

    Raises:
        ValueError: the held-out split is shorter than one window (one line).
    """
    size = corpus.heldout.size
    if size < length + 1:
        raise ValueError(
            f"the corpus {corpus.source!r} holds out {size} bytes: too few for a validation "
            f"window of {length + 1}; give a longer corpus or a lower data.train_max_length"
        )
    low = skip + 1 if size - (skip + 1) >= 4 * (length + 1) else 0
    rng = data_rng(seed, VALID_STREAM, length)
    starts = rng.integers(low, size - length, size=n)  # (n,)
    tokens = corpus.heldout[starts[:, None] + np.arange(length + 1)]  # (n, length + 1)
    return Batch(torch.from_numpy(tokens.astype(np.int64)), 1, length)
