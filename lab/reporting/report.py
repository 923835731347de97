"""Evaluation outputs: the ``eval.json`` schema, per-run files and cross-run reports.

Per run (:func:`write_eval_json`, :func:`write_tensorboard`): ``RUN_DIR/eval.json`` and the
TensorBoard scalars ``by_length_set_smoothing_0/exact_match`` and ``.../token_accuracy`` whose
step is the length, the figure ``figures/accuracy_vs_length`` and the ``headline/*`` metrics.
Across runs (:func:`write_reports`): ``results.csv`` (one row per run x length),
``results.json`` (the list of ``eval.json`` dicts), ``report.md`` (a table per run and, when
seeds repeat, means over seeds) and ``accuracy_vs_length.png``.
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from data import available_tasks, task_class
from lab.common.config import migrate_data_keys
from lab.common.files import atomic_write, atomic_writer, check_not_folders
from lab.common.stats import t_interval
from lab.common.tb_tags import LENGTH_COMPARE, LENGTH_CURVES, RUN_FIGURE
from lab.evaluation.learned import is_learned
from model.position import available_schemes
from model.position.options import describe, options_dict

SCHEMA_VERSION = 2
EVAL_NAME = "eval.json"
DASH = "—"

_FRACTION_OR_NULL = {"type": ["number", "null"], "minimum": 0, "maximum": 1}
_LENGTH = {"type": "integer", "minimum": 1}
_LENGTH_RESULT = {
    "type": "object",
    "required": [
        "length",
        "tokens",
        "samples",
        "exact_match",
        "exact_match_low",
        "exact_match_high",
        "token_accuracy",
        "supported",
        "reason",
        "correct",
        "pairs",
        "pair_accuracy",
    ],
    "additionalProperties": False,
    "properties": {
        "length": _LENGTH,
        "tokens": _LENGTH,
        "samples": {"type": "integer", "minimum": 0},
        "exact_match": _FRACTION_OR_NULL,
        "exact_match_low": _FRACTION_OR_NULL,
        "exact_match_high": _FRACTION_OR_NULL,
        "token_accuracy": _FRACTION_OR_NULL,
        "supported": {"type": "boolean"},
        "reason": {"type": ["string", "null"]},
        "correct": {"type": ["string", "null"], "pattern": "^[01]*$"},
        "pairs": {"type": "integer", "minimum": 0},
        "pair_accuracy": _FRACTION_OR_NULL,
    },
}
_SUMMARY = {
    "type": "object",
    "required": ["in_dist", "at", "notes"],
    "additionalProperties": False,
    "properties": {
        "in_dist": _FRACTION_OR_NULL,
        "at": {"type": "object", "additionalProperties": _FRACTION_OR_NULL},
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}
_ORDER = {
    "type": "object",
    "required": [
        "permutation_tvd",
        "permutation_argmax_changed",
        "order_blind",
        "probe_length",
        "probe_samples",
    ],
    "additionalProperties": False,
    "properties": {
        "permutation_tvd": _FRACTION_OR_NULL,
        "permutation_argmax_changed": _FRACTION_OR_NULL,
        "order_blind": {"type": ["boolean", "null"]},
        "probe_length": _LENGTH,
        "probe_samples": _LENGTH,
    },
}
_CHECKPOINT = {
    "type": ["object", "null"],
    "required": ["run", "step", "sha256"],
    "additionalProperties": False,
    "properties": {
        "run": {"type": "string"},
        "step": {"type": ["integer", "null"], "minimum": 0},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    },
}
"""The evaluated run's identity: its folder's name, the checkpoint's step and the SHA-256 of
its bytes (null for a model evaluated outside a run); a report checks it against the folder."""
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "eval.json: length extrapolation and order sensitivity of one run",
    "type": "object",
    "required": [
        "schema_version",
        "run_dir",
        "config",
        "position",
        "task",
        "seed",
        "train_lengths",
        "grid_lengths",
        "lengths",
        "summary",
        "order",
        "train_steps",
        "eval_seconds",
        "checkpoint",
        "machine",
    ],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "run_dir": {"type": ["string", "null"]},
        "config": {"type": "object", "required": ["model", "data", "train", "eval", "seed"]},
        "position": {"type": "string"},
        "task": {"type": "string"},
        "seed": {"type": "integer"},
        "train_lengths": {"type": "array", "items": _LENGTH, "minItems": 2, "maxItems": 2},
        "grid_lengths": {"type": "array", "items": _LENGTH, "minItems": 1},
        "lengths": {"type": "array", "items": _LENGTH_RESULT, "minItems": 1},
        "summary": _SUMMARY,
        "order": _ORDER,
        "train_steps": {"type": ["integer", "null"], "minimum": 0},
        "reached_target": {"type": ["boolean", "null"]},
        "eval_seconds": {"type": "number", "minimum": 0},
        "checkpoint": _CHECKPOINT,
        "machine": {
            "type": "object",
            "required": ["cpu", "torch", "blas"],
            "description": "where it was evaluated (lab.common.machine.machine_info): "
            "bit-identical results need the same CPU model, torch build and numeric settings",
        },
    },
}
"""JSON Schema (draft 2020-12) of ``eval.json``, the dict
:func:`lab.evaluation.evaluate.evaluate_run`
returns. ``reached_target`` (optional, so files written before it still load): the training
met ``train.target_accuracy`` at every training length (the checkpoint's record); null for a
run without a target or an older checkpoint. Whether a run counts as learned is decided from
it and ``summary.in_dist`` by :func:`lab.evaluation.learned.not_learned_reason`."""


def inconsistency(result: dict[str, Any]) -> str | None:
    """What makes a schema-valid ``eval.json`` dict (:data:`SCHEMA`) unusable, in a few words, or
    None: a NaN or infinite number (JSON readers accept them), a scheme, task, seed or training
    range other than its own ``config``'s (a hand-edited file would put the run in another
    row), lengths not strictly increasing,
    a grid length that was not evaluated, a training range whose ends are swapped, an evaluated
    length without its figures or with figures that disagree (a Wilson interval not around its
    exact-match, a ``correct`` string not one character per sample or not giving the
    exact-match, pair accuracy without pairs), a figure at a multiple of the longest training
    length (``summary.at``) that is not that length's, or an in-distribution figure that is not
    the mean over the grid lengths in the training range. Reports draw error bars and pair
    sequences from these fields, so each one would otherwise be a traceback on every re-run.
    """
    bad = _non_finite(result)
    if bad:
        return f"{bad} is not a finite number"
    lengths = [row["length"] for row in result["lengths"]]
    if lengths != sorted(set(lengths)):
        return f"lengths {lengths} are not strictly increasing"
    grid = result["grid_lengths"]
    if grid != sorted(set(grid)) or not set(grid) <= set(lengths):
        return f"grid_lengths {grid} are not increasing lengths among those evaluated"
    low, high = result["train_lengths"]
    if low > high:
        return f"train_lengths {[low, high]} are not a range"
    config = result["config"]
    model, data = (v if isinstance(v, dict) else {} for v in (config["model"], config["data"]))
    recorded = {  # what the file says at its top level -> what its own run config says
        "position": model.get("position", result["position"]),
        "task": data.get("task", result["task"]),
        "seed": config["seed"],
    }
    for key, value in recorded.items():
        if result[key] != value:
            return f"{key} {result[key]!r} is not its config's {value!r}"
    ends = [data.get("train_min_length") or low, data.get("train_max_length") or high]
    if ends != [low, high]:
        return f"train_lengths {[low, high]} are not its config's {ends}"
    for row in result["lengths"]:
        problem = _row_inconsistency(row)
        if problem:
            return f"length {row['length']}: {problem}"
    factor = (config["eval"] if isinstance(config["eval"], dict) else {}).get("max_length_factor")
    if isinstance(factor, (int, float)):
        from lab.evaluation.extrapolation import multiple_lengths

        rows = {row["length"]: row for row in result["lengths"]}
        at = result["summary"]["at"]
        for label, length in multiple_lengths(high, factor).items():
            row = rows.get(length, {"supported": False})
            value = row["exact_match"] if row["supported"] else None
            if label not in at or at[label] != value:
                return f"summary.at[{label!r}]={at.get(label)} is not the exact-match at {length}"
    inside = [row for row in result["lengths"] if row["length"] in grid and low <= row["length"]]
    inside = [row for row in inside if row["length"] <= high]
    in_dist = result["summary"]["in_dist"]
    if in_dist is not None:
        values = [row["exact_match"] for row in inside]
        if None in values or not values or abs(sum(values) / len(values) - in_dist) > 1e-9:
            return f"summary.in_dist={in_dist} is not the mean over the training range"
    return None


def _row_inconsistency(row: dict[str, Any]) -> str | None:
    """What is wrong with one ``lengths`` entry (see :func:`inconsistency`), or None."""
    figures = [row[k] for k in ("exact_match", "exact_match_low", "exact_match_high")]
    if not row["supported"]:
        return None if figures == [None] * 3 else "unsupported, yet it has figures"
    if None in figures or row["token_accuracy"] is None or row["samples"] < 1:
        return "supported, yet a figure or its samples are missing"
    exact, lowest, highest = figures
    if not lowest <= exact <= highest:
        return f"exact_match {exact} lies outside its interval [{lowest}, {highest}]"
    correct = row["correct"]
    if correct is not None and len(correct) != row["samples"]:
        return f"'correct' has {len(correct)} results for {row['samples']} samples"
    if correct is not None and abs(correct.count("1") / len(correct) - exact) > 1e-9:
        return f"'correct' gives {correct.count('1') / len(correct)}, not exact_match {exact}"
    if row["pair_accuracy"] is not None and row["pairs"] < 1:
        return "pair_accuracy without pairs"
    return None


def _non_finite(value: Any, where: str = "") -> str | None:
    """The dotted place of the first NaN or infinite float in ``value`` (nested dicts and
    lists), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "a value"
    if isinstance(value, (dict, list)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            found = _non_finite(item, f"{where}.{key}" if where else str(key))
            if found:
                return found
    return None


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
)


