"""Attention diagnostics of one length: every layer's and head's attention statistics and
solver alignment over the answer queries of a batch, from one extra float32 forward pass whose
attention is recomputed by hooks (:mod:`lab.evaluation.attention_maps`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from data import Batch, Task
from data.base import source_mask
from lab.diagnostics.attention_stats import ALIGNMENT, STATISTICS, alignment, row_statistics
from lab.evaluation.attention_maps import captured_attention, layer_weights
from model import Transformer

WEIGHT_BUDGET = 2**22
"""Most attention weights (floats) formed per layer at once: rows of a batch are taken in
chunks of ``WEIGHT_BUDGET // (H * Q * T)`` (16 MiB of float32 per layer and chunk), at least
one row, so past about 1000 tokens a chunk is one sequence and grows with its length squared."""


def chunk_rows(heads: int, queries: int, tokens: int) -> int:
    """Rows per chunk for :data:`WEIGHT_BUDGET` (at least 1)."""
    return max(1, WEIGHT_BUDGET // (heads * queries * tokens))


@torch.no_grad()
def attention_diagnostics(
    model: Transformer, task: Task, batch: Batch, batch_tokens: int | None = None
) -> dict[str, Any]:
    """Per layer and head, means over ``batch``'s answer queries (pads excluded) of
    :data:`lab.diagnostics.attention_stats.STATISTICS`, and of
    :data:`lab.diagnostics.attention_stats.ALIGNMENT` over the queries whose answer token the
    task's solver reads from the prompt (:meth:`data.Task.read_positions`).

    Args:
        model: on its device; evaluated in eval mode and float32 (restored afterwards).
        task: the task of ``batch``.
        batch: rows of one length.
        batch_tokens: most tokens per forward pass (``eval.batch_tokens``; None: no token
            bound); rows also follow :data:`WEIGHT_BUDGET` (:func:`chunk_rows`), at least one.

    Returns:
        ``{"samples", "answer_tokens", "aligned_tokens", STAT: [[float per head] per layer]
        for each statistic}``; the alignment lists are None when the task names no read
        positions or no answer query has any.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    answer = batch.answer_slice
    n, t = batch.inputs.shape
    queries = t - answer.start
    positions = torch.arange(t, device=device)[answer]  # (Q,)
    sums: list[dict[str, Tensor]] = [{} for _ in model.blocks]
    rows = chunk_rows(model.config.n_heads, queries, t)
    if batch_tokens is not None:
        rows = min(rows, max(1, batch_tokens // t))
    for start in range(0, n, rows):
        chunk = batch.rows(slice(start, start + rows))
        sources = source_mask(task, chunk)  # (b, A, S - 1) or None, one chunk at a time
        sources = None if sources is None else sources.to(device)
        _add_chunk(model, chunk.to(device), sources, positions, sums)
    model.train(was_training)
    return _means(sums, n, int(batch.answer_mask.sum()))


def _add_chunk(
    model: Transformer,
    chunk: Batch,
    sources: Tensor | None,
    positions: Tensor,
    sums: list[dict[str, Tensor]],
) -> None:
    """Add one chunk's per-head sums into ``sums`` (one dict per layer) from a forward pass
    whose attention layers are hooked; ``positions`` ``(Q,)`` are the answer queries'."""
    weight = chunk.answer_mask.float()  # (b, Q)

    def on_layer(index: int, module: torch.nn.Module, x: Tensor, context: object) -> None:
        weights, visible = layer_weights(module, x, context, chunk.answer_slice)  # (b, H, Q, T)
        found = row_statistics(weights, visible, positions, weight)
        if sources is not None:
            found |= alignment(weights, sources)
        for name, value in found.items():
            sums[index][name] = sums[index].get(name, 0) + value

    with captured_attention(model, on_layer):
        model(chunk.inputs, prefix_len=chunk.answer_start)


def _means(sums: list[dict[str, Tensor]], samples: int, answer_tokens: int) -> dict[str, Any]:
    """The record of :func:`attention_diagnostics` from its per-layer sums."""
    aligned = int(sums[0].get("aligned_tokens", 0))
    record: dict[str, Any] = {
        "samples": samples,
        "answer_tokens": answer_tokens,
        "aligned_tokens": aligned,
    }
    for name in STATISTICS:
        record[name] = [_per_head(layer[name], answer_tokens) for layer in sums]
    for name in ALIGNMENT:
        record[name] = [_per_head(layer[name], aligned) for layer in sums] if aligned else None
    return record


def _per_head(total: Tensor, count: int) -> list[float]:
    """``total / count`` per head, rounded to 6 decimals."""
    return [round(float(v) / count, 6) for v in total.cpu()]
