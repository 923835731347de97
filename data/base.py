"""The interface of synthetic tasks, the batch they produce, and the task registry.

Every task builds sequences ``<bos> + prompt + <sep> + answer + <eos>``. The ``<bos>`` token
gives every sequence the same first token (an attention sink, and the anchor from which a model
without position encoding can count). The model reads the sequence
shifted by one (next-token prediction); loss and accuracy count only the answer tokens and the
closing ``<eos>`` (predicting where the answer stops is part of the task). A batch holds one
``length`` for all its rows, as in Ruoss et al. 2023 ("Randomized Positional Encodings Boost
Length Generalization of Transformers"), and every prompt of a length has the same number of
tokens. Answers may differ in length within a batch (binary addition with or without a final
carry): a task whose vocabulary holds ``<pad>`` fills the rest of the answer region with it,
after the row's ``<eos>``. Pads only ever follow a row's real tokens, so the causal (or
prefix-LM) mask of :mod:`model.mask` already keeps every real token from attending to them; the
loss and the scores skip them through :attr:`Batch.answer_mask`.

Shape notation: ``B`` batch, ``S`` tokens per sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from registry import Registry

BOS, SEP, EOS, PAD = "<bos>", "<sep>", "<eos>", "<pad>"


@dataclass
class Batch:
    """Sequences of one length, with the location of their answers.

    Attributes:
        tokens: int64 ``(B, S)``: ``<bos>``, prompt, ``<sep>``, answer, ``<eos>``.
        answer_start: index in ``tokens`` of the first answer token (the one after ``<sep>``).
        length: the task ``length`` (number of content items) these rows were drawn at.
        pad_id: id of ``<pad>`` for tasks with variable-length answers, else None (no pads).
    """

    tokens: Tensor
    answer_start: int
    length: int
    pad_id: int | None = None

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

    @property
    def answer_mask(self) -> Tensor:
        """Bool ``(B, A)``: True at real answer tokens and ``<eos>``, False at pads."""
        if self.pad_id is None:
            return torch.ones_like(self.answer_targets, dtype=torch.bool)
        return self.answer_targets != self.pad_id

    def rows(self, index: slice | Tensor) -> Batch:
        """The batch of rows ``index`` of this one (same answer start, length and pad)."""
        return replace(self, tokens=self.tokens[index])

    def to(self, device: torch.device | str) -> Batch:
        """The same batch with ``tokens`` on ``device``."""
        return replace(self, tokens=self.tokens.to(device))


@dataclass(frozen=True)
class NoOptions:
    """Options of a task that takes none."""


class Task:
    """A seeded generator of ``<bos> prompt <sep> answer <eos>`` sequences at a given ``length``.

    Subclasses set ``name`` (through :func:`register`), ``min_length``, ``train_lengths`` (the
    default training range), ``Options`` (a frozen dataclass of the task's settings, checked in
    its ``__post_init__``; configs give them as ``data.options.TASK.KEY``), ``vocab`` (a list of
    readable token strings, ``<bos>``, ``<sep>`` and ``<eos>`` first; ``<pad>`` only in tasks whose
    answers vary in length) in ``__init__``, and implement :meth:`generate` and :meth:`solve`.
    ``language_model`` marks a task of next-token prediction on text (:mod:`data.text`): no
    prompts and no exact answers; its runs are scored by loss and perplexity (:mod:`lab.lm`).
    """

    name: ClassVar[str]
    Options: ClassVar[type] = NoOptions
    min_length: ClassVar[int] = 1
    train_lengths: ClassVar[tuple[int, int]] = (2, 10)
    supports_minimal_pairs: ClassVar[bool] = False
    language_model: ClassVar[bool] = False
    vocab: list[str]

    def __init__(self, options: Any = None) -> None:
        self.options = self.Options() if options is None else options

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        """Draw ``n`` examples of ``length``: int arrays ``prompts (n, P)``, ``answers (n, A)``.

        ``P`` and ``A`` depend on ``length`` only; a row whose answer is shorter than ``A`` ends
        in ``<pad>`` ids (:meth:`assemble` puts its ``<eos>`` on the first one).
        """
        raise NotImplementedError

    def solve(self, prompt: Sequence[str]) -> list[str]:
        """The answer tokens of one prompt (its tokens between ``<bos>`` and ``<sep>``): the
        exact solver, written apart from :meth:`generate` so tests can check one with the other."""
        raise NotImplementedError

    def inputs(self) -> dict[str, str]:
        """The files or folders the task reads, by the option naming each (e.g.
        ``{"data.options.text.path": "corpus/"}``); empty for a task that generates its data.
        A run's folder may not lie inside one (:class:`lab.common.config.Config` checks it):
        the task would read the run's own files."""
        return {}

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]] | None:
        """The prompt positions the exact solver reads for each answer token, or None.

        ``prompt`` is what :meth:`solve` takes (the tokens between ``<bos>`` and ``<sep>``).
        Entry ``a`` lists the 0-based indices into ``prompt`` whose tokens determine answer
        token ``a`` of ``solve(prompt)``: one entry per answer token (``<eos>`` excluded),
        empty only where the token states an absence (``count`` answering ``=0``). Like
        :meth:`solve`, a pure function of the prompt, written apart from :meth:`generate`.
        None (the default): the task names none, e.g. because every answer token depends on
        the whole prompt. Used to score how much attention falls on these positions
        (:func:`source_mask`).
        """
        return None

    def minimal_pairs(self, rng: np.random.Generator, length: int, n: int) -> tuple[Batch, Batch]:
        """Two batches of ``n`` rows whose prompts differ by a swap of two items (the same bag
        of tokens) and whose answers differ; only where ``supports_minimal_pairs`` is true."""
        raise NotImplementedError(f"task {self.name!r} has no minimal pairs")

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""
        return len(self.vocab)

    @property
    def pad_id(self) -> int | None:
        """Id of ``<pad>``, or None for a task whose answers all have one length."""
        return self.vocab.index(PAD) if PAD in self.vocab else None

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
        """Join ``(n, P)`` prompts and ``(n, A)`` answers into a :class:`Batch`: ``<eos>`` after
        each row's last real answer token, ``<pad>`` after it (tasks with a pad)."""
        n = prompts.shape[0]
        bos, sep, eos = (np.full((n, 1), self.token_id(t)) for t in (BOS, SEP, EOS))
        if self.pad_id is None:
            tail = np.concatenate([answers, eos], axis=1)  # (n, A + 1)
        else:
            tail = np.concatenate([answers, np.full((n, 1), self.pad_id)], axis=1)  # (n, A + 1)
            ends = (answers != self.pad_id).sum(axis=1)  # (n,): real answer tokens per row
            tail[np.arange(n), ends] = eos[:, 0]
        tokens = np.concatenate([bos, prompts, sep, tail], axis=1)  # (n, S)
        return Batch(
            torch.from_numpy(tokens.astype(np.int64)), prompts.shape[1] + 2, length, self.pad_id
        )

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


