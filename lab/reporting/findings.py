"""Findings against the literature, each decided by numbers computed from the runs.

Every finding names the paper's claim, the measured numbers that decide it, and a verdict:
``agrees``, ``disagrees``, ``mixed`` or ``not measured`` (a needed run is missing). Nothing here
is a fixed conclusion: change the runs and the verdicts follow. Runs that did not learn their
task (:mod:`lab.evaluation.learned`) are left out of the findings on extrapolation, and a first
line counts them. A test is significant when
its exact McNemar p < 0.05 AND the difference has the same sign in every seed
(:attr:`lab.common.stats.Comparison.significant`); a line says which of the two a small p missed.

- Press et al. 2022 ("Train Short, Test Long"): ALiBi extrapolates where absolute encodings do
  not. Decided on ``copy`` at 1.25x: ALiBi's mean against the mean of ``learned`` and
  ``sinusoidal``, and the paired test against each.
- Ruoss et al. 2023 ("Randomized Positional Encodings Boost Length Generalization"): standard
  encodings fail on copy-like tasks past the training length. Decided on ``copy`` at 2x for
  ``learned``, ``sinusoidal`` and ``rope``.
- Kazemnejad et al. 2023 ("The Impact of Positional Encoding on Length Generalization"): a causal
  model without positions (NoPE) learns order, and extrapolates at least as well as RoPE and
  ALiBi. Decided on ``svo`` in distribution (exact-match and minimal pairs) and at 1.5x on both
  tasks.
- Haviv et al. 2022 ("Transformer Language Models without Positional Encodings Still Learn
  Positional Information"): the causal mask alone lets a model learn positions. Decided on
  ``copy`` in distribution for NoPE (copying needs the position of every symbol).
"""

from __future__ import annotations

from typing import Any

from lab.evaluation.learned import LEARNED, learned_only, left_out_count
from lab.evaluation.record import pair_values
from lab.reporting.aggregate import comparison, groups, significance_words

Result = dict[str, Any]
FAILS = 0.10
"""Exact-match at or below which a scheme counts as failing at a length."""
MARGIN = 0.5
"""How far (exact-match) ALiBi must lead the absolute schemes at 1.25x on ``copy``."""
PRESS = "Press et al. 2022 (ALiBi extrapolates)"
KAZEMNEJAD_ORDER = "Kazemnejad et al. 2023 (causal NoPE learns order)"


def _mean(results: list[Result], task: str, scheme: str, where: str) -> float | None:
    runs = groups(results, task).get(scheme, [])
    if where == "pairs":
        values = pair_values(runs, "in_dist")
    else:
        values = [
            r["summary"]["in_dist"] if where == "in_dist" else r["summary"]["at"].get(where)
            for r in runs
        ]
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _test(results: list[Result], task: str, a: str, b: str, where: str) -> str:
    c = comparison(results, task, a, b, where)
    if c is None:
        return f"{a} vs {b}: not measured"
    return f"{a} vs {b}: {100 * c.difference:+.1f} points, McNemar {significance_words(c)}"


def press(results: list[Result]) -> str:
    """ALiBi against the absolute schemes on ``copy`` at 1.25x."""
    alibi = _mean(results, "copy", "alibi", "1.25x")
    absolute = [_mean(results, "copy", s, "1.25x") for s in ("learned", "sinusoidal")]
    if alibi is None or None in absolute:
        return f"{PRESS}: not measured (needs copy runs of alibi, learned and sinusoidal)"
    lead = alibi - sum(absolute) / 2
    tests = [comparison(results, "copy", "alibi", s, "1.25x") for s in ("learned", "sinusoidal")]
    significant = all(c is not None and c.significant and c.difference > 0 for c in tests)
    verdict = "agrees" if lead >= MARGIN and significant else ("mixed" if lead > 0 else "disagrees")
    return (
        f"{PRESS}: **{verdict}**. copy at 1.25x: alibi "
        f"{_pct(alibi)} vs learned/sinusoidal mean {_pct(sum(absolute) / 2)} (lead "
        f"{100 * lead:.1f} points, needed {100 * MARGIN:.0f}); "
        + "; ".join(_test(results, "copy", "alibi", s, "1.25x") for s in ("learned", "sinusoidal"))
    )


