"""Fixed sinusoidal absolute positions (Vaswani et al. 2017, "Attention Is All You Need", §3.5)."""

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from model.position.base import PositionScheme, SchemeConfig, cached_rows, register


def sinusoidal_rows(positions: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """The sinusoidal encoding of ``positions``, computed in float64 and returned as float32.

    ``PE[p, 2i] = sin(p / base**(2i/dim))`` and ``PE[p, 2i+1] = cos(p / base**(2i/dim))``:
    sine and cosine interleaved, as in Vaswani et al. 2017, §3.5 (not concatenated halves).

    Args:
        positions: integer ``(...)``, any values (no length limit).
        dim: encoding width, even and >= 2.
        base: wavelength base; the longest wavelength is ``2 * pi * base``.

    Returns:
        float32 ``(..., dim)`` on ``positions``' device.

    Raises:
        ValueError: ``dim`` odd or < 2, or ``base`` <= 0.
    """
    if dim < 2 or dim % 2:
        raise ValueError(f"sinusoidal dim must be even and >= 2, got {dim}")
    if base <= 0:
        raise ValueError(f"base must be > 0, got {base}")
    exponents = torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device)
    inv_freq = torch.exp(-math.log(base) * exponents / dim)  # (dim/2,)
    angle = positions.to(torch.float64).unsqueeze(-1) * inv_freq  # (..., dim/2)
    table = torch.stack((angle.sin(), angle.cos()), dim=-1)  # (..., dim/2, 2)
    return table.flatten(-2).float()  # (..., dim): sin, cos, sin, cos, ...


def sinusoidal_table(n_positions: int, dim: int, base: float = 10000.0) -> Tensor:
    """:func:`sinusoidal_rows` of ``0 .. n_positions - 1``: float32 ``(n_positions, dim)``, CPU.

    Raises:
        ValueError: ``dim`` odd or < 2, ``n_positions`` negative, or ``base`` <= 0.
    """
    if n_positions < 0:
        raise ValueError(f"n_positions must be >= 0, got {n_positions}")
    return sinusoidal_rows(torch.arange(n_positions), dim, base)


@dataclass(frozen=True)
class SinusoidalOptions:
    """Options of ``sinusoidal``.

    Attributes:
        base: wavelength base of the table.
        scale: multiplier of the table. Its entries are O(1) while token embeddings start at
            std 0.02 (GPT-2 init); Vaswani et al. balance the two by scaling embeddings by
            ``sqrt(d_model)`` (§3.4). Here the table is scaled instead, by default to the
            embeddings' init std, so content is not drowned.
    """

    base: float = 10000.0
    scale: float = 0.02

    def __post_init__(self) -> None:
        for name in ("base", "scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid; it must be > 0")


@register("sinusoidal")
class SinusoidalPosition(PositionScheme):
    """Adds ``scale * sinusoidal_table`` rows to the token embeddings, at any length.

    The table for default positions is cached and grown on demand (doubling), never rebuilt per
    step; explicit positions are encoded directly (no table, no host synchronisation).
    """

    Options = SinusoidalOptions

    def __init__(self, config: SchemeConfig, options: SinusoidalOptions) -> None:
        super().__init__(config, options)
        self.register_buffer("_table", torch.empty(0, config.d_model), persistent=False)

    @classmethod
    def check(cls, config: SchemeConfig, options: SinusoidalOptions) -> None:
        """The table interleaves sin and cos, so ``d_model`` must be even."""
        if config.d_model % 2:
            raise ValueError(
                f"model.d_model={config.d_model} is odd; the sinusoidal table needs an even width"
            )

    def rows(self, positions: Tensor) -> Tensor:
        """Scaled encoding of ``positions``: float32 ``(..., D)``."""
        o = self.options
        return o.scale * sinusoidal_rows(positions, self.config.d_model, o.base)

    def reserve(self, n_positions: int) -> None:
        """Grow the cached table to at least ``n_positions`` rows."""
        cached_rows(self, "_table", n_positions, lambda n: self.rows(torch.arange(n)))

    def embedding(self, positions: Tensor | None, seq_len: int) -> Tensor:
        """Float32 ``(1, T, D)`` for default positions, ``(1 or B, T, D)`` for given ones."""
        if positions is not None:
            rows = self.rows(positions)  # (T, D) or (B, T, D)
            return rows if rows.dim() == 3 else rows.unsqueeze(0)
        table = cached_rows(self, "_table", seq_len, lambda n: self.rows(torch.arange(n)))
        return table.unsqueeze(0)  # (1, T, D), a view
