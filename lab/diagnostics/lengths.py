"""Diagnostics at each evaluated length, beside exact-match: the failure modes of the same
logits, the attention statistics of the first ``eval.diagnostic_samples`` sequences, and the
run's summary of them in ``eval.json`` (``diagnostics``)."""

from __future__ import annotations

import time
from typing import Any

from data import Batch, Task
from data.base import EOS
from data.streams import evaluation_set
from lab.diagnostics.failures import FailureCounts
from lab.diagnostics.measure import attention_diagnostics
from lab.diagnostics.summary import aligned_head, run_line
from lab.evaluation.extrapolation import LengthResult, evaluate_batch
from model import Transformer


def diagnosed_length(
    model: Transformer,
    task: Task,
    batch: Batch,
    batch_tokens: int,
    precision: str,
    diagnostic_samples: int,
    train_answer_tokens: int | None,
) -> tuple[LengthResult, float]:
    """:func:`lab.evaluation.extrapolation.evaluate_batch` of ``batch`` (the same figures) with
    ``failures`` and ``attention`` filled in, and the wall time in seconds of the attention's
    extra forward pass. An unsupported length gets neither; a model without attention blocks
    (a stand-in with a transformer's forward) gets no ``attention``."""
    counts = FailureCounts(task.token_id(EOS))
    result = evaluate_batch(model, batch, batch_tokens, precision=precision, failures=counts)
    started = time.perf_counter()
    if result.supported:
        result.failures = counts.to_dict(train_answer_tokens)
        if isinstance(model, Transformer):
            first = batch.rows(slice(0, diagnostic_samples))
            result.attention = attention_diagnostics(model, task, first, batch_tokens)
    return result, time.perf_counter() - started


def training_answer_tokens(task: Task, seed: int, train_max: int, samples: int) -> int:
    """The longest answer (``<eos>`` not counted) among the test sequences at the longest
    training length ``train_max``: the answer lengths training saw reach about this far."""
    batch = evaluation_set(task, seed, train_max, samples)
    return int(batch.answer_mask.sum(dim=1).max()) - 1


def diagnostics_record(
    record: dict[str, Any],
    mode: str,
    train_answer_tokens: int,
    seconds: float,
    rope: dict[str, Any] | None = None,
) -> dict:
    """The run-level ``diagnostics`` entry of ``eval.json`` from its ``lengths`` rows:
    ``mode`` (``eval.diagnostics``), ``seconds`` (the extra passes' wall time),
    ``train_answer_tokens``, ``aligned_head`` (``[layer, head]``, or None) and
    ``where_it_fails`` (:func:`lab.diagnostics.summary.run_line`), and with ``mode`` ``full``
    on a RoPE run ``rope`` (:func:`lab.diagnostics.rope_use.rope_record`)."""
    found = {
        "mode": mode,
        "seconds": round(seconds, 4),
        "train_answer_tokens": train_answer_tokens,
        "aligned_head": aligned_head(record),
        "where_it_fails": run_line(record),
    }
    return found | ({"rope": rope} if rope is not None else {})
