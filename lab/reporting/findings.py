"""Findings against the literature, each a three-valued verdict decided by intervals over seeds.

Every finding names the paper's claim and splits it into the claims the sweep measures, each
an interval over seeds (:mod:`lab.stats.verdicts`): a paired difference between two schemes
(:func:`lab.reporting.aggregate.comparison`) or one scheme's mean. With ``m`` claims in one
finding, each interval is at level ``1 - 0.05 / m`` (Bonferroni), so the finding as a whole
errs with probability at most 0.05. A claim agrees only when its interval lies beyond the
practical margin (:data:`MARGIN`, or the stated threshold) on the claimed side; the finding
agrees when all its claims agree, disagrees when any disagrees, and is otherwise inconclusive,
with the seeds that would decide it. No verdict depends on a point estimate crossing a bar.

Runs that did not learn their task (:mod:`lab.evaluation.learned`) are left out of every
finding: on extrapolation they measure nothing, and on learning itself a run stopped by its
step budget is inconclusive (more steps might learn), so a finding with such a run says so and
is at best inconclusive, never "disagrees" on its evidence. Since the rule
"learned" is a bar too, :func:`sensitivity` re-decides every finding with the runs near the
bar (:func:`lab.evaluation.learned.is_marginal`) moved across it, and says what changes.

- Press et al. 2022 ("Train Short, Test Long"): ALiBi extrapolates where absolute encodings do
  not. On ``copy`` at 1.25x: ALiBi minus ``learned``, and minus ``sinusoidal``, > MARGIN.
- Ruoss et al. 2023: standard encodings fail on copy past training. On ``copy`` at 2x, each of
  ``learned``, ``sinusoidal`` and ``rope`` has mean exact-match at most :data:`FAILS`.
- Kazemnejad et al. 2023: causal NoPE learns order (``svo`` in distribution, exact-match and
  minimal pairs at least :data:`LEARNED`), and extrapolates at least as well as RoPE and ALiBi
  (at 1.5x on ``copy`` and ``svo``, NoPE minus each no worse than ``-MARGIN``).
- Haviv et al. 2022: the causal mask alone lets a model learn positions (NoPE on ``copy`` in
  distribution at least :data:`LEARNED`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lab.evaluation.learned import LEARNED, is_learned, is_marginal, left_out_count
from lab.evaluation.record import pair_values
from lab.reporting.aggregate import comparison, groups, seed_values
from lab.stats.intervals import t_interval
from lab.stats.seed_stats import ALPHA
from lab.stats.verdicts import INCONCLUSIVE, Claim, Verdict, combine, decide, words

Result = dict[str, Any]
FAILS = 0.10
"""Mean exact-match at or below which a scheme counts as failing at a length."""
MARGIN = 0.05
"""Practical margin of a difference between schemes (exact-match, 5 points)."""


@dataclass(frozen=True)
class Finding:
    """One finding: its title, overall word, and a ``text`` listing each claim's numbers."""

    title: str
    word: str
    text: str

    def line(self) -> str:
        """The Markdown list item."""
        return f"- {self.title}: **{self.word}**. {self.text}"


def _not_measured(title: str, needs: str) -> Finding:
    return Finding(title, "not measured", f"needs {needs}")


def _difference(
    results: list[Result], task: str, a: str, b: str, at: str, claim: Claim, m: int
) -> tuple[Verdict, str] | None:
    c = comparison(results, task, a, b, at, alpha=ALPHA / m)
    if c is None:
        return None
    v = decide(claim, c.mean, c.low, c.high, c.n, c.sd, ALPHA / m)
    per_seed = ", ".join(f"{100 * d:+.1f}" for d in c.differences)
    return v, f"{a} - {b} {100 * c.mean:+.1f} points (per seed {per_seed}): {words(v)}"


def _mean_claim(values: list[float], what: str, claim: Claim, m: int) -> tuple[Verdict, str]:
    interval = t_interval(values, alpha=ALPHA / m)
    sd = None if len(values) < 2 else interval.sd
    v = decide(claim, interval.mean, interval.low, interval.high, len(values), sd, ALPHA / m)
    return v, f"{what} {100 * interval.mean:.1f}%: {words(v, unit='%', mean=True)}"


def _finding(title: str, parts: list[tuple[Verdict, str]], note: str) -> Finding:
    word = combine([v for v, _ in parts])
    return Finding(title, word, f"{note}: " + "; ".join(text for _, text in parts))


