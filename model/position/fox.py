"""FoX: the Forgetting Transformer's forget gate (Lin et al. 2025, "Forgetting Transformer:
Softmax Attention with a Forget Gate", ICLR, §2, eq. 6-8).

Each head of each layer has a forget gate ``f_t = sigmoid(w^T x_t + b)`` per token, and the
score of query ``i`` for key ``j <= i`` gains ``D_ij = sum_{l=j+1..i} log f_l = c_i - c_j``,
``c_t = sum_{l<=t} log f_l`` (the cumulative sum of the log gates; the paper's
``F_ij = prod f_l`` in log space). Three forms, as the paper's ``fgate_type``:

- ``data`` (default, "full"): the gate of every token from the layer's input. The interface
  hands a scheme the layer's queries and keys, not its input ``x``, so the gate reads the
  layer's keys of every head it serves, ``k_t = W_k LN(x_t)`` (width ``H Dh``: ``D`` alone,
  its heads' share in a head split, ``model.heads``): ``f_t = sigmoid(w_h^T k_t + b_h)``.
  Where ``W_k`` is invertible this is the paper's family of gates
  (``w^T x = (W_k^{-T} w)^T W_k x``); the difference is that the gate shares the key
  projection, so its gradient also trains ``W_k``. ``w`` starts at GPT-2's std 0.02 and ``b``
  at 0, as the paper's code (``f`` near 1/2 at first).
- ``bias`` ("bias_only"): a data-independent gate ``sigmoid(b_h)`` per layer and head, ``b``
  learned from 0, so ``D_ij = (i - j) log sigmoid(b_h)``.
- ``fixed``: ``f_h = exp(-m_h)`` with ALiBi's slopes ``m_h`` (:func:`alibi_slopes`), the same in
  every layer: ``D_ij = -m_h (i - j)``, ALiBi's causal bias.

Explicit positions: ``bias`` and ``fixed`` decay per unit of position, ``c_t = p_t log f``;
``data`` has no position (its decay counts tokens), so any positions give the same logits.
Every form is relative and causal only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.position.alibi import alibi_slopes
from model.position.base import (
    ALL,
    PositionScheme,
    SchemeConfig,
    Scores,
    register,
    relative_distance,
)


def forget_bias(log_gates: Tensor, queries: slice = ALL, keys: slice = ALL) -> Tensor:
    """``D_ij = c_i - c_j`` with ``c = cumsum(log f)`` along the tokens: the sum of the log
    gates of keys ``j+1 .. i`` for ``j <= i`` (FoX, eq. 8); for ``j > i`` the negated sum of
    ``i+1 .. j`` (finite, and hidden by the causal mask).

    Args:
        log_gates: float ``(1 or B, H, T)``, ``log f_t <= 0``.
        queries, keys: the window, as in :meth:`PositionScheme.score_bias`.

    Returns:
        float32 ``(1 or B, H, Tq, Tk)``.
    """
    return prefix_difference(log_gates.float().cumsum(dim=-1), queries, keys)


def prefix_difference(prefix: Tensor, queries: slice = ALL, keys: slice = ALL) -> Tensor:
    """``c_i - c_j`` for the window's queries ``i`` and keys ``j``: ``(1 or B, H, Tq, Tk)``
    from ``c`` ``(1 or B, H, T)``."""
    return prefix[..., queries].unsqueeze(-1) - prefix[..., keys].unsqueeze(-2)


@dataclass(frozen=True)
class FoxOptions:
    """Options of ``fox``.

    Attributes:
        mode: ``data`` (a gate per token from the layer's keys), ``bias`` (a learned gate per
            layer and head) or ``fixed`` (ALiBi's decay, no parameters).
    """

    MODES: ClassVar[tuple[str, ...]] = ("data", "bias", "fixed")

    mode: str = "data"

    def __post_init__(self) -> None:
        if self.mode not in self.MODES:
            raise ValueError(
                f"mode={self.mode!r} is invalid; choose one of {', '.join(self.MODES)}"
            )


@register("fox")
class ForgettingPosition(PositionScheme):
    """The forget gate's bias per layer (``data``, ``bias``: built per window on demand) or,
    for ``fixed``, one shared, cached bias."""

    Options = FoxOptions
    relative = True
    bidirectional = False

    def __init__(self, config: SchemeConfig, options: FoxOptions) -> None:
        super().__init__(config, options)
        fixed = options.mode == "fixed"
        self.shared_bias = self.fixed_bias = fixed
        self.windowed_layer_bias = not fixed
        h, layers = config.n_heads, config.n_layers  # in a head split: its heads, its layers
        self.register_buffer("slopes", alibi_slopes(h), persistent=False)
        if options.mode == "data":  # (L, H, H * Dh): reads the keys of the heads it serves
            self.gate_weight = nn.Parameter(torch.zeros(layers, h, h * config.head_dim))
        if options.mode in ("data", "bias"):
            self.gate_bias = nn.Parameter(torch.zeros(layers, h))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The paper's code: ``w`` normal with std 0.02, ``b`` zero."""
        with torch.no_grad():
            if self.options.mode == "data":
                self.gate_weight.normal_(0.0, 0.02)
            if self.options.mode in ("data", "bias"):
                self.gate_bias.zero_()

    def score_bias(
        self, positions: Tensor | None, seq_len: int, queries: slice = ALL, keys: slice = ALL
    ) -> Tensor | None:
        """``fixed``: ``-m_h (p_i - p_j)``, float32 ``(1 or B, H, Tq, Tk)``; else None."""
        if self.options.mode != "fixed":
            return None
        distance = relative_distance(positions, seq_len, self.slopes.device, queries, keys)
        return -self.slopes.view(1, -1, 1, 1) * distance.unsqueeze(1)

    def prefix(self, index: int, k: Tensor, positions: Tensor | None) -> Tensor:
        """Layer ``index``'s ``c_t``, float32 ``(1 or B, H, T)``: ``data``: the cumulative sum
        of ``log f_t``, each gate from token ``t``'s keys of this scheme's heads (``k`` is
        ``(B, H, T, Dh)``); ``bias``: ``p_t log sigmoid(b_h)``."""
        b = self.gate_bias[index]  # (H,)
        if self.options.mode == "data":
            keys = k.transpose(1, 2).flatten(2)  # (B, T, H * Dh): the keys of its heads
            logits = keys.float() @ self.gate_weight[index].t() + b  # (B, T, H)
            return F.logsigmoid(logits).transpose(1, 2).cumsum(dim=-1)  # (B, H, T)
        t = k.shape[-2]
        pos = torch.arange(t, device=k.device) if positions is None else positions.to(k.device)
        pos = pos.float() if pos.dim() == 2 else pos.float().unsqueeze(0)  # (1 or B, T)
        return F.logsigmoid(b).view(1, -1, 1) * pos.unsqueeze(1)  # (1 or B, H, T)

    def layer(self, index: int, q: Tensor, k: Tensor, state: Tensor | None) -> Scores:
        """q and k unchanged; ``data`` and ``bias``: this layer's bias ``c_i - c_j``, built per
        window on demand (meaningful where the key is not after the query)."""
        if self.options.mode == "fixed":
            return Scores(q, k)
        prefix = self.prefix(index, k, state)  # (1 or B, H, T)
        return Scores(
            q, k, window=lambda queries, keys: (prefix_difference(prefix, queries, keys), None)
        )
