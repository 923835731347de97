"""The ``eval.json`` of a language-model run (``kind: "lm"``): its JSON Schema and the
consistency check applied when it is read back (:func:`lab.evaluation.evaluate.load_evaluation`).
"""

from __future__ import annotations

import math
from typing import Any

from lab.evaluation.record import SCHEMA, _dtype_inconsistency, _non_finite

RUN_FIELDS = (
    "run_dir", "config", "position", "task", "seed", "train_lengths", "train_steps",
    "eval_seconds", "checkpoint", "machine", "device", "dtype",
)  # fmt: skip
"""Fields whose schema an LM record shares with the synthetic one
(:data:`lab.evaluation.record.SCHEMA`)."""

LM_SCHEMA_VERSION = 1
"""Version of :data:`LM_SCHEMA`."""

MIN_INTERVAL_WINDOWS = 5
"""Fewest windows a length's perplexity gets a 95% bootstrap interval from: with fewer (one
window gives a zero-width "interval"), ``perplexity_low`` and ``perplexity_high`` are null,
reports show the perplexity alone with a note, and no per-window test is made."""

_NUMBER_OR_NULL = {"type": ["number", "null"], "minimum": 0}
_LENGTH = {"type": "integer", "minimum": 1}

_LM_LENGTH = {
    "type": "object",
    "required": [
        "length", "multiple", "label", "windows", "tokens_scored", "loss", "perplexity",
        "perplexity_low", "perplexity_high", "window_losses", "supported", "reason",
    ],
    "additionalProperties": False,
    "properties": {
        "length": _LENGTH,
        "multiple": _LENGTH,
        "label": {"type": "string", "pattern": "^[0-9]+x$"},
        "windows": _LENGTH,
        "tokens_scored": _LENGTH,
        "loss": _NUMBER_OR_NULL,
        "perplexity": {"type": ["number", "null"], "minimum": 1},
        "perplexity_low": {"type": ["number", "null"], "minimum": 1},
        "perplexity_high": {"type": ["number", "null"], "minimum": 1},
        "window_losses": {"type": ["array", "null"], "items": {"type": "number", "minimum": 0}},
        "supported": {"type": "boolean"},
        "reason": {"type": ["string", "null"]},
    },
}  # fmt: skip
"""One evaluation length: loss (nats per token) and perplexity over every scored token, the
95% bootstrap interval of the perplexity over windows (null below :data:`MIN_INTERVAL_WINDOWS`
windows), and each window's mean loss (the same windows for every run: paired tests pair
them); figures null where ``supported`` is false."""

_CORPUS = {
    "type": "object",
    "required": ["source", "sha256", "python", "files", "heldout_tokens"],
    "additionalProperties": False,
    "properties": {
        "source": {"type": "string"},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "python": {"type": ["string", "null"]},
        "files": {"type": "array", "items": _LENGTH, "minItems": 2, "maxItems": 2},
        "heldout_tokens": _LENGTH,
    },
}

LM_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "eval.json of a language-model run: perplexity by evaluation length and position",
    "type": "object",
    "required": [
        "kind", "schema_version", "run_dir", "config", "position", "task", "seed",
        "train_lengths", "train_steps", "reached_target", "eval_seconds", "checkpoint",
        "machine", "device", "dtype", "corpus", "stride", "lengths", "positions", "summary",
    ],
    "additionalProperties": False,
    "properties": {
        "kind": {"const": "lm"},
        "schema_version": {"const": LM_SCHEMA_VERSION},
        **{key: SCHEMA["properties"][key] for key in RUN_FIELDS},  # as in a synthetic record
        "reached_target": {"type": "null"},
        "corpus": _CORPUS,
        "stride": {"type": ["integer", "null"], "minimum": 1},
        "lengths": {"type": "array", "items": _LM_LENGTH, "minItems": 1},
        "positions": {
            "type": "object",
            "required": ["length", "loss"],
            "additionalProperties": False,
            "properties": {
                "length": {"type": ["integer", "null"], "minimum": 1},
                "loss": {"type": "array", "items": {"type": "number", "minimum": 0}},
            },
        },
        "summary": {
            "type": "object",
            "required": ["perplexity", "notes"],
            "additionalProperties": False,
            "properties": {
                "perplexity": {"type": "object", "additionalProperties": _NUMBER_OR_NULL},
                "notes": {"type": "array", "items": {"type": "string"}},
            },
        },
        "passkey": {"type": ["object", "null"]},
        "parent": {"type": ["object", "null"]},
    },
}  # fmt: skip
"""JSON Schema (draft 2020-12) of a language-model ``eval.json``
(:func:`lab.lm.perplexity.evaluate_lm`). ``positions``: the mean loss at each token position
``0 .. length - 1`` over the windows of the longest supported length (null and empty when no
length is supported). ``passkey`` and ``parent`` are optional (a run fine-tuned from another
names its parent)."""