PRESS = "Press et al. 2022 (ALiBi extrapolates where absolute encodings do not)"


def press(results: list[Result], learned: list[Result]) -> Finding:
    """ALiBi minus ``learned`` and minus ``sinusoidal`` on ``copy`` at 1.25x, > MARGIN."""
    claim = Claim("greater", MARGIN)
    parts = [
        _difference(learned, "copy", "alibi", s, "1.25x", claim, 2)
        for s in ("learned", "sinusoidal")
    ]
    if None in parts:
        return _not_measured(PRESS, "learned copy runs of alibi, learned and sinusoidal")
    return _finding(PRESS, parts, f"copy at 1.25x, claim: lead > {100 * MARGIN:.0f} points")


RUOSS = "Ruoss et al. 2023 (standard encodings fail on copy past training)"


def ruoss(results: list[Result], learned: list[Result]) -> Finding:
    """``learned``, ``sinusoidal`` and ``rope`` at 2x on ``copy``: mean at most FAILS."""
    schemes = ("learned", "sinusoidal", "rope")
    grouped = groups(learned, "copy")
    values = {s: list(seed_values(grouped.get(s, []), "2x").values()) for s in schemes}
    if not all(values.values()):
        return _not_measured(RUOSS, "learned copy runs of learned, sinusoidal and rope")
    claim = Claim("at_most", FAILS)
    parts = [_mean_claim(values[s], s, claim, len(schemes)) for s in schemes]
    return _finding(RUOSS, parts, f"copy at 2x, claim: mean <= {100 * FAILS:.0f}%")


ORDER = "Kazemnejad et al. 2023 (causal NoPE learns order)"


def _not_learned_part(results: list[Result], learned: list[Result], task: str):
    """The claim part that a learnability finding adds when some ``none`` runs on ``task`` did
    not learn within their budget: inconclusive (more steps might learn), never evidence
    against; None when every run learned."""
    runs = groups(results, task).get("none", [])
    missing = len(runs) - len(groups(learned, task).get("none", []))
    if missing == 0:
        return None
    text = f"{missing} of {len(runs)} runs not learned within budget (inconclusive, not a failure)"
    return Verdict(INCONCLUSIVE, None, None, len(runs)), text


def _learnability(
    title: str, results: list[Result], learned: list[Result], task: str, parts_of
) -> Finding:
    """A finding on whether NoPE learns ``task``, from its learned runs: ``parts_of(runs)``
    gives the claim parts (None when a run lacks a figure), then the not-learned part."""
    runs = groups(learned, task).get("none", [])
    extra = _not_learned_part(results, learned, task)
    parts = parts_of(runs) if runs else []
    if not groups(results, task).get("none") or parts is None:
        return _not_measured(title, f"{task} runs of none")
    claim = f"{task} in distribution, claim: >= {100 * LEARNED:.0f}%"
    return _finding(title, [*parts, *([extra] if extra else [])], claim)


def kazemnejad_order(results: list[Result], learned: list[Result]) -> Finding:
    """Causal NoPE on ``svo`` in distribution, its learned runs: exact-match and minimal pairs
    (a run not learned within budget makes the finding inconclusive, :func:`_learnability`)."""

    def parts(runs: list[Result]):
        exact = [r["summary"]["in_dist"] for r in runs]
        pairs = pair_values(runs, "in_dist")
        if None in exact or None in pairs:
            return None
        claim = Claim("at_least", LEARNED)
        return [
            _mean_claim(exact, "exact-match", claim, 2),
            _mean_claim(pairs, "minimal pairs both right (order-blind: 0%)", claim, 2),
        ]

    return _learnability(ORDER, results, learned, "svo", parts)


NOPE = "Kazemnejad et al. 2023 (NoPE extrapolates at least as well as RoPE and ALiBi)"


def kazemnejad(results: list[Result], learned: list[Result]) -> Finding:
    """NoPE minus RoPE and minus ALiBi at 1.5x, on ``copy`` and ``svo``: no worse than
    -MARGIN."""
    claim = Claim("no_worse", MARGIN)
    pairs = [(t, o) for t in ("copy", "svo") for o in ("rope", "alibi")]
    parts = [
        (p, task)
        for task, other in pairs
        if (p := _difference(learned, task, "none", other, "1.5x", claim, len(pairs)))
    ]
    if not parts:
        return _not_measured(NOPE, "learned runs of none with rope or alibi")
    labelled = [(v, f"{task}: {text}") for (v, text), task in parts]
    return _finding(NOPE, labelled, f"at 1.5x, claim: difference >= -{100 * MARGIN:.0f} points")


