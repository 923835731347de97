"""Statistics of attention rows: entropy, the mass on the first token (the "sink") and the
mean attended distance, and their alignment with the positions an exact solver reads.

Every function takes the weights of answer queries, float32 ``(B, H, Q, T)`` (query ``m`` of
``Q`` at input position ``query_positions[m]``, over ``T`` keys), and returns per-head sums
over the answer tokens that count (``weight``), so chunks of rows add up before the mean.
"""

from __future__ import annotations

import torch
from torch import Tensor

STATISTICS = ("entropy", "entropy_norm", "sink_mass", "distance")
"""Per-head statistics of :func:`row_statistics`, in the order of ``eval.json``."""

ALIGNMENT = ("alignment_mass", "alignment_hit")
"""Per-head alignment figures of :func:`alignment`."""


def entropy(weights: Tensor) -> Tensor:
    """Shannon entropy in nats of each row, ``-sum_j p_j log p_j`` with ``0 log 0 = 0``:
    float32 ``(..., T)`` -> ``(...)``. A uniform row over ``n`` keys gives ``log n``."""
    return -torch.special.xlogy(weights, weights).sum(-1)


def row_statistics(
    weights: Tensor, visible: Tensor, query_positions: Tensor, weight: Tensor
) -> dict[str, Tensor]:
    """Per-head sums over answer queries of four statistics.

    Args:
        weights: float32 ``(B, H, Q, T)`` attention of the answer queries.
        visible: bool ``(1 or B, 1 or H, Q, T)``: keys each query may attend to.
        query_positions: int64 ``(Q,)``: each query's input position.
        weight: float32 ``(B, Q)``: 1 for an answer token that counts, 0 for a pad.

    Returns:
        float32 ``(H,)`` sums for each of :data:`STATISTICS`: ``entropy`` (nats),
        ``entropy_norm`` (entropy over ``log n``, ``n`` the keys the query sees; 1 is uniform;
        a query that sees one key counts 0), ``sink_mass`` (weight on input position 0, the
        ``<bos>`` token; Xiao et al. 2024, "Efficient Streaming Language Models with Attention
        Sinks") and ``distance`` (``sum_j p_j |i - j|``, in tokens).
    """
    h_rows = entropy(weights)  # (B, H, Q)
    seen = visible.sum(-1).float().expand_as(h_rows)  # (B, H, Q)
    log_seen = torch.where(seen > 1, seen.clamp(min=2).log(), torch.zeros_like(seen))
    normed = torch.where(seen > 1, h_rows / log_seen, torch.zeros_like(h_rows))
    keys = torch.arange(weights.shape[-1], device=weights.device)
    gap = (query_positions[:, None] - keys[None, :]).abs().float()  # (Q, T)
    rows = {
        "entropy": h_rows,
        "entropy_norm": normed,
        "sink_mass": weights[..., 0],
        "distance": (weights * gap).sum(-1),
    }
    w = weight[:, None, :]  # (B, 1, Q)
    return {name: (value * w).sum(dim=(0, 2)) for name, value in rows.items()}


def alignment(weights: Tensor, sources: Tensor) -> dict[str, Tensor]:
    """Per-head sums over answer queries that have solver positions: the attention mass on
    them, and whether the most-attended key is one of them.

    Args:
        weights: float32 ``(B, H, Q, T)``.
        sources: bool ``(B, Q, T)``: the keys the exact solver reads for each answer query
            (:func:`data.base.source_mask`); a query without any counts neither way.

    Returns:
        float32 ``(H,)`` sums for ``alignment_mass`` and ``alignment_hit``, and
        ``aligned_tokens``: a float32 ``()`` count of the queries that have solver positions
        (divide the sums by it).
    """
    counted = sources.any(-1).float()  # (B, Q)
    mask = sources[:, None].float()  # (B, 1, Q, T)
    mass = (weights * mask).sum(-1)  # (B, H, Q)
    top = weights.argmax(-1, keepdim=True)  # (B, H, Q, 1)
    hit = mask.expand_as(weights).gather(-1, top).squeeze(-1)  # (B, H, Q)
    c = counted[:, None, :]
    return {
        "alignment_mass": (mass * c).sum(dim=(0, 2)),
        "alignment_hit": (hit * c).sum(dim=(0, 2)),
        "aligned_tokens": counted.sum(),
    }
