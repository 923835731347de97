"""Passkey retrieval: a key of digits hidden in filler text, asked for at the end.

The test of Mohtashami and Jaggi 2023 ("Landmark Attention: Random-Access Infinite Context
Length for Transformers", §4.2), used since to judge context extension (Chen et al. 2023,
position interpolation; Peng et al. 2023, YaRN): filler text with a key phrase inserted at a
*depth* (0: at the start of the prompt, 1: at its end); the answer is the key::

    <bos> The grass is gre pass key is 90817. en. The sky is ... <sep> 9 0 8 1 7 <eos>

Tokens are bytes: ids 0..255 are the byte values, then ``<bos>``, ``<sep>``, ``<eos>`` (256,
257, 258), the vocabulary of the byte-level text task. The length axis is the number of prompt
tokens (filler and key phrase together), so the filler shrinks as the key grows.

The key phrase is ``pass key is DIGITS.`` (18 bytes with 5 digits). It is short, so most of a
64-byte training prompt stays filler and the depth means something; its words occur in neither
filler, and the filler has no digits, so the digits are found by content alone (the first
answer token) and copied in order by an induction head (Olsson et al. 2022), the mechanism a
small model learns for ``copy``; the final ``.`` ends the key, so the solver is exact.

Default training lengths 18..32: the shortest prompt is the key phrase alone, so the uniform
length draw mixes in prompts without filler, where the lookup is learned first. With the
model and recipe of ``configs/passkey.yaml``, ``rope`` on 18..64 stayed at the loss of guessing
the digits (exact-match 0%) for 800 steps (on 32..64 at a third of the learning rate, all of
1500); on 18..32 it left it after 300 steps and reached 93% by step 1400.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from data.base import BOS, EOS, SEP, Task, register

REPEAT = (
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
)
"""The filler sentence of Mohtashami and Jaggi 2023 (§4.2), repeated; the trailing space keeps
the sentences apart where it wraps."""

LETTERS = "abcdefghijklmnopqrstuvwxyz "
"""The alphabet of the ``random`` filler: lowercase letters and the space, uniform."""

PREFIX, SUFFIX = "pass key is ", "."
"""The key phrase around the digits: ``pass key is 12345.``."""

FILLERS = ("repeat", "random")


def byte_vocab() -> list[str]:
    """The byte vocabulary: 256 readable strings (printable ASCII other than the space as
    itself, every other byte as ``\\xNN``: no string holds whitespace), then ``<bos>``,
    ``<sep>``, ``<eos>`` at ids 256, 257 and 258."""
    names = [chr(b) if 0x21 <= b <= 0x7E else f"\\x{b:02x}" for b in range(256)]
    return [*names, BOS, SEP, EOS]


@dataclass(frozen=True)
class PasskeyOptions:
    """Options of ``passkey``.

    Attributes:
        digits: digits of the key, 1..20 (each uniform over 0..9, leading zeros allowed).
        filler: ``repeat`` (Mohtashami and Jaggi's sentence, repeated from a random offset) or
            ``random`` (uniform lowercase letters and spaces).
        depth: where the key phrase starts, as a fraction of the places it can start at:
            0 is the first prompt token, 1 puts its last byte on the last prompt token; null
            (the default) draws it uniformly per sequence (training); a float in [0, 1] fixes it.
    """

    MAX_DIGITS: ClassVar[int] = 20

    digits: int = 5
    filler: str = "repeat"
    depth: float | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= self.MAX_DIGITS:
            raise ValueError(f"digits={self.digits} is invalid; it must be in 1..{self.MAX_DIGITS}")
        if self.filler not in FILLERS:
            raise ValueError(f"filler={self.filler!r} is invalid; use one of {', '.join(FILLERS)}")
        depth = self.depth
        if depth is not None:
            number = isinstance(depth, (int, float)) and not isinstance(depth, bool)
            if not number or not (math.isfinite(depth) and 0 <= depth <= 1):
                raise ValueError(
                    f"depth={depth!r} is invalid; it must be a number in [0, 1] or null "
                    "(uniform per sequence)"
                )
            object.__setattr__(self, "depth", float(depth))


@register("passkey")
class PasskeyTask(Task):
    """Filler text with ``pass key is DIGITS.`` inserted at a depth; the answer is the digits
    (Mohtashami and Jaggi 2023)."""

    Options = PasskeyOptions
    train_lengths = (18, 32)  # from the key phrase alone; see the module docstring

    def __init__(self, options: PasskeyOptions | None = None) -> None:
        super().__init__(options)
        self.vocab = byte_vocab()
        self.min_length = self.phrase_length

    @property
    def phrase_length(self) -> int:
        """Tokens of the key phrase (``18`` with 5 digits)."""
        return len(PREFIX) + self.options.digits + len(SUFFIX)

    def positions(self, rng: np.random.Generator, length: int, n: int) -> np.ndarray:
        """Int ``(n,)``: the prompt index where each row's key phrase starts, in
        ``0 .. length - phrase_length``: uniform (``depth`` null), or ``depth`` times the
        last start, rounded half up."""
        last = length - self.phrase_length
        if self.options.depth is None:
            return rng.integers(0, last + 1, size=n)
        return np.full(n, math.floor(self.options.depth * last + 0.5))

    def filler(self, rng: np.random.Generator, size: int, n: int) -> np.ndarray:
        """Uint8-valued int ``(n, size)`` filler bytes of the configured kind."""
        if self.options.filler == "repeat":
            text = np.frombuffer(REPEAT.encode(), dtype=np.uint8).astype(np.int64)
            offsets = rng.integers(0, len(text), size=(n, 1))
            return text[(offsets + np.arange(size)) % len(text)]
        letters = np.frombuffer(LETTERS.encode(), dtype=np.uint8).astype(np.int64)
        return letters[rng.integers(0, len(letters), size=(n, size))]

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        k = self.phrase_length
        keys = rng.integers(0, 10, size=(n, self.options.digits)) + ord("0")  # (n, D) bytes
        filler = self.filler(rng, length - k, n)  # (n, L - K)
        starts = self.positions(rng, length, n)[:, None]  # (n, 1)
        prefix = np.frombuffer(PREFIX.encode(), dtype=np.uint8).astype(np.int64)
        phrase = np.concatenate(
            [np.broadcast_to(prefix, (n, len(prefix))), keys, np.full((n, 1), ord(SUFFIX))], axis=1
        )  # (n, K)
        column = np.arange(length)[None, :]  # (1, L)
        rows = np.arange(n)[:, None]
        before = filler[rows, np.minimum(column, length - k - 1)] if length > k else 0
        after = filler[rows, np.clip(column - k, 0, length - k - 1)] if length > k else 0
        inside = phrase[rows, np.clip(column - starts, 0, k - 1)]
        prompts = np.where(column < starts, before, np.where(column < starts + k, inside, after))
        return prompts.astype(np.int64), keys

    def solve(self, prompt: Sequence[str]) -> list[str]:
        ids = {name: i for i, name in enumerate(self.vocab)}
        text = bytes(ids[token] for token in prompt).decode("latin-1")
        (digits,) = re.findall(re.escape(PREFIX) + r"([0-9]+)" + re.escape(SUFFIX), text)
        return [self.vocab[ord(c)] for c in digits]

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]]:
        """The place of each key digit in the prompt (one byte per token, so a character's
        index in the decoded text is its token's index)."""
        ids = {name: i for i, name in enumerate(self.vocab)}
        text = bytes(ids[token] for token in prompt).decode("latin-1")
        (match,) = re.finditer(re.escape(PREFIX) + r"([0-9]+)" + re.escape(SUFFIX), text)
        return [[i] for i in range(match.start(1), match.end(1))]
