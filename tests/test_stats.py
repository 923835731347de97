"""The t-interval of one figure over seeds and the per-checkpoint exact McNemar test, against
values computed by hand (the arithmetic is spelled out next to each) and scipy's."""

import math

import pytest
from scipy import stats

from lab.stats.intervals import mcnemar_exact, t_interval, t_quantile_975


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


def test_t_interval_at_another_level_matches_scipy() -> None:
    values = [0.9, 0.95, 1.0, 0.97]
    interval = t_interval(values, alpha=0.01)
    mean, sd = sum(values) / 4, interval.sd
    low, high = stats.t.interval(0.99, 3, loc=mean, scale=sd / math.sqrt(4))
    assert (interval.low, interval.high) == pytest.approx((low, high), rel=1e-12)
    with pytest.raises(ValueError, match=r"alpha=1.5 is invalid"):
        t_interval(values, alpha=1.5)