def write_eval_json(result: dict[str, Any], run_dir: str | Path) -> Path:
    """Write ``result`` to ``RUN_DIR/eval.json`` (strict JSON: no NaN); returns the path."""
    return atomic_write(
        Path(run_dir) / EVAL_NAME, json.dumps(result, indent=2, allow_nan=False) + "\n"
    )


EVAL_EVENTS = ".extrapolation"
"""Suffix of the TensorBoard event file that ``eval.py`` writes into a run folder."""


def write_tensorboard(result: dict[str, Any], run_dir: str | Path) -> None:
    """Log one evaluation into ``run_dir``'s TensorBoard run, replacing an earlier one.

    - ``by_length_set_smoothing_0/exact_match`` and ``.../token_accuracy`` (step = length,
      supported lengths), mirrored as ``compare/TASK/exact_match_by_length_set_smoothing_0``
      for the task's Custom Scalars group (:mod:`lab.common.tb_tags`: the name says smoothing must
      be 0, since the step is a length);
    - the same curve as a figure, ``figures/accuracy_vs_length`` (Images tab; no smoothing);
    - the test-set ``headline/*`` metrics of the HParams tab (:func:`headline_scalars`).
    """
    from torch.utils.tensorboard import SummaryWriter  # slow import, only when needed

    for old in Path(run_dir).glob(f"events.out.tfevents.*{EVAL_EVENTS}"):
        old.unlink()  # the latest evaluation replaces earlier ones instead of merging with them
    writer = SummaryWriter(str(run_dir), filename_suffix=EVAL_EVENTS)
    compare = f"compare/{result['task']}/{LENGTH_COMPARE}"  # lab.training.run_logs' layout
    for row in result["lengths"]:
        if row["supported"]:
            writer.add_scalar(f"{LENGTH_CURVES}/exact_match", row["exact_match"], row["length"])
            writer.add_scalar(
                f"{LENGTH_CURVES}/token_accuracy", row["token_accuracy"], row["length"]
            )
            writer.add_scalar(compare, row["exact_match"], row["length"])
    if any(row["supported"] for row in result["lengths"]):
        figure = plot_accuracy_vs_length([result], None)
        figure.suptitle(f"{run_label(result)}: {scheme_label(result)} on {result['task']}")
        writer.add_figure(RUN_FIGURE, figure, result.get("train_steps") or 0, close=False)
    for tag, value in headline_scalars(result).items():
        writer.add_scalar(tag, value, 0)
    writer.close()


