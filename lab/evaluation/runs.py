"""Evaluating the runs ``eval.py`` is given: each run's plan (its overrides checked against its
saved config, where its ``eval.json`` goes) before any work, then the evaluations."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import torch
from tqdm import tqdm

from lab.common.checkpoint import CHECKPOINT_NAME, checkpoint_path
from lab.common.config import (
    Config,
    ConfigError,
    EvalConfig,
    check_diagnostics,
    check_evaluable,
    check_outside_inputs,
)
from lab.common.files import check_not_folders, linked_below, writable_folder
from lab.common.outputs import EVALUATION_FILES, foreign_files
from lab.common.runlock import run_lock
from lab.evaluation.evaluate import apply_eval_overrides, evaluate_run, evaluation_lengths
from lab.evaluation.labels import run_label, scheme_label
from lab.evaluation.record import EVAL_NAME

RUN_ERRORS = (ConfigError, OSError, ValueError)
"""What a bad value or a broken run raises (one line each): one run fails, not the command."""


class Plan(NamedTuple):
    """One run to evaluate: its folder, its evaluation settings, the folder for its
    ``eval.json`` and the progress steps it takes (one per length, one for the order probes)."""

    run: Path
    eval_config: EvalConfig
    write_to: Path
    steps: int


def plan_run(run: Path, config: Config, overrides: list[str], out: Path | None, given: str) -> Plan:
    """Check ``overrides`` against the saved ``config`` of ``run`` as ``train.py`` checks a new
    run (every length against :data:`lab.common.config.MAX_TOKENS`, the task's shortest length,
    the scheme's evaluable options, diagnostics settings that would do nothing) and where its
    ``eval.json`` goes (``out`` mirrors the runs' paths below ``given``; None writes into the
    run), creating nothing.

    Raises:
        ConfigError, ValueError: a value this run cannot be evaluated with (one line).
        OSError: the folder cannot be written, or ``--out`` is another run's folder (its
            ``eval.json`` would be replaced).
    """
    eval_config = apply_eval_overrides(config.eval, overrides)
    check_evaluable(replace(config, eval=eval_config))  # and the whole-config checks (lengths)
    check_diagnostics(config.data, eval_config, {o.split("=", 1)[0] for o in overrides})
    task = config.data.build_task()
    steps = len(evaluation_lengths(config, eval_config, task)[1]) + 1
    if out is not None:  # reports and eval.json in its corpus would change the run's data
        check_outside_inputs(str(out), task, "--out")
    write_to = run if out is None else out / run.relative_to(given)
    if not inside(write_to, run):  # --out elsewhere: nothing there may be another's
        check_foreign(write_to)
    link = linked_below(write_to, out) if out is not None else None
    if link is not None:  # refused here, before any run is evaluated (again at the writes)
        raise OSError(
            f"refusing to write into {str(link)!r}: it is a symbolic link; writes never leave "
            f"{str(out)!r} through a link (remove or rename it)"
        )
    check_not_folders(write_to, [EVAL_NAME])
    return Plan(run, eval_config, writable_folder(write_to, create=False), steps)


def inside(folder: Path, run: Path) -> bool:
    """``folder`` is ``run`` or lies below it, however either is spelled (``RUN/.``, a link)."""
    folder, run = folder.resolve(), run.resolve()
    return folder == run or run in folder.parents


def check_foreign(write_to: Path) -> None:
    """Refuse a ``--out`` folder for one run's ``eval.json`` that holds another run or files
    of those names the project did not write (:func:`lab.common.outputs.foreign_files`: a
    user's file, a link).

    Raises:
        OSError: one line naming the folder and what it holds.
    """
    if checkpoint_path(write_to).is_file():
        raise OSError(
            f"--out {str(write_to)!r} holds another run ({CHECKPOINT_NAME}); its eval.json "
            "would be replaced: give --out a folder of its own"
        )
    foreign = foreign_files(write_to, [EVAL_NAME, *EVALUATION_FILES])
    if foreign:
        raise OSError(
            f"--out {str(write_to)!r} holds {', '.join(foreign)} that this project did not "
            "write (or a link); the evaluation would replace it: give --out a folder of its own"
        )


def hold_runs(plans: list[Plan], held: contextlib.ExitStack) -> None:
    """Take into ``held`` the lock of every planned run whose files go into its own folder (no
    ``--out``, or ``--out`` naming the run itself), before anything is evaluated: a run that a
    training process holds refuses the whole command, as ``--resume`` refuses it, instead of
    reports of the other runs written as the folder's.

    Raises:
        RunLocked: a run is held by another process (one line naming it and the holder).
    """
    for run, _, write_to, _ in plans:
        if inside(Path(write_to), run):  # RUN, or --out spelled as RUN
            held.enter_context(run_lock(run))


def evaluate_plans(
    plans: list[Plan],
    device: torch.device,
    progress: tqdm,
    out: Path | None,
    on_error: Callable[[Exception, Path], Any],
) -> list[dict[str, Any]]:
    """Evaluate every plan in order (:func:`lab.evaluation.evaluate.evaluate_run`), writing each
    ``eval.json``; a run that fails with one of :data:`RUN_ERRORS` is passed to
    ``on_error(error, run)`` and the others go on. Hold the runs' locks first
    (:func:`hold_runs`).

    Args:
        plans: from :func:`plan_run`.
        device: where to evaluate.
        progress: the bar, named after the run being evaluated.
        out: ``--out`` (the folder no write leaves through a link), None when each run's
            files go into the run (its own folder is then that folder).

    Returns:
        The ``eval.json`` dicts of the runs evaluated, in plan order.
    """
    results = []
    for run, eval_config, write_to, _ in plans:
        progress.set_description(run.name)
        try:
            root = out if out is not None else run  # writes never follow a link out of it
            results.append(evaluate_run(run, eval_config, device, progress, write_to, root))
        except RUN_ERRORS as error:
            on_error(error, run)
    return results


def lm_summary_line(result: dict[str, Any], out: Path | None = None) -> str:
    """One line of a language-model ``eval.json`` (``kind: "lm"``): the run, its scheme, and
    the held-out perplexity with its 95% bootstrap interval at each multiple of the training
    length (``-`` where the scheme cannot encode the length), e.g.
    ``rope-text-seed0: rope, perplexity 1x 4.66 [4.61, 4.72], 2x 5.10 [...], ...``."""
    figures = []
    for row in result["lengths"]:
        if row["supported"]:
            low, high = row["perplexity_low"], row["perplexity_high"]
            span = (
                f"[{low:.2f}, {high:.2f}]"
                if low is not None
                else f"[n/a: {row['windows']} window(s)]"
            )
            figures.append(f"{row['label']} {row['perplexity']:.2f} {span}")
        else:
            figures.append(f"{row['label']} -")
    tokens = result["lengths"][0]["tokens_scored"]
    return (
        f"{run_label(result, out)}: {scheme_label(result)} on {result['task']}, held-out "
        f"perplexity over {tokens:,} tokens: {', '.join(figures)}"
    )
