"""The five properties a position encoding is judged by, measured on a scheme's own code.

Every figure is computed from :func:`lab.properties.probe.position_scores`: the attention score
that a fixed content query at position ``m`` gives a fixed content key at position ``n``, so
everything that varies comes from the scheme. Over positions ``0 .. N-1`` (``N`` = ``span``):

- **uniqueness**: the smallest RMS distance between the score rows of two different positions
  (0: some two positions look the same to attention);
- **boundedness**: the largest ``|score|`` up to ``4N`` over the largest up to ``N`` (1: bounded;
  4: grows linearly with distance, as ALiBi's bias);
- **relativity**: the largest change of a score ``(m, n)``, ``n <= m``, when both positions
  shift by ``s`` in ``{1, N/2, N}`` (0: it depends on ``m - n`` only);
- **extrapolation**: the longest position the scheme can encode (a learned table's length),
  whether it encodes 4x the training length, and for a trained run its exact-match at 2x (a
  synthetic task) or its held-out perplexity at 2x (a language model, task ``text``);
- **determinism**: the same scores twice in one process, and in a fresh process (hash).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from lab.properties.probe import Probe, encodings, position_scores
from model.position.base import PositionScheme


@dataclass(frozen=True)
class Properties:
    """One scheme's measured properties (see the module docstring for each test), by criterion:
    uniqueness (``uniqueness``), boundedness (``boundedness``, ``max_score``), relativity
    (``relativity``), extrapolation (``max_length``, ``defined_at_4x``, ``exact_match_2x``,
    ``perplexity_2x``) and determinism (``deterministic``). A trained run has one of the two
    2x figures: exact-match for a synthetic task, perplexity for a language model."""

    scheme: str
    uniqueness: float
    boundedness: float
    max_score: float
    relativity: float
    max_length: int | None
    defined_at_4x: bool
    deterministic: bool
    exact_match_2x: float | None = None
    perplexity_2x: float | None = None


def positions(start: int, n: int) -> Tensor:
    """int64 ``(n,)``: ``start, start + 1, ..., start + n - 1``."""
    return torch.arange(start, start + n)


def uniqueness(scores: Tensor) -> float:
    """Smallest RMS distance between the encodings of two different positions.

    Distances are summed from entry-wise differences (cdist without its matrix-product path):
    ``|x|^2 + |y|^2 - 2 x.y`` cancels, so two bitwise-equal rows came out 5.3e-9 apart on one
    CPU and 0 on another; differences give exactly 0 for equal rows on any CPU.

    Args:
        scores: float32 ``(H, T, T)`` from :func:`position_scores`.
    """
    rows = encodings(scores).double()  # (T, H * T)
    distance = torch.cdist(rows, rows, compute_mode="donot_use_mm_for_euclid_dist")
    distance = distance / rows.shape[1] ** 0.5  # (T, T)
    distance.fill_diagonal_(float("inf"))
    return float(distance.min())


def boundedness(scheme: PositionScheme, probe: Probe, span: int) -> tuple[float, float]:
    """``(max |score| up to 4N / max |score| up to N, max |score| up to 4N)``."""
    near = position_scores(scheme, probe, positions(0, span)).abs().max()
    far = position_scores(scheme, probe, positions(0, 4 * span)).abs().max()
    return float(far / near.clamp_min(1e-12)), float(far)


def relativity(scheme: PositionScheme, probe: Probe, span: int) -> float:
    """Largest ``|score(m + s, n + s) - score(m, n)|`` over ``n <= m < span`` and the shifts."""
    base = position_scores(scheme, probe, positions(0, span))
    lower = torch.ones(span, span, dtype=torch.bool).tril()  # n <= m: what a causal model sees
    worst = 0.0
    for shift in sorted({1, span // 2, span}):
        moved = position_scores(scheme, probe, positions(shift, span))
        worst = max(worst, float((moved - base)[:, lower].abs().max()))
    return worst


def defined_at(scheme: PositionScheme, probe: Probe, length: int) -> bool:
    """Whether the scheme encodes positions ``0 .. length - 1``."""
    limit = scheme.max_length()
    if limit is not None and length > limit:
        return False
    try:
        position_scores(scheme, probe, positions(0, length))
    except (IndexError, ValueError):
        return False
    return True


def fingerprint(scheme: PositionScheme, probe: Probe, span: int) -> str:
    """sha256 of the scores over ``0 .. span-1`` (bitwise: any difference changes it)."""
    scores = position_scores(scheme, probe, positions(0, span)).contiguous()
    return hashlib.sha256(scores.numpy().tobytes()).hexdigest()


def measure(
    scheme: PositionScheme, probe: Probe, span: int, train_length: int, other_process: str | None
) -> Properties:
    """Every property of ``scheme`` (see the module docstring).

    Args:
        scheme: the scheme, fresh or trained weights, eval mode.
        probe: the probe content for its config.
        span: ``N``, the positions measured.
        train_length: the longest training length (extrapolation: "at 4x train").
        other_process: the fingerprint computed in a fresh process, or None to compare only
            within this one.
    """
    scores = position_scores(scheme, probe, positions(0, span))
    again = fingerprint(scheme, probe, span)
    same = again == fingerprint(scheme, probe, span)
    if other_process is not None:
        same = same and again == other_process
    ratio, largest = boundedness(scheme, probe, span)
    return Properties(
        scheme=scheme.name,
        uniqueness=uniqueness(scores),
        boundedness=ratio,
        max_score=largest,
        relativity=relativity(scheme, probe, span),
        max_length=scheme.max_length(),
        defined_at_4x=defined_at(scheme, probe, 4 * train_length),
        deterministic=same,
    )


def as_dict(properties: Properties) -> dict[str, Any]:
    """Plain dict for JSON."""
    return asdict(properties)
