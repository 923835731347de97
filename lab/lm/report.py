"""A sweep's language-model report: ``lm_results.csv`` (one row per run x evaluation length),
``lm_results.json`` (the LM ``eval.json`` dicts), ``lm_report.md`` and its two figures.

:func:`lab.reporting.report.write_reports` hands the LM records (``kind == "lm"``) here and the
synthetic ones to its own writers, so a sweep of both kinds writes both reports side by side.
The statistics are those of :mod:`lab.lm.aggregate`; the findings are :mod:`lab.lm.findings`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from lab.common.files import atomic_write, atomic_writer, check_not_folders
from lab.common.outputs import LM_REPORT_NAMES
from lab.evaluation.labels import ordered, run_label, scheme_label
from lab.evaluation.size import parameters_cell
from lab.lm import figures
from lab.lm.aggregate import (
    Cell,
    cell,
    corpus_parts,
    length_labels,
    length_row,
    loss_family,
    ratio,
    window_p_values,
)
from lab.lm.findings import lm_findings
from lab.lm.record import MIN_INTERVAL_WINDOWS
from lab.reporting.aggregate import groups, tasks
from lab.reporting.tables import DASH, format_table
from lab.stats.seed_stats import ALPHA, Paired
from lab.stats.verdicts import SMOKE_NOTE

Result = dict[str, Any]
KEYS = ("lm_csv", "lm_json", "lm_markdown")
"""The keys :func:`write_lm_reports` returns for the first three of
:data:`lab.common.outputs.LM_REPORT_NAMES`, the files it writes into its folder."""
LM_CSV_COLUMNS = (
    "position",
    "task",
    "seed",
    "length",
    "label",
    "multiple",
    "perplexity",
    "perplexity_low",
    "perplexity_high",
    "loss",
    "windows",
    "tokens_scored",
    "supported",
    "run",
)
"""Columns of ``lm_results.csv``: the run's scheme (``position``), task and seed, then the fields
of one ``lengths`` row of its ``eval.json``, then the run's folder."""


def lm_csv_rows(results: list[Result], out_dir: str | Path | None = None) -> list[dict]:
    """Rows of ``lm_results.csv``: one per run x evaluation length, columns
    :data:`LM_CSV_COLUMNS` (``""`` for a number a length it cannot encode lacks)."""
    rows = []
    for r in ordered(results):
        for length in r["lengths"]:
            row = {"position": r["position"], "task": r["task"], "seed": r["seed"]}
            row |= {key: length[key] for key in LM_CSV_COLUMNS[3:-1]}
            row["run"] = run_label(r, out_dir)
            rows.append({k: "" if v is None else v for k, v in row.items()})
    return rows


def ppl_cell(value: Cell) -> str:
    """``'5.45 [5.31, 5.60]'``, ``'5.45 [n/a: too few windows]'`` (one run scored on fewer
    than :data:`lab.lm.record.MIN_INTERVAL_WINDOWS` windows), ``'5.45'`` (another cell without
    an interval) or ``'n/a (reason)'``."""
    if value.mean is None:
        return f"n/a ({value.reason})"
    if value.interval == "bootstrap" and value.low is None:
        return f"{value.mean:.2f} [n/a: too few windows]"
    if value.low is None or value.high is None:
        return f"{value.mean:.2f}"
    return f"{value.mean:.2f} [{value.low:.2f}, {value.high:.2f}]"


def perplexity_table(results: list[Result], task: str) -> str:
    """Per scheme: its trainable parameters (:func:`lab.evaluation.size.parameters_cell`), the
    seeds, and the perplexity at every evaluation length (mean over seeds with its 95%
    interval, :func:`lab.lm.aggregate.cell`)."""
    labels = length_labels(results)
    rows = [
        [scheme, parameters_cell(runs), str(len(runs))]
        + [ppl_cell(cell(runs, label)) for label in labels]
        for scheme, runs in groups(results, task).items()
    ]
    return format_table(["scheme", "parameters", "seeds", *labels], rows)


def ratio_table(results: list[Result], task: str) -> str:
    """Per scheme: mean perplexity at every length over mean perplexity at 1x."""
    labels = length_labels(results)
    rows = []
    for scheme, runs in groups(results, task).items():
        values = [ratio(runs, label) for label in labels]
        rows.append([scheme, *(DASH if v is None else f"{v:.2f}" for v in values)])
    return format_table(["scheme", *labels], rows)


def _p(values: tuple[float, ...]) -> str:
    return ", ".join(f"{p:.1e}" for p in values)


def _seed_interval(test: Paired) -> str:
    return DASH if test.low is None else f"[{test.low:+.3f}, {test.high:+.3f}]"


