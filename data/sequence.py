"""Symbol-sequence tasks: copy, reverse and sort a string of random symbols.

The prompt is ``length`` symbols drawn uniformly (with replacement) from an alphabet of
``n_symbols``; the answer is a function of the prompt. ``sort`` depends on the multiset of
symbols only, so it is a control: the answer does not change when the prompt is permuted.
"""

import string

import numpy as np

from data.base import BOS, EOS, SEP, Task, register

_SYMBOLS = string.ascii_lowercase + string.ascii_uppercase + string.digits


class SymbolTask(Task):
    """Base of the symbol tasks: ``vocab = [<bos>, <sep>, <eos>, a, b, ...]``.

    Raises:
        ValueError: ``n_symbols`` outside ``2 .. 62``.
    """

    def __init__(self, n_symbols: int = 16) -> None:
        if not 2 <= n_symbols <= len(_SYMBOLS):
            raise ValueError(
                f"data.n_symbols={n_symbols} is invalid; it must be in 2..{len(_SYMBOLS)}"
            )
        self.vocab = [BOS, SEP, EOS, *_SYMBOLS[:n_symbols]]
        self.first_symbol = 3

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        prompts = rng.integers(self.first_symbol, len(self.vocab), size=(n, length))  # (n, L)
        return prompts, self.answer(prompts)

    def answer(self, prompts: np.ndarray) -> np.ndarray:
        """The ``(n, L)`` answers of ``(n, L)`` prompts."""
        raise NotImplementedError


@register("copy")
class CopyTask(SymbolTask):
    """``a c b <sep> a c b <eos>``: repeat the prompt."""

    def answer(self, prompts: np.ndarray) -> np.ndarray:
        return prompts.copy()


@register("reverse")
class ReverseTask(SymbolTask):
    """``a c b <sep> b c a <eos>``: the prompt in reverse order."""

    def answer(self, prompts: np.ndarray) -> np.ndarray:
        return prompts[:, ::-1].copy()


@register("sort")
class SortTask(SymbolTask):
    """``c a b <sep> a b c <eos>``: the prompt sorted (a control: order-insensitive answer)."""

    def answer(self, prompts: np.ndarray) -> np.ndarray:
        return np.sort(prompts, axis=1)
