"""Arithmetic tasks: ``parity``, ``binary_addition`` and ``modular_arithmetic``.

Sources: parity and modular arithmetic are the regular tasks "Parity Check" and "Modular
Arithmetic (Simple)" of Delétang et al. 2023 ("Neural Networks and the Chomsky Hierarchy",
Appendix A); binary addition is their "Binary Addition" (context-sensitive), and addition and
parity are also tasks of Kazemnejad et al. 2023 ("The Impact of Positional Encoding on Length
Generalization in Transformers")::

    parity              1 0 1 1 <sep> 1 1 0 1 <eos>           the parity of every prefix
                                                              (scratchpad=false: 1 only)
    binary_addition     1 1 0 + 1 0 0 <sep> 0 0 1 <eos>       3 + 1 = 4, least significant bit
                                                              first; 3 + 5 = 8 has a 4th bit
    modular_arithmetic  3 + 4 - 1 <sep> 3 2 1 <eos>           3, 3 + 4, 3 + 4 - 1 mod 5
                                                              (scratchpad=false: 1 only)

Length axes: ``parity``, bits in the string; ``binary_addition``, bits of each operand (the
answer has ``length`` bits, or ``length + 1`` with a final carry: answers differ in length
within a batch and are padded, see :mod:`data.base`); ``modular_arithmetic``, operands.
The scratchpad answers of ``parity`` and ``modular_arithmetic`` (:class:`FoldOptions`) have one
token per item.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from data.base import BOS, EOS, PAD, SEP, Task, register

BITS = ("0", "1")
PLUS = "+"


@dataclass(frozen=True)
class FoldOptions:
    """Options of ``parity`` and ``modular_arithmetic``, whose answer is a fold over the prompt.

    Attributes:
        scratchpad: answer the running result after every item, the last one being the result
            (a scratchpad, Nye et al. 2021 "Show Your Work"; studied for length generalization
            by Anil et al. 2022 and Kazemnejad et al. 2023, §5), rather than the result alone
            (Delétang et al. 2023). On by default: with the result alone no scheme learned
            either task in distribution (README, "The task suite").
    """

    SAVED_BEFORE: ClassVar[dict[str, Any]] = {"scratchpad": False}
    """Options added after runs were saved without them, and the value those runs used."""

    scratchpad: bool = True


@register("parity")
class ParityTask(Task):
    """A bit string; the answer is ``1`` when it holds an odd number of ones, else ``0``; with
    ``scratchpad`` (the default), the parity of every prefix, ``length`` bits ending in it::

        1 0 1 1 <sep> 1 1 0 1 <eos>        (scratchpad=false: 1 0 1 1 <sep> 1 <eos>)

    Training starts at 8 bits: at 6 the ``2**6 = 64`` strings are nearly all among the 256 test
    sequences, which leaves a validation set (:func:`data.streams.validation_set`) of a few
    repeated strings. Without the scratchpad, every scheme tried (``none``, ``learned``,
    ``rope``, ``alibi`` at 6..12; ``none`` and ``rope`` at 7..8) stayed at chance (48.8-49.8%)
    within 3000 steps of the suite's recipe, as transformers are known to fail on parity
    (Bhattamishra et al. 2020; Delétang et al. 2023)."""

    Options = FoldOptions
    train_lengths = (8, 12)

    def __init__(self, options: FoldOptions | None = None) -> None:
        super().__init__(options)
        self.vocab = [BOS, SEP, EOS, *BITS]

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        bits = rng.integers(2, size=(n, length))  # (n, L)
        running = np.cumsum(bits, axis=1) % 2  # (n, L): parity of every prefix
        answers = running if self.options.scratchpad else running[:, -1:]
        first = self.token_id(BITS[0])
        return bits + first, answers + first

    def solve(self, prompt: Sequence[str]) -> list[str]:
        prefixes = [str(list(prompt[: i + 1]).count("1") % 2) for i in range(len(prompt))]
        return prefixes if self.options.scratchpad else prefixes[-1:]


@dataclass(frozen=True)
class AdditionOptions:
    """Options of ``binary_addition``.

    Attributes:
        msb_first: write operands and sum most significant bit first (default: least
            significant first, the order in which carries propagate).
    """

    msb_first: bool = False


@register("binary_addition")
class BinaryAdditionTask(Task):
    """Two ``length``-bit numbers (leading zeros kept) joined by ``+``; the answer is their sum
    without leading zeros beyond ``length`` bits: ``length`` bits, or ``length + 1`` when the
    last addition carries.

    Training lengths 4..6: at 3 bits there are only ``2**6 = 64`` prompts, nearly all among the
    256 test sequences (seed 0 left one distinct validation sequence); at 3..8, ``learned``
    reached 100% at 3 bits and 99.6% at 5 but 23.0% at 8 within 3000 steps (``none``, ``alibi``
    and ``rope`` 15.1-18.2% overall). Output bit ``i`` reads operand bits at offsets that
    depend on ``length``; fewer lengths leave fewer offsets to learn."""

    Options = AdditionOptions
    train_lengths = (4, 6)

    def __init__(self, options: AdditionOptions | None = None) -> None:
        super().__init__(options)
        self.vocab = [BOS, SEP, EOS, *BITS, PLUS, PAD]

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        a, b = rng.integers(2, size=(2, n, length))  # (n, L) each, bit i has weight 2**i
        total = np.zeros((n, length + 1), dtype=np.int64)  # (n, L + 1), LSB first
        carry = np.zeros(n, dtype=np.int64)
        for i in range(length):
            column = a[:, i] + b[:, i] + carry
            total[:, i], carry = column % 2, column // 2
        total[:, length] = carry
        first = self.token_id(BITS[0])
        a, b, total = a + first, b + first, total + first
        if self.options.msb_first:  # the carry bit first; without a carry, drop its 0
            a, b, flipped = a[:, ::-1], b[:, ::-1], total[:, ::-1]
            total = np.where(carry[:, None] == 1, flipped, np.roll(flipped, -1, axis=1))
        total[carry == 0, length] = self.pad_id  # (n, L + 1): L bits and a pad, or L + 1 bits
        plus = np.full((n, 1), self.token_id(PLUS))
        return np.concatenate([a, plus, b], axis=1), total

    def solve(self, prompt: Sequence[str]) -> list[str]:
        text = "".join(prompt)
        left, right = text.split(PLUS)
        if not self.options.msb_first:
            left, right = left[::-1], right[::-1]
        total = format(int(left, 2) + int(right, 2), "b").zfill(len(left))
        return list(total if self.options.msb_first else total[::-1])


OPERATIONS = "+-*"


@dataclass(frozen=True)
class ModularOptions(FoldOptions):
    """Options of ``modular_arithmetic``: ``scratchpad`` (see :class:`FoldOptions`), and

    Attributes:
        modulus: numbers and the answer are in ``0 .. modulus - 1`` (2..10).
        operations: the operators drawn between operands, a non-empty subset of ``+-*``
            (``*`` binds tighter than ``+`` and ``-``, as usual).
    """

    modulus: int = 5
    operations: str = "+-"

    def __post_init__(self) -> None:
        if not 2 <= self.modulus <= 10:
            raise ValueError(f"modulus={self.modulus} is invalid; it must be in 2..10")
        if not self.operations or not set(self.operations) <= set(OPERATIONS):
            raise ValueError(
                f"operations={self.operations!r} is invalid; give a non-empty subset of "
                f"{OPERATIONS!r}"
            )


@register("modular_arithmetic")
class ModularArithmeticTask(Task):
    """``length`` operands in ``0 .. modulus - 1`` joined by operators; the answer is the
    expression's value modulo ``modulus``; with ``scratchpad`` (the default), the value of every
    prefix that ends in an operand, ``length`` digits ending in it::

        3 + 4 - 1 <sep> 3 2 1 <eos>        (scratchpad=false: 3 + 4 - 1 <sep> 1 <eos>)

    The prompt has ``2 * length - 1`` tokens. Training starts at 3 operands: at 2 there are
    only ``5 * 2 * 5 = 50`` expressions, nearly always all in the 256 test sequences. Without
    the scratchpad it was not learned in distribution with the suite's recipe: at chance
    (18.9-20.9%) within 3000 steps with ``rope`` (3..8 operands, ``+-``), with ``none``,
    ``rope`` and ``alibi`` (``+`` only) and with ``none`` and ``rope`` at 3..4 operands."""

    Options = ModularOptions
    train_lengths = (3, 8)

    def __init__(self, options: ModularOptions | None = None) -> None:
        super().__init__(options)
        digits = [str(d) for d in range(self.options.modulus)]
        self.vocab = [BOS, SEP, EOS, *digits, *sorted(set(self.options.operations))]

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        m = self.options.modulus
        numbers = rng.integers(m, size=(n, length))  # (n, L)
        ops = np.array(list(self.options.operations))[
            rng.integers(len(self.options.operations), size=(n, length - 1))
        ]  # (n, L - 1) of "+", "-", "*"
        total = np.zeros(n, dtype=np.int64)  # sum of the finished terms
        term = numbers[:, 0].copy()  # the product being built, with its sign
        prefixes = [term % m]  # value of every prefix that ends in an operand, each (n,)
        for i in range(length - 1):
            times = ops[:, i] == "*"
            sign = np.where(ops[:, i] == "-", -1, 1)
            total = np.where(times, total, (total + term) % m)
            term = np.where(times, term * numbers[:, i + 1] % m, sign * numbers[:, i + 1])
            prefixes.append((total + term) % m)
        running = np.stack(prefixes, axis=1)  # (n, L)
        answers = running if self.options.scratchpad else running[:, -1:]
        ids = np.vectorize(self.token_id)
        prompts = np.empty((n, 2 * length - 1), dtype=np.int64)
        prompts[:, ::2] = numbers + self.token_id("0")
        if length > 1:
            prompts[:, 1::2] = ids(ops)
        return prompts, answers + self.token_id("0")

    def solve(self, prompt: Sequence[str]) -> list[str]:
        ends = range(1, len(prompt) + 1, 2)  # every prefix that ends in an operand
        values = [eval("".join(prompt[:end])) for end in ends]  # noqa: S307 (digits, + - *)
        prefixes = [str(value % self.options.modulus) for value in values]
        return prefixes if self.options.scratchpad else prefixes[-1:]
