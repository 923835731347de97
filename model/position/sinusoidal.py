"""Fixed sinusoidal absolute positions (Vaswani et al. 2017, "Attention Is All You Need", §3.5)."""

import math

import torch
from torch import Tensor

from model.config import ModelConfig
from model.position.base import PositionScheme, check_positions, grown_cache, register


def sinusoidal_table(n_positions: int, dim: int, base: float = 10000.0) -> Tensor:
    """The sinusoidal encoding of positions ``0 .. n_positions - 1``.

    ``PE[p, 2i] = sin(p / base**(2i/dim))`` and ``PE[p, 2i+1] = cos(p / base**(2i/dim))``:
    sine and cosine interleaved, as in Vaswani et al. 2017, §3.5 (not concatenated halves).

    Args:
        n_positions: number of rows, >= 0.
        dim: encoding width, even and >= 2.
        base: wavelength base; the longest wavelength is ``2 * pi * base``.

    Returns:
        float32 tensor ``(n_positions, dim)`` on the CPU.

    Raises:
        ValueError: ``dim`` odd or < 2, ``n_positions`` negative, or ``base`` <= 0.
    """
    if dim < 2 or dim % 2:
        raise ValueError(f"sinusoidal dim must be even and >= 2, got {dim}")
    if n_positions < 0:
        raise ValueError(f"n_positions must be >= 0, got {n_positions}")
    if base <= 0:
        raise ValueError(f"base must be > 0, got {base}")
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
    inv_freq = torch.exp(-math.log(base) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angle = position * inv_freq  # (P, dim/2)
    table = torch.stack((angle.sin(), angle.cos()), dim=-1)  # (P, dim/2, 2)
    return table.reshape(n_positions, dim).float()  # (P, dim): sin, cos, sin, cos, ...


@register("sinusoidal")
class SinusoidalPosition(PositionScheme):
    """Adds ``sinusoidal_scale * sinusoidal_table`` rows to the token embeddings, at any length.

    The table is cached and grown on demand (doubling), never rebuilt per step.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.register_buffer("_table", torch.empty(0, config.d_model), persistent=False)

    def table(self, n_positions: int) -> Tensor:
        """The cached, scaled table (``sinusoidal_scale * sinusoidal_table``) with at least
        ``n_positions`` rows: float32 ``(P, D)``."""
        self._table = grown_cache(
            self._table,
            n_positions,
            lambda n: (
                self.config.sinusoidal_scale
                * sinusoidal_table(n, self.config.d_model, self.config.sinusoidal_base)
            ),
        )
        return self._table

    def embedding(self, positions: Tensor | None, seq_len: int) -> Tensor:
        """Float32 ``(1, T, D)`` for default positions, ``(1 or B, T, D)`` for given ones."""
        if positions is None:
            return self.table(seq_len)[:seq_len].unsqueeze(0)  # (1, T, D), a view
        check_positions(positions, seq_len)
        rows = self.table(int(positions.max()) + 1)[positions]  # (T, D) or (B, T, D)
        return rows if rows.dim() == 3 else rows.unsqueeze(0)
