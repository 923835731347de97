"""JSON Schemas of the diagnostics in ``eval.json`` (:data:`lab.evaluation.record.SCHEMA`
includes them): each length's ``failures`` and ``attention``, and the run's ``diagnostics``."""

from __future__ import annotations

from typing import Any

from lab.diagnostics.attention_stats import ALIGNMENT, STATISTICS
from lab.diagnostics.failures import FAILURE_KINDS

_FRACTION = {"type": "number", "minimum": 0, "maximum": 1}
_COUNT = {"type": "integer", "minimum": 0}
_PER_HEAD = {
    "type": "array",
    "minItems": 1,
    "items": {"type": "array", "items": {"type": "number"}},
}

FAILURES: dict[str, Any] = {
    "type": "object",
    "required": [
        *FAILURE_KINDS,
        "oracle_exact_match",
        "first_error_median",
        "first_error_past_train",
    ],
    "additionalProperties": False,
    "properties": {
        **{kind: _FRACTION for kind in FAILURE_KINDS},
        "oracle_exact_match": _FRACTION,
        "first_error_median": {"type": ["number", "null"], "minimum": 1},
        "first_error_past_train": {"oneOf": [{"type": "null"}, _FRACTION]},
    },
    "description": "shares of the sequences by failure mode (they sum to 1; right is the "
    "exact-match), exact-match with the length given (Newman et al. 2020), the median 1-based "
    "answer token of the first error, and the share of wrong sequences whose first error lies "
    "past the longest training answer (lab.diagnostics.failures)",
}

ATTENTION: dict[str, Any] = {
    "type": "object",
    "required": ["samples", "answer_tokens", "aligned_tokens", *STATISTICS, *ALIGNMENT],
    "additionalProperties": False,
    "properties": {
        "samples": _COUNT,
        "answer_tokens": _COUNT,
        "aligned_tokens": _COUNT,
        **{name: _PER_HEAD for name in STATISTICS},
        **{name: {"oneOf": [{"type": "null"}, _PER_HEAD]} for name in ALIGNMENT},
    },
    "description": "per layer, per head: means over the answer queries of the first samples "
    "sequences (lab.diagnostics.measure); the alignment is null when the task names no read "
    "positions",
}

DIAGNOSTICS: dict[str, Any] = {
    "type": "object",
    "required": ["mode", "seconds", "train_answer_tokens", "aligned_head", "where_it_fails"],
    "additionalProperties": False,
    "properties": {
        "mode": {"enum": ["basic", "full"]},
        "seconds": {"type": "number", "minimum": 0},
        "train_answer_tokens": _COUNT,
        "aligned_head": {
            "oneOf": [
                {"type": "null"},
                {"type": "array", "items": _COUNT, "minItems": 2, "maxItems": 2},
            ]
        },
        "where_it_fails": {"type": "string"},
        "rope": {
            "type": "object",
            "required": ["pair_shares", "low_frequency_share", "lengths", "p_rope"],
            "additionalProperties": False,
            "properties": {
                "pair_shares": _PER_HEAD,
                "low_frequency_share": _FRACTION,
                "lengths": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "p_rope": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "array",
                        "items": {"oneOf": [{"type": "null"}, _FRACTION]},
                    },
                },
            },
            "description": "eval.diagnostics=full on a RoPE run (lab.diagnostics.rope_use): "
            "per layer, each rotary pair's share of |q.k| (highest frequency first) at the "
            "longest training length; the lowest quarter's share; exact-match per length with "
            "p-RoPE at evaluation, keyed by p",
        },
    },
    "description": "the run's summary of its diagnostics (lab.diagnostics.lengths)",
}


def diagnostics_inconsistency(result: dict[str, Any]) -> str | None:
    """What makes the diagnostics of a schema-valid ``eval.json`` dict contradict themselves or
    its figures, in a few words, or None: failure shares that do not sum to 1 or whose ``right``
    is not the length's exact-match, per-head lists that are empty or not one shape (layers x
    heads) at every length, an alignment with only one of its two lists, or an aligned head
    outside that shape. :func:`lab.evaluation.record.inconsistency` calls it, so such a file is
    treated as missing instead of breaking every report."""
    shapes = set()
    for row in result["lengths"]:
        failures, attention = row.get("failures"), row.get("attention")
        if failures is not None:
            if abs(sum(failures[kind] for kind in FAILURE_KINDS) - 1) > 1e-9:
                return f"length {row['length']}: failure shares do not sum to 1"
            if failures["right"] != row["exact_match"]:
                return f"length {row['length']}: failures.right is not its exact-match"
        if attention is None:
            continue
        if (attention["alignment_mass"] is None) != (attention["alignment_hit"] is None):
            return f"length {row['length']}: one of alignment_mass and alignment_hit is null"
        for name in (*STATISTICS, *ALIGNMENT):
            if attention[name] is not None:
                shapes.add(tuple(len(heads) for heads in attention[name]))
    if len(shapes) > 1 or any(0 in shape for shape in shapes):
        return "attention statistics are not one shape (layers x heads) at every length"
    head = (result.get("diagnostics") or {}).get("aligned_head")
    if head is not None and (not shapes or head[0] >= len(next(iter(shapes)))):
        return f"diagnostics.aligned_head {head} is outside the attention statistics"
    if head is not None and head[1] >= next(iter(shapes))[head[0]]:
        return f"diagnostics.aligned_head {head} is outside the attention statistics"
    return None
