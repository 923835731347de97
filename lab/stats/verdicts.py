r"""Three-valued verdicts decided by intervals over seeds, never by a point estimate.

A claim from the literature becomes one or more :class:`Claim` objects, each about an
interval over seeds: a paired difference between two schemes (:func:`lab.stats.seed_stats.paired`)
or one scheme's mean (:func:`lab.stats.intervals.t_interval`). Each claim has a stated practical
margin, and its verdict is:

- ``agrees``: the interval lies wholly beyond the margin on the claimed side;
- ``disagrees``: the interval excludes the claimed side (for "no worse than" claims: it shows a
  shortfall beyond the margin);
- ``inconclusive``: anything else, with the interval and about how many seeds would decide it
  at the observed spread (:func:`lab.stats.seed_stats.seeds_for_half_width`).

The four kinds, with ``[lo, hi]`` the interval and ``m`` the margin (units of the figure):

=============  ==============================  ================  ==================
kind           claim                           agrees            disagrees
=============  ==============================  ================  ==================
``greater``    difference > m                  lo > m            hi < 0
``no_worse``   difference >= -m                lo > -m           hi < -m
``at_most``    mean <= m                       hi <= m           lo > m
``at_least``   mean >= m                       lo >= m           hi < m
``within``     \|difference\| <= m              -m <= lo, hi <= m  lo > m or hi < -m
=============  ==============================  ================  ==================

A finding made of several claims (every one must hold) agrees when all agree, disagrees when
any disagrees, and is inconclusive otherwise (:func:`combine`).
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.stats.seed_stats import ALPHA, seeds_for_half_width

AGREES, DISAGREES, INCONCLUSIVE = "agrees", "disagrees", "inconclusive"
SMOKE_NOTE = (
    "**Smoke test** (`smoke: true` in its sweep file): short training and small evaluation "
    "sets check that the pipeline runs end to end. Its models are undertrained, so this report "
    "tests no differences between schemes and gives no findings against the literature."
)
"""What a smoke sweep's reports and console lines carry instead of any test or verdict
(``configs/quick.yaml``, ``configs/lm_quick.yaml``, ``configs/suite_quick.yaml``)."""
KINDS = ("greater", "no_worse", "at_most", "at_least", "within")


@dataclass(frozen=True)
class Claim:
    """One claim about an interval: ``kind`` (one of :data:`KINDS`) against ``margin``."""

    kind: str
    margin: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"claim kind {self.kind!r} is invalid; choose one of {KINDS}")


@dataclass(frozen=True)
class Verdict:
    """The verdict of a claim on an interval.

    Attributes:
        word: :data:`AGREES`, :data:`DISAGREES` or :data:`INCONCLUSIVE`.
        low, high: the interval decided on (None with one seed).
        n: seeds behind the interval.
        seeds_needed: for an inconclusive verdict, the seeds whose interval would be narrow
            enough to decide at the observed mean and spread; None when no count would (the
            mean sits on a boundary, or in the band a claim leaves undecided) or above 1000.
    """

    word: str
    low: float | None
    high: float | None
    n: int
    seeds_needed: int | None = None


def _boundaries(claim: Claim) -> tuple[float, float]:
    """(the bound the interval must pass to agree, the bound it must pass to disagree)."""
    m = claim.margin
    bounds = {"greater": (m, 0.0), "no_worse": (-m, -m), "at_most": (m, m), "at_least": (m, m)}
    return bounds[claim.kind]


def decide(
    claim: Claim,
    mean: float,
    low: float | None,
    high: float | None,
    n: int,
    sd: float | None,
    alpha: float = ALPHA,
) -> Verdict:
    """The verdict of ``claim`` on the ``1 - alpha`` interval ``[low, high]`` of ``mean`` over
    ``n`` seeds with per-seed standard deviation ``sd`` (both None with one seed:
    inconclusive); ``alpha`` also sizes the seeds an inconclusive verdict would need.
    """
    if low is None or high is None:
        return Verdict(INCONCLUSIVE, None, None, n, None)
    m = claim.margin
    if claim.kind == "greater":
        word = AGREES if low > m else (DISAGREES if high < 0 else INCONCLUSIVE)
    elif claim.kind == "no_worse":
        word = AGREES if low > -m else (DISAGREES if high < -m else INCONCLUSIVE)
    elif claim.kind == "at_most":
        word = AGREES if high <= m else (DISAGREES if low > m else INCONCLUSIVE)
    elif claim.kind == "at_least":
        word = AGREES if low >= m else (DISAGREES if high < m else INCONCLUSIVE)
    else:
        inside, outside = -m <= low and high <= m, low > m or high < -m
        word = AGREES if inside else (DISAGREES if outside else INCONCLUSIVE)
    if word != INCONCLUSIVE:
        return Verdict(word, low, high, n)
    return Verdict(word, low, high, n, _seeds_needed(claim, mean, sd, alpha))


def _seeds_needed(claim: Claim, mean: float, sd: float | None, alpha: float) -> int | None:
    """Seeds that would put the interval past the nearer deciding bound at this mean."""
    if claim.kind == "within":  # to agree: |mean| + half < m; to disagree: |mean| - half > m
        distance = (
            claim.margin - abs(mean) if abs(mean) < claim.margin else abs(mean) - claim.margin
        )
        if sd is None or distance <= 0:
            return None
        return 2 if sd == 0 else seeds_for_half_width(sd, distance, alpha)
    agree_at, disagree_at = _boundaries(claim)
    upward = claim.kind in ("greater", "no_worse", "at_least")
    # the side of each bound the mean is on decides which bound it can clear
    if upward:
        candidates = [mean - agree_at] if mean > agree_at else []
        candidates += [disagree_at - mean] if mean < disagree_at else []
    else:
        candidates = [agree_at - mean] if mean < agree_at else []
        candidates += [mean - disagree_at] if mean > disagree_at else []
    distances = [c for c in candidates if c > 0]
    if sd is None or not distances:
        return None
    if sd == 0:
        return 2
    return seeds_for_half_width(sd, min(distances), alpha)


def combine(verdicts: list[Verdict]) -> str:
    """A finding's word from its claims' verdicts: agrees when all agree, disagrees when any
    disagrees, inconclusive otherwise (also when there are none)."""
    words = [v.word for v in verdicts]
    if words and all(w == AGREES for w in words):
        return AGREES
    return DISAGREES if DISAGREES in words else INCONCLUSIVE


def words(
    v: Verdict, unit: str = " points", mean: bool = False, scale: float = 100.0, digits: int = 1
) -> str:
    """``'agrees, [+12.0, +40.1] points at 6 seeds'``, or for an inconclusive verdict
    ``'inconclusive: at 3 seeds the interval is [-36.6, +141.0] points; about 14 seeds
    would decide it'``. Figures are ``scale`` times the interval (default: fractions shown in
    percent) with ``digits`` decimals; ``mean``: an interval of one mean, shown unsigned and
    clipped to 0..100."""
    if v.low is None:
        return f"inconclusive: one seed gives no interval ({v.n} seed)"
    if mean:
        low, high = max(0.0, v.low), min(1.0, v.high)
        span = f"[{scale * low:.{digits}f}, {scale * high:.{digits}f}]{unit}"
    else:
        span = f"[{scale * v.low:+.{digits}f}, {scale * v.high:+.{digits}f}]{unit}"
    if v.word != INCONCLUSIVE:
        return f"{v.word}, {span} at {v.n} seeds"
    if v.seeds_needed is None:
        tail = "no seed count decides it at this estimate"
    else:
        tail = f"about {v.seeds_needed} seeds would decide it"
    return f"inconclusive: at {v.n} seeds the interval is {span}; {tail}"
