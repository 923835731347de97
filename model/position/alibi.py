"""ALiBi: attention with linear biases (Press et al. 2022, "Train Short, Test Long", §3).

With ``learned_slopes`` the head slopes are trained, starting at the paper's geometric
sequence (McGill's ``alibi_learned``; x-transformers ``learned_alibi_slopes``): they are kept
as log-slopes, so every slope stays positive and the bias a penalty.
"""

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from model.position.base import ALL, PositionScheme, SchemeConfig, register, relative_distance


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


def alibi_bias(
    slopes: Tensor,
    positions: Tensor | None,
    seq_len: int,
    queries: slice = ALL,
    keys: slice = ALL,
) -> Tensor:
    """Additive score bias ``-m_h * |i - j|`` for query position ``i`` and key position ``j``.

    Causal models only ever see ``j <= i``, where this is Press et al.'s ``-m_h * (i - j)``;
    bidirectional ones get the symmetric form. No mask: :mod:`model.mask` adds it.

    Args:
        slopes: float32 ``(H,)``.
        positions: None (``arange(T)``), integer ``(T,)`` or ``(B, T)``.
        seq_len: ``T``.
        queries, keys: the window, as in :meth:`PositionScheme.score_bias`.

    Returns:
        float32 ``(1, H, Tq, Tk)`` or ``(B, H, Tq, Tk)``.
    """
    distance = relative_distance(positions, seq_len, slopes.device, queries, keys).abs()
    return -slopes.view(1, -1, 1, 1) * distance.unsqueeze(1)  # (1 or B, H, Tq, Tk)


@dataclass(frozen=True)
class AlibiOptions:
    """Options of ``alibi``.

    Attributes:
        learned_slopes: train the head slopes (as log-slopes, initialised at
            :func:`alibi_slopes`) instead of keeping them fixed.
    """

    learned_slopes: bool = False


@register("alibi")
class ALiBiPosition(PositionScheme):
    """Adds ``-alibi_slopes[h] * distance`` to every head's scores; no embedding, no rotation.

    The bias at default positions is a fixed function of ``T``, so the model caches it with the
    mask merged in (:class:`model.mask.MaskCache`); with ``learned_slopes`` it has parameters,
    ``log_slopes`` ``(H,)``, and is built in every forward pass instead.
    """

    Options = AlibiOptions
    relative = True
    fixed_bias = True

    def __init__(self, config: SchemeConfig, options: AlibiOptions) -> None:
        super().__init__(config, options)
        self.register_buffer("alibi_slopes", alibi_slopes(config.n_heads), persistent=False)
        if options.learned_slopes:
            self.fixed_bias = False
            self.log_slopes = nn.Parameter(alibi_slopes(config.n_heads).log())

    def reset_parameters(self) -> None:
        """Learned slopes start at the paper's geometric slopes."""
        if self.options.learned_slopes:
            with torch.no_grad():
                self.log_slopes.copy_(alibi_slopes(self.config.n_heads).log())

    def score_bias(
        self, positions: Tensor | None, seq_len: int, queries: slice = ALL, keys: slice = ALL
    ) -> Tensor:
        """Float32 ``(1 or B, H, Tq, Tk)``; with ``learned_slopes`` gradients reach
        ``log_slopes``."""
        slopes = self.log_slopes.exp() if self.options.learned_slopes else self.alibi_slopes
        return alibi_bias(slopes, positions, seq_len, queries, keys)
