"""Recall tasks: ``associative_recall`` (several queries) and ``flip_flop``.

``associative_recall`` is multi-query associative recall (MQAR) of Arora et al. 2023 ("Zoology:
Measuring and Improving Recall in Efficient Language Models", §3): ``length`` key-value pairs
with distinct keys, then ``n_queries`` of those keys; the answer is each asked key followed by
its value, in query order, so that every value is predicted at its key, as in MQAR (with
``echo_keys=false``, the values alone). The length axis is the number of pairs (the prompt has
``2 * length + n_queries + 1`` tokens)::

    k3 v1 k7 v4 k1 v1 ? k1 k3 <sep> k1 v1 k3 v1 <eos>

``flip_flop`` is flip-flop language modelling (Liu et al. 2023, "Exposing Attention Glitches
with Flip-Flop Language Modeling", §2): a program of ``length`` instructions, each an
instruction token and a bit: ``w`` writes its bit, ``i`` (a distractor) is ignored, ``r``
reads, and its bit equals the last written one. The program starts with a write; the prompt ends
with a final ``r`` whose bit is the answer. The length axis is the number of instructions
(``2 * length + 1`` prompt tokens)::

    w 1 i 0 r 1 i 1 w 0 i 1 r <sep> 0 <eos>
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from data.base import BOS, EOS, SEP, Task, register

QUERY = "?"


@dataclass(frozen=True)
class RecallOptions:
    """Options of ``associative_recall``.

    Attributes:
        n_keys: key tokens (a prompt's keys are distinct, so ``length <= n_keys``).
        n_values: value tokens.
        n_queries: keys asked per prompt (distinct; ``length >= n_queries``).
        echo_keys: answer ``key value`` per query (default), not the values alone. The echo is
            a copy of the query list; then each value is read at its key by an induction head
            (Olsson et al. 2022), as in MQAR. Without it, the value must be found from a key
            moved to the answer position by an earlier layer: the suite's recipe reached 19.4%
            in distribution (``rope``, 3000 steps; 35.2% with one query).
    """

    SAVED_BEFORE: ClassVar[dict[str, Any]] = {"echo_keys": False}
    """Options added after runs were saved without them, and the value those runs used."""

    MAX_TOKENS: ClassVar[int] = 4096
    """Largest ``n_keys`` and ``n_values``: each is a token of the vocabulary, and drawing ``n``
    prompts sorts an ``(n, n_keys)`` random array; a prompt holds at most 2048 pairs in the
    lab's 4096 tokens (``lab.common.config.MAX_TOKENS``), so more keys are never all used."""

    n_keys: int = 64
    n_values: int = 16
    n_queries: int = 2
    echo_keys: bool = True

    def __post_init__(self) -> None:
        for name in ("n_keys", "n_values", "n_queries"):
            if not 1 <= getattr(self, name) <= self.MAX_TOKENS:
                raise ValueError(
                    f"{name}={getattr(self, name)} is invalid; it must be in [1, {self.MAX_TOKENS}]"
                )
        if self.n_queries > self.n_keys:
            raise ValueError(
                f"n_queries={self.n_queries} is invalid; it must be <= n_keys={self.n_keys}"
            )


@register("associative_recall")
class AssociativeRecallTask(Task):
    """``length`` pairs ``k v``, ``?``, ``n_queries`` keys; answer ``key value`` per query
    (the values alone with ``echo_keys=false``)."""

    Options = RecallOptions
    train_lengths = (2, 8)

    def __init__(self, options: RecallOptions | None = None) -> None:
        super().__init__(options)
        o = self.options
        keys = [f"k{i}" for i in range(o.n_keys)]
        self.vocab = [BOS, SEP, EOS, QUERY, *keys, *(f"v{i}" for i in range(o.n_values))]
        self.min_length = o.n_queries

    def check_length(self, length: int) -> None:
        super().check_length(length)
        if length > self.options.n_keys:
            raise ValueError(
                f"task 'associative_recall' needs length <= n_keys={self.options.n_keys} "
                f"(distinct keys), got length={length}; raise data.options.associative_recall."
                "n_keys"
            )

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        o = self.options
        first_key, first_value = self.token_id("k0"), self.token_id("v0")
        keys = np.argsort(rng.random((n, o.n_keys)), axis=1)[:, :length] + first_key  # (n, L)
        values = rng.integers(o.n_values, size=(n, length)) + first_value  # (n, L)
        asked = np.argsort(rng.random((n, length)), axis=1)[:, : o.n_queries]  # (n, Q) columns
        rows = np.arange(n)[:, None]
        prompts = np.empty((n, 2 * length), dtype=np.int64)
        prompts[:, ::2], prompts[:, 1::2] = keys, values
        query = np.full((n, 1), self.token_id(QUERY))
        prompts = np.concatenate([prompts, query, keys[rows, asked]], axis=1)
        if not o.echo_keys:
            return prompts, values[rows, asked]
        answers = np.empty((n, 2 * o.n_queries), dtype=np.int64)
        answers[:, ::2], answers[:, 1::2] = keys[rows, asked], values[rows, asked]
        return prompts, answers

    def solve(self, prompt: Sequence[str]) -> list[str]:
        at = list(prompt).index(QUERY)
        table = dict(zip(prompt[:at:2], prompt[1:at:2], strict=True))
        if not self.options.echo_keys:
            return [table[key] for key in prompt[at + 1 :]]
        return [token for key in prompt[at + 1 :] for token in (key, table[key])]

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]]:
        """Per asked key, the place of its value in the pair list; with ``echo_keys``, first
        the asked key itself in the query list after ``?`` (what :meth:`solve` copies)."""
        at = list(prompt).index(QUERY)
        where = {key: i for i, key in enumerate(prompt[:at:2])}  # key -> pair number
        values = [[2 * where[key] + 1] for key in prompt[at + 1 :]]
        if not self.options.echo_keys:
            return values
        return [read for q, value in enumerate(values) for read in ([at + 1 + q], value)]


