"""What a position scheme adds to attention, measured through its own hooks, with no content.

The probe holds one fixed random query and key per head (the same at every position) and, for
schemes that add an embedding, fixed random query/key projections of it (as ``W_q``, ``W_k``
would be). :func:`position_scores` then runs the scheme's ``embedding``, ``prepare``,
``layer`` and ``score_bias`` hooks at given positions and returns the score every query
position gives every key position: whatever varies in it comes from the scheme alone. The
property report (:mod:`lab.properties.measure`) measures uniqueness, boundedness, relativity,
extrapolation and determinism on it.

Shape notation: ``H`` heads, ``Dh`` head width, ``D`` model width, ``T`` positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from model.config import ModelConfig
from model.position import PositionScheme, build_position

PROBE_SEED = 1234
"""Seed of the probe's content vectors and of fresh scheme weights."""


@dataclass(frozen=True)
class Probe:
    """Fixed content of the probe.

    Attributes:
        q, k: float32 ``(1, H, 1, Dh)``, unit norm per head: the same query and key at every
            position.
        wq, wk: float32 ``(D, H * Dh)``, std ``1/sqrt(D)``: how an added embedding reaches the
            queries and keys.
    """

    q: Tensor
    k: Tensor
    wq: Tensor
    wk: Tensor


def probe_config(name: str, **values: object) -> ModelConfig:
    """The model the report probes: the ablation's size (``D`` 64, 4 heads, 3 layers), scheme
    ``name`` with its default options unless ``values`` (``ModelConfig`` fields) say otherwise."""
    sizes = {"d_model": 64, "n_layers": 3, "n_heads": 4, "d_ff": 256}
    return ModelConfig(**{**sizes, "position": name, **values})


def make_probe(config: ModelConfig, seed: int = PROBE_SEED) -> Probe:
    """The probe's content for a model of ``config``'s width and heads (seeded, float32)."""
    gen = torch.Generator().manual_seed(seed)
    h, dh, d = config.n_heads, config.head_dim, config.d_model

    def unit() -> Tensor:
        v = torch.randn(1, h, 1, dh, generator=gen)
        return v / v.norm(dim=-1, keepdim=True)

    q, k = unit(), unit()
    wq = torch.randn(d, h * dh, generator=gen) / math.sqrt(d)
    wk = torch.randn(d, h * dh, generator=gen) / math.sqrt(d)
    return Probe(q, k, wq, wk)


def fresh_scheme(config: ModelConfig, seed: int = PROBE_SEED) -> PositionScheme:
    """The scheme of ``config`` with fresh weights (its own initialisation, seeded), eval mode."""
    torch.manual_seed(seed)
    scheme = build_position(config)
    for module in scheme.modules():  # the transformer's GPT-2 init, then the scheme's own
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(module.weight, std=0.02)
    scheme.reset_parameters()
    return scheme.eval()


@torch.no_grad()
def position_scores(scheme: PositionScheme, probe: Probe, positions: Tensor) -> Tensor:
    """Position-only attention scores of layer 0 at ``positions``.

    ``s * q'_m . k'_n / sqrt(Dh) + bias[m, n]``, where ``q'``, ``k'`` are the probe's content
    (plus the projected embedding of schemes that add one) after the scheme's ``layer`` hook,
    ``s`` its score scale and ``bias`` its ``score_bias`` plus its layer bias. No mask: a
    causal model uses the part ``n <= m``.

    Args:
        scheme: a position scheme (eval mode).
        probe: from :func:`make_probe` for the scheme's config.
        positions: int64 ``(T,)``, any non-negative values.

    Returns:
        float32 ``(H, T, T)``: query position ``m`` (rows) against key position ``n``.

    Raises:
        IndexError, ValueError: a position the scheme cannot encode (a learned table's end).
    """
    t = positions.shape[0]
    h, dh = probe.q.shape[1], probe.q.shape[-1]
    q = probe.q.expand(1, h, t, dh)  # (1, H, T, Dh)
    k = probe.k.expand(1, h, t, dh)
    added = scheme.embedding(positions, t)  # (1, T, D) or None
    if added is not None:
        q = q + (added.float() @ probe.wq).view(1, t, h, dh).transpose(1, 2)  # (1, H, T, Dh)
        k = k + (added.float() @ probe.wk).view(1, t, h, dh).transpose(1, 2)
    out = scheme.layer(0, q, k, scheme.prepare(positions, t))
    scale = 1.0 if out.scale is None else out.scale
    scores = scale * (out.q.float() @ out.k.float().transpose(-1, -2)) / math.sqrt(dh)
    for bias in (out.bias_window(), scheme.score_bias(positions, t)):
        if bias is not None:
            scores = scores + bias.float()  # (1, H, T, T)
    return scores[0]  # (H, T, T)


def encodings(scores: Tensor) -> Tensor:
    """Position ``m``'s encoding as seen by attention: its row of scores over every key, all
    heads side by side. float32 ``(T, H * T)`` from ``(H, T, T)`` scores."""
    return scores.permute(1, 0, 2).reshape(scores.shape[1], -1)


def cosine_similarity(scores: Tensor) -> Tensor:
    """Cosine similarity of every two positions' encodings: float32 ``(T, T)``.

    Rows are centred first (a constant row, as NoPE's, has similarity 1 with every other).
    """
    rows = encodings(scores)
    rows = rows - rows.mean(dim=1, keepdim=True)
    norms = rows.norm(dim=1, keepdim=True)
    unit = torch.where(norms > 1e-12, rows / norms.clamp_min(1e-12), torch.ones_like(rows))
    unit = unit / unit.norm(dim=1, keepdim=True)
    return unit @ unit.T