def headline_scalars(result: dict[str, Any]) -> dict[str, float]:
    """The ``headline/*`` metrics of the HParams tab (:data:`lab.training.run_logs.HEADLINE`) that
    this
    evaluation has: exact-match in distribution and at 1.25x, 1.5x, 2x, 4x, minimal pairs in
    distribution, permutation TVD (test set), and ``reached_target`` (1 or 0) when
    ``eval.json`` records whether the training reached its target."""
    from lab.reporting.aggregate import pair_values

    summary = result["summary"]
    values = {"headline/exact_match_in_dist": summary.get("in_dist")}
    for label in ("1.25x", "1.5x", "2x", "4x"):
        values[f"headline/exact_match_{label}"] = summary["at"].get(label)
    values["headline/pair_accuracy_in_dist"] = pair_values([result], "in_dist")[0]
    values["headline/permutation_tvd"] = result.get("order", {}).get("permutation_tvd")
    reached = result.get("reached_target")  # set by the training, when it records it
    values["headline/reached_target"] = None if reached is None else float(reached)
    return {tag: value for tag, value in values.items() if value is not None}


def evaluation_label(result: dict[str, Any]) -> str:
    """The evaluation-time position options, e.g. ``" [scaling=yarn, scaling_factor=4]"``, or
    ``""`` when the run was evaluated as trained; one trained run evaluated several ways gets
    one label (one line, one group) per setting."""
    overrides = result["config"]["eval"].get("position_options") or {}
    inner = ", ".join(f"{key}={value}" for key, value in overrides.items())
    return f" [{inner}]" if inner else ""


