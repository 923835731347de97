"""The interface of synthetic tasks, the batch they produce, and the task registry.

Every task builds sequences ``<bos> + prompt + <sep> + answer + <eos>``. The ``<bos>`` token
gives every sequence the same first token (an attention sink, and the anchor from which a model
without position encoding can count). The model reads the sequence
shifted by one (next-token prediction); loss and accuracy count only the answer tokens and the
closing ``<eos>`` (predicting where the answer stops is part of the task). A batch holds one
``length`` for all its rows, as in Ruoss et al. 2023 ("Randomized Positional Encodings Boost
Length Generalization of Transformers"), so no padding or padding mask is needed.

Shape notation: ``B`` batch, ``S`` tokens per sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

BOS, SEP, EOS = "<bos>", "<sep>", "<eos>"

_TASKS: dict[str, type[Task]] = {}


@dataclass
class Batch:
    """Sequences of one length, with the location of their answers.

    Attributes:
        tokens: int64 ``(B, S)``: ``<bos>``, prompt, ``<sep>``, answer, ``<eos>``.
        answer_start: index in ``tokens`` of the first answer token (the one after ``<sep>``).
        length: the task ``length`` (number of content items) these rows were drawn at.
    """

    tokens: Tensor
    answer_start: int
    length: int

    @property
    def inputs(self) -> Tensor:
        """Model input, int64 ``(B, S - 1)``."""
        return self.tokens[:, :-1]

    @property
    def answer_slice(self) -> slice:
        """Slice of the logit positions (of ``inputs``) that predict answer tokens and ``<eos>``."""
        return slice(self.answer_start - 1, self.tokens.shape[1] - 1)

    @property
    def answer_targets(self) -> Tensor:
        """The answer tokens and ``<eos>``, int64 ``(B, A)``."""
        return self.tokens[:, self.answer_start :]

    def to(self, device: torch.device | str) -> Batch:
        """The same batch with ``tokens`` on ``device``."""
        return Batch(self.tokens.to(device), self.answer_start, self.length)


class Task:
    """A seeded generator of ``<bos> prompt <sep> answer <eos>`` sequences at a given ``length``.

    Subclasses set ``name`` (through :func:`register`), ``min_length``, ``vocab`` (a list of
    readable token strings, ``<bos>``, ``<sep>`` and ``<eos>`` first) and implement
    :meth:`generate`.
    """

    name: ClassVar[str]
    min_length: ClassVar[int] = 1
    supports_minimal_pairs: ClassVar[bool] = False
    vocab: list[str]

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        """Draw ``n`` examples of ``length``: int arrays ``prompts (n, P)``, ``answers (n, A)``."""
        raise NotImplementedError

    def minimal_pairs(self, rng: np.random.Generator, length: int, n: int) -> tuple[Batch, Batch]:
        """Two batches of ``n`` rows whose prompts differ by a swap of two items (the same bag
        of tokens) and whose answers differ; only where ``supports_minimal_pairs`` is true."""
        raise NotImplementedError(f"task {self.name!r} has no minimal pairs")

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""
        return len(self.vocab)

    def token_id(self, token: str) -> int:
        """Id of a token string."""
        return self.vocab.index(token)

    def sample(self, rng: np.random.Generator, length: int, n: int) -> Batch:
        """A :class:`Batch` of ``n`` sequences at ``length``.

        Raises:
            ValueError: ``length`` below the task's ``min_length`` or ``n`` < 1.
        """
        self.check_length(length)
        if n < 1:
            raise ValueError(f"batch size must be >= 1, got {n}")
        prompts, answers = self.generate(rng, length, n)
        return self.assemble(prompts, answers, length)

    def assemble(self, prompts: np.ndarray, answers: np.ndarray, length: int) -> Batch:
        """Join ``(n, P)`` prompts and ``(n, A)`` answers into a :class:`Batch`."""
        n = prompts.shape[0]
        bos, sep, eos = (np.full((n, 1), self.token_id(t)) for t in (BOS, SEP, EOS))
        tokens = np.concatenate([bos, prompts, sep, answers, eos], axis=1)  # (n, S)
        return Batch(torch.from_numpy(tokens.astype(np.int64)), prompts.shape[1] + 2, length)

    def check_length(self, length: int) -> None:
        """Raise ValueError unless ``length >= min_length``."""
        if length < self.min_length:
            raise ValueError(
                f"task {self.name!r} needs length >= {self.min_length}, got length={length}"
            )

    def decode(self, tokens: Sequence[int] | Tensor) -> str:
        """Readable text of one sequence, tokens joined by spaces."""
        ids = tokens.tolist() if isinstance(tokens, Tensor) else tokens
        return " ".join(self.vocab[i] for i in ids)


def register(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator that makes a task selectable as ``data.task = name``."""

    def add(cls: type[Task]) -> type[Task]:
        if name in _TASKS:
            raise ValueError(f"task {name!r} is registered twice")
        cls.name = name
        _TASKS[name] = cls
        return cls

    return add


def available_tasks() -> tuple[str, ...]:
    """Names of the registered tasks, in registration order."""
    return tuple(_TASKS)


def task_class(name: str) -> type[Task]:
    """The class registered as ``name``.

    Raises:
        ValueError: unknown name; the message lists the registered tasks.
    """
    if name not in _TASKS:
        raise ValueError(
            f"data.task={name!r} is not a known task; choose one of {', '.join(_TASKS)}"
        )
    return _TASKS[name]
