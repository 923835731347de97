"""KERPLE, logarithmic variant (Chi et al. 2022, "KERPLE: Kernelized Relative Positional
Embedding for Length Extrapolation", NeurIPS, §4, eq. for ``k_log``).

Every head adds ``-r1 * log(1 + r2 * |i - j|)`` to its scores, with learned ``r1, r2 > 0``
per head (shared by all layers here). Like ALiBi a monotone distance penalty, but logarithmic,
so distant tokens are penalised far less. The reference code (chijames/KERPLE,
``megatron/mpu/layers.py``, ``ParallelKerpleLog.forward``) initialises
``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)`` and, before every use, resets the parameters' data in place
to ``max(value, eps)`` (``self.bias_p.data = self.bias_p.data.clamp(min=self.eps)``), so an
entry below the bound is used as ``eps`` and receives the gradient taken at ``eps``: it
stays trainable. This module does the same once per forward pass, in :meth:`KerpleLog.prepare`
(under ``no_grad``; ``torch.compile(fullgraph=True)`` traces it as an input mutation). The
reset writes the parameters' ``.data``, as the reference does, so it does not bump their
autograd version counter: a second forward pass before ``backward`` (two losses summed, an
evaluation under ``no_grad`` in between) would otherwise make that ``backward`` fail with
"modified by an inplace operation", although the reset changed no value it saved (entries are
already >= ``eps`` after the first pass; an optimizer step in between bumps the version
itself). An out
of place clamp alone would not do: it passes no gradient below its bound, which would freeze
such an entry for good (about 6% of initialisations with 4 heads start one there, as
``P(r1 < eps) + P(r2 < eps) = 1.5%`` per head at ``eps = 0.01``). Where every entry is at
least ``eps`` the reset changes nothing, and values and gradients are those of the plain
formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from model.position.base import ALL, PositionScheme, SchemeConfig, register, relative_distance


def kerple_log_bias(r1: Tensor, r2: Tensor, distance: Tensor) -> Tensor:
    """``-r1[h] * log(1 + r2[h] * |distance|)``.

    Args:
        r1, r2: float32 ``(H,)``, positive.
        distance: float32 ``(1 or B, Tq, Tk)`` query minus key position.

    Returns:
        float32 ``(1 or B, H, Tq, Tk)``.
    """
    d = distance.abs().unsqueeze(1)  # (1 or B, 1, Tq, Tk)
    return -r1.view(1, -1, 1, 1) * torch.log1p(r2.view(1, -1, 1, 1) * d)


@dataclass(frozen=True)
class KerpleOptions:
    """Options of ``kerple``.

    Attributes:
        eps: lower bound of ``r1`` and ``r2`` (the reference code's clamp, 1e-2).
    """

    eps: float = 1e-2

    def __post_init__(self) -> None:
        if not self.eps > 0:
            raise ValueError(f"eps={self.eps!r} is invalid; it must be > 0")


@register("kerple")
class KerpleLog(PositionScheme):
    """Learned logarithmic distance penalty per head, shared by all layers."""

    Options = KerpleOptions
    relative = True

    def __init__(self, config: SchemeConfig, options: KerpleOptions) -> None:
        super().__init__(config, options)
        self.r1 = nn.Parameter(torch.rand(config.n_heads) * 2)
        self.r2 = nn.Parameter(torch.rand(config.n_heads))

    def reset_to_bound(self) -> None:
        """Set every entry of ``r1`` and ``r2`` below ``eps`` to ``eps``, in place on their
        ``.data``, outside autograd and its version counter (the reference's reset of the
        parameters' data): the entry is then used, and
        differentiated, at ``eps``. A no-op on entries >= ``eps``."""
        with torch.no_grad():  # on ``.data``: no version bump (see the module docstring)
            self.r1.data.clamp_(min=self.options.eps)
            self.r2.data.clamp_(min=self.options.eps)

    def prepare(self, positions: Tensor | None, seq_len: int) -> Tensor | None:
        """Reset the parameters to the bound (:meth:`reset_to_bound`) once per forward pass,
        before :meth:`score_bias` uses them (in place once, not per call: a second in-place
        write after a first use would invalidate the tensors autograd saved); returns
        ``positions``."""
        self.reset_to_bound()
        return positions

    def score_bias(
        self, positions: Tensor | None, seq_len: int, queries: slice = ALL, keys: slice = ALL
    ) -> Tensor:
        """Float32 ``(1 or B, H, Tq, Tk)``.

        Uses ``max(r, eps)`` out of place as well, so that a call outside a forward pass (no
        :meth:`prepare` before it) still sees values >= ``eps``; after :meth:`prepare` that
        clamp is the identity, in values and in gradients."""
        device = self.r1.device
        distance = relative_distance(positions, seq_len, device, queries, keys)  # (1|B, Tq, Tk)
        eps = self.options.eps
        return kerple_log_bias(self.r1.clamp(min=eps), self.r2.clamp(min=eps), distance)
