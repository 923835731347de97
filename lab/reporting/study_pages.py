"""The result pages of the studies beyond the default ablation: the language-modelling track
(perplexity by length, passkey retrieval, extend then fine-tune) and the version-3 schemes and
hybrid layouts; and :data:`PAGES`, every page's writer. The families, the checks of committed
files and the shared parts of a page are :mod:`lab.reporting.pages`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.evaluation.learned import LEARNED, is_learned
from lab.lm.extend_report import lm_extend_page
from lab.lm.findings import lm_findings
from lab.lm.passkey import passkey_table
from lab.lm.report import EXPLAINED, corpus_lines, perplexity_table, ratio_table
from lab.reporting.aggregate import groups, headline_table, tasks
from lab.reporting.pages import (
    FAMILIES,
    SELECTION,
    Family,
    Result,
    ablation_page,
    command_text,
    documented,
    files_line,
    header,
    headline_page,
    learning_rate_section,
    noted,
    provenance,
    read_json,
    rope_scaling_page,
    selection,
    steps_line,
    suite_page,
)
from lab.reporting.tables import DASH, format_table, percent, summary_table
from model.position import scheme_class
from registry import options_dict


def lm_page(folder: Path, publish: str) -> str:
    """``docs/results/lm.md``: provenance, corpus, per task the perplexity and ratio tables and
    the findings (:mod:`lab.lm.report`), both figures and the committed files; until a sweep is
    published there, the two commands that make one."""
    family = FAMILIES["lm"]
    if not (folder / "results.json").is_file():
        return "\n".join(
            [
                *header(family, publish),
                "No language-model sweep is published yet. Make one with "
                f"`{family.command}`, then publish it with `{publish} --lm RUNS`.",
                "",
            ]
        )
    results, sweep = read_json(folder, "results.json"), read_json(folder, "sweep.json")
    steps = sorted({r["train_steps"] for r in results if r["train_steps"] is not None})
    lines = [*header(family, publish), provenance(results, sweep, family), noted(family, sweep)]
    lines += [f"Training steps per run: {', '.join(map(str, steps))}.", "", *corpus_lines(results)]
    lines += ["", EXPLAINED, ""]
    for task in sorted({r["task"] for r in results}):
        runs = [r for r in results if r["task"] == task]
        lines += [f"## {task}: perplexity by evaluation length", "", perplexity_table(runs, task)]
        lines += ["", "Perplexity over its value at 1x:", "", ratio_table(runs, task), ""]
        lines += [f"## {task}: findings against the literature", "", *lm_findings(runs), ""]
    lines += ["![perplexity against evaluation length](lm/perplexity_vs_length.png)", ""]
    lines += ["![mean loss against token position](lm/loss_vs_position.png)", ""]
    lines += ["The paired tests between schemes are in [report.md](lm/report.md).", ""]
    names = ["report.md", "results.csv", "results.json", "sweep.json"]
    return "\n".join([*lines, files_line("lm", names), ""])


# --- language-modelling track: passkey retrieval, extend then fine-tune --------------------


def unpublished(family: Family, publish: str, flag: str) -> str:
    """The page of a family with no published sweep yet: the commands that make and publish
    one."""
    return "\n".join(
        [
            *header(family, publish),
            f"No sweep is published here yet. Make one with `{family.command}`, then publish it "
            f"with `{publish} {flag} RUNS`.",
            "",
        ]
    )


def passkey_page(folder: Path, publish: str) -> str:
    """``docs/results/passkey.md``: provenance, one row per run and evaluation rule, the passkey
    table per scheme and rule (:func:`lab.lm.passkey.passkey_table`), the heatmaps, the files;
    until a sweep is published there, the commands that make one."""
    family = FAMILIES["passkey"]
    if not (folder / "results.json").is_file():
        return unpublished(family, publish, "--passkey")
    results, sweep = read_json(folder, "results.json"), read_json(folder, "sweep.json")
    lines = [*header(family, publish), provenance(results, sweep, family), noted(family, sweep)]
    lines += [steps_line(results), "", "## Runs", "", summary_table(results, "runs/passkey"), ""]
    lines += [
        "## Passkey retrieval",
        "",
        "Exact-match of the 5-digit key in percent, per scheme and RoPE extension rule applied "
        "at evaluation (`scaling_factor` 4; no training), at each multiple of the longest "
        "training length: the mean over the key's depths 0, 0.1, ..., 1, and the depth with "
        "the lowest mean over the lengths (its mean in brackets; a dash when every depth "
        "scores alike).",
        "",
        passkey_table(results),
        "",
        *(  # drawn from learned runs only: a sweep where none learned has none
            ["![passkey exact-match by depth and length](passkey/passkey_grid.png)", ""]
            if (folder / "passkey_grid.png").is_file()
            else ["No heatmaps: no passkey run learned its task within its budget.", ""]
        ),
        "The exact-match at every length, the significance tests and the findings are in "
        "[report.md](passkey/report.md).",
        "",
    ]
    lines += learning_rate_section(results, selection(folder), f"passkey/{SELECTION}")
    names = ["report.md", "results.csv", "results.json", "sweep.json"]
    names += [SELECTION] if (folder / SELECTION).is_file() else []
    return "\n".join([*lines, files_line("passkey", names), ""])


def extend_page(folder: Path, publish: str) -> str:
    """``docs/results/lm-extend.md``: :func:`lab.lm.extend_report.lm_extend_page` (provenance,
    perplexity by length, paired tests, findings, files); until a study is published there,
    the commands that make one."""
    family = FAMILIES["lm-extend"]
    if not (folder / "results.json").is_file():
        return unpublished(family, publish, "--lm-extend")
    sweep = read_json(folder, "sweep.json") if (folder / "sweep.json").is_file() else None
    note = family.recorded if documented(sweep) else ""
    return lm_extend_page(folder, publish, note, command_text(sweep, family))


# --- end of the language-modelling track's pages ------------------------------------------

SWEEP_SEEDS = [0, 1, 2]
"""The seeds of the version-3 and hybrid sweep files; a page of other seeds names them."""


def sweep_provenance(results: list[Result], sweep: dict[str, Any], family: Family) -> str:
    """``'`CMD`: 24 runs, seed(s) 0, 1, 2, the last pass in **9.1 min** (trained 16, skipped 8)
    with 2 worker(s) on MACHINE.'``: the command (with ``seed=...`` when the runs hold other
    seeds than :data:`SWEEP_SEEDS`), runs, seeds, and the time and run counts of the pass that
    wrote ``sweep.json`` (``skipped``: runs finished by an earlier pass, e.g. ``seed=0``)."""
    seeds = sorted({r["seed"] for r in results})
    command = command_text(sweep, family)  # a recorded command is the whole command
    if seeds != SWEEP_SEEDS and documented(sweep):
        command = f"`{family.command} seed={','.join(map(str, seeds))}`"
    counts = ", ".join(f"{kind} {n}" for kind, n in sweep["runs"].items())
    return (
        f"{command}: {len(results)} runs, seed(s) {', '.join(map(str, seeds))}, the last pass "
        f"in **{sweep['seconds'] / 60:.1f} min** ({counts}) with {sweep['workers']} worker(s) "
        f"on {sweep['machine']}."
    )


FILLED = ("original_max_position",)
"""Scheme options whose default is a placeholder filled in when a run's config is built."""


