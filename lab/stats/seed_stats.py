"""Seed-level inference: the trained run, not the evaluation sequence, is the unit of evidence.

Two schemes trained with the same seed see the same data stream and are scored on the same
evaluation sequences, so runs pair by seed. A claim about schemes is a claim across training
runs, and every test here works on the **per-seed differences** ``d_i = a_i - b_i`` (one
number per seed: exact-match in [0, 1], or a mean loss in nats/token):

- :func:`paired` gives the mean difference with its Student-t interval over seeds,
  ``mean(d) +- t(1 - alpha/2, n - 1) * sd(d) / sqrt(n)`` (``scipy.stats.ttest_rel``'s
  interval), the paired t-test's p-value, and the exact sign-flip (paired randomisation)
  test's p-value, which assumes only that ``d`` is symmetric about 0 under the null (Fisher
  1935; Good 2005, section 3.3; ``scipy.stats.permutation_test`` with
  ``permutation_type="samples"``, exact over all ``2**n`` sign vectors up to 2**16).
  A difference is **significant** only when both tests reject: the t-test alone trusts
  normality that 6 seeds cannot check, and the sign-flip test alone cannot reach p < 0.05
  below 6 seeds (its smallest two-sided p is ``2 / 2**n``).
- :func:`holm` corrects the p-values of a family of comparisons (Holm 1979).
- :func:`share` is the share of seeds passing a criterion with its exact (Clopper-Pearson)
  interval, for cells whose seeds split (some runs extrapolate, some do not).
- :func:`paired_t_power` and :func:`seeds_for_half_width` plan seeds (a noncentral t,
  Cohen 1988, chapter 2; and the t-interval's half-width solved for n).

Per-sequence tests (McNemar, Wilson intervals in :mod:`lab.stats.intervals`) describe one
checkpoint against another on one sample; they never decide a claim about schemes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

ALPHA = 0.05
"""Level of every seed-level test and interval (two-sided, before any correction)."""
SIGN_FLIP_EXACT = 16
"""Up to this many seeds the sign-flip test enumerates every sign vector; beyond it draws
2**16 of them from a fixed generator (so a report is reproducible)."""


@dataclass(frozen=True)
class Paired:
    """A paired comparison of two arms over the seeds both have.

    Attributes:
        seeds: the paired seeds, sorted.
        differences: ``a - b`` per seed, in seed order (units of the inputs).
        mean: mean of ``differences``.
        low, high: the ``1 - alpha`` t-interval of the mean (equal to ``mean`` when every
            difference is equal; None with one seed).
        alpha: the interval's level (``ALPHA``, or a Bonferroni share of it).
        p_t: two-sided paired t-test p-value (1.0 when every difference is 0; 0.0 when every
            difference is the same non-zero number; None with one seed).
        p_sign_flip: two-sided exact sign-flip p-value (1.0 with one seed).
    """

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    mean: float
    low: float | None
    high: float | None
    alpha: float
    p_t: float | None
    p_sign_flip: float

    def flipped(self) -> Paired:
        """The same comparison as ``b - a``."""
        return Paired(
            self.seeds,
            tuple(-d for d in self.differences),
            -self.mean,
            None if self.high is None else -self.high,
            None if self.low is None else -self.low,
            self.alpha,
            self.p_t,
            self.p_sign_flip,
        )

    @property
    def n(self) -> int:
        """Number of paired seeds."""
        return len(self.seeds)

    @property
    def p_value(self) -> float:
        """The comparison's p-value: the larger of the two tests' (both must reject)."""
        return 1.0 if self.p_t is None else max(self.p_t, self.p_sign_flip)

    @property
    def sd(self) -> float | None:
        """Sample standard deviation of the differences (None with one seed)."""
        return None if self.n < 2 else float(np.std(self.differences, ddof=1))

    @property
    def half_width(self) -> float | None:
        """Half the interval's width (None with one seed)."""
        return None if self.low is None else (self.high - self.low) / 2


def sign_flip_p(differences: list[float] | tuple[float, ...]) -> float:
    """Two-sided p-value of the exact sign-flip test of ``mean(differences) == 0``.

    Every ``2**n`` assignment of signs to the differences is equally likely under the null
    hypothesis that each difference is symmetric about 0; the p-value is the share of
    assignments whose ``|mean|`` is at least the observed one (scipy's
    ``permutation_test``, paired samples). Exact up to :data:`SIGN_FLIP_EXACT` seeds.

    Raises:
        ValueError: no differences.
    """
    d = np.asarray(differences, dtype=float)
    if d.size == 0:
        raise ValueError("sign_flip_p needs at least one difference")
    if not np.any(d):
        return 1.0
    result = stats.permutation_test(
        (d, np.zeros_like(d)),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=2**SIGN_FLIP_EXACT,
        alternative="two-sided",
        rng=np.random.default_rng(0),
    )
    return float(min(1.0, result.pvalue))


