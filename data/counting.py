"""Counting and selective copying, where attention must pick tokens by content and then count
or order them: ``count`` and ``selective_copy``.

Sources: Golovneva et al. 2024 ("Contextual Position Encoding: Learning to Count What's
Important", §4: counting and selective copy, on which contextual positions were shown to
matter); selective copying is also Gu and Dao 2023 ("Mamba", §3.1)::

    count           a c a b a # a <sep> 3 <eos>        occurrences of the symbol after #
    selective_copy  . a . . c b . <sep> a c b <eos>    the symbols, in order, without the blanks

Length axes: ``count``, the symbols before ``#``; ``selective_copy``, the items (symbols and
blanks) of the prompt. How many symbols a ``selective_copy`` prompt holds varies from row to
row, so its answers differ in length within a batch and are padded (see :mod:`data.base`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from data.base import BOS, EOS, PAD, SEP, Task, register
from data.sequence import SYMBOLS

ASK, BLANK = "#", "."


@dataclass(frozen=True)
class CountOptions:
    """Options of ``count``.

    Attributes:
        n_symbols: alphabet size, 2..62.
        max_count: the largest count the vocabulary can answer (tokens ``0 .. max_count``);
            so ``length <= max_count``.
    """

    MAX_COUNT: ClassVar[int] = 4096
    """Largest ``max_count``: one answer token per count, and ``length <= max_count`` with at
    most 4096 tokens per sequence (``lab.common.config.MAX_TOKENS``), so larger counts never
    occur."""

    n_symbols: int = 4
    max_count: int = 64

    def __post_init__(self) -> None:
        if not 2 <= self.n_symbols <= len(SYMBOLS):
            raise ValueError(
                f"n_symbols={self.n_symbols} is invalid; it must be in 2..{len(SYMBOLS)}"
            )
        if not 1 <= self.max_count <= self.MAX_COUNT:
            raise ValueError(
                f"max_count={self.max_count} is invalid; it must be in [1, {self.MAX_COUNT}]"
            )


@register("count")
class CountTask(Task):
    """``length`` symbols, ``#``, a query symbol; answer how many times it occurred (one token,
    ``0`` when never). The query is one of the prompt's symbols half of the time.

    Training starts at 3 symbols: at 2 there are only ``4**2 * 4 = 64`` prompts, nearly all
    among the 256 test sequences, which leaves a validation set of 4-10 distinct sequences."""

    Options = CountOptions
    train_lengths = (3, 10)

    def __init__(self, options: CountOptions | None = None) -> None:
        super().__init__(options)
        symbols = SYMBOLS[: self.options.n_symbols]
        counts = [f"={i}" for i in range(self.options.max_count + 1)]
        self.vocab = [BOS, SEP, EOS, ASK, *symbols, *counts]

    def check_length(self, length: int) -> None:
        super().check_length(length)
        if length > self.options.max_count:
            raise ValueError(
                f"task 'count' needs length <= max_count={self.options.max_count}, got "
                f"length={length}; raise data.options.count.max_count"
            )

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        first = self.token_id(SYMBOLS[0])
        symbols = rng.integers(self.options.n_symbols, size=(n, length)) + first  # (n, L)
        present = symbols[np.arange(n), rng.integers(length, size=n)]  # (n,)
        anything = rng.integers(self.options.n_symbols, size=n) + first
        query = np.where(rng.random(n) < 0.5, present, anything)  # (n,)
        counts = (symbols == query[:, None]).sum(axis=1)  # (n,)
        ask = np.full((n, 1), self.token_id(ASK))
        prompts = np.concatenate([symbols, ask, query[:, None]], axis=1)  # (n, L + 2)
        return prompts, (counts + self.token_id("=0"))[:, None]

    def solve(self, prompt: Sequence[str]) -> list[str]:
        return [f"={list(prompt[:-2]).count(prompt[-1])}"]

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]]:
        """Every symbol before ``#`` equal to the query (the last prompt token): the items the
        one answer token counts. Empty when the count is ``=0``: no item holds the answer."""
        return [[i for i, token in enumerate(prompt[:-2]) if token == prompt[-1]]]


@dataclass(frozen=True)
class SelectiveCopyOptions:
    """Options of ``selective_copy``.

    Attributes:
        n_symbols: alphabet size of the copied symbols, 2..62.
        p_blank: probability that an item of the prompt is a blank.
    """

    n_symbols: int = 8
    p_blank: float = 0.5

    def __post_init__(self) -> None:
        if not 2 <= self.n_symbols <= len(SYMBOLS):
            raise ValueError(
                f"n_symbols={self.n_symbols} is invalid; it must be in 2..{len(SYMBOLS)}"
            )
        if not 0 <= self.p_blank < 1:
            raise ValueError(f"p_blank={self.p_blank} is invalid; it must be in [0, 1)")


@register("selective_copy")
class SelectiveCopyTask(Task):
    """``length`` items, each a blank ``.`` (probability ``p_blank``) or a symbol; the answer
    is the symbols in order (possibly none: then just ``<eos>``)."""

    Options = SelectiveCopyOptions
    train_lengths = (2, 10)

    def __init__(self, options: SelectiveCopyOptions | None = None) -> None:
        super().__init__(options)
        self.vocab = [BOS, SEP, EOS, BLANK, *SYMBOLS[: self.options.n_symbols], PAD]

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        first = self.token_id(SYMBOLS[0])
        symbols = rng.integers(self.options.n_symbols, size=(n, length)) + first  # (n, L)
        blank = rng.random((n, length)) < self.options.p_blank  # (n, L)
        prompts = np.where(blank, self.token_id(BLANK), symbols)
        order = np.argsort(blank, axis=1, kind="stable")  # symbols first, in prompt order
        answers = np.take_along_axis(prompts, order, axis=1)  # (n, L)
        answers[np.take_along_axis(blank, order, axis=1)] = self.pad_id
        return prompts, answers

    def solve(self, prompt: Sequence[str]) -> list[str]:
        return [token for token in prompt if token != BLANK]

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]]:
        """The place of the kept symbol each answer token copies."""
        return [[i] for i, token in enumerate(prompt) if token != BLANK]
