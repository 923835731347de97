"""ALiBi: attention with linear biases (Press et al. 2022, "Train Short, Test Long", §3)."""

import math

import torch
from torch import Tensor

from model.config import ModelConfig
from model.position.base import (
    PositionScheme,
    causal_fill,
    check_positions,
    outside_autograd,
    register,
)


def alibi_slopes(n_heads: int) -> Tensor:
    """Per-head slopes ``m_h`` of the distance penalty, the rule of Press et al. 2022, §3.

    For ``n`` heads, ``n`` a power of two, the slopes are the geometric sequence that starts at
    ``2**(-8/n)`` with that ratio (8 heads: 1/2, 1/4, ..., 1/256). For other ``n``, take the
    slopes of the nearest lower power of two ``c``, then the first ``n - c`` of every other slope
    of ``2c`` heads (the reference implementation, ofirpress/attention_with_linear_biases).

    Returns:
        float32 tensor ``(n_heads,)``, unitless (score penalty per position of distance).

    Raises:
        ValueError: ``n_heads`` < 1.
    """
    if n_heads < 1:
        raise ValueError(f"n_heads must be >= 1, got {n_heads}")

    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(closest) + geometric(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: Tensor, positions: Tensor, causal: bool) -> Tensor:
    """Additive score bias ``-m_h * (i - j)`` for query position ``i`` and key position ``j``.

    Bidirectional attention uses the symmetric ``-m_h * |i - j|``. When ``causal``, keys after
    the query (by sequence index) get ``-inf``.

    Args:
        slopes: float32 ``(H,)``.
        positions: integer ``(T,)`` or ``(B, T)``.
        causal: merge the causal mask into the bias.

    Returns:
        float32 ``(1, H, T, T)`` or ``(B, H, T, T)``.
    """
    pos = positions.float()
    distance = pos.unsqueeze(-1) - pos.unsqueeze(-2)  # (..., T, T): i - j
    # causal: an infinite distance to future keys becomes the -inf of the causal mask, so the
    # (B, H, T, T) bias is built once, not built and then copied by a masked fill
    distance = causal_fill(distance, math.inf) if causal else distance.abs()
    distance = distance if distance.dim() == 3 else distance.unsqueeze(0)  # (1 or B, T, T)
    return -slopes.view(1, -1, 1, 1) * distance.unsqueeze(1)  # (1 or B, H, T, T)


@register("alibi")
class ALiBiPosition(PositionScheme):
    """Adds ``-alibi_slopes[h] * distance`` to every head's scores; no embedding, no rotation.

    For default positions the bias (causal mask merged in) is cached per (causal, dtype) at the
    longest length seen (grown to exactly that length, since it is quadratic) and sliced for
    shorter ones: it depends on ``i - j`` only.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.register_buffer("alibi_slopes", alibi_slopes(config.n_heads), persistent=False)
        self._cache: dict[tuple[bool, torch.dtype], Tensor] = {}

    def score_bias(
        self, positions: Tensor | None, seq_len: int, causal: bool, dtype: torch.dtype
    ) -> Tensor:
        """``dtype`` ``(1, H, T, T)`` for default positions, ``(1 or B, H, T, T)`` otherwise."""
        if positions is not None:
            check_positions(positions, seq_len)
            positions = positions.to(self.alibi_slopes.device)
            return alibi_bias(self.alibi_slopes, positions, causal).to(dtype)
        key = (causal, dtype)
        cache = self._cache.get(key)  # (1, H, P, P), P the longest length seen
        if cache is None or cache.shape[-1] < seq_len or cache.device != self.alibi_slopes.device:
            positions = torch.arange(seq_len, device=self.alibi_slopes.device)
            with outside_autograd():
                cache = alibi_bias(self.alibi_slopes, positions, causal).to(dtype)
            self._cache[key] = cache
        return cache[..., :seq_len, :seq_len]  # (1, H, T, T), a view
