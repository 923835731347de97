"""The "where it fails" line of a run, or of a scheme's runs on one task, generated from the
diagnostics in ``eval.json`` (never written by hand).

A line names the first length past training whose exact-match falls below
:data:`lab.evaluation.learned.LEARNED`, how its errors split (the length decision against the
content, :mod:`lab.diagnostics.failures`), where the first wrong token falls, what oracle length
gives, and how the attention of the aligned head and the mean entropy moved from the longest
training length (1x) to there. The aligned head is the layer and head whose attention mass on
the solver's positions is largest at 1x; it is then followed at every length.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean
from typing import Any

from lab.diagnostics.failures import FAILURE_KINDS
from lab.evaluation.extrapolation import multiple_lengths
from lab.evaluation.learned import LEARNED

Result = dict[str, Any]

ERROR_KINDS = {
    "content": "content errors",
    "early_eos": "early `<eos>`",
    "late_eos": "late `<eos>`",
}
"""The failure kinds past exact-match, and their names in a line."""


@dataclass
class Point:
    """One length's figures that a line reads (a run's, or a mean over runs).

    Attributes:
        length: task length.
        exact_match: share of sequences right.
        failures: the shares of :data:`lab.diagnostics.failures.FAILURE_KINDS`,
            ``oracle_exact_match`` and ``first_error_median`` (None when not diagnosed).
        aligned_mass: the aligned head's attention mass on the solver's positions (None when
            the task names none).
        entropy: attention entropy in nats, mean over layers and heads (None when not measured).
    """

    length: int
    exact_match: float
    failures: dict[str, float | None] | None
    aligned_mass: float | None
    entropy: float | None


def reference_row(run: Result) -> dict[str, Any] | None:
    """The evaluated length that stands for 1x: the longest training length if evaluated, else
    the longest evaluated length inside the training range; None when it has no attention."""
    low, high = run["train_lengths"]
    inside = [r for r in run["lengths"] if low <= r["length"] <= high and r.get("attention")]
    return max(inside, key=lambda r: r["length"]) if inside else None


def aligned_head(run: Result) -> list[int] | None:
    """``[layer, head]`` with the largest attention mass on the solver's positions at 1x
    (:func:`reference_row`); None when the task names no read positions."""
    row = reference_row(run)
    masses = row and row["attention"]["alignment_mass"]
    if not masses:
        return None
    cells = [(layer, head) for layer, heads in enumerate(masses) for head in range(len(heads))]
    return list(max(cells, key=lambda cell: masses[cell[0]][cell[1]]))


def run_points(run: Result) -> list[Point]:
    """One :class:`Point` per supported length of ``run``."""
    head = aligned_head(run)
    points = []
    for row in run["lengths"]:
        if not row["supported"]:
            continue
        attention = row.get("attention") or {}
        masses = attention.get("alignment_mass")
        entropy = attention.get("entropy")
        points.append(
            Point(
                row["length"],
                row["exact_match"],
                row.get("failures"),
                masses[head[0]][head[1]] if masses and head else None,
                mean(v for layer in entropy for v in layer) if entropy else None,
            )
        )
    return points


def mean_points(runs: list[Result]) -> list[Point]:
    """The mean :class:`Point` over ``runs`` at each length every run has."""
    per_run = [{p.length: p for p in run_points(run)} for run in runs]
    common = sorted(set.intersection(*(set(p) for p in per_run))) if per_run else []
    return [_mean_point([points[n] for points in per_run]) for n in common]


def _mean_point(points: list[Point]) -> Point:
    """The mean of one length's points (a figure missing in any run is None)."""

    def average(values: list[float | None]) -> float | None:
        return None if not values or None in values else mean(values)

    failures = None
    if all(p.failures for p in points):
        keys = [*FAILURE_KINDS, "oracle_exact_match"]
        failures = {k: average([p.failures[k] for p in points]) for k in keys}
        medians = [p.failures["first_error_median"] for p in points]
        failures["first_error_median"] = average([m for m in medians if m is not None] or [None])
    return Point(
        points[0].length,
        mean(p.exact_match for p in points),
        failures,
        average([p.aligned_mass for p in points]),
        average([p.entropy for p in points]),
    )


@dataclass
class Frame:
    """What a line needs besides its points: the run's longest training length, its
    in-distribution exact-match, the names of its lengths (``{length: '1.25x'}``, the report's
    multiples) and the first length past training its scheme cannot encode (or None)."""

    train_max: int
    in_dist: float | None
    labels: dict[int, str]
    unsupported_from: int | None

    def label(self, length: int) -> str:
        """``length`` as the report names it: a multiple of the grid (``'1.25x'``), else its
        ratio to the longest training length (``'0.5x'``)."""
        return self.labels.get(length) or f"{length / self.train_max:.3g}x"


