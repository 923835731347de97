"""Three-valued verdicts (lab.stats.verdicts) on hand-built intervals: each kind gives each of
its three answers, the seeds an inconclusive verdict asks for decide it, and a finding agrees
only when all its claims do."""

import math

import pytest
from scipy import stats

from lab.stats.verdicts import (
    AGREES,
    DISAGREES,
    INCONCLUSIVE,
    Claim,
    Verdict,
    combine,
    decide,
    words,
)


@pytest.mark.parametrize(
    ("kind", "interval", "expected"),
    [
        ("greater", (0.10, 0.30), AGREES),  # wholly beyond the +5-point margin
        ("greater", (0.02, 0.30), INCONCLUSIVE),  # above 0, but not beyond the margin
        ("greater", (-0.30, -0.01), DISAGREES),  # excludes the claimed direction
        ("no_worse", (-0.04, 0.20), AGREES),
        ("no_worse", (-0.10, 0.20), INCONCLUSIVE),
        ("no_worse", (-0.30, -0.06), DISAGREES),  # a shortfall beyond the margin
        ("at_most", (0.0, 0.05), AGREES),
        ("at_most", (0.0, 0.40), INCONCLUSIVE),
        ("at_most", (0.06, 0.40), DISAGREES),
        ("at_least", (0.05, 0.40), AGREES),
        ("at_least", (0.01, 0.40), INCONCLUSIVE),
        ("at_least", (-0.1, 0.04), DISAGREES),
        ("within", (-0.04, 0.05), AGREES),
        ("within", (-0.04, 0.20), INCONCLUSIVE),
        ("within", (0.06, 0.20), DISAGREES),
    ],
)
def test_each_kind_gives_each_answer(kind: str, interval: tuple, expected: str) -> None:
    low, high = interval
    verdict = decide(Claim(kind, 0.05), (low + high) / 2, low, high, 6, 0.1)
    assert verdict.word == expected


def test_a_point_estimate_never_decides() -> None:
    # the mean is far beyond the margin, the interval is not: inconclusive, not "agrees"
    v = decide(Claim("greater", 0.05), 0.50, -0.30, 1.30, 3, 0.35)
    assert v.word == INCONCLUSIVE
    one = decide(Claim("greater", 0.05), 0.50, None, None, 1, None)
    assert one.word == INCONCLUSIVE and "one seed" in words(one)


def test_the_seeds_asked_for_would_decide_it() -> None:
    mean, sd = 0.30, 0.35  # a lead of 30 points with a 35-point seed spread
    v = decide(Claim("greater", 0.05), mean, -0.57, 1.17, 3, sd)
    n = v.seeds_needed
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    assert mean - half > 0.05  # at n seeds the same mean and spread would agree
    assert mean - stats.t.ppf(0.975, n - 2) * sd / math.sqrt(n - 1) <= 0.05
    assert f"about {n} seeds would decide it" in words(v)
    between = decide(Claim("greater", 0.05), 0.03, -0.2, 0.26, 3, 0.1)
    assert between.seeds_needed is None and "no seed count decides" in words(between)


def test_combine_needs_every_claim() -> None:
    agree, disagree = Verdict(AGREES, 0.1, 0.2, 6), Verdict(DISAGREES, -0.2, -0.1, 6)
    unsure = Verdict(INCONCLUSIVE, -0.1, 0.2, 6)
    assert combine([agree, agree]) == AGREES
    assert combine([agree, unsure]) == INCONCLUSIVE
    assert combine([agree, disagree]) == DISAGREES
    assert combine([]) == INCONCLUSIVE


def test_words_and_bad_kind() -> None:
    assert words(Verdict(AGREES, 0.1, 0.25, 6)) == "agrees, [+10.0, +25.0] points at 6 seeds"
    assert words(Verdict(AGREES, 0.95, 1.02, 6), unit="%", mean=True) == (
        "agrees, [95.0, 100.0]% at 6 seeds"
    )
    with pytest.raises(ValueError, match=r"claim kind 'bigger' is invalid; choose one of"):
        Claim("bigger", 0.05)
