"""Evaluate trained runs: length extrapolation and order sensitivity, one JSON-ready dict per run.

:func:`evaluate_run` loads ``RUN_DIR/checkpoint.pt``, evaluates it with :func:`evaluate_model`
and (by default) writes ``RUN_DIR/eval.json`` and TensorBoard scalars. The dict's layout is
:data:`lab.report.SCHEMA`. Exact-match here is teacher-forced, which equals exact-match under
greedy decoding (see :mod:`lab.metrics`; ``tests/test_eval.py`` checks it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from tqdm import tqdm

from data import Task
from lab.checkpoint import CHECKPOINT_NAME, checkpoint_path, load_checkpoint
from lab.config import (
    Config,
    ConfigError,
    EvalConfig,
    config_from_dict,
    config_to_dict,
    load_config,
)
from lab.extrapolation import LengthResult, default_lengths, evaluate_length
from lab.probe import minimal_pair_accuracy, permutation_probe
from lab.report import EVAL_NAME, SCHEMA_VERSION, write_eval_json, write_tensorboard
from lab.runtime import resolve_device
from model import Transformer


def find_runs(path: str | Path) -> list[Path]:
    """``path`` itself if it holds a checkpoint, else every folder below it that does (sorted).

    Raises:
        FileNotFoundError: ``path`` does not exist, is not a folder, or holds no checkpoint.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{str(path)!r} does not exist; give a run folder or a parent")
    if not path.is_dir():
        raise FileNotFoundError(f"{str(path)!r} is not a folder; give a run folder or a parent")
    if checkpoint_path(path).is_file():
        return [path]
    runs = sorted(p.parent for p in path.rglob(CHECKPOINT_NAME) if p.is_file())
    if not runs:
        raise FileNotFoundError(
            f"no {CHECKPOINT_NAME} in {str(path)!r} or its subfolders; "
            f"train one first with: python train.py run_dir={path}"
        )
    return runs


def load_run(run_dir: str | Path, device: torch.device) -> tuple[Config, Transformer, dict]:
    """The saved config, the model with its trained weights (eval mode), and the checkpoint.

    Raises:
        FileNotFoundError, ValueError, ConfigError: missing, unreadable or incompatible
            checkpoint; every message is one line.
    """
    state = load_checkpoint(run_dir, device)
    config = config_from_dict(state["config"])
    try:
        model = Transformer(config.model).to(device)
        model.load_state_dict(state["model"])
    except (RuntimeError, ValueError) as error:
        # load_state_dict: a header line, then one line per mismatch; keep the first mismatch.
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        detail = lines[min(1, len(lines) - 1)] if lines else type(error).__name__
        more = f" (and {len(lines) - 2} more)" if len(lines) > 2 else ""
        raise ValueError(
            f"checkpoint in {str(run_dir)!r} does not fit its saved model config: {detail}{more}"
        ) from None
    return config, model.eval(), state


def load_evaluation(run_dir: str | Path, eval_config: EvalConfig | None = None) -> dict | None:
    """A run's saved ``eval.json`` if it is current, else None (so the caller re-evaluates).

    Current means: valid JSON with this :data:`lab.report.SCHEMA_VERSION`, written after the
    checkpoint, and (when ``eval_config`` is given) evaluated with exactly those settings.
    """
    path = Path(run_dir) / EVAL_NAME
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(result, dict) or result.get("schema_version") != SCHEMA_VERSION:
        return None
    checkpoint = checkpoint_path(run_dir)
    if checkpoint.is_file() and checkpoint.stat().st_mtime > path.stat().st_mtime:
        return None
    wanted = eval_config and OmegaConf.to_container(OmegaConf.structured(eval_config))
    if eval_config is not None and result.get("config", {}).get("eval") != wanted:
        return None
    return result


def apply_eval_overrides(eval_config: EvalConfig, overrides: list[str]) -> EvalConfig:
    """``eval_config`` with ``eval.KEY=VALUE`` overrides applied (other sections are refused).

    Raises:
        ConfigError: an override outside ``eval.*``, an unknown key or a bad value (one line).
    """
    keys = []
    for item in overrides:
        key = item.split("=", 1)[0]
        if "=" not in item or not key.startswith("eval."):
            raise ConfigError(
                f"override {item!r} is not an eval.KEY=VALUE override; eval.py only changes "
                "eval.* settings, e.g. eval.samples=500"
            )
        keys.append(item[len("eval.") :])
    load_config(None, overrides)  # one-line errors naming the key and the allowed keys
    try:
        merged = OmegaConf.merge(OmegaConf.structured(eval_config), OmegaConf.from_dotlist(keys))
        result = OmegaConf.to_object(merged)
    except Exception as error:  # OmegaConf and __post_init__ errors
        raise ConfigError(f"bad eval override: {str(error).splitlines()[0]}") from None
    assert isinstance(result, EvalConfig)
    return result