def ruoss(results: list[Result]) -> str:
    """Learned, sinusoidal and RoPE at 2x on ``copy``."""
    schemes = ("learned", "sinusoidal", "rope")
    values = {s: _mean(results, "copy", s, "2x") for s in schemes}
    learned = {s: _mean(results, "copy", s, "in_dist") for s in schemes}
    if None in values.values() or None in learned.values():
        return "Ruoss et al. 2023 (standard encodings fail on copy past training): not measured"
    failing = [s for s in schemes if values[s] <= FAILS and learned[s] >= LEARNED]
    verdict = "agrees" if len(failing) == len(schemes) else ("mixed" if failing else "disagrees")
    numbers = ", ".join(f"{s} {_pct(values[s])} (in-dist {_pct(learned[s])})" for s in schemes)
    return (
        f"Ruoss et al. 2023 (standard encodings fail on copy past training): **{verdict}**. "
        f"copy at 2x: {numbers}; failing means <= {100 * FAILS:.0f}% after >= "
        f"{100 * LEARNED:.0f}% in distribution"
    )


def kazemnejad_order(results: list[Result]) -> str:
    """Causal NoPE on ``svo`` in distribution (exact-match and minimal pairs)."""
    exact = _mean(results, "svo", "none", "in_dist")
    pairs = _mean(results, "svo", "none", "pairs")
    if exact is None or pairs is None:
        return f"{KAZEMNEJAD_ORDER}: not measured (needs svo runs of none)"
    verdict = "agrees" if exact >= LEARNED and pairs >= LEARNED else "disagrees"
    return (
        f"{KAZEMNEJAD_ORDER}: **{verdict}**. svo in "
        f"distribution: NoPE exact-match {_pct(exact)}, minimal pairs both right "
        f"{_pct(pairs)} (an order-blind model scores 0%)"
    )


def kazemnejad(results: list[Result]) -> str:
    """NoPE against RoPE and ALiBi at 1.5x, on ``copy`` and ``svo``."""
    parts, wins, losses = [], 0, 0
    for task in ("copy", "svo"):
        for other in ("rope", "alibi"):
            c = comparison(results, task, "none", other, "1.5x")
            if c is None:
                continue
            wins += c.significant and c.difference > 0
            losses += c.significant and c.difference < 0
            parts.append(
                f"{task}: none {_pct(_mean(results, task, 'none', '1.5x'))} vs {other} "
                f"{_pct(_mean(results, task, other, '1.5x'))}, {significance_words(c)}"
            )
    if not parts:
        return "Kazemnejad et al. 2023 (NoPE extrapolates as well as RoPE/ALiBi): not measured"
    verdict = (
        "agrees" if losses == 0 and wins else ("disagrees" if wins == 0 and losses else "mixed")
    )
    if not wins and not losses:
        verdict = "no significant difference"
    return (
        f"Kazemnejad et al. 2023 (NoPE extrapolates at least as well as RoPE and ALiBi): "
        f"**{verdict}**. At 1.5x: " + "; ".join(parts)
    )


def haviv(results: list[Result]) -> str:
    """Causal NoPE learns ``copy`` (a task that needs every symbol's position)."""
    exact = _mean(results, "copy", "none", "in_dist")
    if exact is None:
        return "Haviv et al. 2022 (causal models learn positions without encodings): not measured"
    verdict = "agrees" if exact >= LEARNED else "disagrees"
    return (
        f"Haviv et al. 2022 (causal models learn positions without encodings): **{verdict}**. "
        f"NoPE on copy in distribution: {_pct(exact)} (learned means >= {100 * LEARNED:.0f}%)"
    )


def findings(results: list[Result]) -> list[str]:
    """The findings as Markdown list items (``'- ...'``), in the order above.

    The findings on extrapolation (Press, Ruoss, Kazemnejad at 1.5x) are decided on the
    learned runs only (:mod:`lab.evaluation.learned`): a run that never learned its task says
    nothing about length. The findings on learning itself (Kazemnejad on order, Haviv) read every
    run,
    since whether the task was learned is their question. A first item counts the runs left
    out and why.
    """
    learned = learned_only(results)
    left_out = left_out_count(results)
    lines = [press(learned), ruoss(learned), kazemnejad_order(results), kazemnejad(learned)]
    lines.append(haviv(results))
    if left_out:
        lines.insert(0, f"{left_out[:-1]}; the extrapolation findings leave them out.")
    return [f"- {line}" for line in lines]
