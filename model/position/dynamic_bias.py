"""Dynamic position bias: a small MLP of the relative distance gives each head's score bias
(Liu et al. 2022, "Swin Transformer V2: Scaling Up Capacity and Resolution", §3.3, eq. 4, the
log-spaced continuous position bias, in one dimension; x-transformers ``DynamicPositionBias``,
``dynamic_pos_bias``).

``B_h(i, j) = G(x)_h`` with ``x = i - j`` (query minus key position) or, with ``log_distance``
(SwinV2's log-spaced coordinates, eq. 4), ``x = sign(i - j) * log(1 + |i - j|)``. ``G`` is an
MLP ``1 -> width`` then ``depth - 1`` layers ``width -> width``, each followed by SiLU
(x-transformers), then ``width -> H``; it is shared by every layer, and its output is the bias
itself (no sigmoid: SwinV2's ``16 sigmoid`` bounds an image's bias, a sequence's need not be).

The bias is a function of ``i - j`` alone (relative). At default positions ``G`` runs once per
distance and the bias is gathered from that table, as
x-transformers does (``2T - 1`` evaluations, for a window too); at explicit positions it runs
on every (query, key) pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from model.position.base import ALL, PositionScheme, SchemeConfig, register, relative_distance


def log_distance(distance: Tensor) -> Tensor:
    """SwinV2's log-spaced coordinate ``sign(d) * log(1 + |d|)`` (eq. 4, without its
    normalisation by the window size), elementwise, same shape and dtype."""
    return torch.sign(distance) * torch.log1p(distance.abs())


@dataclass(frozen=True)
class DynamicBiasOptions:
    """Options of ``dynamic_bias`` (defaults: x-transformers' depth 2, SwinV2's log spacing).

    Attributes:
        depth: hidden layers of the MLP (each ``Linear`` then SiLU), at least 1.
        width: hidden width of the MLP.
        log_distance: feed ``sign(d) log(1 + |d|)`` instead of the distance ``d``.
    """

    MAX_DEPTH: ClassVar[int] = 8
    """Most hidden layers (x-transformers uses 2)."""
    MAX_WIDTH: ClassVar[int] = 256
    """Largest ``width``: at explicit positions the hidden layers are evaluated on every
    (query, key) pair of a window, ``width`` floats each."""

    depth: int = 2
    width: int = 32
    log_distance: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.depth <= self.MAX_DEPTH:
            raise ValueError(f"depth={self.depth} is invalid; it must be in [1, {self.MAX_DEPTH}]")
        if not 1 <= self.width <= self.MAX_WIDTH:
            raise ValueError(f"width={self.width} is invalid; it must be in [1, {self.MAX_WIDTH}]")


@register("dynamic_bias")
class DynamicPositionBias(PositionScheme):
    """A learned MLP of the (log-spaced) relative distance, per head, shared by all layers."""

    Options = DynamicBiasOptions
    relative = True

    def __init__(self, config: SchemeConfig, options: DynamicBiasOptions) -> None:
        super().__init__(config, options)
        width = options.width
        layers: list[nn.Module] = [nn.Linear(1, width), nn.SiLU()]
        for _ in range(options.depth - 1):
            layers += [nn.Linear(width, width), nn.SiLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(width, config.n_heads))

    def reset_parameters(self) -> None:
        """PyTorch's default ``Linear`` initialisation (x-transformers keeps it): GPT-2's std
        0.02 would make ``G`` nearly constant in a distance of a few units."""
        for module in self.mlp:
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def bias_of(self, distance: Tensor) -> Tensor:
        """``G`` at ``distance`` (float32, any shape ``S``): ``(*S, H)``."""
        x = log_distance(distance) if self.options.log_distance else distance
        return self.mlp(x.unsqueeze(-1))

    def score_bias(
        self, positions: Tensor | None, seq_len: int, queries: slice = ALL, keys: slice = ALL
    ) -> Tensor:
        """Float32 ``(1 or B, H, Tq, Tk)``; gradients reach the MLP."""
        device = self.mlp[0].weight.device
        if positions is not None:  # any distances: G on every pair
            distance = relative_distance(positions, seq_len, device, queries, keys)
            return self.bias_of(distance).permute(0, 3, 1, 2)  # (B or 1, H, Tq, Tk)
        pos = torch.arange(seq_len, device=device)
        distances = torch.arange(1 - seq_len, seq_len, device=device).float()  # every i - j
        table = self.bias_of(distances)  # (2T - 1, H)
        index = pos[queries].unsqueeze(1) - pos[keys].unsqueeze(0) + (seq_len - 1)  # (Tq, Tk)
        return table[index].permute(2, 0, 1).unsqueeze(0)  # (1, H, Tq, Tk)