def changed_options(result: Result) -> str:
    """The trained options of the run's scheme that differ from their defaults, e.g.
    ``'p=0.75'``, or ``''`` (a placeholder of :data:`FILLED` aside)."""
    defaults = options_dict(scheme_class(result["position"]).Options())
    saved = (result["config"]["model"].get("options") or {}).get(result["position"]) or {}
    changed = [f"{k}={v}" for k, v in saved.items() if k not in FILLED and defaults.get(k) != v]
    return ", ".join(changed)


def learnability_table(results: list[Result]) -> str:
    """Per task and scheme (its :func:`changed_options` beside it): in-distribution exact-match
    over every seed (learned or not), its mean, seed 0's and the lowest, how many seeds reach
    :data:`LEARNED`, how many count as learned (:mod:`lab.evaluation.learned`), and the mean
    exact-match at 2x over every seed."""
    rows = []
    for task in tasks(results):
        for scheme, runs in groups(results, task).items():
            in_dist = [r["summary"]["in_dist"] or 0.0 for r in runs]
            at_2x = [r["summary"]["at"].get("2x") for r in runs]
            seed0 = [r["summary"]["in_dist"] for r in runs if r["seed"] == 0]
            rows.append(
                [task, scheme, changed_options(runs[0]) or DASH, str(len(runs))]
                + [percent(sum(in_dist) / len(in_dist)), percent(seed0[0]) if seed0 else DASH]
                + [percent(min(in_dist)), str(sum(v >= LEARNED for v in in_dist))]
                + [str(sum(map(is_learned, runs)))]
                + [DASH if None in at_2x else percent(sum(at_2x) / len(at_2x))]
            )
    headers = ["task", "scheme", "options", "seeds", "in-distribution, mean", "seed 0"]
    headers += ["lowest", f"seeds >= {LEARNED:.0%}", "learned", "2x, mean"]
    return format_table(headers, rows)


LEARNABILITY = (
    "In-distribution exact-match on the test set over every seed, learned or not (`learned`: "
    "the seeds whose training reached 99% validation exact-match at every training length and "
    "whose test figure is at least 95%; the tables below leave the others out); `options`: the "
    "scheme's options that differ from their defaults."
)


