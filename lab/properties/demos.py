"""The classic demonstrations of position encodings, as numbers computed by the schemes' code.

- the sinusoidal table for the first positions, and the distance between two sinusoidal
  encodings as a function of their gap (Vaswani et al. 2017, §3.5: it depends on the gap only);
- RoPE's ``q . k`` for the same vectors at the same distance from different absolute positions
  (equal), and the long-range decay of its score upper bound (Su et al. 2021, §3.4.3) for
  several bases;
- the score bias per head of every scheme that has one (ALiBi, T5, KERPLE, FIRE), against the
  distance from the last query;
- the permutation demonstration: shuffle a sentence's tokens, un-shuffle the outputs; equal
  for a bidirectional model without positions, different otherwise.
"""

from __future__ import annotations

from typing import Any

import torch

from lab.properties.probe import PROBE_SEED, fresh_scheme, probe_config
from model import Transformer
from model.position import apply_rope, rope_frequencies, sinusoidal_table
from model.position.base import PositionScheme, scheme_class

ROPE_BASES = (10_000.0, 1_000_000.0)
"""RoPE bases of the decay demonstration: the papers' 10,000 and Qwen3's 1,000,000."""


def sinusoidal_demo(
    dim: int = 64, shown: int = 8, gaps: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
) -> dict[str, Any]:
    """The first ``shown`` positions x dimensions of the table, and ``|PE[m+g] - PE[m]|`` per
    gap ``g`` for starts ``m`` in ``{0, 10, 100, 1000}`` (one row per start)."""
    starts = (0, 10, 100, 1000)
    table = sinusoidal_table(1000 + max(gaps) + 1, dim).double()
    distance = [[float((table[m + g] - table[m]).norm()) for g in gaps] for m in starts]
    return {
        "table": table[:shown, :shown].tolist(),
        "gaps": list(gaps),
        "starts": list(starts),
        "distance": distance,
        "spread": max(max(col) - min(col) for col in zip(*distance, strict=True)),
    }


def rope_demo(
    head_dim: int = 64, distance: int = 3, starts: tuple[int, ...] = (0, 10, 100, 1000)
) -> dict[str, Any]:
    """``rope(q, m + distance) . rope(k, m)`` for one random ``q``, ``k`` (seeded) and each
    start ``m``: equal up to float32 rounding."""
    gen = torch.Generator().manual_seed(PROBE_SEED)
    q, k = torch.randn(2, 1, head_dim, generator=gen)  # each (1, Dh)
    scores = []
    for m in starts:
        rq = apply_rope(q, torch.tensor([m + distance]))
        rk = apply_rope(k, torch.tensor([m]))
        scores.append(float((rq * rk).sum()))
    return {
        "distance": distance,
        "starts": list(starts),
        "scores": scores,
        "spread": max(scores) - min(scores),
    }


def rope_decay(
    head_dim: int = 128, max_distance: int = 4096, bases: tuple[float, ...] = ROPE_BASES
) -> dict[str, Any]:
    """Relative upper bound of RoPE's score against distance ``r`` (Su et al. 2021, §3.4.3):
    ``(1 / (Dh/2)) * sum_j |S_j|``, ``S_j = sum_{i<j} exp(1j * r * theta_i)``.

    Returns:
        ``{"distances": [...], "bound": {base: [...]}}``, distances on a log grid.
    """
    distances = torch.unique(
        torch.logspace(0, torch.log10(torch.tensor(max_distance)), 200).round()
    )
    bound = {}
    for base in bases:
        theta = rope_frequencies(head_dim, base).double()  # (Dh/2,)
        phase = distances.double().unsqueeze(-1) * theta  # (R, Dh/2)
        partial = torch.polar(torch.ones_like(phase), phase).cumsum(-1)  # (R, Dh/2): S_1 ..
        bound[str(int(base))] = (partial.abs().sum(-1) / theta.numel()).tolist()
    return {"distances": distances.int().tolist(), "bound": bound}


def bias_per_head(scheme: PositionScheme, length: int = 64) -> list[list[float]] | None:
    """``score_bias`` of the last query against distances ``0 .. length-1``, per head:
    ``[head][distance]``, or None for a scheme without a shared score bias."""
    with torch.no_grad():
        bias = scheme.score_bias(torch.arange(length), length)
    if bias is None:
        return None
    last = bias[0, :, -1, :].flip(-1)  # (H, T): key at distance 0, 1, ... from the last query
    return last.tolist()


@torch.no_grad()
def permutation_gap(name: str, causal: bool, length: int = 12) -> float:
    """Shuffle a random sentence, un-shuffle the outputs of a fresh model: largest change.

    Args:
        name: a registered scheme.
        causal: build the model causal (True) or bidirectional (False).
        length: tokens in the sentence.

    Returns:
        ``max |f(x)[perm^-1] - f(x[perm])|`` over logits, float32 (0 up to rounding: the model
        is permutation-equivariant).
    """
    config = probe_config(name, causal=causal)
    torch.manual_seed(PROBE_SEED)
    model = Transformer(config).eval()
    gen = torch.Generator().manual_seed(PROBE_SEED)
    idx = torch.randint(config.vocab_size, (1, length), generator=gen)
    perm = torch.randperm(length, generator=gen)
    out = model(idx)[0]  # (T, V)
    shuffled = model(idx[:, perm])[0]  # (T, V): row t is the output for token perm[t]
    return float((shuffled - out[perm]).abs().max())


def permutation_demo(names: list[str]) -> dict[str, float]:
    """:func:`permutation_gap` for NoPE causal and bidirectional, and every named scheme in its
    bidirectional form where it has one (causal otherwise), keyed ``"name (causal)"`` etc."""
    result = {"none (causal)": permutation_gap("none", causal=True)}
    for name in names:
        causal = not scheme_class(name).bidirectional
        result[f"{name} ({'causal' if causal else 'bidirectional'})"] = permutation_gap(
            name, causal
        )
    return result


def score_bias_demo(
    names: list[str], schemes: dict[str, PositionScheme]
) -> dict[str, list[list[float]]]:
    """:func:`bias_per_head` of every named scheme that has a shared score bias."""
    biases = {name: bias_per_head(schemes[name]) for name in names}
    return {name: bias for name, bias in biases.items() if bias is not None}


def fresh_schemes(names: list[str]) -> dict[str, PositionScheme]:
    """Every named scheme with fresh weights at the probe's model size."""
    return {name: fresh_scheme(probe_config(name)) for name in names}
