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

from data.streams import SAMPLE_STREAM, data_rng
from lab.common.files import atomic_write, atomic_writer
from lab.evaluation.attention_maps import attention_maps
from lab.properties import demos, figures
from lab.properties.fingerprints import fingerprints_elsewhere
from lab.properties.markdown import TESTS, criteria_fields, markdown
from lab.properties.measure import Properties, as_dict, measure
from lab.properties.probe import make_probe, position_scores
from model.position.sinusoidal import sinusoidal_table

SPAN = 64
"""Positions ``0 .. SPAN-1`` measured (boundedness goes to ``4 * SPAN``)."""
TRAIN_LENGTH = 16
"""Training length assumed without a run, for extrapolation's "at 4x train"."""


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


def measured_rows(
    names: list[str], schemes: dict, probes: dict, run_dir: Path | None
) -> tuple[list[Properties], tuple[Any, Any] | None]:
    """Every named scheme's row (fresh weights, its fingerprint checked in a fresh process),
    then the trained run's row; with the run's ``(config, model)``, or None without a run."""
    elsewhere = fingerprints_elsewhere(names, SPAN)
    rows = [measure(schemes[n], probes[n], SPAN, TRAIN_LENGTH, elsewhere[n]) for n in names]
    if run_dir is None:
        return rows, None
    row, config, model = run_rows(run_dir, SPAN)
    return [*rows, row], (config, model)


def write_tables(out: Path, rows: list[Properties], demo: dict[str, Any]) -> dict[str, Path]:
    """``properties.md`` and ``properties.json`` in ``out``, written atomically."""
    record = {
        "criteria": criteria_fields(),
        "tests": TESTS,
        "rows": [as_dict(r) for r in rows],
        "demonstrations": demo,
    }
    return {
        "properties.md": atomic_write(out / "properties.md", markdown(rows, demo)),
        "properties.json": atomic_write(out / "properties.json", json.dumps(record, indent=1)),
    }


def pictures_of(
    scores: dict[str, Any], demo: dict[str, Any], trained: tuple[Any, Any] | None
) -> dict[str, Figure]:
    """Every figure of the report by name (the bias figure only when a scheme has a bias, the
    attention maps only with a trained run)."""
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
    return pictures


def write_pictures(out: Path, pictures: dict[str, Figure], text: str) -> dict[str, Path]:
    """Every picture as ``out/NAME.png`` and a TensorBoard image, and ``text`` as TensorBoard
    text ``properties``; returns the PNG paths by file name."""
    from torch.utils.tensorboard import SummaryWriter  # slow import, only when needed

    paths = {}
    writer = SummaryWriter(str(out))
    try:
        for name, fig in pictures.items():
            paths[f"{name}.png"] = save_figure(fig, out, name, writer)
        writer.add_text("properties", text, 0)
    finally:
        writer.close()
    return paths


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
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    schemes = demos.fresh_schemes(names)
    probes = {name: make_probe(s.config) for name, s in schemes.items()}
    rows, trained = measured_rows(
        names, schemes, probes, None if run_dir is None else Path(run_dir)
    )
    demo = demonstrations(names, schemes, SPAN, TRAIN_LENGTH)
    scores = {n: position_scores(schemes[n], probes[n], torch.arange(SPAN)) for n in names}
    paths = write_tables(out, rows, demo)
    pictures = pictures_of(scores, demo, trained)
    return paths | write_pictures(out, pictures, markdown(rows, demo))