def sweep_section(folder: Path, family: Family, title: str, link: str) -> list[str]:
    """A sweep's section of a page: provenance, steps, learnability, per task the headline
    table of the learned seeds, its figure, every run and its files (under ``link``, relative
    to the page), from ``folder``; until it holds a sweep, the command that makes one."""
    lines = [f"## {title}", ""]
    if not (folder / "results.json").is_file():
        return [*lines, f"Not run yet: `{family.command}`.", ""]
    results, sweep = read_json(folder, "results.json"), read_json(folder, "sweep.json")
    lines += [sweep_provenance(results, sweep, family), steps_line(results), ""]
    lines += [LEARNABILITY, "", learnability_table(results), ""]
    for task in tasks(results):
        lines += [f"**{task}**: exact-match, mean [95% t-interval] over the learned seeds", ""]
        lines += [headline_table(results, task), ""]
    lines += [f"![exact-match against length, {title}]({link}/accuracy_vs_length.png)"]
    lines += ["", "Every run:", "", summary_table(results), ""]
    return [*lines, files_line(link, ["report.md", "results.json", "sweep.json"]), ""]


RECIPE = (
    "the default ablation's recipe (`configs/ablation.yaml`: 3 layers, `d_model` 64, batch 32, "
    "early stopping at 99% validation exact-match, an 8000-step cap) on its two tasks, at one "
    "learning rate for every scheme (1e-3, not tuned per scheme as the ablation's are)"
)
"""How the v2 and v3 pages' schemes were trained, as their sweeps give it."""
V2_INTRO = (
    f"The schemes added in version 2 (`t5`, `fire`, `kerple`, `xpos`, `cope`), each trained "
    f"with {RECIPE}; the schemes themselves are in [schemes](../schemes.md), the ablation's "
    "five on [the ablation's page](ablation.md)."
)


def v2_page(folder: Path, publish: str) -> str:
    """``docs/results/v2.md``: the version-2 schemes' sweep (:func:`sweep_section`)."""
    lines = [*header(FAMILIES["v2"], publish), V2_INTRO, ""]
    return "\n".join(lines + sweep_section(folder, FAMILIES["v2"], "Version-2 schemes", "v2"))


V3_INTRO = (
    "The schemes added in version 3 (`fox`, `dynamic_bias`, `pope`, `stickbreaking`) and three "
    "options of earlier ones (ALiBi with learned slopes, p-RoPE, RoPE with Scalable-Softmax), "
    f"each trained with {RECIPE}; the schemes themselves are in [schemes](../schemes.md), the "
    "ablation's five on [the ablation's page](ablation.md), and each scheme's training speed "
    "against NoPE's on [the CPU benchmark](bench-cpu.md)."
)


def v3_page(folder: Path, publish: str) -> str:
    """``docs/results/v3.md``: the new schemes' sweep (``v3/``) and the earlier schemes' new
    options (``v3/variants/``), each a :func:`sweep_section`."""
    lines = [*header(FAMILIES["v3"], publish), V3_INTRO, ""]
    lines += sweep_section(folder, FAMILIES["v3"], "New schemes", "v3")
    variants = FAMILIES["v3-variants"]
    lines += sweep_section(folder / "variants", variants, "New options", "v3/variants")
    return "\n".join(lines)


HYBRIDS_INTRO = (
    "A scheme per layer and per head ([hybrid layouts](../schemes.md#hybrid-layouts)): RoPE "
    "with NoPE every 4th layer (`rope*3,none`), RoPE on half of every layer's heads "
    "(`rope:2+none:2`) and RNoPE-SWA (three RoPE layers with a sliding window of 8 tokens, one "
    "NoPE layer: `rope@8*3,none`), against RoPE and NoPE alone at the same depth, four layers, "
    "otherwise the default ablation's recipe (`configs/ablation.yaml`) at one learning rate "
    "for every layout (1e-3, not tuned per scheme as the ablation's are); their training speed "
    "against NoPE's is with [the layouts](../schemes.md#hybrid-layouts)."
)


def hybrids_page(folder: Path, publish: str) -> str:
    """``docs/results/hybrids.md``: the hybrid layouts' sweep (:func:`sweep_section`)."""
    lines = [*header(FAMILIES["hybrids"], publish), HYBRIDS_INTRO, ""]
    return "\n".join(lines + sweep_section(folder, FAMILIES["hybrids"], "Four layers", "hybrids"))


PAGES = {
    "ablation": ablation_page,
    "headline": headline_page,
    "v2": v2_page,
    "v3": v3_page,
    "hybrids": hybrids_page,
    "suite": suite_page,
    "rope-scaling": rope_scaling_page,
    "lm": lm_page,
    "passkey": passkey_page,  # language-modelling track
    "lm-extend": extend_page,  # language-modelling track
}
