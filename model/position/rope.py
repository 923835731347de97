"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer", §3.4.2, eq. 34).

Queries and keys are rotated pairwise by an angle proportional to their position, so the score
``<rope(q, m), rope(k, n)>`` depends on ``m - n`` only. Pairing is the half-split layout of
GPT-NeoX, Llama and Hugging Face: dimension ``i`` pairs with ``i + Dh/2`` (GPT-J and the RoFormer
paper pair neighbours ``2i, 2i+1`` instead; the two are equal up to a fixed permutation of the
head dimensions, so they learn the same functions).
"""

import torch
from torch import Tensor

from model.config import ModelConfig
from model.position.base import PositionScheme, QKRotation, check_positions, grown_cache, register


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
        raise ValueError(f"rope_theta (base) must be > 0, got {base}")
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
    angle = positions.to(torch.float32).unsqueeze(-1) * inv_freq  # (..., T, Dh/2)
    return angle.cos(), angle.sin()


def rotate_half_split(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs ``(x[..., i], x[..., i + Dh/2])`` by the angles whose cos/sin are given.

    Args:
        x: ``(..., T, Dh)`` of any float dtype.
        cos, sin: float32, broadcastable to ``(..., T, Dh/2)``.

    Returns:
        Tensor of ``x``'s shape and dtype; the arithmetic is done in float32.
    """
    x1, x2 = x.float().chunk(2, dim=-1)  # each (..., T, Dh/2)
    rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)  # (..., T, Dh)
    return rotated.to(x.dtype)


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotate ``x`` by RoPE at ``positions`` (half-split pairing, angles in float32).

    Args:
        x: queries or keys ``(..., T, Dh)``; with ``(B, T)`` positions, ``x`` is ``(B, H, T, Dh)``
            or ``(B, T, Dh)``.
        positions: integer ``(T,)`` or ``(B, T)``; any non-negative value, no length limit.
        base: ``rope_theta``.

    Returns:
        ``x`` rotated, same shape and dtype.

    Raises:
        ValueError: odd head width, or positions of the wrong shape or dtype.
    """
    check_positions(positions, x.shape[-2])
    inv_freq = rope_frequencies(x.shape[-1], base).to(x.device)
    cos, sin = rope_cos_sin(positions.to(x.device), inv_freq)
    if positions.dim() == 2 and x.dim() == 4:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, Dh/2): broadcast over heads
    return rotate_half_split(x, cos, sin)


@register("rope")
class RotaryPosition(PositionScheme):
    """Rotates queries and keys in every layer; nothing is added to embeddings or scores.

    ``cos``/``sin`` tables are cached per model and grown on demand (doubling), so training
    steps and layers share one table and any length works.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        half = config.head_dim // 2
        self.register_buffer("_cos", torch.empty(0, half), persistent=False)
        self.register_buffer("_sin", torch.empty(0, half), persistent=False)

    def cos_sin(self, n_positions: int) -> tuple[Tensor, Tensor]:
        """Cached float32 ``(P, Dh/2)`` tables with ``P >= n_positions``."""

        def angles(n: int) -> Tensor:  # (n, Dh/2) float32, whatever dtype the model was cast to
            inv_freq = rope_frequencies(self.config.head_dim, self.config.rope_theta)
            return torch.arange(n).float().unsqueeze(1) * inv_freq

        self._cos = grown_cache(self._cos, n_positions, lambda n: angles(n).cos())
        self._sin = grown_cache(self._sin, n_positions, lambda n: angles(n).sin())
        return self._cos, self._sin

    def qk_rotation(self, positions: Tensor | None, seq_len: int) -> QKRotation:
        """Rotation of ``(B, H, T, Dh)`` queries or keys at the given positions."""
        if positions is None:
            cos, sin = self.cos_sin(seq_len)
            cos, sin = cos[:seq_len], sin[:seq_len]  # (T, Dh/2) views
        else:
            check_positions(positions, seq_len)
            cos, sin = self.cos_sin(int(positions.max()) + 1)
            cos, sin = cos[positions], sin[positions]  # (T, Dh/2) or (B, T, Dh/2)
            if positions.dim() == 2:
                cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, Dh/2)
        return lambda t: rotate_half_split(t, cos, sin)
