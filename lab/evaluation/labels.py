"""How a run is named in every table, legend and TensorBoard run: its folder, its scheme with the
task and evaluation-time options that differ from the defaults, and the order runs are listed in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data import available_tasks, task_class
from lab.common.config import migrate_data_keys
from model.layout import layout_label
from model.position import available_schemes
from registry import options_dict


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
    """The position scheme (a hybrid layout or sliding window as :func:`model.layout.describe`
    writes it, e.g. ``rope*3,none``), marked ``(bidirectional)`` for non-causal models and
    ``(randomized eval)`` for a model trained to be evaluated on random positions
    (``model.randomized_eval``) and ``(logn)`` or ``(ssmax)`` for a length-aware softmax
    (``model.softmax_scale``), with its :func:`task_options_label` and
    :func:`evaluation_label`."""
    model = result["config"]["model"]
    causal = model.get("causal", True)
    scheme = layout_label(model) or result["position"]
    marked = scheme + ("" if causal else " (bidirectional)")
    marked += " (randomized eval)" if model.get("randomized_eval") else ""
    scale = model.get("softmax_scale", "none")
    marked += "" if scale == "none" else f" ({scale})"
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


def ordered(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results sorted by task, then scheme (in registration order: none, learned, sinusoidal,
    rope, alibi; a hybrid layout after its ``model.position``), then seed, so every report lists
    runs the same way."""
    order = {name: i for i, name in enumerate(available_schemes())}
    return sorted(
        results,
        key=lambda r: (
            r["task"],
            order.get(r["position"], len(order)),
            r["position"],
            layout_label(r["config"]["model"]) or "",
            evaluation_label(r),
            r["seed"],
        ),
    )


NOT_A_SETTING = (
    "seed",
    "run_dir",
    "log_dir",
    "device",
    "threads",
    "train.progress",
    "train.log_every",
    "train.checkpoint_every",
    "train.extrapolation_every",
)
"""Dotted config keys in which runs of one arm may differ: its seeds, where each run was
written and shown (and how often it logged 2x and 4x), and what it ran on (the machine is
recorded apart, ``machine``)."""


def flat_settings(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A saved run config as dotted key -> its value as text (nested sections flattened),
    without :data:`NOT_A_SETTING`."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        if f"{prefix}{key}" in NOT_A_SETTING:
            continue
        if isinstance(value, dict):
            flat |= flat_settings(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = str(value)
    return flat


def split_by_settings(label: str, runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The runs one label names, split into arms when their configs differ in more than the
    seed and folder (a grid over a scheme option, an extend study's parent and children):
    ``label`` -> ``runs`` when they agree, else ``"LABEL {KEY=VALUE, ...}"`` -> the runs of
    each combination, naming the settings that differ by their last dotted part. Two models
    of one seed are never pooled as two seeds."""
    flat = [flat_settings(r["config"]) for r in runs]
    keys = sorted({k for f in flat for k in f if len({g.get(k) for g in flat}) > 1})
    if not keys:
        return {label: runs}
    arms: dict[str, list[dict[str, Any]]] = {}
    for run, settings in zip(runs, flat, strict=True):
        named = ", ".join(f"{k.rsplit('.', 1)[-1]}={settings.get(k)}" for k in keys)
        arms.setdefault(f"{label} {{{named}}}", []).append(run)
    return arms


def one_run_twice(runs: list[dict[str, Any]]) -> tuple[int, int] | None:
    """The indices ``(i, j)`` of the first two ``eval.json`` dicts of ``runs`` that are one run:
    the same scheme, task and seed with the same settings (:func:`flat_settings`, the
    evaluation's included), written in two places (a run folder copied, or a child extended
    twice alike), which a table would count as two seeds; None when there are none."""
    seen: dict[str, int] = {}
    for j, run in enumerate(runs):
        named = [run["position"], run["task"], run["seed"], flat_settings(run["config"])]
        key = json.dumps(named, sort_keys=True, default=str)
        if key in seen:
            return seen[key], j
        seen[key] = j
    return None
