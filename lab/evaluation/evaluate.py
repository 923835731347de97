"""Evaluate trained runs: length extrapolation and order sensitivity, one JSON-ready dict per run.

:func:`evaluate_run` loads ``RUN_DIR/checkpoint.pt``, evaluates it with :func:`evaluate_model`
and (by default) writes ``RUN_DIR/eval.json`` and TensorBoard scalars. The dict's layout is
:data:`lab.evaluation.record.SCHEMA`. Exact-match here is teacher-forced, which equals exact-match
under greedy decoding (see :mod:`lab.evaluation.metrics`; ``tests/test_eval.py`` checks it).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import torch
import yaml
from omegaconf import OmegaConf
from tqdm import tqdm

from data import Task, task_class
from data.streams import evaluation_set
from lab.common.checkpoint import (
    CHECKPOINT_NAME,
    checkpoint_digest,
    checkpoint_path,
    load_checkpoint,
    load_model_state,
)
from lab.common.config import (
    Config,
    ConfigError,
    EvalConfig,
    check_lengths,
    check_overrides,
    config_from_dict,
    config_to_dict,
)
from lab.common.events.place import check_run_events, claimed_above, events_folder
from lab.common.files import linked_below, safe_folder
from lab.common.machine import machine_info
from lab.common.runtime import compute_dtype, resolve_device
from lab.diagnostics.lengths import diagnosed_length, diagnostics_record, training_answer_tokens
from lab.diagnostics.rope_use import rope_record
from lab.evaluation.extrapolation import (
    LengthResult,
    default_lengths,
    evaluate_batch,
    multiple_lengths,
)
from lab.evaluation.learned import LEARNED
from lab.evaluation.order import PermutationProbe, minimal_pair_accuracy, permutation_probe
from lab.evaluation.record import EVAL_NAME, SCHEMA, SCHEMA_VERSION, inconsistency, write_eval_json
from lab.evaluation.tensorboard import write_tensorboard
from lab.lm.passkey import passkey_record
from lab.lm.passkey_figure import write_heatmap
from lab.lm.perplexity import evaluate_lm, lm_plan
from lab.lm.record import LM_SCHEMA, LM_SCHEMA_VERSION, lm_inconsistency
from lab.training.resume import check_corpus
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
    events_root = claimed_above(path)
    if not runs and events_root is not None:
        sweep = events_root.with_name(events_root.name.removesuffix("-runs"))
        raise FileNotFoundError(
            f"{str(path)!r} holds a sweep's TensorBoard events, not runs; "
            f"give the sweep's folder instead: python eval.py {sweep}"
        )
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
    model = Transformer(config.model).to(device)
    load_model_state(model, state["model"], run_dir)
    return config, model.eval(), state


def load_evaluation(
    run_dir: str | Path,
    eval_config: EvalConfig | None = None,
    folder: str | Path | None = None,
    device: torch.device | None = None,
) -> dict | None:
    """A run's saved ``eval.json`` if it is current, else None (so the caller re-evaluates).

    Current means: valid JSON of this :data:`lab.evaluation.record.SCHEMA_VERSION` (an older
    version is out of date and returns None without a warning) that follows
    :data:`lab.evaluation.record.SCHEMA` and is consistent
    (:func:`lab.evaluation.record.inconsistency`; a damaged or hand-edited file, nested too deep for
    Python's JSON reader included, is treated as missing, with
    a one-line warning on stderr, so a sweep evaluates the run again and never reports it),
    written after the checkpoint, computed from this very checkpoint (its
    ``checkpoint.sha256``: an ``eval.json`` of another run copied or written into this folder
    is never taken for this run's), and (when ``eval_config`` is given) evaluated with exactly
    those settings, and (when ``device`` is given) made on a device of the same type (cpu,
    cuda, mps) in the dtype these settings give there (:func:`evaluated_elsewhere`: another
    device's figures are never reused, e.g. a GPU's bf16 ones on a CPU; one warning line).
    ``folder`` is where the ``eval.json`` lies (:func:`evaluate_run`'s ``write_to``); None
    means ``run_dir``.
    """
    path = Path(run_dir if folder is None else folder) / EVAL_NAME
    if folder is not None and linked_below(folder, run_dir) is not None:
        return None  # a linked folder in the run: evaluate_run refuses it by name
    try:
        result = json.loads(path.read_text())
        if older_version(result):
            return None  # written by an earlier version (no device and dtype): evaluate again
        problem = record_problem(result)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as error:
        problem = str(error).splitlines()[0]
    if problem is not None:
        print(f"warning: {path}: {problem}; treated as missing", file=sys.stderr)
        return None
    checkpoint = checkpoint_path(run_dir)
    if not checkpoint.is_file() or checkpoint.stat().st_mtime > path.stat().st_mtime:
        return None
    if (result.get("checkpoint") or {}).get("sha256") != checkpoint_digest(run_dir):
        return None  # another run's evaluation (eval.py RUN_A --out RUN_B), or retrained
    wanted = eval_config and OmegaConf.to_container(OmegaConf.structured(eval_config))
    if eval_config is not None and result.get("config", {}).get("eval") != wanted:
        return None
    elsewhere = device is not None and evaluated_elsewhere(result, device)
    if elsewhere:
        print(f"warning: {path}: {elsewhere}; evaluating it again", file=sys.stderr)
        return None
    return result | {"run_dir": str(run_dir)}  # where it is now (a copied folder names its own)


def evaluated_elsewhere(result: dict[str, Any], device: torch.device) -> str | None:
    """Why the consistent ``eval.json`` dict ``result`` is not what an evaluation on ``device``
    with its own settings would give (another device type, or another dtype: ``auto`` is bf16
    on CUDA and float32 elsewhere), or None."""
    saved = torch.device(result["device"])
    config = result["config"]  # its precision and eval.precision: this run's and these settings'
    precision = (config.get("eval") or {}).get("precision") or config.get("precision", "auto")
    dtype = compute_dtype(device, precision)
    dtype_name = str(dtype).removeprefix("torch.")
    if saved.type == device.type and result["dtype"] == dtype_name:
        return None
    return (
        f"evaluated on {result['device']} in {result['dtype']}, and this evaluation runs on "
        f"{device} in {dtype_name}"
    )


def record_problem(result: Any) -> str | None:
    """Why ``result``, an ``eval.json`` dict of the current version, is unusable, in a few
    words, or None: it does not follow its schema (:data:`lab.evaluation.record.SCHEMA`, or
    :data:`lab.lm.record.LM_SCHEMA` for ``"kind": "lm"``) or contradicts itself
    (:func:`lab.evaluation.record.inconsistency`, :func:`lab.lm.record.lm_inconsistency`).

    Raises:
        RecursionError: nested too deep to check.
    """
    lm = isinstance(result, dict) and result.get("kind") == "lm"
    try:
        jsonschema.validate(result, LM_SCHEMA if lm else SCHEMA)
    except jsonschema.ValidationError as error:
        return str(error).splitlines()[0]
    return lm_inconsistency(result) if lm else inconsistency(result)


def older_version(result: Any) -> bool:
    """``result`` is an ``eval.json`` of an earlier :data:`lab.evaluation.record.SCHEMA_VERSION`
    (an integer below it; a language-model one: :data:`lab.lm.record.LM_SCHEMA_VERSION`): not
    damaged, only out of date."""
    version = result.get("schema_version") if isinstance(result, dict) else None
    lm = isinstance(result, dict) and result.get("kind") == "lm"
    current = LM_SCHEMA_VERSION if lm else SCHEMA_VERSION
    return isinstance(version, int) and not isinstance(version, bool) and version < current


FLAGS = ("threads", "device")
"""Run settings that ``train.py`` and ``sweep.py`` take as ``KEY=VALUE`` and ``eval.py`` as
``--KEY VALUE``: a ``threads=1`` given to ``eval.py`` is answered with the flag."""


def apply_eval_overrides(eval_config: EvalConfig, overrides: list[str]) -> EvalConfig:
    """``eval_config`` with ``eval.KEY=VALUE`` overrides applied (other sections are refused).

    ``eval.position_options.KEY=VALUE`` changes one option; ``eval.position_options={}`` (or
    ``null``) drops every saved one, so a run saved with options its scheme refuses is
    evaluated as trained, and ``eval.position_options={KEY: VALUE}`` replaces them all
    (earlier ``eval.position_options.KEY`` overrides are dropped, later ones apply on top).

    Raises:
        ConfigError: an override outside ``eval.*``, an unknown key or a bad value (one line).
    """
    for item in overrides:
        key = item.split("=", 1)[0]
        if "=" not in item or not key.startswith("eval."):
            flag = f"; give --{key} {item.split('=', 1)[1]}" if key in FLAGS and "=" in item else ""
            raise ConfigError(
                f"override {item!r} is not an eval.KEY=VALUE override; eval.py only changes "
                f"eval.* settings, e.g. eval.samples=500{flag}"
            )
    whole = [i for i, item in enumerate(overrides) if item.split("=", 1)[0] == OPTIONS]
    if whole:  # replaces the saved options (a merge would keep them)
        eval_config = replace(eval_config, position_options=_options(overrides[whole[-1]]))
        overrides = [
            o for i, o in enumerate(overrides) if i > whole[-1] or not o.startswith(OPTIONS)
        ]
    keys = [item[len("eval.") :] for item in overrides]
    check_overrides(overrides)  # one-line errors naming the key and the allowed keys
    try:
        merged = OmegaConf.merge(OmegaConf.structured(eval_config), OmegaConf.from_dotlist(keys))
        result = OmegaConf.to_object(merged)
    except Exception as error:  # OmegaConf and __post_init__ errors
        raise ConfigError(f"bad eval override: {str(error).splitlines()[0]}") from None
    assert isinstance(result, EvalConfig)
    return result


OPTIONS = "eval.position_options"
"""The key of the evaluation-time position options (a mapping)."""


def _options(item: str) -> dict[str, Any]:
    """The mapping ``eval.position_options=VALUE`` gives (YAML; ``null`` is ``{}``).

    Raises:
        ConfigError: a value that is not a mapping or null (one line).
    """
    value = item.split("=", 1)[1]
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        parsed = value
    if parsed is None:
        return {}
    if not isinstance(parsed, dict) or not all(isinstance(k, str) for k in parsed):
        raise ConfigError(
            f"{item!r} is invalid; give a mapping, e.g. {OPTIONS}={{theta: 40000}}, {{}} or "
            f"null (no options: as trained), or one option: {OPTIONS}.KEY=VALUE"
        )
    return parsed


def evaluation_lengths(
    config: Config, eval_config: EvalConfig, task: Task
) -> tuple[list[int], list[int]]:
    """The length grid, and every length to evaluate (the grid plus the multiples of the longest
    training length, :func:`lab.evaluation.extrapolation.multiple_lengths`).

    Returns:
        ``(grid, lengths)``: sorted lists of ints; ``grid`` defines the summary figures.

    Raises:
        ValueError: a grid length below the task's ``min_length``.
        ConfigError: a length over :data:`lab.common.config.MAX_TOKENS` tokens
            (:func:`lab.common.config.check_lengths`: the check a run's config makes, here for
            ``eval.py``'s overrides, before anything is evaluated).
    """
    check_lengths(config.data, eval_config)
    if task.language_model:  # the multiples 1x, 2x, 4x ... (lab.lm.perplexity)
        lengths = list(lm_plan(config, eval_config, task)[0].values())
        return lengths, lengths
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
    return grid, sorted({*grid, *multiple_lengths(high, eval_config.max_length_factor).values()})


def summarize(
    results: list[LengthResult], grid: list[int], train_min: int, train_max: int, factor: float
) -> dict[str, Any]:
    """The summary figures of an extrapolation curve.

    Args:
        results: one :class:`LengthResult` per evaluated length (grid and multiples).
        grid: the grid lengths (a subset of the results' lengths).
        train_min, train_max: the training range.
        factor: ``eval.max_length_factor``: multiples up to it are summarised.

    Returns:
        ``{"in_dist", "at", "notes"}``: the mean exact-match over grid lengths inside the
        training range, and ``at``: exact-match at each multiple of ``train_max``
        (``{"1.1x": ..., "1.25x": ..., ...}``, see :data:`lab.evaluation.extrapolation.MULTIPLES`);
        None (with a note) where a length is unsupported.
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
    for label, length in multiple_lengths(train_max, factor).items():
        result = by_length[length]
        at[label] = result.exact_match if result.supported else None
        if not result.supported:
            notes.append(f"{label}: length {length} is unsupported: {result.reason}")
    return {"in_dist": in_dist, "at": at, "notes": notes}


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
        config: the run's config (task, training range, seed, precision).
        eval_config: evaluation settings; None uses ``config.eval``. Its ``precision`` (None:
            ``config.precision``) sets the dtype of the length grid's forward passes
            (:func:`eval_precision`).
        progress: a tqdm bar advanced once per length and once for the order probes.

    Returns:
        The content of ``eval.json`` (see :data:`lab.evaluation.record.SCHEMA`) with ``run_dir``
        None; ``device`` and ``dtype`` say where and in which dtype the length grid ran. A
        language-model task's is :func:`lab.lm.perplexity.evaluate_lm`'s
        (:data:`lab.lm.record.LM_SCHEMA`).
    """
    if task_class(config.data.task).language_model:
        return evaluate_lm(model, config, eval_config, progress)
    started = time.perf_counter()
    e = eval_config or config.eval
    d = config.data
    task = d.build_task()
    grid, lengths = evaluation_lengths(config, e, task)
    precision = eval_precision(config, e)
    diagnose = e.diagnostics != "none"
    answers = None
    if diagnose:
        answers = training_answer_tokens(task, config.seed, d.train_max_length, e.samples)
    results, spent = length_results(
        model, task, lengths, config.seed, e, precision, progress, answers
    )
    summary = summarize(results, grid, d.train_min_length, d.train_max_length, e.max_length_factor)
    probe = permutation_probe(
        model, task, d.train_max_length, e.probe_samples, config.seed, e.batch_tokens
    )
    if probe.reason:
        summary["notes"].append(f"permutation probe: {probe.reason}")
    if progress is not None:
        progress.update(1)
    device = next(model.parameters()).device
    record = eval_record(config, e, grid, results, summary, probe)
    if diagnose:
        record["diagnostics"] = run_diagnostics(model, config, e, task, record, answers, spent)
    passkey = passkey_record(model, config, e, precision)  # the passkey task only
    if passkey is not None:
        record["passkey"] = passkey
    record["eval_seconds"] = time.perf_counter() - started
    record["device"] = str(device)
    record["dtype"] = str(compute_dtype(device, precision)).removeprefix("torch.")
    return record


def run_diagnostics(
    model: torch.nn.Module,
    config: Config,
    e: EvalConfig,
    task: Task,
    record: dict[str, Any],
    train_answer_tokens: int,
    seconds: float,
) -> dict[str, Any]:
    """The run-level ``diagnostics`` of ``record``
    (:func:`lab.diagnostics.lengths.diagnostics_record`), with RoPE's frequency use at
    ``eval.diagnostics=full`` (:func:`lab.diagnostics.rope_use.rope_record`); ``seconds``: what
    the lengths' diagnostics took, to which RoPE's are added."""
    started, rope = time.perf_counter(), None
    if e.diagnostics == "full":
        lengths = [row["length"] for row in record["lengths"] if row["supported"]]
        train_max = config.data.train_max_length
        precision = eval_precision(config, e)
        rope = rope_record(model, task, train_max, lengths, config.seed, e, precision)
        if rope is None:
            record["summary"]["notes"].append(
                "eval.diagnostics=full: RoPE's frequency use needs RoPE in every layer and head; "
                "not measured"
            )
    seconds += time.perf_counter() - started
    return diagnostics_record(record, e.diagnostics, train_answer_tokens, seconds, rope)


def eval_precision(config: Config, eval_config: EvalConfig) -> str:
    """The precision the length grid runs in: ``eval.precision``, or the run's ``precision``
    when it is None (one of :data:`lab.common.runtime.PRECISIONS`)."""
    return eval_config.precision or config.precision


def length_results(
    model: torch.nn.Module,
    task: Task,
    lengths: list[int],
    seed: int,
    e: EvalConfig,
    precision: str,
    progress: tqdm | None = None,
    train_answer_tokens: int | None = None,
) -> tuple[list[LengthResult], float]:
    """Exact-match and token accuracy (in ``precision``) and minimal pairs (float32) of
    ``model`` at each of ``lengths``, with the diagnostics of ``e.diagnostics``
    (:func:`lab.diagnostics.lengths.diagnosed_length`; ``train_answer_tokens`` as there);
    ``progress`` advances once per length.

    Returns:
        The results, and the seconds the diagnostics' extra passes took (0 when off).
    """
    results, seconds = [], 0.0
    for length in lengths:
        if progress is not None:
            progress.set_postfix_str(f"length {length}")
        batch = evaluation_set(task, seed, length, e.samples)
        if e.diagnostics == "none":
            result = evaluate_batch(model, batch, e.batch_tokens, precision=precision)
        else:
            result, spent = diagnosed_length(
                model,
                task,
                batch,
                e.batch_tokens,
                precision,
                e.diagnostic_samples,
                train_answer_tokens,
            )
            seconds += spent
        pairs = minimal_pair_accuracy(model, task, length, e.probe_samples, seed, e.batch_tokens)
        if pairs is not None and pairs.pair_accuracy is not None:
            result.pairs, result.pair_accuracy = pairs.pairs, pairs.pair_accuracy
        results.append(result)
        if progress is not None:
            progress.update(1)
    return results, seconds


def eval_record(
    config: Config,
    e: EvalConfig,
    grid: list[int],
    results: list[LengthResult],
    summary: dict[str, Any],
    probe: PermutationProbe,
) -> dict[str, Any]:
    """The ``eval.json`` dict of one evaluation (:data:`lab.evaluation.record.SCHEMA`), its
    config holding the evaluation settings ``e``; the run's fields (``run_dir``,
    ``train_steps``, ``reached_target``, ``checkpoint``) None, ``eval_seconds`` 0, ``device``
    and ``dtype`` empty: :func:`evaluate_model` and :func:`evaluate_run` fill them in."""
    d = config.data
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
            "probe_length": d.train_max_length,
            "probe_samples": e.probe_samples,
        },
        "train_steps": None,
        "reached_target": None,
        "eval_seconds": 0.0,
        "checkpoint": None,
        "machine": machine_info(),
        "device": "",
        "dtype": "",
    }


def training_reached_target(config: Config, state: dict[str, Any]) -> bool | None:
    """Whether the checkpoint's training met ``train.target_accuracy`` at its last periodic
    evaluation (:func:`lab.training.run_logs.reached_target`); None when the run has no target, or
    its checkpoint predates the record (written by a version whose early stopping read fewer
    lengths, so it says nothing either way)."""
    if config.train.target_accuracy is None or "reached_target" not in state:
        return None
    return state["reached_target"] is True


def evaluate_run(
    run_dir: str | Path,
    eval_config: EvalConfig | None = None,
    device: torch.device | str = "auto",
    progress: tqdm | None = None,
    write_to: str | Path | None = None,
    root: str | Path | None = None,
) -> dict[str, Any]:
    """Evaluate the checkpoint in ``run_dir``; write ``eval.json`` and TensorBoard scalars.

    Args:
        run_dir: a folder holding ``checkpoint.pt``.
        eval_config: evaluation settings; None uses the run's saved ``eval`` section.
        device: where to evaluate (``auto | cpu | cuda | cuda:N | mps`` or a torch.device).
        progress: a tqdm bar advanced once per length and once for the order probes.
        write_to: folder for ``eval.json`` and its TensorBoard events (``write_tensorboard``);
            None writes them into ``run_dir``. The events of a folder inside ``run_dir`` go to
            the same place below the run's ``log_dir`` when it has one
            (:func:`evaluation_events_folder`).
        root: the folder the writes stay in: every folder from it down to ``write_to`` is
            refused if it is a symbolic link (before the work, and again when created for the
            writes, :func:`lab.common.files.safe_folder`);
            default ``run_dir`` when ``write_to`` is None or below it, else ``write_to``.

    Returns:
        The content of ``eval.json`` (see :data:`lab.evaluation.record.SCHEMA`); its ``checkpoint``
        names the run, the step and the SHA-256 of the checkpoint evaluated.

    Raises:
        FileNotFoundError, ValueError, ConfigError: missing, unreadable or incompatible
            checkpoint, or an invalid length grid; every message is one line.
        OSError: a folder on the way to ``write_to`` is a link or cannot be written.
    """
    started = time.perf_counter()
    device = resolve_device(device) if isinstance(device, str) else device
    destination, root = checked_destination(run_dir, write_to, root)
    digest = checkpoint_digest(run_dir)
    config, model, state = load_run(run_dir, device)
    check_corpus(config, state, "evaluate")
    events = evaluation_events_folder(run_dir, config, destination)
    check_events_destination(events, run_dir, config)  # before the work, and eval.json
    model = model.at_evaluation((eval_config or config.eval).position_options)
    result = evaluate_model(model, config, eval_config, progress)
    add_training_record(result, config, state)
    result["run_dir"] = str(run_dir)
    result["eval_seconds"] = time.perf_counter() - started
    step = state.get("step")
    result["checkpoint"] = {
        "run": Path(run_dir).resolve().name,
        "step": step if isinstance(step, int) else None,
        "sha256": digest,
    }
    write_evaluation(result, run_dir, config, (destination, root, events))
    return result


def write_evaluation(
    result: dict[str, Any],
    run_dir: str | Path,
    config: Config,
    places: tuple[Path, str | Path, Path],
) -> None:
    """Write ``result`` (``eval.json``'s content) of the run in ``run_dir`` (its saved config
    ``config``, whose own ``run_dir`` may name where it was trained): ``eval.json`` (and a
    passkey heatmap) into ``destination``, created below ``root`` now, when a file goes into
    it, and its TensorBoard events into ``events``; ``places`` is ``(destination, root,
    events)`` as :func:`evaluate_run` checked them.

    Raises:
        OSError: a folder on the way is a link or cannot be written.
    """
    destination, root, events = places
    safe_folder(destination, root)
    if events != destination:
        check_run_events(run_dir, config.log_dir, config.data.task, claim=True)
        safe_folder(events, events_folder(run_dir, config.log_dir, config.data.task))
    write_tensorboard(result, events)  # first: a stop between the two leaves eval.json stale,
    write_eval_json(result, destination)  # so the next run evaluates again and both agree
    if result.get("passkey"):
        write_heatmap(result, destination)


def evaluation_events_folder(run_dir: str | Path, config: Config, destination: str | Path) -> Path:
    """Where an evaluation written to ``destination`` puts its TensorBoard events: for a run
    with ``log_dir=sweep`` (:func:`lab.common.events.place.events_folder`), ``destination``'s
    place below the run folder taken below the run's events folder (``RUN/evaluations/LABEL``
    -> ``EVENTS/evaluations/LABEL``); else, or for a ``destination`` outside the run folder
    (``eval.py RUN --out DIR``), ``destination`` itself."""
    destination = Path(destination)
    if not config.log_dir:
        return destination
    try:
        below = destination.relative_to(run_dir)
    except ValueError:
        return destination
    return events_folder(run_dir, config.log_dir, config.data.task) / below


def check_events_destination(events: Path, run_dir: str | Path, config: Config) -> None:
    """Refuse an evaluation whose TensorBoard events cannot be written to ``events``: a file
    stands on its way, or the sweep's events folder is not the run's own
    (:func:`lab.common.events.place.check_run_events`).

    Raises:
        OSError: one line naming the file or folder (nothing was written).
    """
    check_run_events(run_dir, config.log_dir, config.data.task)
    for folder in (events, *events.parents):
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(
                f"{str(folder)!r} is a file; the evaluation writes its TensorBoard events "
                f"into {str(events)!r} (nothing was written)"
            )
        if folder.exists():
            return


def checked_destination(
    run_dir: str | Path, write_to: str | Path | None, root: str | Path | None
) -> tuple[Path, str | Path]:
    """Where :func:`evaluate_run` writes (``write_to``, default ``run_dir``) and the folder its
    writes stay in (``root``, default as :func:`evaluate_run` says), checked before the work.

    Raises:
        OSError: a folder from ``root`` down to the destination is a symbolic link.
    """
    destination = Path(run_dir if write_to is None else write_to)
    if root is None:
        inside = destination == Path(run_dir) or Path(run_dir) in destination.parents
        root = run_dir if inside else destination
    link = linked_below(destination, root)  # checked before the work, again at the writes
    if link is not None:
        raise OSError(
            f"refusing to write into {str(link)!r}: it is a symbolic link; writes never leave "
            f"{str(root)!r} through a link (remove or rename it)"
        )
    return destination, root


def add_training_record(result: dict[str, Any], config: Config, state: dict[str, Any]) -> None:
    """Fill ``result``'s training fields from the checkpoint ``state`` (``train_steps``,
    ``reached_target``, and ``parent`` for a fine-tuned run) and note an unfinished run, or
    one that ended below its target."""
    if not state.get("finished", True):
        result["summary"]["notes"].append(
            f"training unfinished: checkpoint at step {state.get('step')} of {config.train.steps}"
        )
    result["train_steps"] = state.get("step")
    result["reached_target"] = training_reached_target(config, state)
    parents = [h["parent"] for h in state.get("history", []) if "parent" in h]
    if parents:  # a run fine-tuned from another (lab.training.extend.parent_of)
        result["parent"] = parents[0]
    if result["reached_target"] is False and state.get("finished", True):
        result["summary"]["notes"].append(
            f"not learned: training ended at step {state.get('step')} of {config.train.steps} "
            f"below train.target_accuracy={config.train.target_accuracy} at some training length"
        )
