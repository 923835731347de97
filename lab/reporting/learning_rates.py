"""The learning rate each scheme of a published sweep trained at, and how it was chosen.

A comparison that tunes the rate while watching one scheme favours it, so a result page says
which rate every scheme used. When the sweep's rates were chosen by ``python sweep.py
--select-lr`` (:mod:`lab.sweeps.select_lr`), its ``lr_selection.json`` is published beside the
page (from the tuning folder ``OUT_DIR-lr``) and the section names the command, the tuning
seeds, the criterion and what every rate measured; a run whose rate is not the one chosen for
its scheme is flagged, never passed over.
"""

from __future__ import annotations

from typing import Any

from lab.reporting.tables import format_table

SELECTION = "lr_selection.json"
"""The file ``sweep.py --select-lr`` writes into its tuning folder, and its published copy."""
TUNING_SUFFIX = "-lr"
"""The tuning folder of a sweep into ``OUT_DIR`` is ``OUT_DIR-lr`` unless ``out_dir=`` moved it."""
SELECTION_KEYS = {"command": str, "rates": list, "seeds": list, "criterion": str}
SELECTION_MAPS = ("chosen", "why")


def selection_problem(data: Any) -> str | None:
    """What makes ``data`` not an ``lr_selection.json`` (an object with ``command``, ``rates``,
    ``seeds``, ``criterion``, and ``chosen`` and ``why`` keyed by scheme, each chosen rate a
    number in (0, 1)), in a few words, or None."""
    if not isinstance(data, dict):
        return f"not an object but a {type(data).__name__}"
    missing = [key for key in (*SELECTION_KEYS, *SELECTION_MAPS) if key not in data]
    if missing:
        return f"lacks {', '.join(map(repr, missing))}"
    for key, kind in SELECTION_KEYS.items():
        if not isinstance(data[key], kind):
            return f"{key}={data[key]!r} is not a {kind.__name__}"
    for key in SELECTION_MAPS:
        if not isinstance(data[key], dict) or not data[key]:
            return f"{key}={data[key]!r} is not an object keyed by scheme"
    for scheme, lr in data["chosen"].items():
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < 1:
            return f"chosen[{scheme!r}]={lr!r} is not a learning rate in (0, 1)"
    return None


def rates_used(results: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Scheme (``model.position``) -> the distinct ``train.lr`` values its runs trained at, in
    the order the runs come."""
    used: dict[str, list[float]] = {}
    for result in results:
        lr = float(result["config"]["train"]["lr"])
        rates = used.setdefault(str(result["position"]), [])
        if lr not in rates:
            rates.append(lr)
    return used


def learning_rate_section(
    results: list[dict[str, Any]], selection: dict[str, Any] | None, link: str
) -> list[str]:
    """The lines of a page's "Learning rates" section.

    Args:
        results: the sweep's ``eval.json`` dicts.
        selection: its ``lr_selection.json`` (:func:`selection_problem` passed), or None when
            the rates were not chosen by ``sweep.py --select-lr``.
        link: the path the page links the published selection file by.
    """
    used = rates_used(results)
    lines = ["## Learning rates", ""]
    if selection is None:
        rates = sorted({lr for values in used.values() for lr in values})
        if len(rates) == 1:
            return [
                *lines,
                f"Every run trained at lr={rates[0]:g}: one rate for every scheme, "
                "not tuned per scheme (`python sweep.py --select-lr` would).",
                "",
            ]
        rows = [[f"`{s}`", ", ".join(f"{lr:g}" for lr in v)] for s, v in used.items()]
        note = "Rates set by the sweep file, not recorded as chosen by `sweep.py --select-lr`."
        return [*lines, note, "", format_table(["scheme", "lr"], rows), ""]
    seeds = ", ".join(str(s) for s in selection["seeds"])
    rates = ", ".join(f"{float(r):g}" for r in selection["rates"])
    lines += [
        f"Each scheme's rate was chosen alike for every scheme by `{selection['command']}`: "
        f"every scheme trained at every rate of {rates} on tuning seed(s) {seeds} (never the "
        f"seeds above) at this study's step budget, ranked on {selection['criterion']}. Every "
        f"tuning run's numbers: [{SELECTION}]({link}).",
        "",
    ]
    rows = []
    for scheme, chosen in selection["chosen"].items():
        ran = used.get(scheme, [])
        runs = ", ".join(f"{lr:g}" for lr in ran) or "no run"
        if ran != [float(chosen)]:
            runs = f"**{runs}: not the rate chosen**"
        rows.append([f"`{scheme}`", f"{float(chosen):g}", runs, selection["why"].get(scheme, "")])
    for scheme in sorted(used.keys() - selection["chosen"].keys()):
        rows.append([f"`{scheme}`", "not tuned", ", ".join(f"{lr:g}" for lr in used[scheme]), ""])
    return [*lines, format_table(["scheme", "chosen", "runs used", "tuning runs"], rows), ""]