HAVIV = "Haviv et al. 2022 (causal models learn positions without encodings)"


def haviv(results: list[Result], learned: list[Result]) -> Finding:
    """Causal NoPE learns ``copy`` (a task that needs every symbol's position), its learned
    runs (a run not learned within budget makes the finding inconclusive)."""

    def parts(runs: list[Result]):
        exact = [r["summary"]["in_dist"] for r in runs]
        if None in exact:
            return None
        return [_mean_claim(exact, "NoPE exact-match", Claim("at_least", LEARNED), 1)]

    return _learnability(HAVIV, results, learned, "copy", parts)


FINDINGS: tuple[Callable[[list[Result], list[Result]], Finding], ...] = (
    press,
    ruoss,
    kazemnejad_order,
    kazemnejad,
    haviv,
)
"""Every finding, in report order; each takes (every run, the runs that count as learned)."""


def decided(results: list[Result], learned: list[Result] | None = None) -> list[Finding]:
    """Every finding of :data:`FINDINGS`, with ``learned`` (default: the learned runs of
    ``results``) as the runs the extrapolation findings read."""
    if learned is None:
        learned = [r for r in results if is_learned(r)]
    return [finding(results, learned) for finding in FINDINGS]


def sensitivity(results: list[Result]) -> str:
    """One sentence on how the findings' words move when the runs near the "learned" bar
    (:func:`lab.evaluation.learned.is_marginal`) are all counted in, or all left out."""
    marginal = [r for r in results if is_marginal(r)]
    if not marginal:
        return "Inclusion sensitivity: no run sits within 3 points of the learned bar."
    base = decided(results)
    learned = [r for r in results if is_learned(r)]
    variants = {
        "with them in": learned + [r for r in marginal if not is_learned(r)],
        "with them out": [r for r in learned if not is_marginal(r)],
    }
    changes = []
    for name, runs in variants.items():
        for old, new in zip(base, decided(results, runs), strict=True):
            if new.word != old.word:
                changes.append(f"{name}, {old.title} becomes {new.word} (was {old.word})")
    names = ", ".join(f"{r['position']}-{r['task']}-seed{r['seed']}" for r in marginal)
    moved = "; ".join(changes) if changes else "no verdict changes"
    return f"Inclusion sensitivity: {len(marginal)} run(s) near the learned bar ({names}): {moved}."


def decided_line(results: list[Result]) -> str:
    """One line for the terminal: which findings the sweep could decide and which it could
    not, e.g. ``"Findings decided: Ruoss et al. 2023 agrees; ... Inconclusive at these seeds:
    Press et al. 2022 (...)."``, or that it measured none (each needs runs the sweep lacks)."""
    every = decided(results)
    found = [f for f in every if f.word != "not measured"]
    if not found:  # not "decided: none. Inconclusive: none", as if something were measured
        return (
            f"Findings: none measured: the {len(every)} findings need runs this sweep lacks "
            "(report.md names what each needs)."
        )
    done = [f"{f.title} {f.word}" for f in found if f.word != "inconclusive"]
    open_ = [f.title for f in found if f.word == "inconclusive"]
    seeds = sorted(
        {len(runs) for t in {r["task"] for r in results} for runs in groups(results, t).values()}
    )
    at = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}" if seeds else "0"
    return (
        f"Findings at {at} seed(s): decided: {'; '.join(done) or 'none'}. Inconclusive: "
        f"{'; '.join(open_) or 'none'} (report.md gives each interval and the seeds needed)."
    )


def findings(results: list[Result]) -> list[str]:
    """The findings as Markdown list items (``'- ...'``), in the order of :data:`FINDINGS`,
    then the inclusion sensitivity; a first item counts the runs left out as not learned."""
    lines = [f.line() for f in decided(results)]
    lines.append(f"- {sensitivity(results)}")
    left_out = left_out_count(results)
    if left_out:
        lines.insert(0, f"- {left_out[:-1]}; the extrapolation findings leave them out.")
    return lines
