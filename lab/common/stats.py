"""Statistics across seeds: a t-interval for the mean, and an exact paired test between schemes.

With three seeds per cell, two questions need two tools:

- *How much does a cell vary with the seed?* The mean exact-match over seeds with a 95%
  Student-t interval, ``mean +- t(0.975, n - 1) * s / sqrt(n)`` (``s`` the sample standard
  deviation over seeds). With n = 3 the multiplier is 4.303: wide, as it should be.
- *Do two schemes differ?* A test over seeds alone cannot answer at n = 3: the smallest
  two-sided p-value of a sign test or a paired permutation test over 3 seeds is 2/8 = 0.25. So
  the test pools the evaluation sequences: every run of a seed is scored on the same sequences
  (:func:`data.streams.evaluation_set`), which pairs the two schemes sequence by sequence, and
  the exact McNemar test (a two-sided binomial test on the discordant sequences) gives the
  p-value. Pooling treats the trained models as fixed, so a difference also has to point the
  same way in every seed before it is called significant: a seed-to-seed effect that one lucky
  seed carries is not reported as a scheme effect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
T_975 += (2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)
T_975 += (2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
"""Student-t 0.975 quantiles for 1..30 degrees of freedom (standard tables, 3 decimals)."""
Z_975 = 1.959964
ALPHA = 0.05
"""Significance level of :func:`compare`."""


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom.

    From :data:`T_975` up to 30; beyond, the first two terms of the Cornish-Fisher expansion
    ``z + (z**3 + z) / (4 df) + (5 z**5 + 16 z**3 + 3 z) / (96 df**2)`` (Abramowitz and Stegun
    26.7.5; 2.0395 at df = 31, the exact value to 4 decimals).

    Raises:
        ValueError: ``df < 1``.
    """
    if df < 1:
        raise ValueError(f"a t quantile needs df >= 1, got df={df}")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass
class Interval:
    """Mean over seeds with a 95% t-interval (``low``/``high`` None for a single seed)."""

    mean: float
    low: float | None
    high: float | None
    n: int


def t_interval(values: list[float]) -> Interval:
    """Mean of ``values`` with its 95% Student-t interval, as computed (not clipped to [0, 1]).

    Raises:
        ValueError: no values.
    """
    n = len(values)
    if n == 0:
        raise ValueError("t_interval needs at least one value")
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, None, None, 1)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def mcnemar_exact(only_first: int, only_second: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts of a paired comparison.

    Under the null hypothesis each discordant pair is ``only_first`` with probability 1/2, so
    ``p = min(1, 2 * P(X <= min(b, c)))`` with ``X ~ Binomial(b + c, 1/2)`` (McNemar 1947;
    the exact form as in Fagerland et al. 2013). 1.0 when there are no discordant pairs.

    Raises:
        ValueError: a negative count.
    """
    if only_first < 0 or only_second < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_first}, {only_second}")
    n = only_first + only_second
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_first, only_second) + 1))
    return min(1.0, 2 * tail / 2**n)


@dataclass
class Comparison:
    """Scheme A against scheme B on paired sequences, pooled over the seeds both have.

    Attributes:
        difference: mean over seeds of A's exact-match minus B's.
        only_a, only_b: sequences only A (only B) answered right, summed over seeds.
        p_value: exact McNemar p-value of ``only_a`` against ``only_b``.
        seeds: seeds compared.
        same_sign: the per-seed differences are all non-zero and of one sign.
        significant: ``p_value < ALPHA`` and ``same_sign``.
        seed_differences: A's exact-match minus B's, per compared seed (in seed order).
    """

    difference: float
    only_a: int
    only_b: int
    p_value: float
    seeds: int
    same_sign: bool
    seed_differences: tuple[float, ...] = ()

    @property
    def significant(self) -> bool:
        """``p_value < ALPHA`` and the difference points the same way in every seed."""
        return self.p_value < ALPHA and self.same_sign


def compare(a: dict[int, str], b: dict[int, str]) -> Comparison | None:
    """Compare two schemes' per-sequence results, seed by seed.

    Args:
        a, b: seed -> ``"0"``/``"1"`` string, one character per evaluation sequence (the
            ``correct`` field of an ``eval.json`` length), in the same sequence order.

    Returns:
        A :class:`Comparison` over the seeds both have, or None when they share none.

    Raises:
        ValueError: the two strings of a seed have different lengths.
    """
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    only_a = only_b = 0
    differences = []
    for seed in seeds:
        if len(a[seed]) != len(b[seed]):
            raise ValueError(
                f"seed {seed}: {len(a[seed])} and {len(b[seed])} sequences cannot be paired"
            )
        only_a += sum(x == "1" and y == "0" for x, y in zip(a[seed], b[seed], strict=True))
        only_b += sum(x == "0" and y == "1" for x, y in zip(a[seed], b[seed], strict=True))
        differences.append((a[seed].count("1") - b[seed].count("1")) / len(a[seed]))
    same_sign = all(d > 0 for d in differences) or all(d < 0 for d in differences)
    return Comparison(
        sum(differences) / len(differences),
        only_a,
        only_b,
        mcnemar_exact(only_a, only_b),
        len(seeds),
        same_sign,
        tuple(differences),
    )
