"""The property report of every registered scheme: ``properties.md``, ``properties.json``,
PNGs and TensorBoard images in one folder (``python properties.py``).

Schemes come from the registry (:func:`model.position.available_schemes`), so a new scheme gets
its row without editing a list. With a trained run, its own scheme is measured on the trained
weights (its row is named ``NAME (trained)``), its exact-match at 2x comes from its
``eval.json``, and its attention maps are drawn for one prompt at the training length and at
4x.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from lab.common.batches import SAMPLE_STREAM, data_rng
from lab.common.files import atomic_write, atomic_writer
from lab.evaluation.attention_maps import attention_maps
from lab.properties import demos, figures
from lab.properties.measure import Properties, as_dict, fingerprints_elsewhere, measure
from lab.properties.probe import make_probe, position_scores
from model.position.sinusoidal import sinusoidal_table

SPAN = 64
"""Positions ``0 .. SPAN-1`` measured (boundedness goes to ``4 * SPAN``)."""
TRAIN_LENGTH = 16
"""Training length assumed without a run, for extrapolation's "at 4x train"."""

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
        "the run's exact-match at 2x its longest training length (eval.json)",
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
    return f"{value:.3g}"


def markdown(rows: list[Properties], demo: dict[str, Any]) -> str:
    """The report as Markdown: the property table with each test stated, then the demos."""
    head = [name.replace("|", "\\|") for name in TESTS]  # a bare | would split the column
    lines = ["| scheme | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for p in rows:
        cells = [cell(field, getattr(p, field)) for _, _, field, _ in COLUMNS]
        lines.append(f"| {p.scheme} | " + " | ".join(cells) + " |")
    tests = [f"- **{name}**: {test}" for name, test in TESTS.items()]
    sin, rope = demo["sinusoidal"], demo["rope"]
    distance = ", ".join(
        f"{g}: {d:.3f}" for g, d in zip(sin["gaps"], sin["distance"][0], strict=True)
    )
    decay = demo["rope_decay"]
    at = [1, 16, 256, 4096]
    decay_lines = [
        f"- base {int(base):,}: "
        + ", ".join(f"r={r}: {bound[nearest(decay['distances'], r)]:.2f}" for r in at)
        for base, bound in decay["bound"].items()
    ]
    perm = [f"- {name}: {gap:.2e}" for name, gap in demo["permutation"].items()]
    bias = [
        f"- {name}: "
        + "; ".join(
            f"head {h}: " + ", ".join(f"{v:.3f}" for v in row[:5]) for h, row in enumerate(heads)
        )
        for name, heads in demo["bias"].items()
    ]
    table = "\n".join("| " + " | ".join(f"{v:+.3f}" for v in row) + " |" for row in sin["table"])
    return "\n".join(
        [
            f"# Position scheme properties (N = {demo['span']}, L = {demo['train_length']})",
            "",
            "Measured on each scheme's own code: a fixed query and key per head (the same at "
            "every position; schemes that add an embedding add it through fixed random "
            "projections), scored through the scheme's hooks. Fresh weights unless marked "
            "trained. The five criteria: " + ", ".join(CRITERIA) + ".",
            "",
            *lines,
            "",
            *tests,
            "",
            "## Sinusoidal table, positions 0-7 x dimensions 0-7",
            "",
            "| " + " | ".join(f"d{i}" for i in range(len(sin["table"][0]))) + " |",
            "|---" * len(sin["table"][0]) + "|",
            table,
            "",
            f"Distance |PE[m+g] - PE[m]| from m = 0 by gap g: {distance}; the largest difference "
            f"between starts 0, 10, 100, 1000 at any gap is {sin['spread']:.1e} (it depends on "
            "the gap only).",
            "",
            f"## RoPE: q.k at distance {rope['distance']} from positions {rope['starts']}",
            "",
            ", ".join(f"{s:.6f}" for s in rope["scores"]) + f" (spread {rope['spread']:.1e})",
            "",
            "Long-range decay of the relative score upper bound (Dh = 128):",
            "",
            *decay_lines,
            "",
            "## Score bias per head against distance 0-4 from the last query",
            "",
            *bias,
            "",
            "## Permutation: shuffle a sentence, un-shuffle the outputs (largest logit change)",
            "",
            *perm,
            "",
        ]
    )


def nearest(values: list[int], target: int) -> int:
    """Index of the value of ``values`` closest to ``target``."""
    return min(range(len(values)), key=lambda i: abs(values[i] - target))


def demonstrations(names: list[str], schemes: dict, span: int, train_length: int) -> dict[str, Any]:
    """Every demonstration of :mod:`lab.properties.demos` for the named schemes."""
    return {
        "span": span,
        "train_length": train_length,
        "sinusoidal": demos.sinusoidal_demo(),
        "rope": demos.rope_demo(),
        "rope_decay": demos.rope_decay(),
        "bias": demos.score_bias_demo(names, schemes),
        "permutation": demos.permutation_demo(names),
    }


def save_figure(fig: Figure, out: Path, name: str, writer: Any) -> Path:
    """Write ``fig`` as ``out/name.png`` (atomically) and as a TensorBoard image ``name``."""
    path = out / f"{name}.png"
    with atomic_writer(path) as handle:
        fig.savefig(handle, format="png", dpi=90)
    writer.add_figure(f"properties/{name}", fig, 0, close=True)
    return path


def run_rows(run_dir: Path, span: int) -> tuple[Properties, Any, Any, list]:
    """The trained run's scheme measured on its weights, its config, model and task."""
    from lab.evaluation.evaluate import load_evaluation, load_run

    config, model, _ = load_run(run_dir, torch.device("cpu"))
    scheme = model.position
    row = measure(scheme, make_probe(config.model), span, config.data.train_max_length, None)
    evaluation = load_evaluation(run_dir)  # None unless current and of this very checkpoint
    at_2x = evaluation["summary"]["at"].get("2x") if evaluation else None
    return replace(row, scheme=f"{row.scheme} (trained)", exact_match_2x=at_2x), config, model


def attention_figures(config: Any, model: Any) -> dict[str, Figure]:
    """Attention maps of one sampled prompt at the training length and at 4x (prompt only)."""
    task = config.data.build_task()
    out = {}
    for label, length in (
        ("train length", config.data.train_max_length),
        ("4x", 4 * config.data.train_max_length),
    ):
        batch = task.sample(data_rng(config.seed, SAMPLE_STREAM, 0), length, 1)
        prompt = batch.tokens[:, : batch.answer_start]  # (1, T_prompt)
        maps = attention_maps(model, prompt)
        tokens = task.decode(prompt[0]).split()
        key = "attention_" + ("train" if label == "train length" else "4x")
        out[key] = figures.attention_figure(
            maps, tokens, f"{config.model.position}, {label} ({length})"
        )
    return out


def write_report(
    names: list[str], out: str | Path, run_dir: str | Path | None = None
) -> dict[str, Path]:
    """Measure, draw and write everything; returns the written paths by name.

    Args:
        names: registered scheme names (fresh weights).
        out: output folder (created).
        run_dir: a trained run, or None.

    Raises:
        ValueError, FileNotFoundError: an unknown scheme or an unreadable run (one line).
        RuntimeError: the fingerprint process failed.
    """
    from torch.utils.tensorboard import SummaryWriter  # slow import, only when needed

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    schemes = demos.fresh_schemes(names)
    probes = {name: make_probe(s.config) for name, s in schemes.items()}
    elsewhere = fingerprints_elsewhere(names, SPAN)
    rows = [measure(schemes[n], probes[n], SPAN, TRAIN_LENGTH, elsewhere[n]) for n in names]
    trained = None
    if run_dir is not None:
        row, config, model = run_rows(Path(run_dir), SPAN)
        rows.append(row)
        trained = (config, model)
    demo = demonstrations(names, schemes, SPAN, TRAIN_LENGTH)
    scores = {n: position_scores(schemes[n], probes[n], torch.arange(SPAN)) for n in names}
    paths = {
        "properties.md": atomic_write(out / "properties.md", markdown(rows, demo)),
        "properties.json": atomic_write(
            out / "properties.json",
            json.dumps(
                {
                    "criteria": criteria_fields(),
                    "tests": TESTS,
                    "rows": [as_dict(r) for r in rows],
                    "demonstrations": demo,
                },
                indent=1,
            ),
        ),
    }
    pictures = {
        "similarity": figures.similarity_figure(scores),
        "scores": figures.scores_figure(scores),
        "sinusoidal": figures.sinusoidal_figure(sinusoidal_table(64, 64), demo["sinusoidal"]),
        "rope_decay": figures.rope_decay_figure(demo["rope_decay"]),
    }
    if demo["bias"]:
        pictures["bias_per_head"] = figures.bias_figure(demo["bias"])
    if trained is not None:
        pictures.update(attention_figures(*trained))
    writer = SummaryWriter(str(out))
    try:
        for name, fig in pictures.items():
            paths[f"{name}.png"] = save_figure(fig, out, name, writer)
        writer.add_text("properties", markdown(rows, demo), 0)
    finally:
        writer.close()
    return paths
