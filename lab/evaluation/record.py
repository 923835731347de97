"""One run's evaluation record, ``RUN_DIR/eval.json``: its JSON Schema, the consistency check
applied when it is read back, the atomic writer, and lookups into it (a length's row, a
multiple's length, minimal-pair accuracy)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from lab.common.files import atomic_write
from lab.common.outputs import EVAL_NAME
from lab.common.runtime import compute_dtype
from lab.diagnostics.schema import (
    ATTENTION,
    DIAGNOSTICS,
    FAILURES,
    diagnostics_inconsistency,
)
from lab.evaluation.extrapolation import multiple_lengths

Result = dict[str, Any]

SCHEMA_VERSION = 4
"""Version of :data:`SCHEMA`. 3 added ``device``, ``dtype`` and ``config.eval.precision``; 4 the
diagnostics (``lengths[].failures``, ``lengths[].attention``, ``diagnostics``); a file
of an older version is not current (:func:`lab.evaluation.evaluate.load_evaluation` returns
None without a warning, so the run is evaluated again), and the cross-run reports, which read
only the fields every version has, still read it (a committed ``results.json`` included)."""

DTYPES = ("float32", "bfloat16")
"""Values of ``dtype``: :func:`lab.common.runtime.compute_dtype` without its ``torch.`` prefix."""


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
        "failures": {"oneOf": [{"type": "null"}, FAILURES]},
        "attention": {"oneOf": [{"type": "null"}, ATTENTION]},
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


PARENT = {
    "type": "object",
    "required": ["run", "step", "sha256"],
    "additionalProperties": False,
    "properties": {
        "run": {"type": "string"},
        "run_dir": {"type": "string"},
        "step": {"type": "integer", "minimum": 0},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "corpus_sha256": {"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$"},
        "changed": {
            "type": "object",
            "additionalProperties": {"type": "array", "minItems": 2, "maxItems": 2},
        },
    },
    "description": "the run this one was fine-tuned from (python train.py --extend): its "
    "folder's name and path, its checkpoint's step and SHA-256, the SHA-256 of the corpus it "
    "was trained on (null: a synthetic task, or a child made before it was recorded), and "
    "every setting the child changed, key -> [parent value, child value] (lab.training.extend)",
}
"""Schema of the optional ``parent`` of an ``eval.json`` (also for the LM record's schema)."""


_PASSKEY = {
    "type": "object",
    "required": ["depths", "lengths", "labels", "samples", "accuracy"],
    "additionalProperties": False,
    "properties": {
        "depths": {
            "type": "array",
            "items": {"type": "number", "minimum": 0, "maximum": 1},
            "minItems": 1,
        },
        "lengths": {"type": "array", "items": _LENGTH, "minItems": 1},
        "labels": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "samples": {"type": "integer", "minimum": 1},
        "accuracy": {"type": "array", "items": {"type": "array", "items": _FRACTION_OR_NULL}},
    },
}
"""The passkey task's depth x length grid (:mod:`lab.lm.passkey`): ``accuracy[i][j]`` is the
exact-match of ``samples`` sequences with the key at ``depths[i]`` and prompt length
``lengths[j]`` (labelled ``labels[j]``, e.g. ``2x``), null where the scheme cannot encode it."""


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
        "device",
        "dtype",
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
        "parent": PARENT,
        "eval_seconds": {"type": "number", "minimum": 0},
        "checkpoint": _CHECKPOINT,
        "machine": {
            "type": "object",
            "required": ["cpu", "torch", "blas"],
            "description": "where it was evaluated (lab.common.machine.machine_info): "
            "bit-identical results need the same CPU model, torch build and numeric settings",
        },
        "device": {
            "type": "string",
            "minLength": 1,
            "description": "the torch device the model was evaluated on, e.g. cpu or cuda:0",
        },
        "dtype": {
            "enum": list(DTYPES),
            "description": "dtype of the length grid's forward passes (config.eval.precision, or "
            "the run's precision when null, on that device); the permutation probe and the "
            "minimal pairs run in float32",
        },
        "passkey": _PASSKEY,
        "diagnostics": DIAGNOSTICS,
    },
}
"""JSON Schema (draft 2020-12) of ``eval.json``, the dict
:func:`lab.evaluation.evaluate.evaluate_run`
returns. ``reached_target`` (optional, so files written before it still load): the training
met ``train.target_accuracy`` at every training length (the checkpoint's record); null for a
run without a target or an older checkpoint. ``parent`` (optional, only in a fine-tuned run's
file): :data:`PARENT`. ``passkey`` (optional; runs of the ``passkey`` task only): the depth x
length grid, :data:`_PASSKEY`. ``diagnostics`` (optional: absent with ``eval.diagnostics=none``)
and each length's ``failures`` and ``attention`` (null then): :mod:`lab.diagnostics.schema`.
Whether a run counts as learned is decided from it and
``summary.in_dist`` by :func:`lab.evaluation.learned.not_learned_reason`."""


