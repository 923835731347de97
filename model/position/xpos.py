"""xPos: RoPE with an exponential decay (Sun et al. 2023, "A Length-Extrapolatable
Transformer", ACL, §3.2, eq. 8-9; reference code microsoft/torchscale ``XPOS``).

Queries are rotated as in RoPE and scaled by ``zeta_i ** (n / gamma)``, keys by
``zeta_i ** (-m / gamma)``, with ``zeta_i = (2i / Dh + 0.4) / 1.4`` for pair ``i`` and
``gamma`` the scale base (512). The score of a query at ``n`` and a key at ``m`` is then RoPE's
times ``zeta_i ** ((n - m) / gamma)`` per pair: a decay with distance, still relative. Like
torchscale, exponents are taken relative to the middle of the sequence (here
``positions - positions[0] - T // 2``) so the scales stay near 1 at any absolute position;
this changes no score. Causal only: for keys after the query the factor grows instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from model.position.base import PositionScheme, SchemeConfig, Scores, register
from model.position.rope import (
    require_even_head_dim,
    rope_cos_sin,
    rope_frequencies,
    rotate_half_split,
)


def xpos_zeta(head_dim: int) -> Tensor:
    """Per-pair decay bases ``zeta_i = (2i / Dh + 0.4) / 1.4``, ``i = 0 .. Dh/2 - 1``.

    Returns:
        float32 ``(Dh/2,)`` in ``[0.4/1.4, 1)``: the fastest-rotating pairs decay most.
    """
    return (torch.arange(0, head_dim, 2, dtype=torch.float32) + 0.4 * head_dim) / (1.4 * head_dim)


def xpos_scales(positions: Tensor, zeta: Tensor, scale_base: float) -> Tensor:
    """``zeta ** (positions / scale_base)``: float32 ``(..., T, Dh/2)``.

    Args:
        positions: float or integer ``(..., T)`` (already centred by the caller).
        zeta: float32 ``(Dh/2,)`` from :func:`xpos_zeta`.
        scale_base: ``gamma``.
    """
    return zeta ** (positions.float().unsqueeze(-1) / scale_base)


@dataclass(frozen=True)
class XposOptions:
    """Options of ``xpos``.

    Attributes:
        theta: RoPE base of the rotation frequencies.
        scale_base: ``gamma``, positions per unit of the decay exponent (paper: 512).
    """

    theta: float = 10000.0
    scale_base: float = 512.0

    def __post_init__(self) -> None:
        for name in ("theta", "scale_base"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid; it must be > 0")


@register("xpos")
class XposPosition(PositionScheme):
    """RoPE rotation plus the xPos decay, applied to q and k in every layer."""

    Options = XposOptions
    relative = True
    bidirectional = False

    def __init__(self, config: SchemeConfig, options: XposOptions) -> None:
        super().__init__(config, options)
        self.register_buffer("zeta", xpos_zeta(config.head_dim), persistent=False)
        inv_freq = rope_frequencies(config.head_dim, options.theta)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @classmethod
    def check(cls, config: SchemeConfig, options: XposOptions) -> None:
        """Rotation needs pairs of dimensions: ``head_dim`` must be even."""
        require_even_head_dim(config, "xPos")

    def prepare(self, positions: Tensor | None, seq_len: int) -> tuple[Tensor, ...]:
        """``(cos, sin, query scale, key scale)``: float32 ``(T, Dh)``-broadcastable tables,
        ``(B, 1, T, .)`` for ``(B, T)`` positions."""
        device = self.inv_freq.device
        pos = torch.arange(seq_len, device=device) if positions is None else positions
        cos, sin = rope_cos_sin(pos, self.inv_freq)  # (..., T, Dh/2)
        centred = pos - pos[..., :1] - seq_len // 2  # (..., T): exponents near 0
        scale = xpos_scales(centred, self.zeta, self.options.scale_base)  # (..., T, Dh/2)
        scale = torch.cat((scale, scale), dim=-1)  # (..., T, Dh): half-split pairs share it
        tables = (cos, sin, scale, 1 / scale)
        if pos.dim() == 2:
            tables = tuple(t.unsqueeze(1) for t in tables)  # (B, 1, T, .)
        return tables

    def layer(self, index: int, q: Tensor, k: Tensor, state: tuple[Tensor, ...]) -> Scores:
        """Queries rotated and scaled up, keys rotated and scaled down: ``(B, H, T, Dh)``."""
        cos, sin, up, down = state
        return Scores(rotate_half_split(q, cos, sin, up), rotate_half_split(k, cos, sin, down))
