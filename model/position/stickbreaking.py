"""Stick-breaking attention (Tan et al. 2025, ICLR, "Scaling Stick-Breaking Attention: An
Efficient Implementation and In-depth Study", §2, eq. 1-2), which replaces softmax.

Query ``i`` breaks a stick of length 1 from its nearest key backwards: key ``j`` takes the share
``beta_ij = sigmoid(z_ij)`` of what the keys between them left,

    A_ij = beta_ij * prod_{j<k<i} (1 - beta_ik)        for j < i, 0 otherwise,

with ``z_ij = q_i . k_j / sqrt(Dh)``, and the output is ``sum_j A_ij v_j``. The weights sum to
``1 - prod_{k<i} (1 - beta_ik) <= 1`` (no normalisation), and the nearest key that matches takes
most of them, so order comes from the weights themselves: the scheme adds no position encoding.
Keys run over ``j < i`` as in the paper and its reference code (``attend_current=False``): the
first query attends to nothing and keeps its residual stream; ``attend_current`` lets a query
take its own key first, ``j <= i`` with the product over ``j < k <= i``. In log space,
``log(1 - sigmoid(z)) = logsigmoid(-z)`` (:func:`stick_breaking_weights`). The ``O(T^2)`` form:
the whole ``(B, H, T, T)`` weights at once, at every length. Causal only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor

from model.position.base import PositionScheme, Scores, register


def stick_breaking_weights(logits: Tensor, attend_current: bool = False) -> Tensor:
    """Causal stick-breaking weights ``A_ij`` from scores ``z_ij`` (Tan et al. 2025, eq. 2).

    ``log A_ij = logsigmoid(z_ij) + sum_{j<k<i} logsigmoid(-z_ik)`` for ``j < i`` (``j <= i``
    and ``j < k <= i`` with ``attend_current``), the sum a cumulative sum over keys taken from
    the right, so no term is subtracted from a larger one.

    Args:
        logits: float ``(..., T, T)`` scores, query rows against key columns (entries for keys
            a query may not see are ignored).
        attend_current: let a query attend to its own key.

    Returns:
        float32 ``(..., T, T)``: zero where ``j > i`` (and on the diagonal unless
        ``attend_current``); each row sums to at most 1.
    """
    z = logits.float()
    t = z.shape[-1]
    ones = torch.ones(t, t, dtype=torch.bool, device=z.device)
    visible = ones.tril(0 if attend_current else -1)  # (T, T): key j may be attended by query i
    rest = torch.where(visible, F.logsigmoid(-z), 0.0)  # log(1 - beta_ik) on visible keys
    after = rest.flip(-1).cumsum(-1).flip(-1)  # sum_{k >= j} log(1 - beta_ik)
    after = F.pad(after[..., 1:], (0, 1))  # sum_{k > j}: every visible k between j and i
    return torch.where(visible, (F.logsigmoid(z) + after).exp(), 0.0)


@dataclass(frozen=True)
class StickBreakingOptions:
    """Options of ``stickbreaking``.

    Attributes:
        attend_current: a query may attend to its own key (``j <= i``); the paper's and the
            reference code's default is ``j < i``.
    """

    attend_current: bool = False


@register("stickbreaking")
class StickBreaking(PositionScheme):
    """Attention weights by stick-breaking instead of softmax; no position encoding."""

    Options = StickBreakingOptions
    relative = True
    bidirectional = False
    replaces_softmax = True

    def layer(self, index: int, q: Tensor, k: Tensor, state: object) -> Scores:
        """q and k unchanged, with the stick-breaking weights in place of softmax."""
        weights = partial(stick_breaking_weights, attend_current=self.options.attend_current)
        return Scores(q, k, weights=weights)
