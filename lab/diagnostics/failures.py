"""Failure modes of exact-match: the length decision (``<eos>`` too early or too late) against
wrong content, where the first wrong token falls, and exact-match with the length given.

Newman et al. 2020 ("The EOS Decision and Length Extrapolation") showed that much of a model's
failure past its training length is the decision to stop, not the content: their oracle-length
evaluation forbids ``<eos>`` until the right length and ends the answer there. Under teacher
forcing (which equals greedy decoding for exact-match, :mod:`lab.evaluation.metrics`) the first
wrong answer position is where greedy decoding first goes wrong, so it decides the failure:

- ``early_eos``: ``<eos>`` predicted where an answer token was due (the answer stops short);
- ``late_eos``: an answer token predicted where ``<eos>`` was due (the answer runs on);
- ``content``: a wrong answer token where one was due (the length still right so far).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

FAILURE_KINDS = ("right", "early_eos", "late_eos", "content")
"""The shares of a length's sequences; they sum to 1 (``right`` is exact-match)."""


@dataclass
class FailureCounts:
    """Counts of one length's sequences by failure mode, added chunk by chunk (:meth:`add`).

    Attributes:
        eos_id: the task's id of ``<eos>``.
        counts: sequences per :data:`FAILURE_KINDS` entry.
        oracle_right: sequences right under oracle-length evaluation.
        first_errors: the 1-based answer-token index of each wrong sequence's first error.
    """

    eos_id: int
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_KINDS, 0))
    oracle_right: int = 0
    first_errors: list[int] = field(default_factory=list)

    def add(self, logits: Tensor, targets: Tensor, real: Tensor) -> None:
        """Count one chunk.

        Args:
            logits: ``(B, A, V)`` at the answer positions (any float dtype).
            targets: int64 ``(B, A)``: answer tokens and ``<eos>``.
            real: bool ``(B, A)``: False at pads.
        """
        eos_id = self.eos_id
        predictions = logits.argmax(-1)  # (B, A)
        wrong = (predictions != targets) & real  # (B, A)
        first = wrong.float().argmax(-1)  # (B,): the first wrong index (0 when none)
        rows = torch.arange(len(first))
        any_wrong = wrong.any(-1)
        due_eos = targets[rows, first] == eos_id
        said_eos = predictions[rows, first] == eos_id
        kinds = {
            "right": ~any_wrong,
            "early_eos": any_wrong & said_eos & ~due_eos,
            "late_eos": any_wrong & due_eos,
            "content": any_wrong & ~said_eos & ~due_eos,
        }
        for kind, hit in kinds.items():
            self.counts[kind] += int(hit.sum())
        self.first_errors += (first[any_wrong] + 1).tolist()
        self.oracle_right += int(oracle_length_hits(logits, targets, real, self.eos_id).sum())

    def to_dict(self, train_answer_tokens: int | None) -> dict[str, Any]:
        """The ``failures`` entry of a length in ``eval.json``: the shares of
        :data:`FAILURE_KINDS`, ``oracle_exact_match``, ``first_error_median`` (1-based answer
        token; None without errors) and ``first_error_past_train``: the share of wrong
        sequences whose first error lies past ``train_answer_tokens`` (the longest answer seen
        in training, ``<eos>`` not counted; None without errors or when not known)."""
        samples = sum(self.counts.values())
        shares = {kind: n / samples for kind, n in self.counts.items()}
        errors = self.first_errors
        past = None
        if errors and train_answer_tokens is not None:
            past = sum(e > train_answer_tokens for e in errors) / len(errors)
        return {
            **shares,
            "oracle_exact_match": self.oracle_right / samples,
            "first_error_median": statistics.median(errors) if errors else None,
            "first_error_past_train": past,
        }


def oracle_length_hits(logits: Tensor, targets: Tensor, real: Tensor, eos_id: int) -> Tensor:
    """Bool ``(B,)``: each answer right when the length is given (Newman et al. 2020, oracle
    length): ``<eos>`` is forbidden (its logit set to ``-inf``) where an answer token is due,
    and the ``<eos>`` position itself is not scored, since the oracle ends the answer there."""
    forbidden = torch.zeros_like(logits, dtype=torch.bool)
    forbidden[..., eos_id] = True
    predictions = logits.masked_fill(forbidden, float("-inf")).argmax(-1)  # (B, A)
    scored = real & (targets != eos_id)
    return ((predictions == targets) | ~scored).all(-1)