def task_options_label(result: dict[str, Any]) -> str:
    """The run's task options that differ from the task's defaults, e.g.
    ``" {scratchpad=False}"``, or ``""``: runs of one task with other options (another task, in
    effect) are never pooled as seeds of one group, nor compared as schemes."""
    saved = result["config"].get("data")
    if not saved or result["task"] not in available_tasks():
        return ""  # a hand-made result without its data section
    return changed_task_options(saved)


def changed_task_options(data: dict[str, Any]) -> str:
    """``" {scratchpad=False}"``: the options of a saved ``data`` section's task that differ
    from the task's defaults, or ``""``. A section saved before an option existed reads as the
    value it had then (:func:`lab.common.config.migrate_data_keys`)."""
    data = migrate_data_keys(data)
    task = data.get("task", "svo")
    defaults = options_dict(task_class(task).Options())
    options = (data.get("options") or {}).get(task) or {}
    changed = [f"{key}={value}" for key, value in options.items() if defaults.get(key) != value]
    return " {" + ", ".join(changed) + "}" if changed else ""


def scheme_label(result: dict[str, Any]) -> str:
    """The position scheme, marked ``(bidirectional)`` for non-causal models, with its
    :func:`task_options_label` and :func:`evaluation_label`."""
    causal = result["config"]["model"].get("causal", True)
    marked = result["position"] + ("" if causal else " (bidirectional)")
    return marked + task_options_label(result) + evaluation_label(result)


def run_label(result: dict[str, Any], out_dir: str | Path | None = None) -> str:
    """The run folder relative to ``out_dir`` when inside it, else its name, with its
    :func:`evaluation_label`."""
    run = Path(result["run_dir"] or "model")
    label = run.name
    if out_dir is not None:
        try:
            relative = run.resolve().relative_to(Path(out_dir).resolve())
            if relative.parts:
                label = relative.as_posix()
        except ValueError:
            pass
    return label + evaluation_label(result)


