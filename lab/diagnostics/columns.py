"""The diagnostics' columns of ``results.csv`` (one row per run x length): the failure split,
oracle-length exact-match, the first error, and the attention statistics averaged over layers
and heads, with the aligned head's alignment (:func:`lab.diagnostics.summary.aligned_head`)."""

from __future__ import annotations

from statistics import mean
from typing import Any

from lab.diagnostics.summary import aligned_head

DIAGNOSTIC_COLUMNS = (
    "early_eos",
    "late_eos",
    "content_errors",
    "oracle_exact_match",
    "first_error_median",
    "entropy",
    "entropy_norm",
    "sink_mass",
    "attended_distance",
    "alignment_mass",
    "alignment_hit",
)
"""Columns after the evaluation's own, empty where a run or length has no diagnostics."""

AVERAGED = {
    "entropy": "entropy",
    "entropy_norm": "entropy_norm",
    "sink_mass": "sink_mass",
    "attended_distance": "distance",
}
"""Columns averaged over layers and heads -> their statistic in ``attention``."""


def diagnostic_fields(run: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """``{column: value or None}`` of :data:`DIAGNOSTIC_COLUMNS` for one ``lengths`` row of
    ``run``: shares of sequences, ``first_error_median`` a 1-based answer token, ``entropy``
    in nats and ``attended_distance`` in tokens (means over layers and heads), and
    ``alignment_*`` the aligned head's."""
    fields: dict[str, Any] = dict.fromkeys(DIAGNOSTIC_COLUMNS)
    failures, attention = row.get("failures"), row.get("attention")
    if failures:
        fields["early_eos"], fields["late_eos"] = failures["early_eos"], failures["late_eos"]
        fields["content_errors"] = failures["content"]
        fields["oracle_exact_match"] = failures["oracle_exact_match"]
        fields["first_error_median"] = failures["first_error_median"]
    if attention:
        for column, key in AVERAGED.items():
            fields[column] = round(mean(v for layer in attention[key] for v in layer), 6)
        head = aligned_head(run)
        if head and attention["alignment_mass"]:
            fields["alignment_mass"] = attention["alignment_mass"][head[0]][head[1]]
            fields["alignment_hit"] = attention["alignment_hit"][head[0]][head[1]]
    return fields