def where_it_fails(points: list[Point], frame: Frame) -> str:
    """The line for ``points`` (a run's or a mean over runs) in ``frame``."""
    inside = [p for p in points if p.length <= frame.train_max]
    reference = max(inside, key=lambda p: p.length, default=None)
    unsupported = ""
    if frame.unsupported_from is not None:
        n = frame.unsupported_from
        unsupported = f"; the scheme cannot encode length {n} ({frame.label(n)}) and beyond"
    if frame.in_dist is None:
        return "in-distribution exact-match not evaluated" + unsupported
    if frame.in_dist < LEARNED or reference is None:
        shown = f"not learned in distribution (exact-match {frame.in_dist:.1%})"
        at = frame.label(reference.length) if reference else ""
        return shown + _errors(reference, at) + unsupported
    past = [p for p in points if p.length > frame.train_max]
    failing = next((p for p in past if p.exact_match < LEARNED), None)
    if failing is None:
        if not past:
            return "holds in distribution; no length past training was evaluated" + unsupported
        last = past[-1]
        return (
            f"holds to {frame.label(last.length)}: exact-match {last.exact_match:.1%} at length "
            f"{last.length}{unsupported}"
        )
    return _failing(reference, failing, frame) + unsupported


def _failing(reference: Point, failing: Point, frame: Frame) -> str:
    """The line's body for the first failing length: errors, oracle length, alignment and
    entropy moved from ``reference`` (the longest evaluated training length)."""
    label, base = frame.label(failing.length), frame.label(reference.length)
    parts = [f"fails at {label} (length {failing.length}): exact-match {failing.exact_match:.1%}"]
    parts.append(_errors(failing, label).removeprefix("; "))
    if failing.failures and failing.failures.get("oracle_exact_match") is not None:
        parts.append(f"oracle length gives {failing.failures['oracle_exact_match']:.1%}")
    if reference.aligned_mass is not None and failing.aligned_mass is not None:
        parts.append(
            f"aligned-head mass on the solver's positions {reference.aligned_mass:.2f} ({base}) "
            f"-> {failing.aligned_mass:.2f} ({label})"
        )
    if reference.entropy is not None and failing.entropy is not None:
        parts.append(f"entropy {failing.entropy - reference.entropy:+.2f} nats from {base}")
    return "; ".join(part for part in parts if part)


def _errors(point: Point | None, label: str) -> str:
    """``'; 97% of errors are content errors (early `<eos>` 2%, late `<eos>` 1%), the first
    from answer token 11'``, or empty when there are no errors or no failure split."""
    if point is None or not point.failures or point.failures["right"] is None:
        return ""
    wrong = 1 - point.failures["right"]
    if wrong <= 0:
        return ""
    shares = {k: (point.failures[k] or 0.0) / wrong for k in ERROR_KINDS}
    top = max(shares, key=shares.get)
    others = ", ".join(f"{ERROR_KINDS[k]} {v:.0%}" for k, v in shares.items() if k != top)
    text = f"; at {label}, {shares[top]:.0%} of errors are {ERROR_KINDS[top]} ({others})"
    first = point.failures.get("first_error_median")
    if first is None:
        return text
    shown = f"{first:g}" if float(first).is_integer() else f"{first:.1f}"  # a mean of medians
    return text + f", the first from answer token {shown}"


def frame(run: Result, in_dist: float | None) -> Frame:
    """The :class:`Frame` of ``run`` (its config's ``eval.max_length_factor`` names the
    multiples) with ``in_dist``."""
    high = run["train_lengths"][1]
    factor = run["config"]["eval"].get("max_length_factor", 4.0)
    labels = {n: label for label, n in multiple_lengths(high, factor).items()}
    labels.setdefault(high, "1x")
    blocked = [r["length"] for r in run["lengths"] if r["length"] > high and not r["supported"]]
    return Frame(high, in_dist, labels, min(blocked, default=None))


def run_line(run: Result) -> str:
    """The "where it fails" line of one run's ``eval.json`` dict."""
    return where_it_fails(run_points(run), frame(run, run["summary"]["in_dist"]))


def group_line(runs: list[Result]) -> str:
    """The line of a scheme's runs on one task (same training range and grid): means over the
    runs (seeds) at each length; ``in_dist`` is the mean of theirs."""
    values = [r["summary"]["in_dist"] for r in runs]
    in_dist = None if None in values else mean(values)
    return where_it_fails(mean_points(runs), frame(runs[0], in_dist))
