"""Intervals of one figure, and the exact McNemar test of one checkpoint against another.

- :func:`t_interval`: the mean of per-seed figures with its Student-t interval,
  ``mean +- t(1 - alpha/2, n - 1) * s / sqrt(n)`` (``s`` the sample standard deviation over
  seeds; ``scipy.stats.t``). With 3 seeds the multiplier is 4.303: wide, as it should be.
- :func:`mcnemar_exact`: does *this* checkpoint differ from *that* one on *this* evaluation
  sample? A per-run question (the trained models are fixed, only the sequences vary); it never
  decides a claim about schemes, which is a claim across training runs
  (:mod:`lab.stats.seed_stats`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

ALPHA = 0.05
"""Level of the intervals (two-sided)."""


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (``scipy.stats.t``).

    Raises:
        ValueError: ``df < 1``.
    """
    if df < 1:
        raise ValueError(f"a t quantile needs df >= 1, got df={df}")
    return float(stats.t.ppf(0.975, df))


@dataclass
class Interval:
    """Mean over seeds with a t-interval (``low``/``high``/``sd`` None for a single seed)."""

    mean: float
    low: float | None
    high: float | None
    n: int
    sd: float | None = None


def t_interval(values: list[float], alpha: float = ALPHA) -> Interval:
    """Mean of ``values`` with its ``1 - alpha`` Student-t interval, as computed (not clipped
    to [0, 1]).

    Raises:
        ValueError: no values, or ``alpha`` outside (0, 1).
    """
    n = len(values)
    if n == 0:
        raise ValueError("t_interval needs at least one value")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r} is invalid; it must be in (0, 1)")
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, None, None, 1)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(1 - alpha / 2, n - 1)) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, sd)


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
