"""Wilson intervals: reference values, and every interval contains its estimate."""

import pytest

from lab.evaluation.metrics import wilson_interval


@pytest.mark.parametrize(
    ("successes", "trials", "low", "high"),
    [
        (5, 10, 0.2366, 0.7634),  # by hand: centre 0.5, half-width 0.2634
        (0, 10, 0.0, 0.2775),  # Newcombe 1998, Statistics in Medicine 17, Table II
        (81, 263, 0.2553, 0.3662),  # Newcombe 1998, Table II
    ],
)
def test_reference_values(successes, trials, low, high):
    assert wilson_interval(successes, trials) == pytest.approx((low, high), abs=5e-5)


def test_every_interval_contains_its_estimate():
    """wilson_interval(128, 128) once returned 0.9999999999999999 as its upper bound, below the
    100% estimate, and the plot then crashed on a negative error bar."""
    assert wilson_interval(128, 128)[1] == 1.0
    for trials in range(1, 301):
        for successes in range(trials + 1):
            low, high = wilson_interval(successes, trials)
            assert 0.0 <= low <= successes / trials <= high <= 1.0, (successes, trials)


def test_no_trials_is_the_whole_range():
    assert wilson_interval(0, 0) == (0.0, 1.0)
