"""Findings of a language-model sweep against the literature, each a three-valued verdict
decided by intervals over seeds.

The seed is the unit of evidence. Every claim is about per-seed figures in nats per token (the
log of a perplexity ratio): a scheme's *growth*, its mean loss at :data:`AT` minus its own at
1x (``exp`` of it is the perplexity ratio), or the difference between two schemes' losses or
growths, paired by seed (:func:`lab.stats.seed_stats.paired`). Each claim is decided by its
95% t-interval over seeds against a stated margin (:func:`lab.stats.verdicts.decide`): agrees
when the interval lies beyond the margin on the claimed side, disagrees when it excludes the
claimed side, and is otherwise inconclusive, with about how many seeds would decide it. A
finding of ``m`` claims uses ``1 - 0.05 / m`` intervals (Bonferroni) and agrees when all agree,
disagrees when any does (:func:`lab.stats.verdicts.combine`). One seed decides nothing.

- Press et al. 2022 ("Train Short, Test Long", fig. 1): ALiBi's perplexity stays near its 1x
  value past the training length while sinusoidal's grows: ALiBi's growth at 4x within
  +-:data:`FLAT`, sinusoidal's at least :data:`GROWS`.
- Press et al. 2022 (table 1, L_valid = L): at the training length ALiBi is no worse than
  sinusoidal and rotary: RoPE's and sinusoidal's loss minus ALiBi's at 1x, each no worse than
  ``-LOSS_MARGIN``. Small models can disagree; the page says so when they do.
- Press et al. 2022 (fig. 1) and Chen et al. 2023 (fig. 1): RoPE degrades past the training
  length: its growth at 4x greater than :data:`LOSS_MARGIN`.
- Press et al. 2022 (sec. 2): learned absolute positions cannot extrapolate: a table that
  cannot encode 4x agrees by construction; a longer one needs growth of at least :data:`GROWS`.
- Kazemnejad et al. 2023: NoPE extrapolates better than absolute encodings: learned's and
  sinusoidal's growth minus NoPE's, each greater than :data:`LOSS_MARGIN` (a learned table that
  cannot encode 4x counts as worse).
- Peng et al. 2023 ("YaRN") and bloc97 2023 (NTK-aware scaling): NTK, dynamic NTK and YaRN
  lower RoPE's perplexity past the training length without fine-tuning: plain RoPE's loss at
  4x minus each rule's greater than :data:`LOSS_MARGIN`.
"""

from __future__ import annotations

import math
from typing import Any

from lab.lm.aggregate import length_row, seed_losses
from lab.reporting.aggregate import groups
from lab.stats.seed_stats import ALPHA
from lab.stats.seed_stats import paired as seed_paired
from lab.stats.verdicts import AGREES, Claim, Verdict, combine, decide, words

Result = dict[str, Any]
AT = "4x"
"""The multiple of the training length at which the extrapolation findings are decided."""
LOSS_MARGIN = math.log(1.05)
"""Practical margin of a loss difference: a 5% perplexity ratio (0.049 nats/token)."""
FLAT = math.log(1.10)
"""How far from zero a flat growth may be: perplexity within 10% of its 1x value."""
GROWS = math.log(2.0)
"""Growth at or above which a perplexity has grown (doubled) at :data:`AT`."""
SCALING_RULES = ("ntk", "dynamic", "yarn")
"""RoPE extension rules that claim to work without fine-tuning."""
Part = tuple[Verdict, str]


def plain(runs: list[Result], scheme: str) -> list[Result]:
    """The runs of ``scheme`` as trained: causal, no evaluation-time position options, of the
    first scheme label (task options) that has any."""
    by_label = groups(runs, runs[0]["task"]) if runs else {}
    for group in by_label.values():
        first = group[0]
        if (
            first["position"] == scheme
            and first["config"]["model"].get("causal", True)
            and not first["config"]["eval"].get("position_options")
        ):
            return group
    return []


def growth(runs: list[Result], label: str = AT) -> dict[int, float]:
    """Seed -> mean loss at ``label`` minus mean loss at 1x (nats/token), for the seeds whose
    run supports both lengths."""
    base, far = seed_losses(runs, "1x"), seed_losses(runs, label)
    return {seed: far[seed] - base[seed] for seed in sorted(set(base) & set(far))}


def unsupported_at(runs: list[Result], label: str = AT) -> bool:
    """Every run was evaluated at ``label`` and none can encode it (a learned table too short)."""
    rows = [length_row(r, label) for r in runs]
    return bool(rows) and all(row is not None and not row["supported"] for row in rows)


def part(
    a: dict[int, float], b: dict[int, float] | None, claim: Claim, m: int, what: str
) -> Part | None:
    """The verdict of ``claim`` on ``a - b`` per seed (``b`` None: ``a`` itself) at level
    ``1 - ALPHA / m``, with its text; None when no seed has both."""
    test = seed_paired(a, dict.fromkeys(a, 0.0) if b is None else b, alpha=ALPHA / m)
    if test is None:
        return None
    v = decide(claim, test.mean, test.low, test.high, test.n, test.sd, ALPHA / m)
    per_seed = ", ".join(f"{d:+.3f}" for d in test.differences)
    shown = words(v, " nats", scale=1.0, digits=3)
    return (
        v,
        f"{what} {test.mean:+.3f} nats (x{math.exp(test.mean):.2f}; per seed {per_seed}): {shown}",
    )


def finding(title: str, parts: list[Part | None], claim: str, needs: str) -> str:
    """``'TITLE: **WORD**. CLAIM: part; part'``, or not measured when a part is None."""
    if not parts or any(p is None for p in parts):
        return f"{title}: **not measured** (needs {needs})"
    word = combine([v for v, _ in parts])
    return f"{title}: **{word}**. {claim}: " + "; ".join(text for _, text in parts)


