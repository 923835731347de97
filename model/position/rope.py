"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer", §3.4.2, eq. 34).

Queries and keys are rotated pairwise by an angle proportional to their position, so the score
``<rope(q, m), rope(k, n)>`` depends on ``m - n`` only. Pairing is the half-split layout of
GPT-NeoX, Llama and Hugging Face: dimension ``i`` pairs with ``i + Dh/2`` (GPT-J and the RoFormer
paper pair neighbours ``2i, 2i+1`` instead; the two are equal up to a fixed permutation of the
head dimensions, so they learn the same functions). With ``rotary_fraction < 1`` only the first
``rotary_dims`` dimensions of each head are rotated and the rest pass through (partial rotary,
GPT-NeoX ``rotary_pct``, x-transformers ``rotary_emb_dim``).
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from model.config import ModelConfig
from model.position.base import PositionScheme, Scores, grown_cache, register


def rope_frequencies(head_dim: int, base: float = 10000.0) -> Tensor:
    """Rotation frequencies ``omega_i = base**(-2i/head_dim)``, ``i = 0 .. head_dim/2 - 1``.

    Returns:
        float32 tensor ``(head_dim // 2,)`` in radians per position.

    Raises:
        ValueError: ``head_dim`` odd or < 2, or ``base`` <= 0.
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"RoPE head_dim must be even and >= 2, got {head_dim}")
    if base <= 0:
        raise ValueError(f"rope theta (base) must be > 0, got {base}")
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    return (base**-exponent).float()


def rope_cos_sin(positions: Tensor, inv_freq: Tensor) -> tuple[Tensor, Tensor]:
    """Cosine and sine of the angles ``positions * inv_freq``, computed in float32.

    Args:
        positions: integer ``(T,)`` or ``(B, T)``.
        inv_freq: float32 ``(Dh/2,)`` from :func:`rope_frequencies`.

    Returns:
        ``(cos, sin)``, each float32 ``(T, Dh/2)`` or ``(B, T, Dh/2)``.
    """
    angle = positions.to(torch.float32).unsqueeze(-1) * inv_freq.to(positions.device)
    return angle.cos(), angle.sin()  # each (..., T, Dh/2)


def rotate_half_split(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs ``(x[..., i], x[..., i + R/2])`` of the first ``R = 2 * cos.shape[-1]``
    dimensions by the angles whose cos/sin are given; dimensions past ``R`` pass through.

    Args:
        x: ``(..., T, Dh)`` of any float dtype, ``Dh >= R``.
        cos, sin: float32, broadcastable to ``(..., T, R/2)``.

    Returns:
        Tensor of ``x``'s shape and dtype; the arithmetic is done in float32.
    """
    rotary = 2 * cos.shape[-1]
    if rotary < x.shape[-1]:
        head, tail = x[..., :rotary], x[..., rotary:]  # (..., T, R), (..., T, Dh - R)
        return torch.cat((rotate_half_split(head, cos, sin), tail), dim=-1)
    x1, x2 = x.float().chunk(2, dim=-1)  # each (..., T, Dh/2)
    rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)  # (..., T, Dh)
    return rotated.to(x.dtype)


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotate ``x`` by RoPE at ``positions`` (half-split pairing, angles in float32).

    Args:
        x: queries or keys ``(..., T, Dh)``; with ``(B, T)`` positions, ``x`` is ``(B, H, T, Dh)``
            or ``(B, T, Dh)``.
        positions: integer ``(T,)`` or ``(B, T)``; any non-negative value, no length limit.
        base: ``theta``.

    Returns:
        ``x`` rotated, same shape and dtype.

    Raises:
        ValueError: odd head width.
    """
    inv_freq = rope_frequencies(x.shape[-1], base).to(x.device)
    cos, sin = rope_cos_sin(positions.to(x.device), inv_freq)
    if positions.dim() == 2 and x.dim() == 4:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, Dh/2): broadcast over heads
    return rotate_half_split(x, cos, sin)


@dataclass(frozen=True)
class RopeOptions:
    """Options of ``rope``.

    Attributes:
        theta: the base of the rotation frequencies (Su et al. 2021, eq. 15). Evaluable: it may
            be changed at evaluation time (``python eval.py RUN eval.position_options.theta=...``).
        rotary_fraction: share of each head's dimensions that are rotated, in (0, 1]; rounded
            down to an even count of at least 2 (GPT-NeoX ``rotary_pct``).
    """

    theta: float = 10000.0
    rotary_fraction: float = 1.0

    def __post_init__(self) -> None:
        if not self.theta > 0:
            raise ValueError(f"theta={self.theta!r} is invalid; it must be > 0")
        if not 0 < self.rotary_fraction <= 1:
            raise ValueError(
                f"rotary_fraction={self.rotary_fraction!r} is invalid; it must be in (0, 1]"
            )


def rotary_dims(head_dim: int, fraction: float) -> int:
    """Rotated dimensions per head: ``head_dim * fraction`` rounded down to even, at least 2."""
    return max(2, int(head_dim * fraction) // 2 * 2)


@register("rope")
class RotaryPosition(PositionScheme):
    """Rotates queries and keys in every layer; nothing is added to embeddings or scores.

    ``cos``/``sin`` tables for default positions are cached per model and grown on demand
    (doubling); explicit positions are rotated by angles computed from them directly.
    """

    Options = RopeOptions
    evaluable = frozenset({"theta"})
    relative = True

    def __init__(self, config: ModelConfig, options: RopeOptions) -> None:
        super().__init__(config, options)
        half = rotary_dims(config.head_dim, options.rotary_fraction) // 2
        self.register_buffer("_cos", torch.empty(0, half), persistent=False)
        self.register_buffer("_sin", torch.empty(0, half), persistent=False)

    @classmethod
    def check(cls, config: ModelConfig, options: RopeOptions) -> None:
        """RoPE rotates pairs of dimensions, so ``head_dim`` must be even."""
        if config.head_dim % 2:
            raise ValueError(
                f"model.head_dim={config.head_dim} (d_model / n_heads) is odd; RoPE rotates pairs "
                "of dimensions, so it needs an even head_dim"
            )

    def inv_freq(self) -> Tensor:
        """Float32 ``(R/2,)`` frequencies of the rotated dimensions (``R`` = rotary dims)."""
        rotary = rotary_dims(self.config.head_dim, self.options.rotary_fraction)
        return rope_frequencies(rotary, self.options.theta)

    def reserve(self, n_positions: int) -> None:
        """Grow the cached tables to at least ``n_positions`` rows."""

        def angles(n: int) -> Tensor:  # (n, R/2) float32, whatever dtype the model was cast to
            return torch.arange(n).float().unsqueeze(1) * self.inv_freq()

        self._cos = grown_cache(self._cos, n_positions, lambda n: angles(n).cos())
        self._sin = grown_cache(self._sin, n_positions, lambda n: angles(n).sin())

    def prepare(self, positions: Tensor | None, seq_len: int) -> tuple[Tensor, Tensor]:
        """``(cos, sin)``: float32 ``(T, R/2)``, or ``(B, 1, T, R/2)`` for ``(B, T)`` positions."""
        if positions is None:
            self.reserve(seq_len)
            return self._cos[:seq_len], self._sin[:seq_len]  # (T, R/2) views
        cos, sin = rope_cos_sin(positions, self.inv_freq())  # (T, R/2) or (B, T, R/2)
        if positions.dim() == 2:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, R/2)
        return cos, sin

    def layer(self, index: int, q: Tensor, k: Tensor, state: tuple[Tensor, Tensor]) -> Scores:
        """Queries and keys ``(B, H, T, Dh)`` rotated; the same tables in every layer."""
        cos, sin = state
        return Scores(rotate_half_split(q, cos, sin), rotate_half_split(k, cos, sin))
