"""Which runs learned their task: the one rule every report, figure and finding applies.

A run counts as **learned** when both hold:

- its training reached ``train.target_accuracy`` (``reached_target`` of ``eval.json``, from
  the checkpoint: the minimum periodic exact-match over every training length, see
  :func:`lab.training.run_logs.reached_target`), unless the run had no target or predates the field
  (``reached_target`` null);
- its in-distribution exact-match on the test set (``summary.in_dist`` of ``eval.json``, the
  mean over grid lengths inside the training range) is at least :data:`LEARNED`. This rule
  reads the run as trained: an evaluation of it under other position options
  (``eval.position_options``, "train once, evaluate many") is judged by the training alone
  when its training reached a target, since what such an option does to the
  in-distribution figure is the measurement itself; without a target (``reached_target``
  null) nothing but its own in-distribution figure can tell, so that decides.

A run that is not learned has extrapolation figures that say little (a scheme that never
learned the task also fails past it); the sweep's tables, significance tests and findings
leave it out and say so (:func:`lab.reporting.aggregate.left_out_line`), the per-run table and the
figures mark it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

LEARNED = 0.95
"""In-distribution exact-match (test set) below which a run counts as not learned."""

Result = dict[str, Any]


def not_learned_reason(result: Result) -> str | None:
    """Why the run of ``result`` (an ``eval.json`` dict) is not learned, or None when it is.

    Returns:
        e.g. ``"ended at its 4000-step cap below train.target_accuracy=0.99"`` or
        ``"in-distribution exact-match 89.1% on the test set, below 95%"``.
    """
    if result.get("reached_target") is False:
        target = result["config"].get("train", {}).get("target_accuracy")
        steps = result.get("train_steps")
        budget = result["config"].get("train", {}).get("steps")
        if steps == budget:
            return f"ended at its {steps}-step cap below train.target_accuracy={target}"
        return f"stopped at step {steps} of {budget}, below train.target_accuracy={target}"
    if result["config"].get("eval", {}).get("position_options") and result.get("reached_target"):
        return None  # under other position options, after training reached its target
    in_dist = result["summary"]["in_dist"]
    if in_dist is None:
        return "no in-distribution exact-match (a training length is unsupported)"
    if in_dist < LEARNED:
        return f"in-distribution exact-match {in_dist:.1%} on the test set, below {LEARNED:.0%}"
    return None


MARGINAL = 0.03
"""Runs whose in-distribution exact-match lies within this of :data:`LEARNED` are marginal."""


def is_marginal(result: Result) -> bool:
    """The run sits near the learned bar, so a rerun on another CPU may put it on the other
    side: its in-distribution exact-match is within :data:`MARGINAL` of :data:`LEARNED`, or it
    ended below its training target with an in-distribution exact-match at or above
    :data:`LEARNED`. Findings report how their verdicts move with these runs in or out
    (:func:`lab.reporting.findings.sensitivity`)."""
    in_dist = result["summary"].get("in_dist")
    if in_dist is None:
        return False
    if result.get("reached_target") is False and in_dist >= LEARNED:
        return True
    return abs(in_dist - LEARNED) < MARGINAL


def is_learned(result: Result) -> bool:
    """``result``'s run learned its task (:func:`not_learned_reason` is None)."""
    return not_learned_reason(result) is None


def learned_only(results: list[Result]) -> list[Result]:
    """The learned runs of ``results``, in their order."""
    return [r for r in results if is_learned(r)]


def left_out_count(results: list[Result]) -> str | None:
    """One sentence counting the runs left out as not learned, by kind of reason, e.g.
    ``"2 of 30 runs left out as not learned (1 ended below its training target, 1 below 95%
    in distribution on the test set)."``; None when every run learned."""
    kinds = Counter(
        "ended below its training target"
        if r.get("reached_target") is False
        else f"below {LEARNED:.0%} in distribution on the test set"
        for r in results
        if not is_learned(r)
    )
    if not kinds:
        return None
    counted = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    return f"{kinds.total()} of {len(results)} runs left out as not learned ({counted})."
