"""Findings of a language-model sweep against the literature, each decided by numbers computed
from the runs.

Every finding names the claim and its source, the measured perplexities that decide it, and a
verdict: ``agrees``, ``disagrees`` or ``cannot tell`` (a needed run or length is missing, or the
intervals leave the question open). Change the runs and the verdicts follow. Perplexities are
means over seeds (:func:`lab.lm.aggregate.cell`); ratios are to the scheme's own perplexity at
the training length (1x).

- Press et al. 2022 ("Train Short, Test Long", fig. 1): ALiBi's perplexity stays near its 1x
  value past the training length while sinusoidal's grows. Decided at 4x: ALiBi within
  :data:`FLAT` of its 1x value, and sinusoidal at least :data:`GROWS` times its 1x value.
- Press et al. 2022 (fig. 1) and Chen et al. 2023 ("Extending Context Window of Large Language
  Models via Positional Interpolation", fig. 1): RoPE degrades past the training length.
  Decided at 4x: RoPE's perplexity above its 1x value by more than the intervals (the 4x
  interval's low end above the 1x interval's high end).
- Press et al. 2022 (sec. 2): learned absolute positions cannot extrapolate: a learned table
  cannot encode a position past its size, and where it can (a longer table), perplexity
  explodes. Decided at 4x: unsupported, or at least :data:`GROWS` times its 1x value.
- Kazemnejad et al. 2023 ("The Impact of Positional Encoding on Length Generalization in
  Transformers"): a causal model without positions (NoPE) extrapolates better than absolute
  encodings. Decided at 4x: NoPE's ratio to 1x below learned's and sinusoidal's (an unsupported
  learned length counts as worse).
- Peng et al. 2023 ("YaRN") and bloc97 2023 (NTK-aware scaling): NTK, dynamic NTK and YaRN
  lower RoPE's perplexity past the training length without fine-tuning. Decided at 4x for each
  RoPE run evaluated under ``eval.position_options.scaling`` in ``ntk``, ``dynamic``, ``yarn``:
  its perplexity below plain RoPE's.
"""

from __future__ import annotations

from typing import Any

from lab.lm.aggregate import Cell, cell, ratio
from lab.reporting.aggregate import groups

Result = dict[str, Any]
AT = "4x"
"""The multiple of the training length at which the findings are decided."""
FLAT = 0.10
"""How far (relative) from its 1x value a flat perplexity may be at :data:`AT`."""
GROWS = 2.0
"""Ratio to 1x at or above which a perplexity has grown (exploded) at :data:`AT`."""
SCALING_RULES = ("ntk", "dynamic", "yarn")
"""RoPE extension rules that claim to work without fine-tuning."""


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


def _ppl(value: Cell) -> str:
    return f"n/a ({value.reason})" if value.mean is None else f"{value.mean:.2f}"


def _ratio_text(runs: list[Result], scheme: str) -> str:
    """``'alibi 5.45 -> 5.28 (0.97x its 1x)'``."""
    value = ratio(runs, AT)
    times = "" if value is None else f" ({value:.2f}x its 1x)"
    return f"{scheme} {_ppl(cell(runs, '1x'))} -> {_ppl(cell(runs, AT))}{times}"


def press(results: list[Result]) -> str:
    """ALiBi flat at 4x, sinusoidal grown at 4x."""
    claim = (
        "Press et al. 2022 (ALiBi's perplexity stays near its 1x value while sinusoidal's grows)"
    )
    alibi, sinusoidal = plain(results, "alibi"), plain(results, "sinusoidal")
    flat, grown = ratio(alibi, AT), ratio(sinusoidal, AT)
    if flat is None or grown is None:
        return f"{claim}: **cannot tell** (needs alibi and sinusoidal runs at 1x and {AT})"
    holds = [abs(flat - 1) <= FLAT, grown >= GROWS]
    verdict = "agrees" if all(holds) else "disagrees"
    return (
        f"{claim}: **{verdict}**. Perplexity 1x -> {AT}: {_ratio_text(alibi, 'alibi')}, "
        f"{_ratio_text(sinusoidal, 'sinusoidal')}; agreeing needs alibi within "
        f"{100 * FLAT:.0f}% of its 1x value ({'yes' if holds[0] else 'no'}) and sinusoidal at "
        f">= {GROWS:g}x its 1x value ({'yes' if holds[1] else 'no'})"
    )