def percent(value: float | None) -> str:
    """``0.973 -> '97.3%'``; None gives a dash."""
    return DASH if value is None else f"{100 * value:.1f}%"


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table with padded columns (readable as plain text too)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
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
    runs
    are left out of the sweep's means, tests and findings)."""
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
    the run counts as learned, :func:`lab.evaluation.learned.is_learned`)."""
    rows = []
    for r in results:
        for length in r["lengths"]:
            row = {"run": run_label(r, out_dir), "position": r["position"], "task": r["task"]}
            row["seed"] = r["seed"]
            row.update({k: length[k] for k in CSV_COLUMNS[4:-1]})
            row["learned"] = is_learned(r)
            rows.append({k: "" if v is None else v for k, v in row.items()})
    return rows


PANELS_PER_ROW = 4
"""Task panels per row of the accuracy-against-length figure."""


def _not_learned_label(result: dict[str, Any]) -> str:
    """The legend label of a not-learned run's own line: ``"sinusoidal seed 2: not learned"``."""
    return f"{scheme_label(result)} seed {result['seed']}: not learned"


def _line_order(item: tuple[str, list[dict[str, Any]]], labels: list[str]) -> tuple[int, str]:
    """Sort key of a plotted line: its scheme's place in ``labels``, then its name."""
    return labels.index(scheme_label(item[1][0])), item[0]


