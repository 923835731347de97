"""Seed statistics: the t-interval and the exact McNemar test against values computed by hand.

Reference values were computed with scipy 1.x in the system Python (``scipy.stats.t.ppf`` and
``scipy.stats.binomtest``), which the project's environment does not need; the arithmetic is
spelled out next to each.
"""

import math

import pytest

from lab.common.stats import ALPHA, compare, mcnemar_exact, t_interval, t_quantile_975


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062), (2, 4.3027), (30, 2.0423), (31, 2.0395), (60, 2.0003), (1000, 1.9623)],
)
def test_t_quantile_matches_scipy(df: int, expected: float) -> None:
    # scipy.stats.t.ppf(0.975, df): 12.7062, 4.3027, 2.0423, 2.0395, 2.0003, 1.9623
    assert t_quantile_975(df) == pytest.approx(expected, abs=1e-3)


def test_t_quantile_rejects_zero_degrees_of_freedom() -> None:
    with pytest.raises(ValueError, match=r"df >= 1, got df=0"):
        t_quantile_975(0)


def test_t_interval_by_hand() -> None:
    # values 0.90, 0.95, 1.00: mean 0.95, s = 0.05, half = 4.3027 * 0.05 / sqrt(3) = 0.12421
    interval = t_interval([0.9, 0.95, 1.0])
    assert interval.mean == pytest.approx(0.95)
    assert interval.low == pytest.approx(0.825793, abs=2e-5)  # scipy: 0.8257931
    assert interval.high == pytest.approx(1.074207, abs=2e-5)  # scipy: 1.0742069
    assert interval.n == 3
    two = t_interval([0.2, 0.4])  # s = 0.14142, half = 12.706 * 0.14142 / sqrt(2) = 1.2706
    assert (two.low, two.high) == pytest.approx((0.3 - 1.2706, 0.3 + 1.2706), abs=1e-4)
    same = t_interval([0.5, 0.5, 0.5])
    assert (same.mean, same.low, same.high) == (0.5, 0.5, 0.5)
    one = t_interval([0.7])
    assert (one.mean, one.low, one.high, one.n) == (0.7, None, None, 1)
    with pytest.raises(ValueError, match="at least one value"):
        t_interval([])


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (2, 10, 0.03857421875),  # 2 * (1 + 12 + 66) / 2**12 = 158 / 4096; scipy binomtest
        (0, 5, 0.0625),  # 2 / 32
        (3, 3, 1.0),  # the two-sided p-value is capped at 1
        (0, 0, 1.0),  # no discordant pair: no evidence
        (30, 70, 7.85013964559367e-05),  # scipy.stats.binomtest(30, 100).pvalue
    ],
)
def test_mcnemar_exact_by_hand(b: int, c: int, expected: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-9)
    assert mcnemar_exact(c, b) == pytest.approx(expected, rel=1e-9)  # symmetric


def test_mcnemar_rejects_negative_counts() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        mcnemar_exact(-1, 3)


def test_compare_pairs_sequences_and_pools_seeds() -> None:
    # seed 0: a right on 4 of 4, b on 1 (discordant 3:0); seed 1: a 3, b 1 (2:0); seed 2: 1:0
    a = {0: "1111", 1: "1110", 2: "1000"}
    b = {0: "1000", 1: "0010", 2: "0000", 7: "1111"}  # seed 7 is not shared: ignored
    result = compare(a, b)
    assert (result.only_a, result.only_b, result.seeds) == (6, 0, 3)
    assert result.p_value == pytest.approx(2 / 2**6)  # 0.03125
    assert result.difference == pytest.approx((3 / 4 + 2 / 4 + 1 / 4) / 3)
    assert result.same_sign and result.significant and result.p_value < ALPHA
    # The same pooled counts, but one seed points the other way: not significant.
    mixed = compare({0: "1111", 1: "1111", 2: "0000"}, {0: "0000", 1: "0000", 2: "1000"})
    assert (mixed.only_a, mixed.only_b) == (8, 1)
    assert mixed.p_value == pytest.approx(2 * (1 + 9) / 2**9)  # 0.0390625 < 0.05
    assert not mixed.same_sign and not mixed.significant
    assert compare({0: "1"}, {1: "1"}) is None
    with pytest.raises(ValueError, match="cannot be paired"):
        compare({0: "11"}, {0: "1"})


def test_three_seeds_alone_cannot_be_significant() -> None:
    """Why the test pools sequences: the best sign test over 3 seeds has p = 2 / 2**3."""
    assert 2 * math.comb(3, 0) / 2**3 == 0.25 > ALPHA
