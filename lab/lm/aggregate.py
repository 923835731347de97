"""Language-model runs grouped over seeds: perplexity per scheme and evaluation length with its
95% interval, the ratio to the training length, and paired tests between schemes.

Every function takes LM ``eval.json`` dicts (``kind: "lm"``, :mod:`lab.lm.record`) and groups
them by task and scheme label (:func:`lab.reporting.aggregate.groups`: one group per scheme and
evaluation-time option, one run per seed).

- A cell is the mean perplexity over seeds with its 95% Student-t interval over seeds
  (:func:`lab.stats.intervals.t_interval`) when there are two seeds or more, else the run's own 95%
  bootstrap interval over held-out windows (``perplexity_low``/``perplexity_high``).
- Two schemes are compared at one length over seeds (the unit of evidence): their runs pair
  by seed, and the per-seed differences in mean loss (nats/token) give a mean, its 95%
  t-interval, the paired t-test and the exact sign-flip test (:func:`lab.stats.seed_stats.paired`);
  :func:`loss_family` adjusts every comparison of a report by Holm's method, and a difference
  is significant only when both tests reject after it. Within one seed every scheme scores the
  same held-out windows, so the Wilcoxon signed-rank test (Wilcoxon 1945;
  :func:`scipy.stats.wilcoxon`) on the per-window losses (:func:`window_p_value`) describes how
  surely *these two checkpoints* differ on *these windows*; it never decides a scheme claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.lm.record import MIN_INTERVAL_WINDOWS
from lab.stats.intervals import t_interval
from lab.stats.seed_stats import Paired, holm
from lab.stats.seed_stats import paired as seed_paired

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


def row_at(result: Result, length: int) -> dict[str, Any] | None:
    """The supported ``lengths`` row of ``result`` at ``length`` tokens that holds per-window
    losses, or None."""
    for row in result["lengths"]:
        if row["length"] == length and row["supported"] and row.get("window_losses"):
            return row
    return None


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


def seed_losses(runs: list[Result], label: str) -> dict[int, float]:
    """Seed -> mean loss (nats/token) at ``label`` of each run that evaluated and supports it."""
    rows = {r["seed"]: length_row(r, label) for r in runs}
    return {seed: row["loss"] for seed, row in rows.items() if row and row["supported"]}


def paired(runs_a: list[Result], runs_b: list[Result], label: str) -> Paired | None:
    """Scheme A against scheme B at ``label``: A's mean loss minus B's per shared seed
    (negative: A is better), as :func:`lab.stats.seed_stats.paired` gives it; None when no seed
    has both runs supporting the length."""
    return seed_paired(seed_losses(runs_a, label), seed_losses(runs_b, label))


def window_p_values(runs_a: list[Result], runs_b: list[Result], label: str) -> tuple[float, ...]:
    """Per shared seed (in seed order), the Wilcoxon p-value of the two checkpoints' per-window
    losses at ``label`` (:func:`window_p_value`): a per-checkpoint description, not a test of
    the schemes; none for a seed whose rows hold fewer than
    :data:`lab.lm.record.MIN_INTERVAL_WINDOWS` windows.

    Raises:
        ValueError: a seed's two runs scored different windows.
    """
    by_seed_b = {r["seed"]: r for r in runs_b}
    p_values = []
    for run in sorted(runs_a, key=lambda r: r["seed"]):
        if run["seed"] not in by_seed_b:
            continue
        row_a, row_b = length_row(run, label), length_row(by_seed_b[run["seed"]], label)
        rows = (row_a, row_b)
        if all(r and r["supported"] and r["windows"] >= MIN_INTERVAL_WINDOWS for r in rows):
            p_values.append(window_p_value(row_a, row_b))
    return tuple(p_values)


def loss_family(
    grouped: dict[str, list[Result]], labels: list[str]
) -> list[tuple[str, str, str, Paired, float]]:
    """Every comparison a report makes between the schemes of ``grouped`` (label -> runs) at
    ``labels``: ``(length, a, b, test, holm_p)``, with Holm's adjusted p-value over all of them
    (:func:`lab.stats.seed_stats.holm`) of each test's :attr:`Paired.p_value` (the larger of
    the t and sign-flip p-values). Only arms trained at one length are compared: another's
    multiples are other lengths and windows (an extend study's parents and children)."""
    names = list(grouped)
    found = [
        (label, a, b, test)
        for label in labels
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if one_length(grouped[a], grouped[b])
        and (test := paired(grouped[a], grouped[b], label)) is not None
    ]
    adjusted = holm([test.p_value for *_, test in found])
    return [(*item, p) for item, p in zip(found, adjusted, strict=True)]


def one_length(runs_a: list[Result], runs_b: list[Result]) -> bool:
    """The runs of two arms were trained at one range of lengths (``train_lengths``)."""
    return len({tuple(r["train_lengths"]) for r in [*runs_a, *runs_b]}) == 1


def corpus_parts(results: list[Result], task: str) -> list[tuple[str, list[Result]]]:
    """The runs of ``task`` split by what they were scored on and trained at, as ``(title,
    runs)``: the corpus (``corpus.sha256``), its held-out split (``corpus.heldout_tokens``)
    and the training length (``train_lengths``). The title is the task's name alone when they
    share all three, else the task with what tells its part apart (``"text on corpus SHA12"``,
    ``"text, 18,408 held-out tokens"``, ``"text, trained at 32 tokens"``). Runs of two parts
    scored other held-out windows or other lengths: a report pools and pairs only runs of one.
    """
    parts: dict[tuple, list[Result]] = {}
    for r in results:
        if r["task"] == task:
            corpus = r.get("corpus") or {}
            key = (corpus.get("sha256"), corpus.get("heldout_tokens"), r["train_lengths"][1])
            parts.setdefault(key, []).append(r)
    if len(parts) == 1:
        return [(task, next(iter(parts.values())))]
    varies = [len({key[i] for key in parts}) > 1 for i in range(3)]
    return [(part_title(task, key, varies), runs) for key, runs in parts.items()]


def part_title(task: str, key: tuple, varies: list[bool]) -> str:
    """``"TASK on corpus SHA12, N held-out tokens, trained at L tokens"``, naming only the
    parts of ``key`` (sha256, held-out tokens, training length) that ``varies`` marks."""
    sha, heldout, length = key
    title = f"{task} on corpus {(sha or 'none')[:12]}" if varies[0] else task
    if varies[1]:
        title += f", {heldout:,} held-out tokens" if heldout is not None else ", no held-out split"
    return title + (f", trained at {length} tokens" if varies[2] else "")
