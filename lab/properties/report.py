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
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from data.streams import SAMPLE_STREAM, data_rng
from lab.common.checkpoint import find_checkpoint
from lab.common.files import atomic_write, atomic_writer
from lab.evaluation.attention_maps import attention_maps
from lab.properties import demos, figures
from lab.properties.fingerprints import fingerprints_elsewhere
from lab.properties.markdown import TESTS, criteria_fields, markdown
from lab.properties.measure import Properties, as_dict, measure
from lab.properties.probe import make_probe, position_scores
from model.layout import layout_label
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


MIN_TABLE = 8
"""Fewest positions a trained scheme's table must hold to be measured: ``N >= 2`` positions
(uniqueness compares two) and boundedness reads up to ``4N - 1``."""


def trained_span(scheme: Any, span: int, run_dir: Path) -> tuple[int, list[str]]:
    """The ``N`` a trained scheme is measured over: ``span``, or the largest its table holds
    (boundedness reads positions up to ``4N - 1``), with the one-line note that says so.

    Raises:
        ValueError: the table holds fewer than :data:`MIN_TABLE` positions (one line).
    """
    limit = scheme.max_length()
    if limit is None or 4 * span <= limit:
        return span, []
    if limit < MIN_TABLE:
        raise ValueError(
            f"run {run_dir}: its {scheme.name} scheme encodes only {limit} positions; the "
            f"property report needs at least {MIN_TABLE} (N >= 2 positions, boundedness up to 4N)"
        )
    fit = limit // 4
    return fit, [
        f"{scheme.name} (trained): measured over N = {fit}, not {span}: it encodes only "
        f"{limit} positions and boundedness reads positions up to 4N - 1"
    ]


def figures_at_2x(evaluation: dict | None) -> dict[str, float | None]:
    """The run's 2x figure as :class:`Properties` fields: ``exact_match_2x`` of a synthetic
    task's ``eval.json``, ``perplexity_2x`` of a language model's (``kind: "lm"``,
    :data:`lab.lm.record.LM_SCHEMA`); nothing without a current ``eval.json``."""
    if evaluation is None:
        return {}
    if evaluation.get("kind") == "lm":
        return {"perplexity_2x": evaluation["summary"]["perplexity"].get("2x")}
    return {"exact_match_2x": evaluation["summary"]["at"].get("2x")}


def run_rows(run_dir: Path, span: int) -> tuple[Properties, Any, Any, list[str]]:
    """The trained run's scheme measured on its weights, its config, its model, and notes on
    what was measured differently (a table too short for ``span``)."""
    from lab.evaluation.evaluate import load_evaluation, load_run

    config, model, _ = load_run(run_dir, torch.device("cpu"))
    scheme = model.position
    span, notes = trained_span(scheme, span, run_dir)
    row = measure(scheme, make_probe(config.model), span, config.data.train_max_length, None)
    evaluation = load_evaluation(run_dir)  # None unless current and of this very checkpoint
    name = layout_label(asdict(config.model)) or row.scheme  # rope:2+none:2, as reports say
    options = config.model.options.get(config.model.position) or {}
    if options.get("scaling", "none") != "none":  # a RoPE extension rule: "rope yarn s=4"
        name += f" {options['scaling']} s={float(options.get('scaling_factor', 1)):g}"
    row = replace(row, scheme=f"{name} (trained)", **figures_at_2x(evaluation))
    return row, config, model, notes


def attention_input(task: Any, seed: int, length: int) -> tuple[torch.Tensor, list[str]]:
    """What the model reads of one sampled example at ``length``, int64 ``(1, T)``, and one
    label per token: a synthetic task's prompt (its words), a language model's whole window
    of ``length`` bytes (its only prompt is the first byte)."""
    batch = task.sample(data_rng(seed, SAMPLE_STREAM, 0), length, 1)
    if not task.language_model:
        prompt = batch.tokens[:, : batch.answer_start]  # (1, T_prompt)
        return prompt, task.decode(prompt[0]).split()
    window = batch.tokens[:, :-1]  # (1, length): the last byte is only a target
    labels = [repr(task.decode([t]))[1:-1].replace("$", r"\$") for t in window[0].tolist()]
    return window, labels


def attention_figures(config: Any, model: Any) -> tuple[dict[str, Figure], list[str]]:
    """Attention maps of one sampled example at the training length and at 4x, and a note for
    each length left out because the scheme cannot encode it (a learned table's end)."""
    task = config.data.build_task()
    limit = model.position.max_length()
    out, notes = {}, []
    for key, label, length in (
        ("attention_train", "train length", config.data.train_max_length),
        ("attention_4x", "4x", 4 * config.data.train_max_length),
    ):
        tokens, labels = attention_input(task, config.seed, length)
        if limit is not None and tokens.shape[1] > limit:
            notes.append(
                f"{key}.png not drawn: at {label} ({length}) the model reads {tokens.shape[1]} "
                f"tokens, past the {limit} positions its {config.model.position} scheme encodes"
            )
            continue
        title = f"{config.model.position}, {label} ({length})"
        out[key] = figures.attention_figure(attention_maps(model, tokens), labels, title)
    return out, notes


