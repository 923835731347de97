"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer", §3.4.2, eq. 34).

Queries and keys are rotated pairwise by an angle proportional to their position, so the score
``<rope(q, m), rope(k, n)>`` depends on ``m - n`` only. Pairing is the half-split layout of
GPT-NeoX, Llama and Hugging Face: dimension ``i`` pairs with ``i + Dh/2`` (GPT-J and the RoFormer
paper pair neighbours ``2i, 2i+1`` instead; the two are equal up to a fixed permutation of the
head dimensions, so they learn the same functions). With ``rotary_fraction < 1`` only the first
``rotary_dims`` dimensions of each head are rotated and the rest pass through (partial rotary,
GPT-NeoX ``rotary_pct``, x-transformers ``rotary_emb_dim``). With ``p < 1`` only the
highest-frequency share ``p`` of the pairs rotates, the rest get frequency zero (p-RoPE, Barbero
et al. 2025, "Round and Round We Go! What Makes Rotary Positional Encodings Useful?", §6;
Hugging Face ``proportional``).
"""

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from model.position.base import PositionScheme, SchemeConfig, Scores, cached_rows, register
from model.position.rope_scaling import (
    base_frequencies,
    proportional,
    rope_inv_freq,
    scaling_rules,
)

__all__ = ["RopeOptions", "RotaryPosition", "apply_rope", "rope_frequencies", "rope_inv_freq"]


def rope_frequencies(head_dim: int, base: float = 10000.0) -> Tensor:
    """Rotation frequencies ``omega_i = base**(-2i/head_dim)``, ``i = 0 .. head_dim/2 - 1``.

    Returns:
        float32 tensor ``(head_dim // 2,)`` in radians per position (computed in float64).

    Raises:
        ValueError: ``head_dim`` odd or < 2, or ``base`` <= 0.
    """
    return base_frequencies(head_dim, base).float()


def rope_cos_sin(positions: Tensor, inv_freq: Tensor) -> tuple[Tensor, Tensor]:
    """Cosine and sine of the angles ``positions * inv_freq``, computed in float32.

    Args:
        positions: integer ``(T,)`` or ``(B, T)``.
        inv_freq: float32 ``(Dh/2,)`` from :func:`rope_frequencies`.

    Returns:
        ``(cos, sin)``, each float32 ``(T, Dh/2)`` or ``(B, T, Dh/2)``.
    """
    angle = positions.to(torch.float32).unsqueeze(-1) * inv_freq.to(positions.device)
    return angle.cos(), angle.sin()  # each (..., T, Dh/2)


def rotate_half_split(x: Tensor, cos: Tensor, sin: Tensor, scale: Tensor | None = None) -> Tensor:
    """Rotate pairs ``(x[..., i], x[..., i + R/2])`` of the first ``R = 2 * cos.shape[-1]``
    dimensions by the angles whose cos/sin are given, then multiply them by ``scale`` if given;
    dimensions past ``R`` pass through.

    Args:
        x: ``(..., T, Dh)`` of any float dtype, ``Dh >= R``.
        cos, sin: float32, broadcastable to ``(..., T, R/2)``.
        scale: float32 broadcastable to ``(..., T, R)``, or None (xPos's decay).

    Returns:
        Tensor of ``x``'s shape and dtype; the arithmetic is done in float32.
    """
    rotary = 2 * cos.shape[-1]
    if rotary < x.shape[-1]:
        head, tail = x[..., :rotary], x[..., rotary:]  # (..., T, R), (..., T, Dh - R)
        return torch.cat((rotate_half_split(head, cos, sin, scale), tail), dim=-1)
    dtype, x = x.dtype, x.float()
    x1, x2 = x.chunk(2, dim=-1)  # each (..., T, Dh/2)
    cos2, sin2 = torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)  # (..., T, Dh)
    # (x1 cos - x2 sin, x2 cos + x1 sin), bitwise, with 3 full-width passes instead of 6 halves
    rotated = x * cos2 + torch.cat((x2, x1), dim=-1) * sin2  # (..., T, Dh)
    if scale is not None:
        rotated.mul_(scale)  # in place: the sum is ours and its backward does not read it
    return rotated.to(dtype)


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotate ``x`` by RoPE at ``positions`` (half-split pairing, angles in float32).

    Args:
        x: queries or keys ``(..., T, Dh)``; with ``(B, T)`` positions, ``x`` is ``(B, H, T, Dh)``
            or ``(B, T, Dh)``.
        positions: integer ``(T,)`` or ``(B, T)``; any non-negative value, no length limit.
        base: ``theta``.

    Returns:
        ``x`` rotated, same shape and dtype.

    Raises:
        ValueError: odd head width.
    """
    inv_freq = rope_frequencies(x.shape[-1], base).to(x.device)
    cos, sin = rope_cos_sin(positions.to(x.device), inv_freq)
    if positions.dim() == 2 and x.dim() == 4:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, Dh/2): broadcast over heads
    return rotate_half_split(x, cos, sin)


def require_even_head_dim(config: SchemeConfig, scheme: str) -> None:
    """Rotations act on pairs of dimensions, so a rotary scheme needs an even ``head_dim``.

    Raises:
        ValueError: ``head_dim`` is odd (one line naming it and the scheme).
    """
    if config.head_dim % 2:
        raise ValueError(
            f"model.head_dim={config.head_dim} (d_model / n_heads) is odd; {scheme} rotates pairs "
            "of dimensions, so it needs an even head_dim"
        )


@dataclass(frozen=True)
class RopeOptions:
    """Options of ``rope``.

    Every option but ``rotary_fraction`` is evaluable: it may be changed at evaluation time
    without retraining (``python eval.py RUN eval.position_options.scaling=yarn``). The
    ``scaling*`` options are Hugging Face's ``rope_scaling`` flattened into one key each, so that
    each can be a sweep axis (:mod:`model.position.rope_scaling` has the equations).

    Attributes:
        theta: the base of the rotation frequencies (Su et al. 2021, eq. 15).
        rotary_fraction: share of each head's dimensions that are rotated, in (0, 1]; rounded
            down to an even count of at least 2 (GPT-NeoX ``rotary_pct``).
        p: p-RoPE's share of the pairs that rotate, in [0, 1]: the highest frequencies are
            kept, the others set to zero (:func:`model.position.rope_scaling.proportional`);
            1 is RoPE, 0 NoPE.
        scaling: context-extension rule: ``none``, ``linear`` (position interpolation),
            ``ntk``, ``dynamic``, ``yarn``, ``llama3`` or ``longrope`` (HF ``rope_type``).
        scaling_factor: the rule's factor ``s`` (HF ``factor``), in [1, :attr:`MAX_FACTOR`];
            above 1 for ``linear``, ``ntk``, ``yarn`` and ``llama3``, which at 1 are plain RoPE
            under another name (HF accepts 1); ``dynamic`` at 1 still rescales past
            ``original_max_position`` (its effective factor is ``T / L``), so it accepts 1.
        original_max_position: the context the model was trained at, in tokens (HF
            ``original_max_position_embeddings``); 0 in a run config means "the longest
            training sequence", filled in from ``data.*`` when the run's config is built.
        beta_fast, beta_slow: YaRN's rotation counts bounding the ramp (paper: 32 and 1);
            ``beta_fast > beta_slow > 0`` (HF only warns on ``beta_fast < beta_slow``, which
            inverts the ramp).
        attention_factor: YaRN's factor on cos and sin; 0 means the paper's ``0.1 ln s + 1``.
        low_freq_factor, high_freq_factor: Llama 3's wavelength bounds (Meta: 1 and 4);
            ``high_freq_factor > low_freq_factor > 0`` (the rule divides by both).
        mscale, mscale_all_dim: YaRN's attention factor as DeepSeek's ratio
            ``(0.1 mscale ln s + 1) / (0.1 mscale_all_dim ln s + 1)`` when both are > 0 and
            ``attention_factor`` is 0; 0 leaves them unset (HF ``mscale``, ``mscale_all_dim``).
        truncate: YaRN's ramp ends rounded to whole dimensions (HF ``truncate``, default true).
        short_factor, long_factor: LongRoPE's rescale factor per rotated pair (``R / 2``
            positive numbers each), used up to and past ``original_max_position`` tokens;
            empty unless ``scaling`` is ``longrope``.
    """

    MAX_FACTOR: ClassVar[float] = 1024.0
    """Largest ``scaling_factor``: 8 times YaRN's largest published factor (128)."""
    MAX_ORIGINAL: ClassVar[int] = 2**16
    """Largest ``original_max_position`` (65,536 tokens: 16 times the lab's longest sequence,
    ``lab.common.config.MAX_TOKENS``)."""
    NO_OP_AT_ONE: ClassVar[frozenset[str]] = frozenset({"linear", "ntk", "yarn", "llama3"})
    """Rules that are plain RoPE at ``scaling_factor`` 1."""

    theta: float = 10000.0
    rotary_fraction: float = 1.0
    scaling: str = "none"
    scaling_factor: float = 1.0
    original_max_position: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float = 0.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    p: float = 1.0
    mscale: float = 0.0
    mscale_all_dim: float = 0.0
    truncate: bool = True
    short_factor: list[float] = field(default_factory=list)
    long_factor: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.theta > 0:
            raise ValueError(f"theta={self.theta!r} is invalid; it must be > 0")
        self.check_extensions()
        if not 0 < self.rotary_fraction <= 1:
            raise ValueError(
                f"rotary_fraction={self.rotary_fraction!r} is invalid; it must be in (0, 1]"
            )
        rules = ("none", *scaling_rules()[1:])
        if self.scaling not in rules:
            raise ValueError(
                f"scaling={self.scaling!r} is invalid; choose one of {', '.join(rules)}"
            )
        self.check_factor()
        if not 0 <= self.original_max_position <= self.MAX_ORIGINAL:
            raise ValueError(
                f"original_max_position={self.original_max_position} is invalid; it must be in "
                f"[0, {self.MAX_ORIGINAL}] (0: the longest training sequence)"
            )
        if self.attention_factor < 0:
            raise ValueError(
                f"attention_factor={self.attention_factor!r} is invalid; it must be >= 0 "
                "(0: YaRN's 0.1 ln s + 1)"
            )
        for name in ("beta_slow", "low_freq_factor"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid; it must be > 0")
        if not self.beta_fast > self.beta_slow:
            raise ValueError(
                f"beta_fast={self.beta_fast!r} is invalid; it must be > beta_slow="
                f"{self.beta_slow!r} (YaRN's ramp runs from beta_slow to beta_fast rotations)"
            )
        if not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                f"high_freq_factor={self.high_freq_factor!r} is invalid; it must be > "
                f"low_freq_factor={self.low_freq_factor!r}"
            )

    def check_extensions(self) -> None:
        """Raise ValueError (one line) unless ``p``, ``mscale``, ``mscale_all_dim`` and the
        LongRoPE factors are valid (their count is checked against the rotated width when the
        scheme is built)."""
        if not 0 <= self.p <= 1:
            raise ValueError(f"p={self.p!r} is invalid; it must be in [0, 1]")
        for name in ("mscale", "mscale_all_dim"):
            if not getattr(self, name) >= 0:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is invalid; it must be >= 0 (0: unset)"
                )
        for name in ("short_factor", "long_factor"):
            values = getattr(self, name)
            numbers = isinstance(values, (list, tuple)) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
            )
            if not numbers or not all(v > 0 for v in values):
                raise ValueError(
                    f"{name}={values!r} is invalid; it must be a list of positive numbers"
                )
            object.__setattr__(self, name, [float(v) for v in values])
        given = (bool(self.short_factor), bool(self.long_factor))
        if given != ((True, True) if self.scaling == "longrope" else (False, False)):
            raise ValueError(
                f"short_factor and long_factor are LongRoPE's: give both exactly when "
                f"scaling=longrope (scaling={self.scaling!r})"
            )

    def check_factor(self) -> None:
        """Raise ValueError (one line) unless ``scaling_factor`` fits ``scaling`` (see the
        class docstring)."""
        factor = self.scaling_factor
        if not 1 <= factor <= self.MAX_FACTOR:
            raise ValueError(
                f"scaling_factor={factor!r} is invalid; it must be in [1, {self.MAX_FACTOR:g}]"
            )
        if self.scaling in self.NO_OP_AT_ONE and factor == 1:
            raise ValueError(
                f"scaling_factor={factor!r} is invalid for scaling={self.scaling!r}; it must be "
                f"> 1 (at 1 it is plain RoPE: use scaling=none), e.g. scaling_factor=4"
            )

    def rope_parameters(self) -> dict | None:
        """The scaling as a Hugging Face ``rope_parameters`` dict for :func:`rope_inv_freq`, or
        None when ``scaling`` is ``none``."""
        if self.scaling == "none":
            return None
        return {
            "rope_type": self.scaling,
            "factor": self.scaling_factor,
            "original_max_position_embeddings": self.original_max_position,
            "beta_fast": self.beta_fast,
            "beta_slow": self.beta_slow,
            "attention_factor": self.attention_factor or None,
            "low_freq_factor": self.low_freq_factor,
            "high_freq_factor": self.high_freq_factor,
            "mscale": self.mscale or None,
            "mscale_all_dim": self.mscale_all_dim or None,
            "truncate": self.truncate,
            "short_factor": self.short_factor,
            "long_factor": self.long_factor,
        }


