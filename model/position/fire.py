"""FIRE: functional interpolation for relative positions (Li et al. 2024, "Functional
Interpolation for Relative Positions Improves Long Context Transformers", ICLR, §3, eq. 4-5).

The bias of query ``i`` and key ``j`` is a learned function of their normalised distance:
``b(i, j) = f(psi(i - j) / psi(max(i, L)))`` with ``psi(x) = log(c x + 1)``, ``f`` a small MLP
``1 -> width -> H`` (ReLU), ``c`` learned, and ``L`` a learned threshold (``|L_mult| * init_L``):
below it the normaliser is constant (short sequences behave as relative), beyond it distances
are "progressively interpolated" into ``[0, 1]``. The reference code of the paper's appendix
is followed (``eps`` in the normaliser); bidirectional models use ``|i - j|``. Shared by all
layers. Not shift-invariant: queries past ``L`` are normalised by their own position.

``f`` is evaluated as the piecewise linear function it is (:mod:`model.position.piecewise`):
a binary search and ``H`` multiply-adds per pair instead of ``width * (H + 2)`` operations,
same values up to rounding; ``self.mlp`` holds the parameters, so checkpoints are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from model.position.base import ALL, PositionScheme, SchemeConfig, register, relative_distance
from model.position.piecewise import relu_mlp


@dataclass(frozen=True)
class FireOptions:
    """Options of ``fire`` (defaults: the paper's appendix code).

    Attributes:
        mlp_width: hidden width of ``f``.
        init_c: initial ``c`` of ``psi``.
        init_L: the threshold ``L`` at initialisation, in positions (``L`` itself is learned
            through a multiplier).
        eps: added to the normaliser.
    """

    MAX_MLP_WIDTH: ClassVar[int] = 256
    """Largest ``mlp_width`` (8 times the paper's 32): the hidden layer is evaluated on every
    (query, key) pair of a window, ``mlp_width`` floats each."""

    mlp_width: int = 32
    init_c: float = 0.1
    init_L: float = 512.0
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if not 1 <= self.mlp_width <= self.MAX_MLP_WIDTH:
            raise ValueError(
                f"mlp_width={self.mlp_width} is invalid; it must be in [1, {self.MAX_MLP_WIDTH}]"
            )
        for name in ("init_c", "init_L", "eps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid; it must be > 0")


@register("fire")
class FirePosition(PositionScheme):
    """Learned MLP bias of the log-normalised distance, per head, shared by all layers."""

    Options = FireOptions

    def __init__(self, config: SchemeConfig, options: FireOptions) -> None:
        super().__init__(config, options)
        width = options.mlp_width
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, config.n_heads))
        self.c = nn.Parameter(torch.tensor(options.init_c))
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))

    def reset_parameters(self) -> None:
        """PyTorch's default ``Linear`` initialisation for the MLP, as the paper's code: its input
        lies in [0, 1], so GPT-2's std 0.02 would leave ``f`` nearly constant (measured: a
        constant bias after 4000 steps, and ``svo`` at chance for three seeds)."""
        for module in self.mlp:
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def score_bias(
        self, positions: Tensor | None, seq_len: int, queries: slice = ALL, keys: slice = ALL
    ) -> Tensor:
        """Float32 ``(1 or B, H, Tq, Tk)``; gradients reach the MLP, ``c`` and ``L``."""
        device = self.c.device
        pos = torch.arange(seq_len, device=device) if positions is None else positions.to(device)
        pos = pos.float() if pos.dim() == 2 else pos.float().unsqueeze(0)  # (1 or B, T)
        distance = relative_distance(positions, seq_len, device, queries, keys).abs()
        threshold = (self.L_multiplier * self.options.init_L).abs()
        normaliser = torch.maximum(pos[:, queries], threshold).unsqueeze(-1)  # (1|B, Tq, 1)
        numerator = torch.log(torch.abs(self.c * distance) + 1)  # (1 or B, Tq, Tk)
        denominator = torch.log(torch.abs(self.c * normaliser) + 1) + self.options.eps
        bias = relu_mlp(self.mlp[0], self.mlp[2], numerator / denominator)  # (H, 1|B, Tq, Tk)
        return bias.movedim(0, 1)  # (1 or B, H, Tq, Tk)