@dataclass(frozen=True)
class FlipFlopOptions:
    """Options of ``flip_flop``.

    Attributes:
        p_ignore: probability of an ignore instruction (a distractor) after the first write;
            writes and reads share the rest equally (Liu et al.'s FFL(0.8) by default).
    """

    p_ignore: float = 0.8

    def __post_init__(self) -> None:
        if not 0 <= self.p_ignore < 1:
            raise ValueError(f"p_ignore={self.p_ignore} is invalid; it must be in [0, 1)")


@register("flip_flop")
class FlipFlopTask(Task):
    """A write/ignore/read program; the answer is the bit of its final read."""

    Options = FlipFlopOptions
    train_lengths = (3, 16)  # 3: enough distinct programs for a disjoint validation set
    INSTRUCTIONS = ("w", "i", "r")

    def __init__(self, options: FlipFlopOptions | None = None) -> None:
        super().__init__(options)
        self.vocab = [BOS, SEP, EOS, *self.INSTRUCTIONS, "0", "1"]

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        p = self.options.p_ignore
        kinds = rng.choice(3, p=[(1 - p) / 2, p, (1 - p) / 2], size=(n, length))  # 0 w, 1 i, 2 r
        kinds[:, 0] = 0
        bits = rng.integers(2, size=(n, length))  # (n, L)
        last = bits[:, 0].copy()  # the last written bit
        for i in range(length):
            last = np.where(kinds[:, i] == 0, bits[:, i], last)
            bits[:, i] = np.where(kinds[:, i] == 2, last, bits[:, i])
        zero, write = self.token_id("0"), self.token_id("w")
        prompts = np.empty((n, 2 * length + 1), dtype=np.int64)
        prompts[:, 0:-1:2], prompts[:, 1::2] = kinds + write, bits + zero
        prompts[:, -1] = self.token_id("r")
        return prompts, (last + zero)[:, None]

    def solve(self, prompt: Sequence[str]) -> list[str]:
        writes = [bit for op, bit in zip(prompt[0:-1:2], prompt[1::2], strict=True) if op == "w"]
        return [writes[-1]]

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]]:
        """The bit of the last write (the final ``r`` reads it)."""
        ops = range(0, len(prompt) - 1, 2)
        return [[1 + max(i for i in ops if prompt[i] == "w")]]
