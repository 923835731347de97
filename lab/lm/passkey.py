"""Passkey retrieval on a depth x length grid: the ``passkey`` entry of a run's ``eval.json``.

The long-context test of Mohtashami and Jaggi 2023 (§4.2), read as in position interpolation
(Chen et al. 2023, Table 4), YaRN (Peng et al. 2023) and LongLoRA (Chen et al. 2024): exact-match
of the key at every depth (0: the key opens the prompt, 1: it ends it) and every length
``m x`` the longest training length, ``m`` in :data:`MULTIPLES` up to
``eval.max_length_factor``. Every cell is ``eval.samples`` sequences drawn from a generator that
is a pure function of (seed, depth index, length) (:func:`grid_batch`), so every scheme and
every evaluation rule of a seed reads the same sequences. The model is evaluated as given: a
run evaluated under ``eval.position_options`` (e.g. a RoPE ``scaling`` rule) has its own grid.

:func:`passkey_table` summarises the grids of a sweep; figures are in
:mod:`lab.lm.passkey_figure`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from data import Batch, Task
from lab.common.config import Config, EvalConfig
from lab.evaluation.extrapolation import evaluate_batch, multiple_label
from lab.evaluation.labels import ordered, scheme_label
from lab.evaluation.learned import is_learned, not_learned_reason

DASH = "—"
"""A table cell without a figure."""

TASK = "passkey"
"""The task whose evaluation carries the grid."""

DEPTHS = tuple(i / 10 for i in range(11))
"""Depths of the grid's rows: 0, 0.1, ..., 1 (the 10% steps of the needle-in-a-haystack
heatmaps)."""

MULTIPLES = (1, 2, 4, 8)
"""Multiples of the longest training length of the grid's columns (up to
``eval.max_length_factor``)."""

PASSKEY_STREAM = 5
"""Seed-sequence stream of the grid's sequences (:mod:`data.streams` uses 0..4)."""


def grid_lengths(train_max: int, factor: float) -> dict[str, int]:
    """``{"1x": train_max, "2x": 2 * train_max, ...}``: the :data:`MULTIPLES` up to ``factor``."""
    return {multiple_label(m): m * train_max for m in MULTIPLES if m <= factor}


def grid_batch(task: Task, seed: int, depth_index: int, length: int, samples: int) -> Batch:
    """The ``samples`` sequences of cell (``DEPTHS[depth_index]``, ``length``): ``task`` with
    its depth fixed, drawn from ``numpy.random.default_rng([seed, PASSKEY_STREAM, depth_index,
    length])`` (the same for every model of a seed)."""
    at_depth = type(task)(replace(task.options, depth=DEPTHS[depth_index]))
    rng = np.random.default_rng([seed, PASSKEY_STREAM, depth_index, length])
    return at_depth.sample(rng, length, samples)


def passkey_grid(
    model: torch.nn.Module,
    task: Task,
    seed: int,
    lengths: dict[str, int],
    samples: int,
    batch_tokens: int = 32768,
    precision: str = "auto",
) -> dict[str, Any]:
    """Exact-match of ``model`` on every cell of the depth x length grid.

    Args:
        model: a :class:`model.Transformer` (or a module with its forward and ``.position``).
        task: a ``passkey`` task (its ``depth`` option is replaced per row).
        seed: the run's seed (:func:`grid_batch`).
        lengths: label -> prompt length (:func:`grid_lengths`).
        samples: sequences per cell.
        batch_tokens, precision: as :func:`lab.evaluation.extrapolation.evaluate_batch`.

    Returns:
        ``{"depths", "lengths", "labels", "samples", "accuracy"}``: ``accuracy[i][j]`` is the
        exact-match (0..1) at ``depths[i]`` and ``lengths[j]``, None where the position scheme
        cannot encode the length (a learned table too short).
    """
    accuracy = []
    for index in range(len(DEPTHS)):
        row = []
        for length in lengths.values():
            batch = grid_batch(task, seed, index, length, samples)
            result = evaluate_batch(model, batch, batch_tokens, precision=precision)
            row.append(result.exact_match)
        accuracy.append(row)
    return {
        "depths": list(DEPTHS),
        "lengths": list(lengths.values()),
        "labels": list(lengths),
        "samples": samples,
        "accuracy": accuracy,
    }


