"""T5 relative position bias (Raffel et al. 2020, "Exploring the Limits of Transfer Learning
with a Unified Text-to-Text Transformer", §2.1; Shaw et al. 2018 for relative attention).

Each query-key offset is mapped to one of ``num_buckets`` buckets: exact buckets for small
offsets, then logarithmically wider ones up to ``max_distance``, beyond which every offset
shares the last bucket. A learned scalar per (bucket, head) is added to the attention score.
Causal models use one-sided buckets (keys at or before the query); bidirectional ones spend
half the buckets on each side. The table is shared by all layers, as in T5 (``per_layer``
gives every layer its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from model.position.base import ALL, PositionScheme, SchemeConfig, Scores, register


def relative_position_bucket(
    relative_position: Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """T5's bucket of each offset ``relative_position = key_position - query_position``.

    The reference rule (mesh_tensorflow ``_relative_position_bucket``; Hugging Face
    ``T5Attention._relative_position_bucket``, which takes the same ``key - query``): with
    ``n = -relative_position`` (bidirectional: ``|relative_position|``, and offsets > 0 shifted
    to the upper half of the buckets), ``max_exact = num_buckets / 2`` (of the half, when
    bidirectional); ``n < max_exact`` is its own bucket; otherwise
    ``max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) * (num_buckets -
    max_exact))``, capped at ``num_buckets - 1``. Causal: keys after the query (``> 0``) fall in
    bucket 0.

    Args:
        relative_position: integer tensor of any shape.
        bidirectional: two-sided buckets.
        num_buckets: buckets in all (bidirectional: per side ``num_buckets // 2``).
        max_distance: offsets at or past it share the last bucket.

    Returns:
        int64 tensor of the same shape, values in ``[0, num_buckets)``.
    """
    buckets = torch.zeros_like(relative_position, dtype=torch.long)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        n = relative_position.abs()
    else:
        n = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    scaled = torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, n.long(), large)


@dataclass(frozen=True)
class T5Options:
    """Options of ``t5``.

    Attributes:
        num_buckets: buckets of offsets (T5: 32).
        max_distance: offset from which all share the last bucket (T5: 128).
        per_layer: a table per layer instead of one shared by all layers (T5 shares).
    """

    MAX_BUCKETS: ClassVar[int] = 1024
    """Most ``num_buckets`` (32 times T5's 32): a ``(num_buckets, n_heads)`` table per layer."""
    MAX_DISTANCE: ClassVar[int] = 2**16
    """Largest ``max_distance``: offsets past the lab's 4096 tokens
    (``lab.common.config.MAX_TOKENS``)
    never occur, so 65,536 is 16 times more than any run can use."""

    num_buckets: int = 32
    max_distance: int = 128
    per_layer: bool = False

    def __post_init__(self) -> None:
        if not 4 <= self.num_buckets <= self.MAX_BUCKETS:
            raise ValueError(
                f"num_buckets={self.num_buckets} is invalid; it must be in [4, {self.MAX_BUCKETS}]"
            )
        if self.max_distance > self.MAX_DISTANCE:
            raise ValueError(
                f"max_distance={self.max_distance} is invalid; it must be <= {self.MAX_DISTANCE}"
            )
        if self.max_distance <= self.num_buckets // 2:
            raise ValueError(
                f"max_distance={self.max_distance} is invalid; it must exceed num_buckets / 2 "
                f"= {self.num_buckets // 2} (the exact buckets)"
            )


@register("t5")
class T5Bias(PositionScheme):
    """Learned bias per (bucket of ``j - i``, head), shared by all layers or one per layer."""

    Options = T5Options
    relative = True
    shared_bias = True

    def __init__(self, config: SchemeConfig, options: T5Options) -> None:
        super().__init__(config, options)
        self.shared_bias = not options.per_layer  # per layer: each layer's own, from ``layer``
        tables = config.n_layers if options.per_layer else 1
        self.tables = nn.ModuleList(
            nn.Embedding(options.num_buckets, config.n_heads) for _ in range(tables)
        )

    def buckets(
        self, positions: Tensor | None, seq_len: int, queries: slice = ALL, keys: slice = ALL
    ) -> Tensor:
        """Bucket of every (query, key) pair of the window (see
        :meth:`PositionScheme.score_bias`): int64 ``(1, Tq, Tk)`` or ``(B, Tq, Tk)``."""
        device = self.tables[0].weight.device
        pos = torch.arange(seq_len, device=device) if positions is None else positions
        offset = pos[..., keys].unsqueeze(-2) - pos[..., queries].unsqueeze(-1)  # key - query
        offset = offset if offset.dim() == 3 else offset.unsqueeze(0)
        o = self.options
        return relative_position_bucket(
            offset, not self.config.causal, o.num_buckets, o.max_distance
        )

    def bias(self, table: nn.Embedding, buckets: Tensor) -> Tensor:
        """Float32 ``(1 or B, H, Tq, Tk)`` bias of ``table`` at ``buckets`` ``(1 or B, Tq, Tk)``."""
        return table(buckets).permute(0, 3, 1, 2)  # (1 or B, Tq, Tk, H) -> (1 or B, H, Tq, Tk)

    def score_bias(
        self, positions: Tensor | None, seq_len: int, queries: slice = ALL, keys: slice = ALL
    ) -> Tensor | None:
        """The shared table's bias (None with ``per_layer``)."""
        if self.options.per_layer:
            return None
        return self.bias(self.tables[0], self.buckets(positions, seq_len, queries, keys))

    def prepare(self, positions: Tensor | None, seq_len: int) -> Tensor | None:
        """Buckets for the per-layer tables (None when shared)."""
        return self.buckets(positions, seq_len) if self.options.per_layer else None

    def layer(self, index: int, q: Tensor, k: Tensor, state: Tensor | None) -> Scores:
        """Layer ``index``'s own bias when ``per_layer``; q and k unchanged."""
        if state is None:
            return Scores(q, k)
        return Scores(q, k, bias=self.bias(self.tables[index], state))
