"""Symbol-sequence tasks: copy, reverse and sort a string of random symbols.

The prompt is ``length`` symbols drawn uniformly (with replacement) from an alphabet of
``n_symbols``; the answer is a function of the prompt. ``sort`` depends on the multiset of
symbols only, so it is a control: the answer does not change when the prompt is permuted.
``copy`` and ``reverse`` have minimal pairs: swapping two different symbols of the prompt keeps
its bag of symbols and changes the answer, so a model blind to order answers at most one of the
two right.
"""

import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from data.base import BOS, EOS, SEP, Batch, Task, register

SYMBOLS = string.ascii_lowercase + string.ascii_uppercase + string.digits
"""Readable names of the symbols of every symbol task, in id order."""


@dataclass(frozen=True)
class SymbolOptions:
    """Options of the symbol tasks.

    Attributes:
        n_symbols: alphabet size, 2..62.
    """

    n_symbols: int = 16

    def __post_init__(self) -> None:
        if not 2 <= self.n_symbols <= len(SYMBOLS):
            raise ValueError(
                f"n_symbols={self.n_symbols} is invalid; it must be in 2..{len(SYMBOLS)}"
            )


class SymbolTask(Task):
    """Base of the symbol tasks: ``vocab = [<bos>, <sep>, <eos>, a, b, ...]``; the length axis
    is the number of prompt symbols."""

    Options = SymbolOptions

    def __init__(self, options: SymbolOptions | None = None) -> None:
        super().__init__(options)
        self.vocab = [BOS, SEP, EOS, *SYMBOLS[: self.options.n_symbols]]
        self.first_symbol = 3

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        prompts = rng.integers(self.first_symbol, len(self.vocab), size=(n, length))  # (n, L)
        return prompts, self.answer(prompts)

    def answer(self, prompts: np.ndarray) -> np.ndarray:
        """The ``(n, L)`` answers of ``(n, L)`` prompts."""
        raise NotImplementedError

    def minimal_pairs(self, rng: np.random.Generator, length: int, n: int) -> tuple[Batch, Batch]:
        """``n`` prompts and the same prompts with two different symbols swapped.

        Two distinct columns are drawn per row; where they hold the same symbol, the second is
        replaced by another one first, so every swap changes the prompt and (for ``copy`` and
        ``reverse``) the answer.

        Raises:
            ValueError: ``length < 2`` (nothing to swap).
        """
        self.check_length(length)
        if length < 2:
            raise ValueError(
                f"task {self.name!r} needs length >= 2 for swapped pairs, got {length}"
            )
        n_symbols = len(self.vocab) - self.first_symbol
        prompts = rng.integers(self.first_symbol, len(self.vocab), size=(n, length))  # (n, L)
        rows = np.arange(n)
        i = rng.integers(length, size=n)
        j = (i + rng.integers(1, length, size=n)) % length  # (n,), j != i
        shift = rng.integers(1, n_symbols, size=n)
        moved = (prompts[rows, j] - self.first_symbol + shift) % n_symbols + self.first_symbol
        prompts[rows, j] = np.where(prompts[rows, i] == prompts[rows, j], moved, prompts[rows, j])
        swapped = prompts.copy()
        swapped[rows, i], swapped[rows, j] = prompts[rows, j], prompts[rows, i]
        first = self.assemble(prompts, self.answer(prompts), length)
        return first, self.assemble(swapped, self.answer(swapped), length)


@register("copy")
class CopyTask(SymbolTask):
    """``a c b <sep> a c b <eos>``: repeat the prompt."""

    supports_minimal_pairs = True

    def answer(self, prompts: np.ndarray) -> np.ndarray:
        return prompts.copy()

    def solve(self, prompt: Sequence[str]) -> list[str]:
        return list(prompt)

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]]:
        """Answer token ``i`` copies prompt item ``i``."""
        return [[i] for i in range(len(prompt))]


@register("reverse")
class ReverseTask(SymbolTask):
    """``a c b <sep> b c a <eos>``: the prompt in reverse order."""

    supports_minimal_pairs = True

    def answer(self, prompts: np.ndarray) -> np.ndarray:
        return prompts[:, ::-1].copy()

    def solve(self, prompt: Sequence[str]) -> list[str]:
        return list(reversed(prompt))

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]]:
        """Answer token ``i`` copies prompt item ``L - 1 - i``."""
        return [[len(prompt) - 1 - i] for i in range(len(prompt))]


@register("sort")
class SortTask(SymbolTask):
    """``c a b <sep> a b c <eos>``: the prompt sorted (a control: order-insensitive answer)."""

    def answer(self, prompts: np.ndarray) -> np.ndarray:
        return np.sort(prompts, axis=1)

    def solve(self, prompt: Sequence[str]) -> list[str]:
        return sorted(prompt, key=SYMBOLS.index)
