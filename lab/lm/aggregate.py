"""Language-model runs grouped over seeds: perplexity per scheme and evaluation length with its
95% interval, the ratio to the training length, and paired tests between schemes.

Every function takes LM ``eval.json`` dicts (``kind: "lm"``, :mod:`lab.lm.record`) and groups
them by task and scheme label (:func:`lab.reporting.aggregate.groups`: one group per scheme and
evaluation-time option, one run per seed).

- A cell is the mean perplexity over seeds with its 95% Student-t interval over seeds
  (:func:`lab.stats.intervals.t_interval`) when there are two seeds or more, else the run's own 95%
  bootstrap interval over held-out windows (``perplexity_low``/``perplexity_high``).
- Two schemes are compared at one length twice. Over seeds (two or more shared): the 95%
  t-interval of the per-seed differences in mean loss (nats/token), significant when it excludes
  0 (a paired t-test at the 5% level). Within a seed: every scheme scores the same held-out
  windows (the first ``eval.lm_tokens`` tokens, cut the same way), so the windows pair, and the
  Wilcoxon signed-rank test (Wilcoxon 1945; :func:`scipy.stats.wilcoxon`) on the per-window mean
  losses gives a p-value per seed; significant when p < 0.05 in every seed and the difference
  points the same way in every seed, the rule of the synthetic tracks
  (:attr:`lab.stats.intervals.Comparison.significant`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lab.stats.intervals import ALPHA, Interval, t_interval

Result = dict[str, Any]


def lm_only(results: list[Result]) -> list[Result]:
    """The language-model records (``kind == "lm"``) of ``results``."""
    return [r for r in results if r.get("kind") == "lm"]


def length_labels(results: list[Result]) -> list[str]:
    """Every evaluation length's label (``"1x"``, ``"2x"``, ...) of ``results``, by multiple."""
    multiples = {row["label"]: row["multiple"] for r in results for row in r["lengths"]}
    return sorted(multiples, key=lambda label: multiples[label])


def length_row(result: Result, label: str) -> dict[str, Any] | None:
    """The ``lengths`` row of ``result`` labelled ``label``, or None when it has none."""
    return next((row for row in result["lengths"] if row["label"] == label), None)


@dataclass(frozen=True)
class Cell:
    """Perplexity of one scheme at one length, over its seeds.

    Attributes:
        mean: mean perplexity over seeds; None when a run lacks or cannot encode the length.
        low, high: its 95% interval (see ``interval``); None for a single run without one.
        seeds: runs averaged.
        interval: ``"t"`` (over seeds) or ``"bootstrap"`` (one run, over windows).
        reason: why ``mean`` is None (the record's ``reason``, or ``"not evaluated"``).
    """

    mean: float | None
    low: float | None
    high: float | None
    seeds: int
    interval: str
    reason: str | None = None


def cell(runs: list[Result], label: str) -> Cell:
    """The perplexity of ``runs`` (one scheme, one run per seed) at the length ``label``; no runs
    give a cell ``"not evaluated"``."""
    rows = [length_row(r, label) for r in runs] or [None]
    missing = next((row for row in rows if row is None or not row["supported"]), False)
    if missing is not False:
        reason = "not evaluated" if missing is None else (missing.get("reason") or "unsupported")
        return Cell(None, None, None, len(runs), "", reason)
    if len(rows) == 1:
        row = rows[0]
        return Cell(
            row["perplexity"], row["perplexity_low"], row["perplexity_high"], 1, "bootstrap"
        )
    interval = t_interval([row["perplexity"] for row in rows])
    return Cell(interval.mean, interval.low, interval.high, interval.n, "t")


def ratio(runs: list[Result], label: str, base: str = "1x") -> float | None:
    """Mean perplexity at ``label`` over mean perplexity at ``base`` (the training length), or
    None when either is missing."""
    top, bottom = cell(runs, label).mean, cell(runs, base).mean
    return None if top is None or bottom is None else top / bottom


def window_p_value(row_a: dict[str, Any], row_b: dict[str, Any]) -> float:
    """Two-sided Wilcoxon signed-rank p-value of two runs' per-window mean losses on the same
    held-out windows (Wilcoxon 1945; :func:`scipy.stats.wilcoxon`); 1.0 when every window ties.

    Raises:
        ValueError: the two rows did not score the same windows (their ``windows``,
            ``tokens_scored`` or number of ``window_losses`` differ): they cannot be paired.
    """
    from scipy.stats import wilcoxon  # a slow import, only when a test is made

    shape_a = (row_a["windows"], row_a["tokens_scored"], len(row_a["window_losses"]))
    shape_b = (row_b["windows"], row_b["tokens_scored"], len(row_b["window_losses"]))
    if shape_a != shape_b:
        raise ValueError(
            f"at {row_a['label']}: (windows, tokens_scored, window_losses) {shape_a} and "
            f"{shape_b} differ, so the windows cannot be paired"
        )
    if all(a == b for a, b in zip(row_a["window_losses"], row_b["window_losses"], strict=True)):
        return 1.0
    return float(wilcoxon(row_a["window_losses"], row_b["window_losses"]).pvalue)


@dataclass(frozen=True)
class Paired:
    """Scheme A against scheme B at one length, on the seeds both have.

    Attributes:
        seed_differences: A's mean loss minus B's (nats/token), per shared seed, in seed order.
        window_p: the Wilcoxon p-value over the shared windows, per shared seed.
    """

    seed_differences: tuple[float, ...]
    window_p: tuple[float, ...]

    @property
    def difference(self) -> float:
        """Mean over seeds of A's loss minus B's (nats/token); negative: A is better."""
        return sum(self.seed_differences) / len(self.seed_differences)

    @property
    def seed_interval(self) -> Interval | None:
        """The 95% t-interval of the per-seed differences; None with fewer than two seeds."""
        if len(self.seed_differences) < 2:
            return None
        return t_interval(list(self.seed_differences))

    @property
    def over_seeds(self) -> bool | None:
        """The t-interval over seeds excludes 0 (None with fewer than two seeds)."""
        interval = self.seed_interval
        return None if interval is None else interval.low > 0 or interval.high < 0

    @property
    def over_windows(self) -> bool:
        """p < 0.05 over the windows in every seed, and one sign in every seed."""
        signs = {math.copysign(1, d) for d in self.seed_differences if d != 0}
        nonzero = all(d != 0 for d in self.seed_differences)
        return nonzero and len(signs) == 1 and all(p < ALPHA for p in self.window_p)


def paired(runs_a: list[Result], runs_b: list[Result], label: str) -> Paired | None:
    """Compare two schemes' runs (one per seed) at ``label`` on the seeds both have and both
    support there; None when there is no such seed.

    Raises:
        ValueError: a seed's two runs scored different windows (:func:`window_p_value`).
    """
    by_seed_b = {r["seed"]: r for r in runs_b}
    differences, p_values = [], []
    for run in sorted(runs_a, key=lambda r: r["seed"]):
        if run["seed"] not in by_seed_b:
            continue
        row_a, row_b = length_row(run, label), length_row(by_seed_b[run["seed"]], label)
        if row_a is None or row_b is None or not (row_a["supported"] and row_b["supported"]):
            continue
        differences.append(row_a["loss"] - row_b["loss"])
        p_values.append(window_p_value(row_a, row_b))
    return Paired(tuple(differences), tuple(p_values)) if differences else None