def rotary_dims(head_dim: int, fraction: float) -> int:
    """Rotated dimensions per head: ``head_dim * fraction`` rounded down to even, at least 2."""
    return max(2, int(head_dim * fraction) // 2 * 2)


@register("rope")
class RotaryPosition(PositionScheme):
    """Rotates queries and keys in every layer; nothing is added to embeddings or scores.

    ``cos``/``sin`` tables for default positions are cached per model and grown on demand
    (doubling); explicit positions are rotated by angles computed from them directly. With a
    ``scaling`` rule the frequencies are :func:`rope_inv_freq`'s; ``dynamic`` and ``longrope``
    recompute them for each sequence longer than ``original_max_position`` (from its length
    ``T``, also when explicit positions are given; Hugging Face's ``longrope`` reads the
    largest position instead), and YaRN's attention factor ``a`` multiplies the scores of
    every layer by ``a**2`` (Peng et al. 2023, eq. 22: ``1/t``, with ``sqrt(1/t) = a``).
    """

    Options = RopeOptions
    evaluable = frozenset(
        {
            "theta",
            "scaling",
            "scaling_factor",
            "original_max_position",
            "beta_fast",
            "beta_slow",
            "attention_factor",
            "low_freq_factor",
            "high_freq_factor",
            "p",
            "mscale",
            "mscale_all_dim",
            "truncate",
            "short_factor",
            "long_factor",
        }
    )
    relative = True

    def __init__(self, config: SchemeConfig, options: RopeOptions) -> None:
        super().__init__(config, options)
        half = rotary_dims(config.head_dim, options.rotary_fraction) // 2
        self.register_buffer("_cos", torch.empty(0, half), persistent=False)
        self.register_buffer("_sin", torch.empty(0, half), persistent=False)
        factor = self.frequencies(None)[1]  # also checks the scaling settings, here, once
        self.score_scale = None if factor == 1.0 else factor**2

    @classmethod
    def check(cls, config: SchemeConfig, options: RopeOptions) -> None:
        """RoPE rotates pairs of dimensions, so ``head_dim`` must be even."""
        require_even_head_dim(config, "RoPE")

    @classmethod
    def with_training_context(cls, options: dict, tokens: int) -> dict:
        """``original_max_position`` 0 becomes ``tokens``."""
        if options.get("original_max_position"):
            return options
        return {**options, "original_max_position": tokens}

    def frequencies(self, seq_len: int | None) -> tuple[Tensor, float]:
        """``(inv_freq, attention_factor)`` of the rotated dimensions at length ``seq_len``
        (read by ``dynamic`` only): float32 ``(R/2,)`` and a float (see :func:`rope_inv_freq`).

        Raises:
            ValueError: a rule that needs ``original_max_position`` left at 0.
        """
        rotary = rotary_dims(self.config.head_dim, self.options.rotary_fraction)
        try:
            inv_freq, factor = rope_inv_freq(
                rotary, self.options.theta, self.options.rope_parameters(), seq_len
            )
        except ValueError as error:
            raise ValueError(f"model.options.rope: {error}") from None
        if self.options.p < 1:
            inv_freq = proportional(inv_freq, self.options.p)
        return inv_freq, factor

    def inv_freq(self) -> Tensor:
        """Float32 ``(R/2,)`` frequencies of the rotated dimensions (``R`` = rotary dims) at
        lengths up to ``original_max_position``."""
        return self.frequencies(None)[0]

    def reserve(self, n_positions: int) -> None:
        """Grow the cached tables to at least ``n_positions`` rows."""
        self.tables(n_positions)

    def tables(self, seq_len: int) -> tuple[Tensor, Tensor]:
        """Cached ``(cos, sin)`` of default positions: float32 ``(T, R/2)`` views (see
        :func:`cached_rows`)."""

        def angles(n: int) -> Tensor:  # (n, R/2) float32, whatever dtype the model was cast to
            return torch.arange(n).float().unsqueeze(1) * self.inv_freq()

        cos = cached_rows(self, "_cos", seq_len, lambda n: angles(n).cos())
        return cos, cached_rows(self, "_sin", seq_len, lambda n: angles(n).sin())

    def prepare(self, positions: Tensor | None, seq_len: int) -> tuple[Tensor, Tensor]:
        """``(cos, sin)``: float32 ``(T, R/2)``, or ``(B, 1, T, R/2)`` for ``(B, T)`` positions."""
        longer = seq_len > self.options.original_max_position
        if self.options.scaling in ("dynamic", "longrope") and longer:
            inv_freq = self.frequencies(seq_len)[0].to(self._cos.device)
            if positions is None:
                positions = torch.arange(seq_len, device=self._cos.device)
        elif positions is None:
            return self.tables(seq_len)  # (T, R/2) views
        else:
            inv_freq = self.inv_freq()
        cos, sin = rope_cos_sin(positions, inv_freq)  # (T, R/2) or (B, T, R/2)
        if positions.dim() == 2:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, R/2)
        return cos, sin

    def layer(self, index: int, q: Tensor, k: Tensor, state: tuple[Tensor, Tensor]) -> Scores:
        """Queries and keys ``(B, H, T, Dh)`` rotated (the same tables in every layer), and
        YaRN's score scale ``a**2`` where the rule has one."""
        cos, sin = state
        return Scores(
            rotate_half_split(q, cos, sin), rotate_half_split(k, cos, sin), None, self.score_scale
        )