def press(results: list[Result]) -> str:
    """ALiBi's growth at 4x within +-FLAT, sinusoidal's at least GROWS."""
    title = (
        "Press et al. 2022 (ALiBi's perplexity stays near its 1x value while sinusoidal's grows)"
    )
    alibi, sinusoidal = growth(plain(results, "alibi")), growth(plain(results, "sinusoidal"))
    parts = [
        part(alibi, None, Claim("within", FLAT), 2, "alibi growth") if alibi else None,
        part(sinusoidal, None, Claim("at_least", GROWS), 2, "sinusoidal growth")
        if sinusoidal
        else None,
    ]
    claim = f"growth at {AT} (loss there minus at 1x), claim: alibi within +-{FLAT:.3f}, "
    claim += f"sinusoidal >= {GROWS:.3f} (x2)"
    return finding(title, parts, claim, f"alibi and sinusoidal runs at 1x and {AT}")


def press_at_length(results: list[Result]) -> str:
    """RoPE's and sinusoidal's loss minus ALiBi's at 1x, each no worse than -LOSS_MARGIN."""
    title = "Press et al. 2022 (at the training length ALiBi is no worse than sinusoidal and RoPE)"
    alibi = seed_losses(plain(results, "alibi"), "1x")
    others = {s: seed_losses(plain(results, s), "1x") for s in ("sinusoidal", "rope")}
    claim = Claim("no_worse", LOSS_MARGIN)
    parts = [
        part(values, alibi, claim, 2, f"{s} - alibi") if values and alibi else None
        for s, values in others.items()
    ]
    text = f"loss at 1x, claim: each difference >= -{LOSS_MARGIN:.3f} (ALiBi at most 5% worse)"
    return finding(title, parts, text, "alibi, sinusoidal and rope runs at 1x")


def rope_degrades(results: list[Result]) -> str:
    """RoPE's growth at 4x greater than LOSS_MARGIN."""
    title = (
        "Press et al. 2022; Chen et al. 2023 (RoPE's perplexity degrades past the training length)"
    )
    values = growth(plain(results, "rope"))
    parts = [
        part(values, None, Claim("greater", LOSS_MARGIN), 1, "rope growth") if values else None
    ]
    claim = f"growth at {AT}, claim: > {LOSS_MARGIN:.3f} (x1.05)"
    return finding(title, parts, claim, f"rope runs at 1x and {AT}")


def learned_fails(results: list[Result]) -> str:
    """Learned positions unsupported at 4x, or growth at least GROWS."""
    title = "Press et al. 2022 (learned absolute positions cannot extrapolate)"
    runs = plain(results, "learned")
    if unsupported_at(runs):
        reason = length_row(runs[0], AT)["reason"]
        return (
            f"{title}: **agrees**. learned cannot encode {AT} ({reason}) in any of {len(runs)} runs"
        )
    values = growth(runs)
    parts = [part(values, None, Claim("at_least", GROWS), 1, "learned growth") if values else None]
    claim = f"growth at {AT}, claim: unsupported or >= {GROWS:.3f} (x2)"
    return finding(title, parts, claim, f"learned runs at 1x and {AT}")


def kazemnejad(results: list[Result]) -> str:
    """Learned's and sinusoidal's growth minus NoPE's, each greater than LOSS_MARGIN."""
    title = "Kazemnejad et al. 2023 (NoPE extrapolates better than absolute encodings)"
    nope = growth(plain(results, "none"))
    parts: list[Part | None] = []
    for scheme in ("learned", "sinusoidal"):
        runs = plain(results, scheme)
        if runs and unsupported_at(runs):
            seeds = len(runs)
            parts.append((Verdict(AGREES, None, None, seeds), f"{scheme} cannot encode {AT}"))
            continue
        values = growth(runs)
        claim = Claim("greater", LOSS_MARGIN)
        parts.append(part(values, nope, claim, 2, f"{scheme} - none") if values and nope else None)
    text = f"growth at {AT}, claim: each difference > {LOSS_MARGIN:.3f}"
    return finding(title, parts, text, f"none, learned and sinusoidal runs at 1x and {AT}")


def peng(results: list[Result]) -> str:
    """Plain RoPE's loss at 4x minus each NTK/dynamic/YaRN rule's, greater than LOSS_MARGIN."""
    title = "Peng et al. 2023; bloc97 2023 (NTK, dynamic and YaRN lower RoPE's perplexity past L)"
    base = seed_losses(plain(results, "rope"), AT)
    scaled = {
        label: seed_losses(group, AT)
        for label, group in groups(results, results[0]["task"] if results else "").items()
        if group[0]["position"] == "rope"
        and (group[0]["config"]["eval"].get("position_options") or {}).get("scaling")
        in SCALING_RULES
    }
    m = max(1, len(scaled))
    claim = Claim("greater", LOSS_MARGIN)
    parts = [part(base, values, claim, m, f"rope - {label}") for label, values in scaled.items()]
    text = f"loss at {AT}, claim: rope as trained minus the rule > {LOSS_MARGIN:.3f}"
    return finding(
        title, parts if base else [], text, f"rope runs at {AT} as trained and under a rule"
    )


def lm_findings(results: list[Result]) -> list[str]:
    """The findings of one task's LM runs as Markdown list items (``'- ...'``), in the order of
    the module docstring."""
    checks = (press, press_at_length, rope_degrades, learned_fails, kazemnejad, peng)
    return [f"- {check(results)}" for check in checks]