def paired(a: dict[int, float], b: dict[int, float], alpha: float = ALPHA) -> Paired | None:
    """Arm ``a`` against arm ``b``, paired by seed.

    Args:
        a, b: seed -> the arm's figure for that seed's run (exact-match in [0, 1], a mean
            loss, ...); seeds only one arm has are ignored.
        alpha: the interval's level is ``1 - alpha``.

    Returns:
        A :class:`Paired` over the shared seeds, or None when they share none.

    Raises:
        ValueError: ``alpha`` outside (0, 1), or a value that is not finite.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha!r} is invalid; it must be in (0, 1)")
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        return None
    d = np.array([a[s] - b[s] for s in seeds], dtype=float)
    if not np.all(np.isfinite(d)):
        raise ValueError(f"paired: a difference is not finite ({d.tolist()})")
    mean = float(d.mean())
    if len(d) == 1:
        return Paired(seeds, (mean,), mean, None, None, alpha, None, 1.0)
    if np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())):  # all equal to rounding: no t
        p_t = 1.0 if mean == 0 else 0.0
        return Paired(seeds, tuple(d.tolist()), mean, mean, mean, alpha, p_t, sign_flip_p(d))
    test = stats.ttest_1samp(d, 0.0)
    ci = test.confidence_interval(1 - alpha)
    return Paired(
        seeds,
        tuple(d.tolist()),
        mean,
        float(ci.low),
        float(ci.high),
        alpha,
        float(test.pvalue),
        sign_flip_p(d),
    )


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (Holm 1979).

    The i-th smallest p-value is multiplied by ``m - i`` (i from 0), made monotone and capped
    at 1; rejecting where the adjusted p < alpha controls the family-wise error at alpha.

    Raises:
        ValueError: a p-value outside [0, 1].
    """
    if any(not 0 <= p <= 1 for p in p_values):
        raise ValueError(f"holm: p-values must be in [0, 1], got {p_values}")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Share:
    """``k`` of ``n`` seeds pass a criterion, with the exact ``1 - alpha`` interval."""

    k: int
    n: int
    low: float
    high: float

    @property
    def split(self) -> bool:
        """Some seeds pass and some do not (a bimodal cell)."""
        return 0 < self.k < self.n

    def words(self) -> str:
        """``'2/6 seeds [4%, 78%]'``."""
        return f"{self.k}/{self.n} seeds [{100 * self.low:.0f}%, {100 * self.high:.0f}%]"


def share(k: int, n: int, alpha: float = ALPHA) -> Share:
    """``k`` of ``n`` seeds pass, with the Clopper-Pearson interval (``scipy.stats.binomtest``,
    ``method="exact"``; Clopper and Pearson 1934).

    Raises:
        ValueError: ``n < 1`` or ``k`` outside 0..n.
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"share: need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=1 - alpha, method="exact")
    return Share(k, n, float(ci.low), float(ci.high))


def paired_t_power(effect: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test at ``n`` seeds for a true mean difference
    ``effect`` with a per-seed standard deviation ``sd`` of the differences.

    ``P(|T| > t(1 - alpha/2, n - 1))`` for ``T`` noncentral t with ``n - 1`` degrees of
    freedom and noncentrality ``effect * sqrt(n) / sd`` (Cohen 1988, section 2.3).

    Raises:
        ValueError: ``n < 2`` or ``sd <= 0``.
    """
    if n < 2 or not sd > 0:
        raise ValueError(f"paired_t_power needs n >= 2 and sd > 0, got n={n}, sd={sd}")
    df = n - 1
    critical = stats.t.ppf(1 - alpha / 2, df)
    ncp = effect * math.sqrt(n) / sd
    return float(stats.nct.sf(critical, df, ncp) + stats.nct.cdf(-critical, df, ncp))


MAX_SEEDS = 1000
"""Seed counts above this are reported as "more than 1000"."""


def seeds_for_half_width(sd: float, half_width: float, alpha: float = ALPHA) -> int | None:
    """The fewest seeds whose t-interval of the mean has a half-width below ``half_width``
    when the per-seed standard deviation is ``sd``: the smallest n >= 2 with
    ``t(1 - alpha/2, n - 1) * sd / sqrt(n) < half_width``; None above :data:`MAX_SEEDS`.

    Raises:
        ValueError: ``half_width <= 0`` or ``sd < 0``.
    """
    if not half_width > 0 or sd < 0:
        raise ValueError(f"need half_width > 0 and sd >= 0, got {half_width}, {sd}")
    for n in range(2, MAX_SEEDS + 1):
        if stats.t.ppf(1 - alpha / 2, n - 1) * sd / math.sqrt(n) < half_width:
            return n
    return None
