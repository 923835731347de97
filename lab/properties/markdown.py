"""The property report as text: its columns, each column's test, and the Markdown page
(``properties.md``) of the measured rows and the demonstrations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lab.properties.measure import Properties

CRITERIA = ("uniqueness", "boundedness", "relativity", "extrapolation", "determinism")
"""The five criteria a position encoding is judged by, in the seeds' words and order."""

COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    (
        "uniqueness",
        "uniqueness",
        "uniqueness",
        "smallest RMS distance between the score rows of two positions in 0..N-1",
    ),
    (
        "boundedness",
        "boundedness",
        "boundedness",
        "max |score| over 0..4N-1 / max over 0..N-1 (1: bounded, 4: linear)",
    ),
    (
        "boundedness",
        "boundedness: max |score|",
        "max_score",
        "largest position-only score or bias over 0..4N-1",
    ),
    (
        "relativity",
        "relativity",
        "relativity",
        "largest |score(m+s, n+s) - score(m, n)|, n <= m < N, s in {1, N/2, N}",
    ),
    (
        "extrapolation",
        "extrapolation: defined up to",
        "max_length",
        "longest position the scheme encodes",
    ),
    (
        "extrapolation",
        "extrapolation: at 4x train",
        "defined_at_4x",
        "encodes positions 0..4L-1 (L: longest training length)",
    ),
    (
        "extrapolation",
        "extrapolation: 2x exact-match",
        "exact_match_2x",
        "a synthetic-task run's exact-match at 2x its longest training length (eval.json)",
    ),
    (
        "extrapolation",
        "extrapolation: 2x perplexity",
        "perplexity_2x",
        "a language-model run's held-out perplexity at 2x its training length (eval.json)",
    ),
    (
        "determinism",
        "determinism",
        "deterministic",
        "same scores twice here and, fresh weights, in a fresh process (sha256)",
    ),
)
"""The table's columns: ``(criterion, header, field of Properties and JSON row, test)``. JSON
rows keep the field names (``max_length``, ``defined_at_4x``, ``deterministic``, ...);
``properties.json``'s ``criteria`` maps each criterion to its fields."""

TESTS = {header: test for _, header, _, test in COLUMNS}
"""Each column's test, by header (``properties.json``'s ``tests``)."""


def criteria_fields() -> dict[str, list[str]]:
    """Each criterion's fields of a JSON row, in column order."""
    return {c: [field for criterion, _, field, _ in COLUMNS if criterion == c] for c in CRITERIA}


def cell(field: str, value: Any) -> str:
    """One table cell: a field of :class:`Properties` as the report prints it."""
    if field == "relativity":
        return f"{value:.2e}"
    if field == "max_length":
        return "unlimited" if value is None else str(value)
    if field in ("defined_at_4x", "deterministic"):
        return "yes" if value else "no"
    if field == "exact_match_2x":
        return "—" if value is None else f"{100 * value:.1f}%"
    if field == "perplexity_2x":
        return "—" if value is None else f"{value:.3g}"
    return f"{value:.3g}"


def table_lines(rows: list[Properties]) -> list[str]:
    """The property table (one row per scheme) followed by each column's test."""
    head = [name.replace("|", "\\|") for name in TESTS]  # a bare | would split the column
    lines = ["| scheme | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for p in rows:
        cells = [cell(field, getattr(p, field)) for _, _, field, _ in COLUMNS]
        lines.append(f"| {p.scheme} | " + " | ".join(cells) + " |")
    return [*lines, "", *(f"- **{name}**: {test}" for name, test in TESTS.items())]


def sinusoidal_lines(sin: dict[str, Any]) -> list[str]:
    """The sinusoidal table and its distance by gap."""
    distance = ", ".join(
        f"{g}: {d:.3f}" for g, d in zip(sin["gaps"], sin["distance"][0], strict=True)
    )
    table = "\n".join("| " + " | ".join(f"{v:+.3f}" for v in row) + " |" for row in sin["table"])
    return [
        "## Sinusoidal table, positions 0-7 x dimensions 0-7",
        "",
        "| " + " | ".join(f"d{i}" for i in range(len(sin["table"][0]))) + " |",
        "|---" * len(sin["table"][0]) + "|",
        table,
        "",
        f"Distance |PE[m+g] - PE[m]| from m = 0 by gap g: {distance}; the largest difference "
        f"between starts 0, 10, 100, 1000 at any gap is {sin['spread']:.1e} (it depends on "
        "the gap only).",
    ]


def rope_lines(rope: dict[str, Any], decay: dict[str, Any]) -> list[str]:
    """RoPE's equal scores at one distance and the decay of its upper bound by base."""
    at = [1, 16, 256, 4096]
    decay_lines = [
        f"- base {int(base):,}: "
        + ", ".join(f"r={r}: {bound[nearest(decay['distances'], r)]:.2f}" for r in at)
        for base, bound in decay["bound"].items()
    ]
    return [
        f"## RoPE: q.k at distance {rope['distance']} from positions {rope['starts']}",
        "",
        ", ".join(f"{s:.6f}" for s in rope["scores"]) + f" (spread {rope['spread']:.1e})",
        "",
        "Long-range decay of the relative score upper bound (Dh = 128):",
        "",
        *decay_lines,
    ]


def bias_and_permutation_lines(demo: dict[str, Any]) -> list[str]:
    """Each biased scheme's score bias per head, then the permutation demonstration."""
    bias = [
        f"- {name}: "
        + "; ".join(
            f"head {h}: " + ", ".join(f"{v:.3f}" for v in row[:5]) for h, row in enumerate(heads)
        )
        for name, heads in demo["bias"].items()
    ]
    perm = [f"- {name}: {gap:.2e}" for name, gap in demo["permutation"].items()]
    return [
        "## Score bias per head against distance 0-4 from the last query",
        "",
        *bias,
        "",
        "## Permutation: shuffle a sentence, un-shuffle the outputs (largest logit change)",
        "",
        *perm,
    ]


def note_lines(notes: Sequence[str]) -> list[str]:
    """What the report could not measure or draw, and why, one bullet each (none: no lines)."""
    return ["", "Notes:", "", *(f"- {note}" for note in notes)] if notes else []


def markdown(rows: list[Properties], demo: dict[str, Any], notes: Sequence[str] = ()) -> str:
    """The report as Markdown: the property table with each test stated and the notes (what
    was measured differently or left out, and why), then the demos."""
    return "\n".join(
        [
            f"# Position scheme properties (N = {demo['span']}, L = {demo['train_length']})",
            "",
            "Measured on each scheme's own code: a fixed query and key per head (the same at "
            "every position; schemes that add an embedding add it through fixed random "
            "projections), scored through the scheme's hooks. Fresh weights unless marked "
            "trained. The five criteria: " + ", ".join(CRITERIA) + ".",
            "",
            *table_lines(rows),
            *note_lines(notes),
            "",
            *sinusoidal_lines(demo["sinusoidal"]),
            "",
            *rope_lines(demo["rope"], demo["rope_decay"]),
            "",
            *bias_and_permutation_lines(demo),
            "",
        ]
    )


def nearest(values: list[int], target: int) -> int:
    """Index of the value of ``values`` closest to ``target``."""
    return min(range(len(values)), key=lambda i: abs(values[i] - target))
