"""Continuing a run: the saved settings, the changes ``--resume`` allows, restoring the state.

A resumed run is the run that was saved: its config comes from its checkpoint, and only
:data:`lab.common.config.RESUME_KEYS` may change (where and how it runs, and the step budget). Each
change is listed in the checkpoint's ``history``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lab.common.checkpoint import load_checkpoint, load_model_state
from lab.common.config import (
    RESUME_KEYS,
    Config,
    ConfigError,
    changed_keys,
    config_from_dict,
    with_overrides,
)
from lab.common.runtime import restore_rng
from lab.training.run import Run


def resume_config(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The config saved in ``RUN_DIR/checkpoint.pt``, with ``run_dir`` set to where the folder
    is now and the explicit ``overrides`` applied (only :data:`lab.common.config.RESUME_KEYS`).

    Raises:
        ConfigError: an override of another key (one line naming it and the allowed ones), or
            a saved config this version cannot read.
        FileNotFoundError, ValueError: no readable checkpoint (see :func:`load_checkpoint`).
    """
    keys = [item.partition("=")[0] for item in overrides]
    refused = [k for k in keys if k not in RESUME_KEYS]
    if refused:
        raise ConfigError(
            f"--resume keeps the run's saved settings; {', '.join(refused)} cannot change on "
            f"resume (allowed: {', '.join(RESUME_KEYS)}); start a new run for other settings"
        )
    saved = load_checkpoint(run_dir)["config"]
    return with_overrides(config_from_dict({**saved, "run_dir": str(run_dir)}), overrides)


def resume_history(config: Config, state: dict[str, Any]) -> list[dict[str, Any]]:
    """Check that ``config`` may continue the checkpoint ``state``; return the run's change
    history with this resume's changes appended (``{"step": N, "changed": {key: [old, new]}}``).

    Raises:
        ConfigError: ``config`` differs from the saved one outside
            :data:`lab.common.config.RESUME_KEYS`, asks for fewer steps than were taken, or (a
            language-model run) its corpus changed (:func:`check_corpus`).
        ValueError: a checkpoint without training state (optimizer, schedule, step, generators).
    """
    run_dir = Path(config.run_dir)
    # the folder may have moved, and is spelt as given (runs/x/ is runs/x): where, not what
    saved = config_from_dict({**state["config"], "run_dir": config.run_dir})
    changed = changed_keys(saved, config)
    refused = [f"{k}: saved {a!r}, given {b!r}" for k, (a, b) in changed.items()]
    refused = [r for r, k in zip(refused, changed, strict=True) if k not in RESUME_KEYS]
    if refused:
        more = f"; and {len(refused) - 3} more" if len(refused) > 3 else ""
        raise ConfigError(
            f"cannot resume {str(run_dir)!r} with other settings ({'; '.join(refused[:3])}"
            f"{more}); only {', '.join(RESUME_KEYS)} may change on resume"
        )
    check_corpus(config, state)
    missing = [k for k in ("optimizer", "scheduler", "step", "rng") if k not in state]
    if missing:
        raise ValueError(
            f"checkpoint in {str(run_dir)!r} has no {', '.join(missing)}; it cannot be "
            "resumed (evaluate it with eval.py, or train a new run)"
        )
    if config.train.steps < state["step"]:
        raise ConfigError(
            f"train.steps={config.train.steps} is below the {state['step']} steps "
            f"{str(run_dir)!r} has taken; give train.steps >= {state['step']}"
        )
    history = list(state.get("history", []))
    if changed:
        change = {k: list(values) for k, values in changed.items()}
        history.append({"step": state["step"], "changed": change})
    return history


def check_corpus(config: Config, state: dict[str, Any], action: str = "resume") -> None:
    """Refuse to continue (``action`` ``resume``) or evaluate (``evaluate``) a language-model
    run on another corpus than the one it was trained on (the checkpoint's ``corpus.sha256``,
    :meth:`data.text.Corpus.record`): another Python's standard library, or a user file that
    changed (its held-out split would shift under the run).

    Raises:
        ConfigError: one line naming both digests.
    """
    task = config.data.build_task()
    saved = (state.get("corpus") or {}).get("sha256")
    if not task.language_model or saved is None:
        return
    corpus = task.corpus
    if corpus.sha256 != saved:
        raise ConfigError(
            f"cannot {action} {config.run_dir!r}: it was trained on a corpus of sha256 {saved}, "
            f"and {corpus.source!r} now has sha256 {corpus.sha256} (another Python version or "
            "a changed file); train a new run"
        )


def restore(run: Run, state: dict[str, Any]) -> None:
    """Load a checkpoint into ``run``: weights, optimizer, schedule (recomputed for
    ``run.config.train.steps``), step, generators and results so far.

    Raises:
        ValueError: the weights or the optimizer state do not fit the saved config (one line).
    """
    run_dir = run.config.run_dir
    load_model_state(run.model, state["model"], run_dir)
    try:
        run.optimizer.load_state_dict(state["optimizer"])
        run.scheduler.load_state_dict(state["scheduler"])
    except (KeyError, ValueError) as error:
        raise ValueError(
            f"checkpoint in {str(run_dir)!r}: optimizer state does not fit its model ({error})"
        ) from None
    step = run.step = run.saved_step = state["step"]
    for group, base, rule in zip(
        run.optimizer.param_groups, run.scheduler.base_lrs, run.scheduler.lr_lambdas, strict=True
    ):
        group["lr"] = base * rule(step)  # as LambdaLR computes it; differs only if steps changed
    restore_rng(state["rng"])
    old_budget = state["config"]["train"]["steps"]
    extended = run.config.train.steps > old_budget
    r = run.result
    r.step, r.final_loss, r.eval = step, state.get("final_loss", math.nan), state.get("eval", {})
    r.finished = bool(state.get("finished")) and not extended
    r.reached_target = state.get("reached_target") is True  # (absent in older checkpoints)
    r.target_streak = int(state.get("target_streak", int(r.reached_target)))
    run.eval_pending = state.get("eval_pending") is True  # its periodic evaluation was stopped
    if not r.finished and step >= run.config.train.steps:  # resumed at exactly its budget: the
        run.eval_pending = True  # final evaluation (and early-stopping test) of that step is due