def measured_rows(
    names: list[str], schemes: dict, probes: dict, run_dir: Path | None
) -> tuple[list[Properties], tuple[Any, Any] | None, list[str]]:
    """Every named scheme's row (fresh weights, its fingerprint checked in a fresh process),
    then the trained run's row; with the run's ``(config, model)`` (None without a run) and the
    notes on its measurement."""
    elsewhere = fingerprints_elsewhere(names, SPAN)
    rows = [measure(schemes[n], probes[n], SPAN, TRAIN_LENGTH, elsewhere[n]) for n in names]
    if run_dir is None:
        return rows, None, []
    row, config, model, notes = run_rows(run_dir, SPAN)
    return [*rows, row], (config, model), notes


FIGURE_NAMES = (
    "similarity",
    "scores",
    "sinusoidal",
    "rope_decay",
    "bias_per_head",
    "attention_train",
    "attention_4x",
)
"""Every figure the report may draw (:func:`pictures_of`), as ``NAME.png``."""
WRITTEN = {
    "properties.md": b"# Position scheme properties (",
    "properties.json": b'{\n "criteria"',
    **{f"{name}.png": b"\x89PNG" for name in FIGURE_NAMES},
}
"""The report's own files -> how they begin when this report wrote them."""


def check_replaceable(out: str | Path) -> None:
    """Refuse an ``out`` holding a :data:`WRITTEN` file that this report did not write (a
    user's ``properties.md``, e.g. ``docs/properties.md``, or a file, folder, FIFO or link
    named like a figure), before anything is measured.

    Raises:
        ValueError: one line naming the folder and the files.
    """
    foreign = []
    for name, start in WRITTEN.items():
        path = Path(out) / name
        if path.is_symlink() or (path.exists() and not _begins(path, start)):
            foreign.append(name)  # a link, a FIFO (never opened: it would block), a folder
    if foreign:
        raise ValueError(
            f"--out {str(out)!r} holds {', '.join(foreign)} that properties.py did not write; "
            "the report would replace them: give --out a folder of its own"
        )


def _begins(path: Path, start: bytes) -> bool:
    """``path`` is a regular file whose first bytes are ``start``."""
    if not path.is_file():
        return False
    with path.open("rb") as file:
        return file.read(len(start)) == start


def write_tables(
    out: Path, rows: list[Properties], demo: dict[str, Any], notes: list[str]
) -> dict[str, Path]:
    """``properties.md`` and ``properties.json`` in ``out``, written atomically."""
    record = {
        "criteria": criteria_fields(),
        "tests": TESTS,
        "rows": [as_dict(r) for r in rows],
        "notes": notes,
        "demonstrations": demo,
    }
    return {
        "properties.md": atomic_write(out / "properties.md", markdown(rows, demo, notes)),
        "properties.json": atomic_write(out / "properties.json", json.dumps(record, indent=1)),
    }


def pictures_of(
    scores: dict[str, Any], demo: dict[str, Any], trained: tuple[Any, Any] | None
) -> tuple[dict[str, Figure], list[str]]:
    """Every figure of the report by name (the bias figure only when a scheme has a bias, the
    attention maps only with a trained run), and notes on the attention maps left out."""
    pictures = {
        "similarity": figures.similarity_figure(scores),
        "scores": figures.scores_figure(scores),
        "sinusoidal": figures.sinusoidal_figure(sinusoidal_table(64, 64), demo["sinusoidal"]),
        "rope_decay": figures.rope_decay_figure(demo["rope_decay"]),
    }
    if demo["bias"]:
        pictures["bias_per_head"] = figures.bias_figure(demo["bias"])
    if trained is None:
        return pictures, []
    maps, notes = attention_figures(*trained)
    return pictures | maps, notes


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
    if run_dir is not None:
        find_checkpoint(run_dir)  # before anything is written; "" is no folder, not "."
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    schemes = demos.fresh_schemes(names)
    probes = {name: make_probe(s.config) for name, s in schemes.items()}
    rows, trained, notes = measured_rows(
        names, schemes, probes, None if run_dir is None else Path(run_dir)
    )
    demo = demonstrations(names, schemes, SPAN, TRAIN_LENGTH)
    scores = {n: position_scores(schemes[n], probes[n], torch.arange(SPAN)) for n in names}
    pictures, skipped = pictures_of(scores, demo, trained)
    notes = [*notes, *skipped]
    paths = write_tables(out, rows, demo, notes)
    paths |= write_pictures(out, pictures, markdown(rows, demo, notes))
    for name in set(WRITTEN) - set(paths):  # an earlier report's figure (a run's maps) goes
        if _begins(out / name, WRITTEN[name]) and not (out / name).is_symlink():
            (out / name).unlink()
    return paths
