"""CoPE: contextual position encoding (Golovneva et al. 2024, "Contextual Position Encoding:
Learning to Count What's Important", §3, eq. 3-5; the paper's listing is followed).

Positions are counted by the queries: gate ``g_ij = sigmoid(q_i . k_j / sqrt(Dh))`` for every
key ``j <= i``, and the position of key ``j`` seen from query ``i`` is
``p_ij = sum_{t=j..i} g_it``, a fraction. Each layer learns ``npos_max`` position vectors
``e[p]`` (width ``Dh``, shared by the heads); the score gains ``q_i . e[p_ij]``, interpolated
between ``e[floor p_ij]`` and ``e[ceil p_ij]``, with ``p`` capped at ``npos_max - 1``. Token
positions are never used, so any shift of them changes nothing. Causal only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.position.base import PositionScheme, SchemeConfig, Scores, register


def cope_positions(logits: Tensor, diagonal: int = 0) -> Tensor:
    """Contextual positions ``p_ij = sum_{t=j..i} sigmoid(logits_it)`` for every key ``j <= i``.

    Computed as ``P_ii - P_ij + g_ij`` from the row-wise prefix sums ``P_ij = sum_{t<=j} g_it``:
    every term uses only gates of visible keys, so no mask is applied first (one pass fewer
    over ``(B, H, Tq, Tk)``).

    Args:
        logits: float ``(B, H, Tq, Tk)`` scaled scores ``q . k / sqrt(Dh)`` of a window of
            queries against keys from the first one on (all of them: ``Tq = Tk``) or at least
            up to the last query.
        diagonal: column of the first query's own key (query ``r`` of the window is key
            ``diagonal + r``).

    Returns:
        float32 ``(B, H, Tq, Tk)``; entries with the key after the query are meaningless (at most
        1, possibly negative) and must be masked, as causal attention does.
    """
    gates = torch.sigmoid(logits.float())  # (B, H, Tq, Tk)
    prefix = gates.cumsum(dim=-1)  # (B, H, Tq, Tk): sum_{t <= j} g_it
    own = prefix[..., diagonal : diagonal + logits.shape[-2]]  # (B, H, Tq, Tq): own key at r
    total = own.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)  # (B, H, Tq, 1): sum_{t <= i} g_it
    return (total - prefix).add_(gates)  # in place: one (B, H, Tq, Tk) tensor fewer


def cope_bias(q: Tensor, embeddings: Tensor, positions: Tensor) -> Tensor:
    """``q_i . e[p_ij]`` with ``e`` linearly interpolated at fractional ``p``:
    ``s[floor p] + frac(p) (s[floor p + 1] - s[floor p])`` with ``s[n] = q_i . e[n]``.

    Args:
        q: ``(B, H, T, Dh)`` queries.
        embeddings: float32 ``(Dh, P)`` position vectors as columns.
        positions: float32 ``(B, H, T, T)`` in ``[0, P - 1]``.

    Returns:
        float32 ``(B, H, T, T)``.
    """
    at_integers = q.float() @ embeddings  # (B, H, T, P): q_i . e[p] for every integer p
    steps = F.pad(at_integers.diff(dim=-1), (0, 1))  # s[p + 1] - s[p]; 0 at P - 1 (frac is 0)
    below = positions.long()  # floor, as positions >= 0
    low = at_integers.gather(-1, below)  # (B, H, T, T)
    return torch.addcmul(low, positions.frac(), steps.gather(-1, below))


@dataclass(frozen=True)
class CopeOptions:
    """Options of ``cope``.

    Attributes:
        npos_max: position vectors per layer; contextual positions are capped at
            ``npos_max - 1``.
    """

    MAX_NPOS: ClassVar[int] = 4096
    """Largest ``npos_max``: a contextual position never exceeds the sequence length, which the
    lab caps at 4096 tokens (``lab.common.config.MAX_TOKENS``), so more vectors are never reached;
    an evaluation batch builds ``(B, H, T, npos_max)`` dot products."""

    npos_max: int = 64

    def __post_init__(self) -> None:
        if not 2 <= self.npos_max <= self.MAX_NPOS:
            raise ValueError(
                f"npos_max={self.npos_max} is invalid; it must be in [2, {self.MAX_NPOS}]"
            )


@register("cope")
class CopePosition(PositionScheme):
    """Per-layer contextual positions from the layer's own q and k, as a per-layer bias."""

    Options = CopeOptions
    relative = True
    bidirectional = False
    windowed_layer_bias = True

    def __init__(self, config: SchemeConfig, options: CopeOptions) -> None:
        super().__init__(config, options)
        shape = (config.head_dim, options.npos_max)
        self.embeddings = nn.ParameterList(
            nn.Parameter(torch.zeros(shape)) for _ in range(config.n_layers)
        )

    def layer(self, index: int, q: Tensor, k: Tensor, state: object) -> Scores:
        """q and k unchanged; this layer's CoPE bias, built per window on demand
        (:meth:`window_bias`), meaningful where the key is not after the query (the causal
        mask hides the rest)."""
        return Scores(q, k, window=partial(self.window_bias, index, q, k))

    def window_bias(
        self, index: int, q: Tensor, k: Tensor, queries: slice, keys: slice
    ) -> tuple[Tensor, Tensor]:
        """Layer ``index``'s bias ``(B, H, Tq, Tk)`` for a window of queries over keys (which
        must start at or before the first query and reach the last one, as causal windows
        do), and the window's logits ``q . k / sqrt(Dh)``, from the layer's ``(B, H, T, Dh)``
        queries and keys."""
        diagonal = (queries.start or 0) - (keys.start or 0)  # windows start at an index or 0
        q = q[:, :, queries]  # (B, H, Tq, Dh)
        logits = (q / math.sqrt(q.shape[-1])) @ k[:, :, keys].transpose(-1, -2)  # (B, H, Tq, Tk)
        positions = cope_positions(logits, diagonal).clamp(0, self.options.npos_max - 1)
        return cope_bias(q, self.embeddings[index], positions), logits