def evaluation_lengths(
    config: Config, eval_config: EvalConfig, task: Task
) -> tuple[list[int], list[int]]:
    """The length grid, and every length to evaluate (the grid plus 2x and 4x the longest).

    Returns:
        ``(grid, lengths)``: sorted lists of ints; ``grid`` defines the summary figures.

    Raises:
        ValueError: a grid length below the task's ``min_length``.
    """
    low, high = config.data.train_min_length, config.data.train_max_length
    if eval_config.lengths is not None:
        grid = sorted(set(eval_config.lengths))
    else:
        grid = default_lengths(low, high, eval_config.max_length_factor)
    if grid[0] < task.min_length:
        raise ValueError(
            f"eval.lengths contains {grid[0]} but task {task.name!r} needs length >= "
            f"{task.min_length}"
        )
    return grid, sorted({*grid, 2 * high, 4 * high})


def extrapolation_ratio(
    results: list[LengthResult], grid: list[int], train_max: int, threshold: float
) -> tuple[float, str | None]:
    """Longest grid length ``L`` with exact-match >= ``threshold`` at every grid length <= ``L``
    (contiguous from the shortest), over ``train_max``; 0.0 if the shortest length fails.

    An unsupported length ends the run of passing lengths like a failing one.

    Returns:
        ``(ratio, note)``: ``note`` says where and why the run of passing lengths stopped early
        because of an unsupported length, else None.
    """
    by_length = {r.length: r for r in results}
    passed = 0
    for length in grid:
        result = by_length[length]
        if not result.supported:
            note = f"extrapolation_ratio: stops at unsupported length {length}: {result.reason}"
            return passed / train_max, note
        if result.exact_match < threshold:
            break
        passed = length
    return passed / train_max, None


LEARNED = 0.95
"""In-distribution exact-match below which a run is flagged as not having learned its task."""


def summarize(
    results: list[LengthResult], grid: list[int], train_min: int, train_max: int, threshold: float
) -> dict[str, Any]:
    """The summary figures of an extrapolation curve.

    Args:
        results: one :class:`LengthResult` per evaluated length (the grid, 2x and 4x included).
        grid: the grid lengths (a subset of the results' lengths).
        train_min, train_max: the training range.
        threshold: exact-match level of the extrapolation ratio.

    Returns:
        ``{"in_dist", "at_2x", "at_4x", "extrapolation_ratio", "threshold", "notes"}``: the mean
        exact-match over grid lengths inside the training range, exact-match at ``2 * train_max``
        and ``4 * train_max``, the ratio; None (with a note) where a length is unsupported.
    """
    by_length = {r.length: r for r in results}
    notes = []
    inside = [by_length[n] for n in grid if train_min <= n <= train_max]
    in_dist = None
    if not inside:
        notes.append(f"in_dist: no grid length inside the training range {train_min}..{train_max}")
    elif any(not r.supported for r in inside):
        bad = next(r for r in inside if not r.supported)
        notes.append(f"in_dist: length {bad.length} is unsupported: {bad.reason}")
    else:
        in_dist = sum(r.exact_match for r in inside) / len(inside)
        if in_dist < LEARNED:
            notes.append(
                f"in_dist: {in_dist:.1%} is below {LEARNED:.0%}: undertrained, or the task is "
                "not learnable for this model; its extrapolation figures say little"
            )
    at = {}
    for name, length in (("at_2x", 2 * train_max), ("at_4x", 4 * train_max)):
        result = by_length[length]
        at[name] = result.exact_match if result.supported else None
        if not result.supported:
            notes.append(f"{name}: length {length} is unsupported: {result.reason}")
    ratio, note = extrapolation_ratio(results, grid, train_max, threshold)
    if note:
        notes.append(note)
    return {
        "in_dist": in_dist,
        "at_2x": at["at_2x"],
        "at_4x": at["at_4x"],
        "extrapolation_ratio": ratio,
        "threshold": threshold,
        "notes": notes,
    }