def paired_rows(results: list[Result], task: str) -> list[list[str]]:
    """Every pair of schemes at every length both can encode: their perplexities, the mean
    loss difference over seeds with its 95% t-interval, the paired t and sign-flip p-values,
    Holm's adjusted p over the table (:func:`lab.lm.aggregate.loss_family`), whether it is
    significant, and the per-checkpoint Wilcoxon p per seed (these runs' windows only)."""
    runs = groups(results, task)
    rows = []
    for label, a, b, test, holm_p in loss_family(runs, length_labels(results)):
        p_t = DASH if test.p_t is None else f"{test.p_t:.2g}"
        rows.append(
            [label, f"{a} vs {b}", ppl_cell(cell(runs[a], label)), ppl_cell(cell(runs[b], label))]
            + [f"{test.mean:+.3f}", _seed_interval(test), str(test.n), p_t]
            + [f"{test.p_sign_flip:.2g}", f"{holm_p:.2g}", "yes" if holm_p < ALPHA else "no"]
            + [_p(window_p_values(runs[a], runs[b], label))]
        )
    return rows


PAIRED_HEADERS = ["length", "A vs B", "perplexity A", "perplexity B", "loss A - B (nats)"]
PAIRED_HEADERS += ["95% t over seeds", "seeds", "t p", "sign-flip p", "Holm p", "significant"]
PAIRED_HEADERS += ["per-checkpoint Wilcoxon p per seed"]


def paired_table(results: list[Result], task: str) -> str:
    """The paired tests of :func:`paired_rows` as a Markdown table (a line when there are none)."""
    rows = paired_rows(results, task)
    if rows:
        return format_table(PAIRED_HEADERS, rows)
    if len(groups(results, task)) < 2:
        return "One scheme only: no pair to test."
    return "No two schemes share a seed."


def lm_summary_table(results: list[Result], out_dir: str | Path | None = None) -> str:
    """One row per LM run: run, scheme, task, seed, training steps and its perplexity at every
    evaluation length (columns ``perplexity LENGTH``; ``n/a`` where it cannot encode it)."""
    labels = length_labels(results)
    rows = []
    for r in ordered(results):
        cells = []
        for label in labels:
            row = length_row(r, label)
            supported = row is not None and row["supported"]
            cells.append(f"{row['perplexity']:.2f}" if supported else "n/a")
        steps = DASH if r.get("train_steps") is None else str(r["train_steps"])
        rows.append([run_label(r, out_dir), scheme_label(r), r["task"], str(r["seed"]), steps])
        rows[-1] += cells
    units = [f"perplexity {label}" for label in labels]
    return format_table(["run", "scheme", "task", "seed", "steps", *units], rows)


def corpus_lines(results: list[Result]) -> list[str]:
    """One Markdown bullet per corpus and evaluation setting the runs used: its source, sha256,
    Python version, files, held-out tokens, tokens scored per length and windows."""
    lines: dict[str, None] = {}
    for r in results:
        corpus, first = r["corpus"], r["lengths"][0]
        python = f", Python {corpus['python']}" if corpus.get("python") else ""
        cut = f"sliding windows, stride {r['stride']}" if r["stride"] else "non-overlapping windows"
        train, heldout = corpus["files"]
        line = (
            f"- {r['task']}: {corpus['source']} (sha256 {corpus['sha256'][:12]}{python}; "
            f"{train} training and {heldout} held-out files, {corpus['heldout_tokens']:,} "
            f"held-out tokens); trained at {r['train_lengths'][1]} tokens; every length scores "
            f"the same first {first['tokens_scored']:,} held-out tokens in {cut}"
        )
        lines[line] = None
    return list(lines)


EXPLAINED = (
    "Perplexity is exp(mean loss per token, nats) on held-out text; a cell is the mean over "
    "seeds with its 95% t-interval over seeds, or for a single run its 95% bootstrap interval "
    f"over windows (none below {MIN_INTERVAL_WINDOWS} windows: `[n/a: too few windows]`); "
    "`n/a` names why a scheme cannot encode a length. Paired tests: the seed is "
    "the unit of evidence. `loss A - B` is the mean over seeds of the per-seed difference in "
    "mean loss (negative: A is better), with its 95% t-interval; significant when both the "
    "paired t-test and the exact sign-flip test reject after Holm's correction over every "
    "comparison of the table (below 6 seeds the sign-flip test cannot reject, so nothing is). "
    "The Wilcoxon signed-rank p per seed, on the same held-out windows, describes how surely "
    "two checkpoints differ on these windows, not the schemes. Only runs of one corpus (the "
    "same sha256) are pooled or paired: runs of another corpus get a section of their own."
)


