"""String-manipulation tasks of the Chomsky-hierarchy suite (Delétang et al. 2023, "Neural
Networks and the Chomsky Hierarchy", §4 and Appendix A; used by Ruoss et al. 2023 to compare
position encodings): ``duplicate``, ``odds_first`` and ``missing_duplicate``.

The length axis of all three is ``length``, the number of symbols of the string ``w`` (drawn
uniformly, with replacement, from ``n_symbols``)::

    duplicate          a c b <sep> a c b a c b <eos>           w -> ww
    odds_first         a c b d <sep> a b c d <eos>             items 1, 3, ... then 2, 4, ...
    missing_duplicate  a c b a _ b <sep> c <eos>               ww with one item hidden by _
"""

from collections.abc import Sequence

import numpy as np

from data.base import BOS, EOS, SEP, Task, register
from data.sequence import SYMBOLS, SymbolOptions, SymbolTask

HIDDEN = "_"


@register("duplicate")
class DuplicateTask(SymbolTask):
    """``w <sep> w w``: the string twice (Delétang et al. 2023, "Duplicate String")."""

    supports_minimal_pairs = True

    def answer(self, prompts: np.ndarray) -> np.ndarray:
        return np.concatenate([prompts, prompts], axis=1)  # (n, 2L)

    def solve(self, prompt: Sequence[str]) -> list[str]:
        return [*prompt, *prompt]

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]]:
        """Answer token ``i`` copies prompt item ``i mod L``."""
        return [[i % len(prompt)] for i in range(2 * len(prompt))]


@register("odds_first")
class OddsFirstTask(SymbolTask):
    """``w <sep>`` the items at odd positions (1st, 3rd, ...) then those at even positions
    (Delétang et al. 2023, "Odds First").

    Answer item ``j`` (from 0) is prompt item ``2j``, then ``2(j - ceil(length / 2)) + 1`` in
    the second half: an absolute index. With the suite's recipe at lengths 2..10, ``learned``
    positions reached 99.9% in distribution (early stop at 1900 steps), ``rope`` 82.1% and
    ``alibi`` 54.4% at the 3000-step cap."""

    supports_minimal_pairs = True
    min_length = 2

    def answer(self, prompts: np.ndarray) -> np.ndarray:
        return np.concatenate([prompts[:, ::2], prompts[:, 1::2]], axis=1)  # (n, L)

    def solve(self, prompt: Sequence[str]) -> list[str]:
        odd = [t for i, t in enumerate(prompt) if i % 2 == 0]  # 1st, 3rd, ... (1-based)
        return odd + [t for i, t in enumerate(prompt) if i % 2 == 1]

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]]:
        """Prompt items ``0, 2, 4, ...`` then ``1, 3, 5, ...``, one per answer token."""
        return [[i] for i in (*range(0, len(prompt), 2), *range(1, len(prompt), 2))]


@register("missing_duplicate")
class MissingDuplicateTask(Task):
    """``w w`` with one of its ``2 * length`` items replaced by ``_``; the answer is the hidden
    symbol (Delétang et al. 2023, "Missing Duplicate"). The prompt has ``2 * length`` tokens.

    Training lengths 2..5: with the suite's recipe, ``rope`` reached 98.5% in distribution at
    2..5 (early stop at 2100 steps) but 94.3% at 2..6 and 83.0% at 2..10 (``learned`` 75.6%,
    ``alibi`` 73.0%) within 3000 steps; accuracy fell with length in each."""

    Options = SymbolOptions
    train_lengths = (2, 5)

    def __init__(self, options: SymbolOptions | None = None) -> None:
        super().__init__(options)
        self.vocab = [BOS, SEP, EOS, HIDDEN, *SYMBOLS[: self.options.n_symbols]]

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        first = self.token_id(SYMBOLS[0])
        word = rng.integers(first, len(self.vocab), size=(n, length))  # (n, L)
        prompts = np.concatenate([word, word], axis=1)  # (n, 2L)
        hidden = rng.integers(2 * length, size=n)  # (n,)
        rows = np.arange(n)
        answers = prompts[rows, hidden][:, None].copy()  # (n, 1)
        prompts[rows, hidden] = self.token_id(HIDDEN)
        return prompts, answers

    def solve(self, prompt: Sequence[str]) -> list[str]:
        half = len(prompt) // 2
        at = list(prompt).index(HIDDEN)
        return [prompt[(at + half) % len(prompt)]]

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]]:
        """The hidden item's partner in the other copy of ``w``."""
        return [[(list(prompt).index(HIDDEN) + len(prompt) // 2) % len(prompt)]]