def rope_degrades(results: list[Result]) -> str:
    """RoPE above its 1x perplexity at 4x by more than the intervals."""
    claim = (
        "Press et al. 2022; Chen et al. 2023 (RoPE's perplexity degrades past the training length)"
    )
    runs = plain(results, "rope")
    base, far = cell(runs, "1x"), cell(runs, AT)
    if base.mean is None or far.mean is None:
        return f"{claim}: **cannot tell** (needs rope runs at 1x and {AT})"
    top = base.high if base.high is not None else base.mean
    bottom = far.low if far.low is not None else far.mean
    verdict = "agrees" if bottom > top else "cannot tell"
    verdict = "disagrees" if far.mean <= base.mean else verdict
    return (
        f"{claim}: **{verdict}**. {_ratio_text(runs, 'rope')}; 95% intervals 1x "
        f"{_interval(base)}, {AT} {_interval(far)}; agreeing needs the {AT} interval above the "
        "1x interval"
    )


def _interval(value: Cell) -> str:
    if value.low is None or value.high is None:
        return "n/a (one run without an interval)"
    return f"[{value.low:.2f}, {value.high:.2f}]"


def learned_fails(results: list[Result]) -> str:
    """Learned positions unsupported at 4x, or grown at least GROWS times."""
    claim = "Press et al. 2022 (learned absolute positions cannot extrapolate)"
    runs = plain(results, "learned")
    base, far = cell(runs, "1x"), cell(runs, AT)
    if not runs or base.mean is None or far.reason == "not evaluated":
        return f"{claim}: **cannot tell** (needs learned runs at 1x and {AT})"
    if far.mean is None:
        return f"{claim}: **agrees**. learned at {AT}: n/a ({far.reason}); at 1x {base.mean:.2f}"
    grown = far.mean / base.mean
    verdict = "agrees" if grown >= GROWS else "disagrees"
    return (
        f"{claim}: **{verdict}**. {_ratio_text(runs, 'learned')}; agreeing needs it unsupported "
        f"or >= {GROWS:g}x its 1x value"
    )


def kazemnejad(results: list[Result]) -> str:
    """NoPE's ratio at 4x below learned's and sinusoidal's (an unsupported length: worse)."""
    claim = "Kazemnejad et al. 2023 (NoPE extrapolates better than absolute encodings)"
    nope = ratio(plain(results, "none"), AT)
    ratios: dict[str, float | None] = {}
    for scheme in ("learned", "sinusoidal"):
        runs = plain(results, scheme)
        far = cell(runs, AT)
        if not runs or cell(runs, "1x").mean is None or far.reason == "not evaluated":
            return f"{claim}: **cannot tell** (needs none, learned and sinusoidal at 1x and {AT})"
        ratios[scheme] = ratio(runs, AT)  # None: it cannot encode the length
    if nope is None:
        return f"{claim}: **cannot tell** (needs none, learned and sinusoidal at 1x and {AT})"
    better = all(value is None or nope < value for value in ratios.values())
    shown = [
        f"{s} {value:.2f}x" if value is not None else f"{s} n/a (cannot encode {AT})"
        for s, value in ratios.items()
    ]
    return (
        f"{claim}: **{'agrees' if better else 'disagrees'}**. Perplexity at {AT} over 1x: "
        f"none {nope:.2f}x, {', '.join(shown)}; agreeing needs NoPE's ratio below each"
    )


def peng(results: list[Result]) -> str:
    """Each RoPE run under an NTK/dynamic/YaRN rule below plain RoPE at 4x."""
    claim = "Peng et al. 2023; bloc97 2023 (NTK, dynamic and YaRN lower RoPE's perplexity past L)"
    base = cell(plain(results, "rope"), AT)
    scaled = {
        label: cell(group, AT)
        for label, group in groups(results, results[0]["task"] if results else "").items()
        if group[0]["position"] == "rope"
        and (group[0]["config"]["eval"].get("position_options") or {}).get("scaling")
        in SCALING_RULES
    }
    measured = {label: value for label, value in scaled.items() if value.mean is not None}
    if base.mean is None or not measured:
        return f"{claim}: **cannot tell** (needs rope runs at {AT} as trained and under a rule)"
    lower = [label for label, value in measured.items() if value.mean < base.mean]
    verdict = "agrees" if len(lower) == len(measured) else "disagrees"
    shown = ", ".join(f"{label} {value.mean:.2f}" for label, value in measured.items())
    return (
        f"{claim}: **{verdict}**. Perplexity at {AT}: rope as trained {base.mean:.2f}; {shown}; "
        f"agreeing needs every rule below rope as trained ({len(lower)} of {len(measured)})"
    )


def lm_findings(results: list[Result]) -> list[str]:
    """The findings of one task's LM runs as Markdown list items (``'- ...'``), in the order of
    the module docstring."""
    checks = (press, rope_degrades, learned_fails, kazemnejad, peng)
    return [f"- {check(results)}" for check in checks]