TASKS: Registry[type[Task]] = Registry("task", "data.task")
"""The registered tasks, in registration order."""

register = TASKS.register
"""Class decorator that makes a task selectable as ``data.task = name``."""

task_class = TASKS.lookup
"""The class registered as ``name``; an unknown name is a ValueError listing the tasks."""


def available_tasks() -> tuple[str, ...]:
    """Names of the registered tasks, sorted."""
    return tuple(sorted(TASKS.names()))


def source_mask(task: Task, batch: Batch) -> Tensor | None:
    """Where each answer token's solver reads, as a mask over the model's input positions.

    Args:
        task: the task that drew ``batch``.
        batch: ``B`` rows of ``task`` (``tokens`` int64 ``(B, S)``).

    Returns:
        Bool ``(B, A, S - 1)`` on ``batch.tokens``' device, ``A = batch.answer_targets.shape[1]``:
        ``[b, a, 1 + p]`` is True for every ``p`` in ``task.read_positions(prompt_b)[a]``
        (input index ``1 + p``: ``inputs`` start with ``<bos>``); all False at the ``<eos>`` and
        ``<pad>`` answer positions. None when the task's :meth:`Task.read_positions` is None.
    """
    tokens = batch.tokens.tolist()
    n_rows, width = batch.tokens.shape
    mask = torch.zeros(n_rows, width - batch.answer_start, width - 1, dtype=torch.bool)
    for b, row in enumerate(tokens):
        prompt = [task.vocab[i] for i in row[1 : batch.answer_start - 1]]
        positions = task.read_positions(prompt)
        if positions is None:
            return None
        for a, read in enumerate(positions):
            mask[b, a, [1 + p for p in read]] = True
    return mask.to(batch.tokens.device)
