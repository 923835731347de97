"""Seed-level inference (lab.stats.seed_stats): scipy and hand values on fixed inputs, the
false-positive rate on simulated sweeps with no scheme effect, and power against the textbook
noncentral-t calculation."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from lab.stats.seed_stats import (
    ALPHA,
    holm,
    paired,
    paired_t_power,
    seeds_for_half_width,
    share,
    sign_flip_p,
)


def test_paired_matches_scipy_ttest_rel() -> None:
    a = {0: 0.62, 1: 0.91, 2: 0.40, 3: 0.75, 4: 0.55, 5: 0.80, 9: 0.1}  # seed 9: a only
    b = {0: 0.50, 1: 0.70, 2: 0.45, 3: 0.60, 4: 0.30, 5: 0.81}
    c = paired(a, b)
    seeds = range(6)
    reference = stats.ttest_rel([a[s] for s in seeds], [b[s] for s in seeds])
    ci = reference.confidence_interval(0.95)
    assert c.seeds == (0, 1, 2, 3, 4, 5)
    assert c.mean == pytest.approx(np.mean([a[s] - b[s] for s in seeds]), rel=1e-12)
    assert (c.low, c.high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert c.p_t == pytest.approx(reference.pvalue, rel=1e-12)
    assert c.flipped().mean == -c.mean and c.flipped().low == -c.high


def test_the_audit_example_is_not_significant() -> None:
    # copy at 1.25x, ALiBi minus learned per seed: +53.1, +87.5, +16.0 points. The pooled
    # McNemar test called it p = 3.9e-121; over seeds the interval is +52 +- 89 points.
    c = paired({0: 0.531, 1: 0.875, 2: 0.160}, {0: 0.0, 1: 0.0, 2: 0.0})
    assert c.mean == pytest.approx(0.522)
    assert c.half_width == pytest.approx(0.888, abs=1e-3)
    assert c.p_t == pytest.approx(0.127, abs=1e-3)
    assert c.p_sign_flip == 0.25  # 2 of the 8 sign vectors are as extreme
    assert c.p_value >= ALPHA


def _sign_flip_by_enumeration(d: list[float]) -> float:
    observed = abs(sum(d))
    flips = list(itertools.product((1, -1), repeat=len(d)))
    sums = [abs(sum(s * x for s, x in zip(signs, d, strict=True))) for signs in flips]
    extreme = sum(total >= observed - 1e-12 for total in sums)
    return extreme / len(flips)


@pytest.mark.parametrize(
    "d",
    [[0.1, 0.2, 0.3], [0.1] * 6, [0.3, -0.1, 0.2, 0.25, 0.05, 0.4], [0.5, -0.5, 0.1, -0.1, 0.2]],
)
def test_sign_flip_is_the_exact_enumeration(d: list[float]) -> None:
    assert sign_flip_p(d) == pytest.approx(_sign_flip_by_enumeration(d))


def test_sign_flip_floor_and_degenerate_inputs() -> None:
    assert sign_flip_p([0.1] * 5) == pytest.approx(2 / 32)  # cannot reach 0.05 below 6 seeds
    assert sign_flip_p([0.1] * 6) == pytest.approx(2 / 64)
    assert sign_flip_p([0.0, 0.0, 0.0]) == 1.0
    same = paired({0: 0.5, 1: 0.5}, {0: 0.5, 1: 0.5})
    assert (same.mean, same.low, same.high, same.p_t, same.p_value) == (0, 0, 0, 1.0, 1.0)
    one = paired({0: 0.9}, {0: 0.1})
    assert one.low is None and one.p_value == 1.0 and one.n == 1
    assert paired({0: 1.0}, {1: 1.0}) is None
    with pytest.raises(ValueError, match="at least one difference"):
        sign_flip_p([])
    with pytest.raises(ValueError, match=r"alpha=0 is invalid"):
        paired({0: 1.0}, {0: 1.0}, alpha=0)


def test_holm_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04, 0.5 times 4, 3, 2, 1: 0.04, 0.09, 0.08 -> 0.09 (monotone), 0.5
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
    with pytest.raises(ValueError, match="must be in"):
        holm([1.2])


def test_share_is_clopper_pearson() -> None:
    s = share(2, 6)
    assert (s.low, s.high) == pytest.approx((0.04327, 0.77722), abs=1e-5)  # scipy binomtest
    zero = share(0, 6)  # the upper bound of k = 0 is 1 - (alpha / 2) ** (1 / n)
    assert zero.low == 0 and zero.high == pytest.approx(1 - 0.025 ** (1 / 6))
    assert s.split and not zero.split and not share(6, 6).split
    assert s.words() == "2/6 seeds [4%, 78%]"
    with pytest.raises(ValueError, match="k=7, n=6"):
        share(7, 6)


def _sweep(rng: np.random.Generator, n: int, mean: float, sd: float, effect: float = 0.0):
    """One simulated pair of arms at n seeds: each seed's run draws its true accuracy from
    N(mean (+ effect), sd), clipped to [0, 1], then is scored on 256 sequences."""
    true_a = np.clip(rng.normal(mean + effect, sd, n), 0, 1)
    true_b = np.clip(rng.normal(mean, sd, n), 0, 1)
    a, b = rng.binomial(256, true_a) / 256, rng.binomial(256, true_b) / 256
    return dict(enumerate(a)), dict(enumerate(b))


@pytest.mark.parametrize("sd", [0.0, 0.05, 0.10, 0.20])
@pytest.mark.parametrize("n", [3, 6, 10])
def test_false_positive_rate_without_a_scheme_effect(sd: float, n: int) -> None:
    rng = np.random.default_rng(1000 * n + int(100 * sd))
    sims = 600
    rejected = sum(paired(*_sweep(rng, n, 0.5, sd)).p_value < ALPHA for _ in range(sims))
    assert rejected / sims <= 0.06


def test_power_matches_the_noncentral_t() -> None:
    # textbook values (G*Power, paired t two-tailed, alpha 0.05): dz = 1 at n = 10 has power
    # 0.803; dz = 0.5 needs n = 34 for 0.80 (power 0.808)
    assert paired_t_power(1.0, 1.0, 10) == pytest.approx(0.8031, abs=1e-4)
    assert paired_t_power(0.5, 1.0, 34) == pytest.approx(0.8078, abs=1e-4)
    assert paired_t_power(0.5, 1.0, 33) < 0.80
    rng = np.random.default_rng(7)
    sims, n, effect, sd = 2000, 10, 0.10, 0.10  # differences N(0.10, 0.10): dz = 1
    hits = 0
    for _ in range(sims):
        d = rng.normal(effect, sd, n)
        hits += paired(dict(enumerate(d)), dict.fromkeys(range(n), 0.0)).p_t < ALPHA
    expected = paired_t_power(effect, sd, n)
    assert abs(hits / sims - expected) < 3 * math.sqrt(expected * (1 - expected) / sims)


def test_seeds_for_half_width_solves_the_interval() -> None:
    n = seeds_for_half_width(0.3, 0.1)
    assert stats.t.ppf(0.975, n - 1) * 0.3 / math.sqrt(n) < 0.1
    assert stats.t.ppf(0.975, n - 2) * 0.3 / math.sqrt(n - 1) >= 0.1
    assert n == 38
    assert seeds_for_half_width(0.0, 0.1) == 2
    assert seeds_for_half_width(10.0, 0.01) is None  # more than 1000
    with pytest.raises(ValueError, match="half_width > 0"):
        seeds_for_half_width(0.3, 0.0)
