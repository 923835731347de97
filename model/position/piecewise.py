"""A ReLU MLP of one scalar, ``f(x) = W2 relu(W1 x + b1) + b2``, evaluated as the piecewise
linear function it is.

Each hidden unit ``k`` switches at its breakpoint ``t_k = -b1_k / W1_k``: for ``W1_k > 0`` it is
active (``W1_k x + b1_k > 0``) above ``t_k``, for ``W1_k < 0`` below it, and for ``W1_k = 0`` it
is the constant ``relu(b1_k)``, active everywhere or nowhere. With the ``K`` breakpoints sorted,
``s_0 <= ... <= s_{K-1}``, the active set is fixed on each interval ``(s_{m-1}, s_m)``
(``m = 0 .. K``, ``s_{-1} = -inf``, ``s_K = +inf``), so there

    f(x) = A_m x + B_m,  A_m = sum_{k active} W2[:, k] W1_k,
                         B_m = sum_{k active} W2[:, k] b1_k + b2.

Evaluating ``f`` at ``N`` points then costs a binary search and ``O(H)`` per point instead of
``O(width * H)``. ``f`` is continuous, so a point on a breakpoint gets the same value from
either neighbouring piece (up to rounding), and ties (several units on one breakpoint) leave
empty intervals that the search never picks. ``A`` and ``B`` are differentiable in the
weights, with the MLP's gradients wherever no point lies on a breakpoint (where ReLU's own
derivative is a convention). This is a property of ReLU networks, not of any one paper; FIRE
(Li et al. 2024, eq. 4-5) applies such an MLP to every (query, key) pair.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def relu_pieces(first: nn.Linear, last: nn.Linear) -> tuple[Tensor, Tensor, Tensor]:
    """The pieces of ``last(relu(first(x)))`` for a scalar ``x``.

    Args:
        first: ``Linear(1, W)``.
        last: ``Linear(W, H)``.

    Returns:
        ``(breakpoints, slopes, intercepts)``: float32 ``(W,)`` sorted ascending (units with
        ``W1_k = 0`` at ``+inf``), with no gradient; ``(H, W + 1)`` and ``(H, W + 1)``, column
        ``m`` the piece on the interval ending at ``breakpoints[m]``, differentiable in the
        weights of both layers.
    """
    w1, b1 = first.weight[:, 0], first.bias  # (W,), (W,)
    with torch.no_grad():
        flat = w1 == 0
        points = torch.where(flat, torch.inf, -b1 / torch.where(flat, 1.0, w1))  # (W,)
        breakpoints, order = points.sort()
        ranks = torch.arange(len(order), device=w1.device)
        rank = torch.empty_like(order).scatter_(0, order, ranks)  # (W,): unit k's place in order
        piece = torch.arange(len(order) + 1, device=w1.device).unsqueeze(-1)  # (W + 1, 1)
        active = torch.where(w1 > 0, piece > rank, piece <= rank)  # (W + 1, W)
        active = torch.where(flat, b1 > 0, active).to(w1.dtype)
    slopes = last.weight @ (active * w1).T  # (H, W + 1)
    intercepts = last.weight @ (active * b1).T + last.bias.unsqueeze(-1)  # (H, W + 1)
    return breakpoints, slopes, intercepts


def relu_mlp(first: nn.Linear, last: nn.Linear, x: Tensor) -> Tensor:
    """``last(relu(first(x)))`` for every scalar of ``x``, head axis first.

    Args:
        first, last: as in :func:`relu_pieces`.
        x: float32 of any shape ``S``.

    Returns:
        float32 ``(H, *S)``; equal to the MLP up to float rounding.
    """
    breakpoints, slopes, intercepts = relu_pieces(first, last)
    piece = torch.searchsorted(breakpoints, x.detach())  # (*S,): number of breakpoints < x
    table = torch.cat([slopes, intercepts])  # (2H, W + 1): one gather, 4x faster than two
    picked = table.index_select(1, piece.flatten()).view(2, len(slopes), *x.shape)  # (2, H, *S)
    return torch.addcmul(picked[1], picked[0], x)  # (H, *S)