def lm_inconsistency(result: dict[str, Any]) -> str | None:
    """What makes a schema-valid LM ``eval.json`` dict (:data:`LM_SCHEMA`) unusable, in a few
    words, or None: a NaN or infinite number; a scheme, task, seed or training length other than
    its config's; a ``dtype`` its device and precision do not give; lengths that are not
    ``L * multiple`` in increasing order, or that score different tokens; a row whose figures
    disagree (perplexity not ``exp(loss)``, an interval not around it, not one window loss per
    window, non-overlapping windows whose mean loss is not the loss, figures on an unsupported
    length); a summary figure
    that is not its row's; or a per-position curve not of the longest supported length.
    Reports draw intervals and pair windows from these fields.
    """
    bad = _non_finite(result)
    if bad:
        return f"{bad} is not a finite number"
    config = result["config"]
    model, data = (v if isinstance(v, dict) else {} for v in (config["model"], config["data"]))
    recorded = {
        "position": model.get("position"),
        "task": data.get("task"),
        "seed": config["seed"],
        "train_lengths": [data.get("train_min_length"), data.get("train_max_length")],
    }
    for key, value in recorded.items():
        if result[key] != value:
            return f"{key} {result[key]!r} is not its config's {value!r}"
    problem = _dtype_inconsistency(result) or _lengths_inconsistency(result)
    if problem:
        return problem
    for row in result["lengths"]:
        problem = _row_inconsistency(row, result["stride"] is not None)
        if problem:
            return f"length {row['length']}: {problem}"
    return _summary_inconsistency(result)


def _lengths_inconsistency(result: dict[str, Any]) -> str | None:
    """Lengths increasing, each ``train_max * multiple`` with its label, all scoring the same
    number of tokens, within the held-out split; or None."""
    rows, high = result["lengths"], result["train_lengths"][1]
    lengths = [row["length"] for row in rows]
    if lengths != sorted(set(lengths)):
        return f"lengths {lengths} are not strictly increasing"
    for row in rows:
        if row["length"] != high * row["multiple"] or row["label"] != f"{row['multiple']}x":
            return f"length {row['length']} is not {row['label']} of the training length {high}"
    scored = {row["tokens_scored"] for row in rows}
    if len(scored) != 1:
        return f"lengths score different numbers of tokens {sorted(scored)}"
    if scored.pop() >= result["corpus"]["heldout_tokens"]:
        return "more tokens scored than the corpus holds out"
    return None


def _row_inconsistency(row: dict[str, Any], sliding: bool) -> str | None:
    """What is wrong with one ``lengths`` entry, or None; ``sliding``: windows of
    ``eval.stride`` score unequal numbers of tokens (their mean is then weighted)."""
    keys = ("loss", "perplexity", "perplexity_low", "perplexity_high", "window_losses")
    if not row["supported"]:
        return None if all(row[k] is None for k in keys) else "unsupported, yet it has figures"
    few = row["windows"] < MIN_INTERVAL_WINDOWS  # an interval may be null, and only then
    if any(row[k] is None for k in keys if not (few and k.startswith("perplexity_"))):
        return "supported, yet a figure is missing"
    loss, ppl = row["loss"], row["perplexity"]
    if not math.isclose(ppl, math.exp(loss), rel_tol=1e-9):
        return f"perplexity {ppl} is not exp(loss {loss})"
    low, high = row["perplexity_low"], row["perplexity_high"]
    if (low is None) != (high is None):
        return "one end of its interval is missing"
    if low is not None and not low * (1 - 1e-9) <= ppl <= high * (1 + 1e-9):
        return f"perplexity {ppl} lies outside its interval [{low}, {high}]"
    window_losses = row["window_losses"]
    if len(window_losses) != row["windows"] or row["windows"] > row["tokens_scored"]:
        return f"{len(window_losses)} window losses for {row['windows']} windows"
    mean = sum(window_losses) / len(window_losses)
    if not sliding and not math.isclose(mean, loss, rel_tol=1e-9, abs_tol=1e-12):
        return f"the mean of its window losses {mean} is not its loss {loss}"
    return None


def _summary_inconsistency(result: dict[str, Any]) -> str | None:
    """``summary.perplexity`` holds each row's perplexity under its label, and ``positions``
    is the curve of the longest supported length; or None."""
    wanted = {row["label"]: row["perplexity"] for row in result["lengths"]}
    if result["summary"]["perplexity"] != wanted:
        return "summary.perplexity is not the perplexity of each length"
    supported = [row["length"] for row in result["lengths"] if row["supported"]]
    positions = result["positions"]
    longest = max(supported) if supported else None
    if positions["length"] != longest or len(positions["loss"]) != (longest or 0):
        return f"positions are not the {longest or 0} positions of the longest supported length"
    return None