def plot_accuracy_vs_length(results: list[dict[str, Any]], path: str | Path | None) -> Figure:
    """Exact-match against length: one panel per task, one line per scheme (mean over its
    learned seeds), and a dotted line with ``x`` markers, labelled ``not learned`` and without
    error bars, for each run that did not learn its task (:mod:`lab.evaluation.learned`).

    Error bars are the 95% Wilson interval for a single run and the 95% t-interval over seeds
    (:func:`lab.common.stats.t_interval`, clipped to [0, 1]) for several. The training range is
    shaded, and a dashed line marks the longest training length.
    Unsupported lengths are left out, so a line stops where its scheme stops.

    Returns:
        The figure (``len(figure.axes[i].containers)`` is the number of lines in panel ``i``:
        its schemes with a learned run, plus its not-learned runs);
        saved as PNG to ``path`` unless ``path`` is None.
    """
    tasks = sorted({r["task"] for r in results})
    order = {name: i for i, name in enumerate(available_schemes())}
    labels = sorted(
        {scheme_label(r) for r in results}, key=lambda s: (order.get(s.split()[0], 99), s)
    )
    colors = {label: f"C{i}" for i, label in enumerate(labels)}  # one colour per scheme, all panels
    ncols = min(len(tasks), PANELS_PER_ROW)
    nrows = -(-len(tasks) // ncols)
    figure = Figure(figsize=(6 * ncols, 4.6 * nrows), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(nrows, ncols, squeeze=False).flatten()
    for ax in axes[len(tasks) :]:  # the last row's empty cells
        figure.delaxes(ax)
    for ax, task in zip(axes, tasks, strict=False):
        runs = [r for r in results if r["task"] == task]
        lows, highs = zip(*(r["train_lengths"] for r in runs), strict=True)
        ax.axvspan(min(lows), max(highs), color="0.85", label="training range")
        for high in sorted(set(highs)):
            ax.axvline(high, color="0.4", linestyle="--", linewidth=1)
        by_scheme: dict[str, list[dict]] = defaultdict(list)
        for r in runs:  # learned runs are averaged; each not-learned run is a line of its own
            by_scheme[scheme_label(r) if is_learned(r) else _not_learned_label(r)].append(r)
        for name, group in sorted(by_scheme.items(), key=lambda item: _line_order(item, labels)):
            scheme = scheme_label(group[0])
            points: dict[int, list[dict]] = defaultdict(list)
            for r in group:
                for row in r["lengths"]:
                    if row["supported"]:
                        points[row["length"]].append(row)
            xs = sorted(points)
            means, below, above = [], [], []
            for x in xs:
                values = [p["exact_match"] for p in points[x]]
                mean = sum(values) / len(values)
                interval = t_interval(values)  # over seeds; None bounds for one run
                if interval.low is None:  # one run: its 95% Wilson interval
                    low, high = points[x][0]["exact_match_low"], points[x][0]["exact_match_high"]
                else:
                    low, high = max(0.0, interval.low), min(1.0, interval.high)
                means.append(mean)
                below.append(mean - low)
                above.append(high - mean)
            learned = is_learned(group[0])
            label = name if len(group) == 1 else f"{name} (mean of {len(group)})"
            ax.errorbar(
                xs,
                means,
                yerr=[below, above] if learned else None,
                marker="o" if learned else "x",
                linestyle="-" if learned else ":",
                capsize=3,
                label=label,
                color=colors[scheme],
            )
        ax.set(
            title=task, xlabel="length (content items)", ylabel="exact-match", ylim=(-0.02, 1.02)
        )
    handles: dict[str, Any] = {}
    for ax in figure.axes:  # one legend for all panels, below them
        handles.update(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    figure.legend(
        list(handles.values()),
        list(handles),
        loc="outside lower center",
        ncols=min(len(handles), 7),
        fontsize="small",
        title="error bars: 95% Wilson interval (one run), 95% t-interval over seeds (several)",
        title_fontsize="small",
    )
    if path is not None:
        with atomic_writer(path) as file:
            figure.savefig(file, format="png", dpi=120)
    return figure


def ordered(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results sorted by task, then scheme (in registration order: none, learned, sinusoidal,
    rope, alibi), then seed, so every report lists runs the same way."""
    order = {name: i for i, name in enumerate(available_schemes())}
    return sorted(
        results,
        key=lambda r: (
            r["task"],
            order.get(r["position"], len(order)),
            r["position"],
            evaluation_label(r),
            r["seed"],
        ),
    )


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


REPORT_NAMES = (
    "results.csv",
    "results.json",
    "report.md",
    "accuracy_vs_length.png",
    "learning_speed.png",
    "order_sensitivity.png",
)
"""The files :func:`write_reports` writes into its folder."""


def write_reports(results: list[dict[str, Any]], out_dir: str | Path) -> dict[str, Path]:
    """Write ``results.csv``, ``results.json``, ``report.md`` and ``accuracy_vs_length.png``.

    Args:
        results: ``eval.json`` dicts (from :func:`lab.evaluation.evaluate.evaluate_run`), at least
        one.
        out_dir: destination folder (created if needed).

    Returns:
        ``{"csv", "json", "markdown", "plot", "learning_speed", "order_sensitivity"}`` -> path
        written.

    Raises:
        IsADirectoryError: a folder stands where one of :data:`REPORT_NAMES` goes (checked
            before any is written).
    """
    out = Path(out_dir)
    check_not_folders(out, REPORT_NAMES)
    out.mkdir(parents=True, exist_ok=True)
    results = ordered(results)
    paths = {
        "csv": out / "results.csv",
        "json": out / "results.json",
        "markdown": out / "report.md",
        "plot": out / "accuracy_vs_length.png",
    }
    with atomic_writer(paths["csv"], "w") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(csv_rows(results, out))
    atomic_write(paths["json"], json.dumps(results, indent=2, allow_nan=False) + "\n")
    plot_accuracy_vs_length(results, paths["plot"])
    from lab.reporting import sweep_figures  # both build on this module's tables
    from lab.reporting.overview import markdown_report

    paths["learning_speed"] = sweep_figures.save(
        sweep_figures.learning_speed_figure(results), out / "learning_speed.png"
    )
    paths["order_sensitivity"] = sweep_figures.save(
        sweep_figures.order_sensitivity_figure(results), out / "order_sensitivity.png"
    )

    atomic_write(paths["markdown"], markdown_report(results, out))
    return paths