def passkey_record(
    model: torch.nn.Module, config: Config, e: EvalConfig, precision: str
) -> dict[str, Any] | None:
    """The ``passkey`` entry of ``eval.json`` for a run of the ``passkey`` task (None for any
    other task): :func:`passkey_grid` at the run's seed, ``e.samples`` per cell, lengths up to
    ``e.max_length_factor`` times the longest training length."""
    if config.data.task != TASK:
        return None
    lengths = grid_lengths(config.data.train_max_length, e.max_length_factor)
    task = config.data.build_task()
    return passkey_grid(model, task, config.seed, lengths, e.samples, e.batch_tokens, precision)


def mean_grid(results: list[dict[str, Any]]) -> list[list[float | None]]:
    """The cell-wise mean of the runs' ``passkey.accuracy`` (one grid shape); None where any
    run has None."""
    grids = [r["passkey"]["accuracy"] for r in results]
    return [
        [None if None in cells else sum(cells) / len(cells) for cells in zip(*rows, strict=True)]
        for rows in zip(*grids, strict=True)
    ]


def grouped(results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The learned runs with a ``passkey`` grid by :func:`lab.evaluation.labels.scheme_label`
    (scheme, changed task options, evaluation rule), in report order; the seeds of a group are
    pooled. A run not learned within its budget (:mod:`lab.evaluation.learned`) measures no
    retrieval past training and is left out (:func:`not_learned_rows` lists it).
    Runs whose grids have other lengths (another training length or
    ``eval.max_length_factor``) get their own group, labelled with their lengths."""
    runs = ordered([r for r in results if r.get("passkey") and is_learned(r)])
    shapes = {tuple(r["passkey"]["lengths"]) for r in runs}
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for result in runs:
        label = scheme_label(result)
        if len(shapes) > 1:
            label += f" (lengths {', '.join(map(str, result['passkey']['lengths']))})"
        groups[label].append(result)
    return dict(groups)


def passkey_table(results: list[dict[str, Any]]) -> str:
    """A Markdown table of the sweep's passkey grids: one row per :func:`grouped` group (scheme
    and evaluation rule), its seeds, the exact-match in percent at each length (mean over the
    depths of the seed-mean grid), and its worst depth (the row with the lowest mean over the
    supported lengths, the first of equals) with that mean, a dash when every depth scores
    alike. A dash marks a length the scheme cannot encode or did
    not evaluate; empty when no run has a grid."""
    groups = grouped(results)
    if not groups and not any(r.get("passkey") for r in results):
        return ""
    labels = [multiple_label(m) for m in MULTIPLES]
    labels = [
        x for x in labels if any(x in r["passkey"]["labels"] for g in groups.values() for r in g)
    ]
    rows = [_table_row(label, runs, labels) for label, runs in groups.items()]
    rows += not_learned_rows(results, len(labels) + 1)
    headers = ["scheme", "seeds", *labels, "worst depth"]
    lines = [headers, ["---"] * len(headers), *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def not_learned_rows(results: list[dict[str, Any]], width: int) -> list[list[str]]:
    """One row per run with a passkey grid that did not learn its task: inconclusive, never
    0%: ``not learned within budget`` with its reason, across ``width`` cells."""
    rows = []
    for r in ordered([r for r in results if r.get("passkey") and not is_learned(r)]):
        why = f"not learned within budget: {not_learned_reason(r)}"
        rows.append([f"`{scheme_label(r)}` seed {r['seed']}", "0", why, *[""] * (width - 1)])
    return rows


def _table_row(label: str, runs: list[dict[str, Any]], labels: list[str]) -> list[str]:
    """One :func:`passkey_table` row."""
    grid, first = mean_grid(runs), runs[0]["passkey"]
    columns = {x: [row[j] for row in grid] for j, x in enumerate(first["labels"])}
    means = {x: None if None in c else sum(c) / len(c) for x, c in columns.items()}
    supported = [j for j, x in enumerate(first["labels"]) if means[x] is not None]
    cells = [DASH if means.get(x) is None else f"{100 * means[x]:.1f}" for x in labels]
    worst = DASH
    if supported:
        by_depth = [sum(row[j] for j in supported) / len(supported) for row in grid]
        at = int(np.argmin(by_depth))
        if max(by_depth) > by_depth[at]:  # every depth alike: none is the worst
            worst = f"{first['depths'][at]:g} ({100 * by_depth[at]:.1f})"
    return [f"`{label}`", str(len(runs)), *cells, worst]