def apart_line(task: str, count: int) -> str:
    """The line that opens each part of a task whose runs fall into ``count`` parts
    (:func:`lab.lm.aggregate.corpus_parts`)."""
    return (
        f"The {task} runs fall into {count} parts (another corpus or held-out split: other "
        "held-out windows; another training length: other lengths), so each part is reported "
        "apart: no run is pooled or paired with a run of another."
    )


def task_section(
    results: list[Result], task: str, smoke: bool = False, title: str | None = None
) -> list[str]:
    """The lines of one task (headed ``title``, default the task; ``results``: the runs of
    one part, :func:`lab.lm.aggregate.corpus_parts`): perplexity table, ratio table, paired
    tests and findings (for a ``smoke`` sweep the tables alone)."""
    runs = [r for r in results if r["task"] == task]
    train = max(r["train_lengths"][1] for r in runs)
    title = title or task
    tables = [
        f"## {title}: perplexity at multiples of the training length ({train} tokens)",
        "",
        perplexity_table(runs, task),
        "",
        f"### {title}: perplexity over its value at 1x",
        "",
        ratio_table(runs, task),
        "",
    ]
    if smoke:
        return tables
    return [
        *tables,
        f"### {title}: paired tests between schemes",
        "",
        paired_table(runs, task),
        "",
        f"### {title}: findings against the literature",
        "",
        *lm_findings(runs),
        "",
    ]


def lm_markdown(
    results: list[Result], out_dir: str | Path | None = None, smoke: bool = False
) -> str:
    """``lm_report.md``: corpus and settings, per task the tables and findings, the figures and
    one row per run; a ``smoke`` report has :data:`lab.stats.verdicts.SMOKE_NOTE` instead of
    tests and findings."""
    results = ordered(results)
    seeds = ", ".join(str(s) for s in sorted({r["seed"] for r in results}))
    lines = ["# Language-model report", "", f"{len(results)} run(s), seed(s) {seeds}.", ""]
    lines += [SMOKE_NOTE, ""] if smoke else []
    lines += [*corpus_lines(results), "", EXPLAINED, ""]
    for task in tasks(results):
        parts = corpus_parts(results, task)
        for title, runs in parts:
            lines += [apart_line(task, len(parts)), ""] if len(parts) > 1 else []
            lines += task_section(runs, task, smoke, title)
    lines += ["![perplexity against evaluation length](perplexity_vs_length.png)", ""]
    lines += ["![mean loss against token position](loss_vs_position.png)", ""]
    lines += ["## Runs", "", lm_summary_table(results, out_dir), ""]
    return "\n".join(lines)


def write_lm_reports(
    results: list[Result], out_dir: str | Path, smoke: bool = False
) -> dict[str, Path]:
    """Write the LM report files (:data:`LM_REPORT_NAMES`) of ``results`` into ``out_dir``.

    Args:
        results: LM ``eval.json`` dicts (``kind == "lm"``), at least one.
        out_dir: destination folder (created if needed).
        smoke: a smoke sweep's runs (:func:`lm_markdown`).

    Returns:
        ``{"lm_csv", "lm_json", "lm_markdown", "perplexity_plot", "position_plot"}`` -> path.

    Raises:
        ValueError: no results, a record that is not an LM one, or two runs of one seed that
            scored different held-out windows (they cannot be paired).
        IsADirectoryError: a folder stands where a report file goes (checked first).
    """
    if not results or any(r.get("kind") != "lm" for r in results):
        raise ValueError("write_lm_reports needs LM eval.json dicts (kind 'lm'), at least one")
    out = Path(out_dir)
    check_not_folders(out, LM_REPORT_NAMES)
    out.mkdir(parents=True, exist_ok=True)
    results = ordered(results)
    markdown = lm_markdown(results, out, smoke)  # first: the paired tests check the windows
    paths = {key: out / name for key, name in zip(KEYS, LM_REPORT_NAMES[:3], strict=True)}
    with atomic_writer(paths["lm_csv"], "w") as file:
        writer = csv.DictWriter(file, fieldnames=LM_CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(lm_csv_rows(results, out))
    atomic_write(paths["lm_json"], json.dumps(results, indent=2, allow_nan=False) + "\n")
    perplexity_png, position_png = LM_REPORT_NAMES[3:]
    paths["perplexity_plot"] = figures.save(
        figures.perplexity_figure(results), out / perplexity_png
    )
    paths["position_plot"] = figures.save(figures.position_figure(results), out / position_png)
    atomic_write(paths["lm_markdown"], markdown)
    return paths
