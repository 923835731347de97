"""PoPE: polar coordinate position embedding (Gopalakrishnan et al. 2025, "Decoupling the
'What' and 'Where' With Polar Coordinate Positional Embeddings", arXiv 2509.10534, §3,
eq. 5-7; x-transformers ``PolarEmbedding`` and ``apply_polar_pos_emb``).

Every one of the ``Dh`` components of a query or key becomes a complex number whose magnitude
is the content, ``mu = softplus(x_c)`` (non-negative), and whose phase is the position,
``t theta_c`` with ``theta_c = theta**(-c/Dh)``, ``c = 0 .. Dh-1`` (one frequency per component,
not per pair as in RoPE); keys add a learned phase bias ``delta_{h,c}`` clamped to
``[-2 pi, 0]``. In real coordinates a query at ``i`` is ``[mu cos(i theta), mu sin(i theta)]``
(width ``2 Dh``), a key at ``j`` is ``[mu cos(j theta + delta), mu sin(j theta + delta)]``, and
the score is ``sum_c mu_q mu_k cos((i - j) theta_c - delta_c) / sqrt(Dh)``: relative, with
content ("what") and position ("where") in separate factors. The scale stays ``1/sqrt(Dh)``
of the head width before doubling, as in x-transformers. ``delta`` starts at zero (x-transformers'
default; ``bias_uniform_init`` draws it from ``[-2 pi, 0]``) and is shared by all layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.position.base import PositionScheme, SchemeConfig, Scores, cached_rows, register


def pope_frequencies(head_dim: int, theta: float = 10000.0) -> Tensor:
    """``theta_c = theta**(-c / head_dim)``, ``c = 0 .. head_dim - 1``: float32 ``(Dh,)``
    radians per position (computed in float64)."""
    return (theta ** -(torch.arange(head_dim, dtype=torch.float64) / head_dim)).float()


def polar(x: Tensor, angle: Tensor) -> Tensor:
    """``[softplus(x) cos(angle), softplus(x) sin(angle)]`` along the last axis (float32).

    Args:
        x: ``(..., T, Dh)`` queries or keys, any float dtype.
        angle: float32 broadcastable to ``(..., T, Dh)``.

    Returns:
        ``(..., T, 2 Dh)`` in ``x``'s dtype.
    """
    magnitude = F.softplus(x.float())
    return torch.cat((magnitude * angle.cos(), magnitude * angle.sin()), dim=-1).to(x.dtype)


@dataclass(frozen=True)
class PopeOptions:
    """Options of ``pope``.

    Attributes:
        theta: the base of the frequencies.
        bias_uniform_init: draw the key phase bias from ``U[-2 pi, 0]`` instead of zero.
    """

    theta: float = 10000.0
    bias_uniform_init: bool = False

    def __post_init__(self) -> None:
        if not self.theta > 0:
            raise ValueError(f"theta={self.theta!r} is invalid; it must be > 0")


@register("pope")
class PolarPosition(PositionScheme):
    """Queries and keys to polar coordinates in every layer (width doubled), a learned phase
    bias per head and component on the keys; nothing is added to embeddings or scores."""

    Options = PopeOptions
    evaluable = frozenset({"theta"})
    relative = True
    widens_heads = True

    def __init__(self, config: SchemeConfig, options: PopeOptions) -> None:
        super().__init__(config, options)
        dh = config.head_dim
        self.register_buffer("frequencies", pope_frequencies(dh, options.theta), persistent=False)
        self.register_buffer("_angles", torch.empty(0, dh), persistent=False)
        self.phase_bias = nn.Parameter(torch.zeros(config.n_heads, 1, dh))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Zero, or ``U[-2 pi, 0]`` with ``bias_uniform_init``."""
        with torch.no_grad():
            if self.options.bias_uniform_init:
                self.phase_bias.uniform_(-2 * math.pi, 0.0)
            else:
                self.phase_bias.zero_()

    def reserve(self, n_positions: int) -> None:
        """Grow the cached angle table to at least ``n_positions`` rows."""
        cached_rows(self, "_angles", n_positions, self.angles_of)

    def angles_of(self, n: int) -> Tensor:
        """``t theta_c`` for ``t = 0 .. n-1``: float32 ``(n, Dh)``."""
        return torch.arange(n, device=self.frequencies.device).float().unsqueeze(1) * (
            self.frequencies
        )

    def prepare(self, positions: Tensor | None, seq_len: int) -> Tensor:
        """Angles ``p_t theta_c``: float32 ``(T, Dh)``, or ``(B, 1, T, Dh)`` for ``(B, T)``
        positions."""
        if positions is None:
            return cached_rows(self, "_angles", seq_len, self.angles_of)
        angles = positions.to(self.frequencies.device).float().unsqueeze(-1) * self.frequencies
        return angles.unsqueeze(1) if positions.dim() == 2 else angles

    def layer(self, index: int, q: Tensor, k: Tensor, state: Tensor) -> Scores:
        """Queries and keys ``(B, H, T, 2 Dh)`` in polar form, scores scaled by ``1/sqrt(Dh)``
        (``scale`` 1 of the undoubled width)."""
        bias = self.phase_bias.clamp(-2 * math.pi, 0.0)  # (H, 1, Dh)
        return Scores(polar(q, state), polar(k, state + bias), None, 1.0)