def inconsistency(result: dict[str, Any]) -> str | None:
    """What makes a schema-valid ``eval.json`` dict (:data:`SCHEMA`) unusable, in a few words, or
    None: a NaN or infinite number (JSON readers accept them), a scheme, task, seed or training
    range other than its own ``config``'s (a hand-edited file would put the run in another
    row), a ``dtype`` that its ``device`` and precision do not give, lengths not strictly
    increasing, a grid length that was not evaluated, a training range whose ends are swapped,
    an evaluated length without its figures or with figures that disagree (a Wilson interval
    not around its exact-match, a ``correct`` string not one character per sample or not giving the
    exact-match, pair accuracy without pairs), a figure at a multiple of the longest training
    length (``summary.at``) that is not that length's, or an in-distribution figure that is not
    the mean over the grid lengths in the training range, or diagnostics that contradict
    themselves (:func:`lab.diagnostics.schema.diagnostics_inconsistency`). Reports draw error
    bars and pair sequences from these fields, so each one would otherwise be a traceback on
    every re-run.
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
    problem = _dtype_inconsistency(result)
    if problem:
        return problem
    for row in result["lengths"]:
        problem = _row_inconsistency(row)
        if problem:
            return f"length {row['length']}: {problem}"
    return (
        _summary_inconsistency(result)
        or _passkey_inconsistency(result.get("passkey"))
        or diagnostics_inconsistency(result)
    )


def _passkey_inconsistency(grid: dict[str, Any] | None) -> str | None:
    """Whether a ``passkey`` grid has one label per length and one row of one cell per length
    for each depth (see :data:`_PASSKEY`), or None (also when there is no grid)."""
    if grid is None:
        return None
    columns = len(grid["lengths"])
    if len(grid["labels"]) != columns:
        return f"passkey: {len(grid['labels'])} labels for {columns} lengths"
    if len(grid["accuracy"]) != len(grid["depths"]):
        return f"passkey: {len(grid['accuracy'])} rows for {len(grid['depths'])} depths"
    if any(len(row) != columns for row in grid["accuracy"]):
        return f"passkey: a row of accuracy has not {columns} cells (one per length)"
    return None


def _summary_inconsistency(result: dict[str, Any]) -> str | None:
    """Whether ``summary.at`` holds each multiple's exact-match and ``summary.in_dist`` the mean
    over the grid lengths in the training range (see :func:`inconsistency`), or None."""
    config, grid, (low, high) = result["config"], result["grid_lengths"], result["train_lengths"]
    factor = (config["eval"] if isinstance(config["eval"], dict) else {}).get("max_length_factor")
    if isinstance(factor, (int, float)):
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


def _dtype_inconsistency(result: dict[str, Any]) -> str | None:
    """Whether ``dtype`` is what ``device`` and the precision in ``config`` give (see
    :data:`SCHEMA`), in a few words, or None."""
    config = result["config"]
    evaluation = config["eval"] if isinstance(config["eval"], dict) else {}
    precision = evaluation.get("precision") or config.get("precision", "auto")
    try:
        expected = compute_dtype(torch.device(result["device"]), precision)
    except (RuntimeError, ValueError, TypeError):
        return f"device {result['device']!r} with precision {precision!r} is not a known setting"
    expected_name = str(expected).removeprefix("torch.")
    if result["dtype"] != expected_name:
        return (
            f"dtype {result['dtype']!r} is not what precision {precision!r} gives on "
            f"{result['device']} ({expected_name!r})"
        )
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


def write_eval_json(result: dict[str, Any], run_dir: str | Path) -> Path:
    """Write ``result`` to ``RUN_DIR/eval.json`` (strict JSON: no NaN); returns the path."""
    return atomic_write(
        Path(run_dir) / EVAL_NAME, json.dumps(result, indent=2, allow_nan=False) + "\n"
    )


def length_row(run: Result, length: int | None) -> dict[str, Any] | None:
    """The ``lengths`` entry of ``run`` at ``length`` (None when it was not evaluated, or for a
    ``length`` of None)."""
    return next((row for row in run["lengths"] if row["length"] == length), None)


def at_multiple(run: Result, label: str) -> int | None:
    """The length of multiple ``label`` (e.g. ``'2x'``) for ``run``'s training range; None when
    the run was evaluated below it (``eval.max_length_factor`` under 2 has no ``'2x'``)."""
    factor = run["config"]["eval"]["max_length_factor"]
    return multiple_lengths(run["train_lengths"][1], factor).get(label)


def pair_values(runs: list[Result], where: str) -> list[float | None]:
    """Per run: pair accuracy (both members right) in distribution (``where='in_dist'``: mean
    over grid lengths in the training range) or at multiple ``where``."""
    values = []
    for run in runs:
        low, high = run["train_lengths"]
        if where == "in_dist":
            rows = [length_row(run, n) for n in run["grid_lengths"] if low <= n <= high]
        else:
            rows = [length_row(run, at_multiple(run, where))]
        accuracies = [row["pair_accuracy"] if row else None for row in rows]
        ok = accuracies and all(a is not None for a in accuracies)
        values.append(sum(accuracies) / len(accuracies) if ok else None)
    return values
