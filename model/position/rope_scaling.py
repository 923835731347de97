"""RoPE context extension: rules that change the rotation frequencies of a model trained at one
context length so that it can be run at a longer one, without retraining.

Notation: ``d`` the rotated head width, ``theta`` the base, ``omega_i = theta**(-2i/d)`` the
frequency of pair ``i = 0 .. d/2 - 1``, ``s`` the factor, ``L`` the original (training) context
in tokens, ``lambda_i = 2 pi / omega_i`` the wavelength of pair ``i``. Each rule returns new
frequencies ``omega'_i`` and an attention factor ``a``: Hugging Face multiplies cos and sin by
``a``, so the logits of rotated dimensions scale by ``a**2`` (YaRN's ``1/t``).

- ``linear``: position interpolation (Chen et al. 2023, "Extending Context Window of Large
  Language Models via Positional Interpolation", eq. 4): ``omega'_i = omega_i / s``.
- ``ntk``: static NTK-aware base change (bloc97 2023; Peng et al. 2023, "YaRN", eq. 16):
  ``theta' = theta * s**(d / (d - 2))``.
- ``dynamic``: dynamic NTK (emozilla 2023; YaRN §3.3): the NTK base change with the factor
  ``s T / L - (s - 1)`` for a sequence of ``T > L`` tokens; nothing changes up to ``L``.
- ``yarn``: YaRN's "NTK-by-parts" with temperature (Peng et al. 2023, eqs. 17-23): pairs that
  rotate fewer than ``beta_slow`` times over ``L`` are interpolated (``omega_i / s``), pairs that
  rotate more than ``beta_fast`` times are kept, with a linear ramp in between over the
  dimension index; ``a = 0.1 ln s + 1`` unless given, or with DeepSeek's ``mscale`` and
  ``mscale_all_dim`` (both set) ``a = m(s, mscale) / m(s, mscale_all_dim)``, ``m(s, k) =
  0.1 k ln s + 1``; ``truncate`` (default) rounds the ramp's ends to whole dimensions (floor,
  ceil), ``truncate: False`` keeps them fractional (gpt-oss).
- ``longrope``: LongRoPE (Ding et al. 2024, "LongRoPE: Extending LLM Context Window Beyond 2
  Million Tokens", §3; Phi-3's ``su`` scaling): every pair has its own rescale factor,
  ``omega'_i = omega_i / r_i`` with ``r = short_factor`` up to ``L`` tokens and ``long_factor``
  past it; ``a = sqrt(1 + ln s / ln L)`` unless given (1 at ``s = 1``).
- ``llama3``: Llama 3.1's rule (Meta 2024, ``apply_scaling`` in llama-models): wavelengths
  above ``L / low_freq_factor`` are interpolated, below ``L / high_freq_factor`` kept, and in
  between ``omega'_i = (1 - g) omega_i / s + g omega_i`` with ``g = (L / lambda_i - low) /
  (high - low)``.

p-RoPE (Barbero et al. 2025, "Round and Round We Go! What Makes Rotary Positional Encodings
Useful?", §6) keeps the highest-frequency share ``p`` of the pairs and sets the others'
frequency to zero (those dimensions are not rotated): :func:`proportional`, Hugging Face's
``proportional`` rope type with ``partial_rotary_factor = p``.

The ``scaling`` dict follows Hugging Face's ``rope_parameters`` (``rope_type``, ``factor``,
``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``, ``attention_factor``,
``low_freq_factor``, ``high_freq_factor``, ``mscale``, ``mscale_all_dim``, ``truncate``,
``short_factor``, ``long_factor``; ``rope_theta`` is the ``theta`` argument) plus
``rope_type: ntk``; the values equal ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS``
(tests/test_rope_scaling.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

Rule = Callable[[Tensor, float, dict[str, Any], int | None], tuple[Tensor, float]]
"""``(omega float64 (d/2,), theta, scaling, seq_len) -> (omega', attention factor)``."""

_RULES: dict[str, Rule] = {}

NEEDS_ORIGINAL = frozenset({"dynamic", "yarn", "llama3", "longrope"})
"""Rules that read ``original_max_position_embeddings``."""


def _rule(name: str) -> Callable[[Rule], Rule]:
    def add(function: Rule) -> Rule:
        _RULES[name] = function
        return function

    return add


def scaling_rules() -> tuple[str, ...]:
    """Names of the scaling rules (``rope_type`` values), ``default`` first."""
    return tuple(_RULES)


def base_frequencies(head_dim: int, theta: float) -> Tensor:
    """``omega_i = theta**(-2i/head_dim)`` in float64, shape ``(head_dim // 2,)``.

    Raises:
        ValueError: ``head_dim`` odd or < 2, or ``theta`` <= 0.
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"RoPE head_dim must be even and >= 2, got {head_dim}")
    if theta <= 0:
        raise ValueError(f"rope theta (base) must be > 0, got {theta}")
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    return theta**-exponent


def rope_inv_freq(
    head_dim: int, theta: float, scaling: dict[str, Any] | None = None, seq_len: int | None = None
) -> tuple[Tensor, float]:
    """RoPE frequencies of ``head_dim`` rotated dimensions under a context-extension rule.

    Args:
        head_dim: rotated dimensions ``d`` (even).
        theta: the base.
        scaling: None (plain RoPE) or a Hugging Face ``rope_parameters``-style dict (see the
            module docstring); ``rope_type`` one of :func:`scaling_rules`.
        seq_len: the current sequence length in tokens; read by ``dynamic`` only (None means
            ``original_max_position_embeddings``).

    Returns:
        ``(inv_freq, attention_factor)``: float32 ``(head_dim // 2,)`` radians per position
        (computed in float64), and the factor Hugging Face multiplies cos and sin by (1.0 for
        every rule but ``yarn``).

    Raises:
        ValueError: an unknown ``rope_type`` (the message lists the rules), a factor < 1, a
            missing or non-positive ``original_max_position_embeddings`` where the rule needs it,
            YaRN's ``beta_fast <= beta_slow`` (Hugging Face only warns: an inverted ramp), or
            LongRoPE factors that are not ``head_dim / 2`` positive numbers.
    """
    omega = base_frequencies(head_dim, theta)
    scaling = dict(scaling or {})
    kind = scaling.get("rope_type", "default")
    if kind not in _RULES:
        raise ValueError(
            f"rope scaling {kind!r} is not a known rule; choose one of {', '.join(_RULES)}"
        )
    if kind != "default" and not scaling.get("factor", 0) >= 1:
        raise ValueError(
            f"rope scaling factor={scaling.get('factor')!r} is invalid; it must be >= 1"
        )
    original = scaling.get("original_max_position_embeddings")
    if kind in NEEDS_ORIGINAL and not (original and original > 0):
        raise ValueError(
            f"rope scaling {kind!r} needs original_max_position_embeddings > 0 (the training "
            f"context in tokens), got {original!r}"
        )
    fast, slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1  # as _yarn
    if kind == "yarn" and not fast > slow:
        raise ValueError(
            f"rope scaling yarn needs beta_fast > beta_slow (its ramp runs from beta_slow to "
            f"beta_fast rotations), got beta_fast={fast!r}, beta_slow={slow!r}"
        )
    if kind == "longrope":
        check_longrope_factors(scaling, head_dim // 2)
    inv_freq, attention_factor = _RULES[kind](omega, theta, scaling, seq_len)
    return inv_freq.float(), float(attention_factor)


@_rule("default")
def _default(
    omega: Tensor, theta: float, scaling: dict, seq_len: int | None
) -> tuple[Tensor, float]:
    return omega, 1.0


@_rule("linear")
def _linear(
    omega: Tensor, theta: float, scaling: dict, seq_len: int | None
) -> tuple[Tensor, float]:
    return omega / scaling["factor"], 1.0


def _ntk_base(theta: float, factor: float, dim: int) -> float:
    """The NTK-aware base ``theta * factor**(d / (d - 2))`` (``d = 2`` keeps ``theta``: one pair,
    whose frequency is 1 for any base)."""
    return theta * factor ** (dim / (dim - 2)) if dim > 2 else theta


@_rule("ntk")
def _ntk(omega: Tensor, theta: float, scaling: dict, seq_len: int | None) -> tuple[Tensor, float]:
    dim = 2 * omega.numel()
    return base_frequencies(dim, _ntk_base(theta, scaling["factor"], dim)), 1.0


@_rule("dynamic")
def _dynamic(
    omega: Tensor, theta: float, scaling: dict, seq_len: int | None
) -> tuple[Tensor, float]:
    original, factor = scaling["original_max_position_embeddings"], scaling["factor"]
    length = max(seq_len or original, original)
    effective = factor * length / original - (factor - 1)  # 1 at length == original
    dim = 2 * omega.numel()
    return base_frequencies(dim, _ntk_base(theta, effective, dim)), 1.0


@_rule("yarn")
def _yarn(omega: Tensor, theta: float, scaling: dict, seq_len: int | None) -> tuple[Tensor, float]:
    factor, original = scaling["factor"], scaling["original_max_position_embeddings"]
    dim = 2 * omega.numel()
    attention = scaling.get("attention_factor")
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if attention is None and mscale and mscale_all_dim:  # DeepSeek's ratio (HF's rule)
        attention = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
    elif attention is None:
        attention = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0

    def dimension(
        rotations: float,
    ) -> float:  # the i (as d-scaled index) rotating that often over L
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dimension(scaling.get("beta_fast") or 32), dimension(scaling.get("beta_slow") or 1)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high = high + 0.001 if low == high else high  # avoid a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (omega kept), 0: interpolate (omega / s)
    return omega / factor * (1 - keep) + omega * keep, attention


@_rule("llama3")
def _llama3(
    omega: Tensor, theta: float, scaling: dict, seq_len: int | None
) -> tuple[Tensor, float]:
    factor, original = scaling["factor"], scaling["original_max_position_embeddings"]
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    if not high > low:
        raise ValueError(
            f"rope scaling llama3 needs high_freq_factor > low_freq_factor, got {high} <= {low}"
        )
    wavelength = 2 * math.pi / omega
    smooth = (original / wavelength - low) / (high - low)
    medium = (wavelength >= original / high) & (wavelength <= original / low)
    scaled = torch.where(wavelength > original / low, omega / factor, omega)
    return torch.where(medium, (1 - smooth) * omega / factor + smooth * omega, scaled), 1.0


def _yarn_mscale(factor: float, mscale: float) -> float:
    """DeepSeek's ``0.1 mscale ln s + 1`` (1 at ``s <= 1``)."""
    return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0


def check_longrope_factors(scaling: dict, pairs: int) -> None:
    """Raise ValueError (one line) unless ``short_factor`` and ``long_factor`` each hold
    ``pairs`` positive numbers (one rescale factor per rotated pair)."""
    for key in ("short_factor", "long_factor"):
        values = list(scaling.get(key) or ())
        if len(values) != pairs or not all(v > 0 for v in values):
            raise ValueError(
                f"rope scaling longrope needs {key} with {pairs} positive numbers (one per "
                f"rotated pair: rotated dims / 2), got {values!r}"
            )


@_rule("longrope")
def _longrope(
    omega: Tensor, theta: float, scaling: dict, seq_len: int | None
) -> tuple[Tensor, float]:
    factor, original = scaling["factor"], scaling["original_max_position_embeddings"]
    attention = scaling.get("attention_factor")
    if attention is None:
        attention = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0
    key = "long_factor" if seq_len and seq_len > original else "short_factor"
    return omega / torch.tensor(scaling[key], dtype=torch.float64), attention


def proportional(inv_freq: Tensor, p: float) -> Tensor:
    """p-RoPE's frequencies: ``inv_freq`` with all but its first ``int(p * d // 2)`` entries (the
    highest frequencies) set to zero, ``d = 2 * len(inv_freq)`` the rotated width (Barbero et
    al. 2025, §6; Hugging Face ``proportional`` with ``partial_rotary_factor = p``, which counts
    the kept pairs the same way). ``p = 1`` keeps every frequency, ``p = 0`` none (NoPE).

    Args:
        inv_freq: ``(d/2,)`` frequencies in decreasing order.
        p: the share kept, in [0, 1].

    Returns:
        A new tensor of ``inv_freq``'s shape and dtype.
    """
    kept = int(p * (2 * inv_freq.numel()) // 2)
    return torch.where(
        torch.arange(inv_freq.numel(), device=inv_freq.device) < kept, inv_freq, 0.0
    ).to(inv_freq.dtype)