def evaluate_model(
    model: torch.nn.Module,
    config: Config,
    eval_config: EvalConfig | None = None,
    progress: tqdm | None = None,
) -> dict[str, Any]:
    """Length extrapolation and order sensitivity of ``model`` trained under ``config``.

    Args:
        model: a :class:`model.Transformer` (or a module with the same forward, ``.config``
            and ``.position``) on its device.
        config: the run's config (task, training range, seed).
        eval_config: evaluation settings; None uses ``config.eval``.
        progress: a tqdm bar advanced once per length and once for the order probes.

    Returns:
        The content of ``eval.json`` (see :data:`lab.report.SCHEMA`) with ``run_dir`` None.
    """
    started = time.perf_counter()
    e = eval_config or config.eval
    d = config.data
    task = d.build_task()
    grid, lengths = evaluation_lengths(config, e, task)
    results = []
    for length in lengths:
        if progress is not None:
            progress.set_postfix_str(f"length {length}")
        results.append(evaluate_length(model, task, length, e.samples, config.seed, e.batch_tokens))
        if progress is not None:
            progress.update(1)
    summary = summarize(results, grid, d.train_min_length, d.train_max_length, e.threshold)
    probe_length = d.train_max_length
    probe = permutation_probe(
        model, task, probe_length, e.probe_samples, config.seed, e.batch_tokens
    )
    if probe.reason:
        summary["notes"].append(f"permutation probe: {probe.reason}")
    pairs = minimal_pair_accuracy(
        model, task, probe_length, e.probe_samples, config.seed, e.batch_tokens
    )
    if pairs is not None and pairs.reason:
        summary["notes"].append(f"minimal pairs: {pairs.reason}")
    if progress is not None:
        progress.update(1)
    saved = config_to_dict(config)
    saved["eval"] = OmegaConf.to_container(OmegaConf.structured(e))
    return {
        "schema_version": SCHEMA_VERSION,
        "run_dir": None,
        "config": saved,
        "position": config.model.position,
        "task": d.task,
        "seed": config.seed,
        "train_lengths": [d.train_min_length, d.train_max_length],
        "grid_lengths": grid,
        "lengths": [r.to_dict() for r in results],
        "summary": summary,
        "order": {
            "permutation_tvd": probe.tvd,
            "permutation_argmax_changed": probe.argmax_changed,
            "order_blind": probe.order_blind,
            "minimal_pair_member_accuracy": pairs.member_accuracy if pairs else None,
            "minimal_pair_accuracy": pairs.pair_accuracy if pairs else None,
            "probe_length": probe_length,
            "probe_samples": e.probe_samples,
        },
        "eval_seconds": time.perf_counter() - started,
    }


def evaluate_run(
    run_dir: str | Path,
    eval_config: EvalConfig | None = None,
    device: torch.device | str = "auto",
    progress: tqdm | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """Evaluate the checkpoint in ``run_dir``; write ``eval.json`` and TensorBoard scalars.

    Args:
        run_dir: a folder holding ``checkpoint.pt``.
        eval_config: evaluation settings; None uses the run's saved ``eval`` section.
        device: where to evaluate (``auto | cpu | cuda | cuda:N | mps`` or a torch.device).
        progress: a tqdm bar advanced once per length and once for the order probes.
        write: write ``RUN_DIR/eval.json`` and the ``extrapolation/*`` TensorBoard scalars.

    Returns:
        The content of ``eval.json`` (see :data:`lab.report.SCHEMA`).

    Raises:
        FileNotFoundError, ValueError, ConfigError: missing, unreadable or incompatible
            checkpoint, or an invalid length grid; every message is one line.
    """
    started = time.perf_counter()
    device = resolve_device(device) if isinstance(device, str) else device
    config, model, state = load_run(run_dir, device)
    model = model.at_evaluation((eval_config or config.eval).position_options)
    result = evaluate_model(model, config, eval_config, progress)
    if not state.get("finished", True):
        result["summary"]["notes"].append(
            f"training unfinished: checkpoint at step {state.get('step')} of {config.train.steps}"
        )
    result["run_dir"] = str(run_dir)
    result["eval_seconds"] = time.perf_counter() - started
    if write:
        write_eval_json(result, run_dir)
        write_tensorboard(result, run_dir)
    return result
