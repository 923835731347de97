"""Markdown tables and CSV rows of evaluation results: one row per run, one row per length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.diagnostics.columns import DIAGNOSTIC_COLUMNS, diagnostic_fields
from lab.evaluation.labels import ordered, run_label, scheme_label
from lab.evaluation.learned import is_learned
from model.layout import layout_label
from registry import describe

DASH = "—"


CSV_COLUMNS = (
    "run",
    "position",
    "task",
    "seed",
    "length",
    "tokens",
    "supported",
    "exact_match",
    "exact_match_low",
    "exact_match_high",
    "token_accuracy",
    "pair_accuracy",
    "learned",
    *DIAGNOSTIC_COLUMNS,
)


def percent(value: float | None) -> str:
    """``0.973 -> '97.3%'``; None gives a dash."""
    return DASH if value is None else f"{100 * value:.1f}%"


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table with padded columns (readable as plain text too); no ``rows`` gives the
    header alone (the caller says why the table is empty)."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = [headers, ["-" * w for w in widths], *rows]
    return "\n".join(
        "| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |"
        for line in lines
    )


SUMMARY_MULTIPLES = ("1.25x", "1.5x", "2x", "4x")


SUMMARY_HEADERS = ["in-distribution", *SUMMARY_MULTIPLES, "pairs in-dist", "order-blind"]


def _figures(result: dict[str, Any]) -> list[str]:
    summary, low, high = result["summary"], *result["train_lengths"]
    pairs = [
        row["pair_accuracy"]
        for row in result["lengths"]
        if low <= row["length"] <= high and row["length"] in result["grid_lengths"]
    ]
    blind = result["order"]["order_blind"]
    return [
        percent(summary["in_dist"]),
        *(percent(summary["at"].get(label)) for label in SUMMARY_MULTIPLES),
        percent(sum(pairs) / len(pairs)) if pairs and None not in pairs else DASH,
        DASH if blind is None else ("yes" if blind else "no"),
    ]


def summary_table(results: list[dict[str, Any]], out_dir: str | Path | None = None) -> str:
    """One row per run: run, scheme, task, seed, exact-match in distribution and at 1.25x,
    1.5x, 2x and 4x the longest training length, minimal pairs in distribution, order-blind,
    the optimizer steps it trained, and whether it learned (:mod:`lab.evaluation.learned`; ``no``
    runs are left out of the sweep's means, tests and findings)."""
    rows = [
        [run_label(r, out_dir), scheme_label(r), r["task"], str(r["seed"]), *_figures(r)]
        + [DASH if r.get("train_steps") is None else str(r["train_steps"])]
        + ["yes" if is_learned(r) else "no"]
        for r in ordered(results)
    ]
    headers = ["run", "scheme", "task", "seed", *SUMMARY_HEADERS, "steps", "learned"]
    return format_table(headers, rows)


def length_table(result: dict[str, Any]) -> str:
    """One row per evaluated length of one run, with the 95% Wilson interval."""
    low, high = result["train_lengths"]
    rows = []
    for r in result["lengths"]:
        interval = DASH
        if r["supported"]:
            interval = f"{percent(r['exact_match_low'])} .. {percent(r['exact_match_high'])}"
        note = "training range" if low <= r["length"] <= high else ""
        note = note if r["supported"] else f"unsupported: {r['reason']}"
        rows.append(
            [str(r["length"]), str(r["tokens"]), percent(r["exact_match"]), interval]
            + [percent(r["token_accuracy"]), percent(r["pair_accuracy"]), note]
        )
    headers = ["length", "tokens", "exact-match", "95% interval", "token accuracy", "pairs"]
    headers.append("note")
    return format_table(headers, rows)


def csv_rows(results: list[dict[str, Any]], out_dir: str | Path | None = None) -> list[dict]:
    """Rows of ``results.csv``: one per run x length, columns :data:`CSV_COLUMNS` (``learned``:
    the run counts as learned, :func:`lab.evaluation.learned.is_learned`; then the diagnostics,
    :func:`lab.diagnostics.columns.diagnostic_fields`)."""
    rows = []
    for r in results:
        for length in r["lengths"]:
            scheme = layout_label(r["config"]["model"]) or r["position"]  # what the model runs
            row = {"run": run_label(r, out_dir), "position": scheme, "task": r["task"]}
            row["seed"] = r["seed"]
            row.update({k: length[k] for k in CSV_COLUMNS[4 : CSV_COLUMNS.index("learned")]})
            row["learned"] = is_learned(r)
            row.update(diagnostic_fields(r, length))
            rows.append({k: "" if v is None else v for k, v in row.items()})
    return rows


def task_options(results: list[dict[str, Any]]) -> list[str]:
    """One Markdown bullet per task and options: the options and training lengths its runs
    used, e.g. ``- copy: copy(n_symbols=16), trained on lengths 2..10``."""
    lines = {}
    for r in results:
        data = r["config"]["data"]
        options = describe(r["task"], data.get("options", {}).get(r["task"], {}))
        low, high = r["train_lengths"]
        lines[f"- {r['task']}: {options}, trained on lengths {low}..{high}"] = None
    return list(lines)


def position_options(results: list[dict[str, Any]], out_dir: str | Path) -> list[str]:
    """One Markdown bullet per run: its scheme's options as trained, and any evaluation-time
    overrides, e.g. ``- rope-svo-seed0: rope(theta=10000.0, rotary_fraction=1.0)``."""
    lines = []
    for r in results:
        model, position = r["config"]["model"], r["position"]
        trained = describe(position, model.get("options", {}).get(position, {}))
        randomized = model.get("randomized_positions")
        wrapped = f"randomized({trained}, L={randomized})" if randomized else trained
        overrides = r["config"]["eval"].get("position_options")
        at_eval = f"; evaluated with {overrides}" if overrides else ""
        lines.append(f"- {run_label(r, out_dir)}: {wrapped}{at_eval}")
    return lines
