"""Extend, then fine-tune: ``python train.py --extend PARENT_RUN_DIR [key=value ...]``.

The recipe of position interpolation (Chen et al. 2023, "Extending Context Window of Large
Language Models via Positional Interpolation", sec. 3) and YaRN (Peng et al. 2023, sec. 4):
take a run trained at length ``L``, change its position options (e.g. a RoPE extension rule,
``model.options.rope.scaling=yarn model.options.rope.scaling_factor=4``) and its lengths
(``data.train_max_length=256``), and fine-tune it for a few steps into a NEW run folder.

The child is the parent's saved config with the overrides on top; its weights start as the
parent's, bit for bit; its optimizer, schedule (warmup and cosine over the child's
``train.steps``) and step counter start fresh. The architecture (:data:`ARCHITECTURE`) cannot
change. How: the child's folder is given a step-0 checkpoint holding the parent's weights and a
fresh optimizer, and the ordinary training loop resumes it
(:func:`lab.training.trainer.train`), so every guarantee of a run (exact resume, stop signals,
atomic checkpoints) holds for the child too; ``python train.py --resume CHILD`` continues it.

The child records its parent, ``{"run", "run_dir", "step", "sha256", "corpus_sha256",
"changed"}`` (folder name, path as given, the checkpoint's step and SHA-256, the SHA-256 of the
corpus it was trained on, and every setting that differs from the parent's as ``key: [parent,
child]``): in its checkpoint's ``history`` (kept by every save and
resume; :func:`parent_of`), in ``eval.json`` (``parent``), and in TensorBoard (the HParams
tab's ``parent``, ``parent_step`` and ``parent_sha256``, and a ``parent`` text). A child is
refused, before its folder is made, when its folder is inside (or around) its parent's, when an
override changes the shape of a weight, and when its corpus is not its parent's
(:func:`check_child`).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.tensorboard.summary import hparams as hparams_summary

from lab.common.checkpoint import (
    check_fresh_start,
    check_trainer_paths,
    checkpoint_digest,
    checkpoint_path,
    clear_events,
    clear_run,
    load_checkpoint,
    load_model_state,
    nested_run_problem,
)
from lab.common.config import (
    Config,
    ConfigError,
    changed_keys,
    check_evaluable,
    config_from_dict,
    with_overrides,
)
from lab.common.events.place import check_run_events, events_folder
from lab.common.events.writer import open_summary_writer
from lab.common.outputs import output_problem
from lab.common.runlock import RunLocked, removed_if_refused, run_lock
from lab.training.run import TrainingDiverged, TrainingInterrupted, TrainResult
from lab.training.run_logs import HEADLINE, hparams, mark_axes
from lab.training.trainer import start_run, train
from model import Transformer

ARCHITECTURE = (
    "model.vocab_size",
    "model.d_model",
    "model.n_layers",
    "model.n_heads",
    "model.d_ff",
    "model.position",
    "model.layout",
    "model.heads",
    "model.nope_every",
    "model.tie_embeddings",
)
"""Settings a child must share with its parent: they shape the weights it starts from (the
vocabulary follows ``data.task``), or decide which scheme each layer and head runs (a layout
that gave half a RoPE parent's heads ALiBi was fine-tuned as if it were the parent)."""
HELD_OUT = ("data.options.text.holdout_every",)
"""Settings a child must share with its parent because they decide which text is held out: with
another split the child would be tested on text its parent trained on."""

SUFFIX = "-extended"
"""The child's default folder: the parent's path plus this suffix."""

PLACES = ("run_dir", "log_dir")
"""Settings that say where a run's files go, not what it learns: never listed as changed."""


def parent_of(state: dict[str, Any]) -> dict[str, Any] | None:
    """The parent record of a loaded checkpoint ``state`` (see the module docstring), or None
    for a run that was not fine-tuned from another."""
    entries = [h["parent"] for h in state.get("history", []) if isinstance(h.get("parent"), dict)]
    return entries[0] if entries else None


def child_config(
    parent_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()
) -> tuple[Config, dict[str, Any]]:
    """The child's config (the parent's saved config with ``overrides``; ``run_dir`` defaults
    to ``PARENT_RUN_DIR`` + :data:`SUFFIX`, and its TensorBoard events go into its own folder
    unless ``overrides`` give a ``log_dir``: never into the parent's) and the parent's loaded
    checkpoint.

    Raises:
        FileNotFoundError: no parent folder, or no checkpoint in it (one line).
        ValueError: an unreadable checkpoint, or a parent whose training has not finished.
        ConfigError: a bad override, a changed :data:`ARCHITECTURE` setting, the child's
            folder equal to the parent's or refused as every output folder is
            (:func:`lab.common.outputs.output_problem`; one line each).
    """
    parent_dir = Path(parent_dir)
    state = load_checkpoint(parent_dir)
    if not state.get("finished", False):
        raise ValueError(
            f"parent {str(parent_dir)!r} has not finished training (checkpoint at step "
            f"{state.get('step')}); finish it first with python train.py --resume "
            f"{shlex.quote(str(parent_dir))}"
        )
    parent = config_from_dict({**state["config"], "run_dir": str(parent_dir)})
    child = with_overrides(parent, [f"run_dir={parent_dir}{SUFFIX}", "log_dir=", *overrides])
    check_child(child, parent_dir, state)
    check_evaluable(child)
    return child, state


def check_child(child: Config, parent_dir: str | Path, state: dict[str, Any]) -> None:
    """Everything that must hold before a child's folder is created (by either entry point):
    its folder apart from its parent's (not the same, not inside it nor around it), the same
    architecture (:func:`check_architecture`), weights of the same shapes
    (:func:`check_weights_fit`) and the same corpus (:func:`check_same_corpus`).

    Raises:
        ConfigError: one line naming the setting and the values.
    """
    parent_dir, run_dir = Path(parent_dir).resolve(), Path(child.run_dir).resolve()
    if run_dir == parent_dir:
        raise ConfigError(
            f"run_dir={child.run_dir!r} is the parent's own folder; the fine-tuned run goes "
            f"into a new folder (default {str(parent_dir)}{SUFFIX}; give run_dir=...)"
        )
    problem = output_problem(child.run_dir, "run_dir") or nested_run_problem(child.run_dir)
    if problem is None and run_dir in parent_dir.parents:
        problem = (
            f"run_dir={child.run_dir!r} holds the parent's folder {str(parent_dir)!r}; the "
            "fine-tuned run goes into a folder of its own beside it"
        )
    if problem:
        raise ConfigError(problem)
    parent = config_from_dict({**state["config"], "run_dir": str(parent_dir)})
    check_architecture(parent, child)
    check_weights_fit(parent, child, state)
    check_same_corpus(child, parent_dir, state)


def check_architecture(parent: Config, child: Config) -> None:
    """Refuse a child that changes an :data:`ARCHITECTURE` setting.

    Raises:
        ConfigError: one line naming the first changed setting, both values, and what may
            change.
    """
    changed = changed_keys(parent, child)
    vocab = child.data.build_task().vocab_size  # a saved config keeps the parent's vocab_size
    if vocab != parent.model.vocab_size:
        changed["model.vocab_size"] = (parent.model.vocab_size, vocab)
    for key in (*ARCHITECTURE, *HELD_OUT):
        if key in changed:
            before, after = changed[key]
            kept = "held-out text" if key in HELD_OUT else "weights"
            raise ConfigError(
                f"{key} cannot change when extending a run (parent {before!r}, child "
                f"{after!r}): the child keeps the parent's {kept}; change position options, "
                "lengths and training settings only"
            )


def check_weights_fit(parent: Config, child: Config, state: dict[str, Any]) -> None:
    """Refuse a child whose model has other weights than the parent's checkpoint ``state``
    holds (a setting outside :data:`ARCHITECTURE` that adds or reshapes a tensor, e.g.
    ``model.softmax_scale=ssmax``); the child's model is built on the ``meta`` device, so no
    memory is spent and nothing is written.

    Raises:
        ConfigError: one line naming the changed settings and the first tensor that differs.
    """
    with torch.device("meta"):
        wanted = {k: tuple(v.shape) for k, v in Transformer(child.model).state_dict().items()}
    saved = {k: tuple(v.shape) for k, v in state["model"].items()}
    if wanted == saved:
        return
    key = next((k for k in wanted if saved.get(k) != wanted[k]), None) or next(iter(saved))
    detail = (
        f"{key} is {saved[key]} in the parent and {wanted[key]} in the child"
        if key in saved and key in wanted
        else f"{key} is {'not in the parent' if key in wanted else 'not in the child'}"
    )
    changed = {k: v for k, v in changed_keys(parent, child).items() if k not in PLACES}
    named = {k: v for k, v in changed.items() if k.startswith("model.")} or changed
    settings = "; ".join(f"{k}={b!r} (parent {a!r})" for k, (a, b) in named.items())
    raise ConfigError(
        f"{settings or 'the overrides'} change the model's weights ({detail}); the child "
        "starts from the parent's weights: change position options, lengths and training "
        "settings only"
    )


def check_same_corpus(child: Config, parent_dir: str | Path, state: dict[str, Any]) -> None:
    """Refuse a language-model child whose corpus is not the one its parent was trained on
    (the parent checkpoint's ``corpus.sha256``): the child would learn other text, and its
    evaluation would score other held-out windows than its parent's.

    Raises:
        ConfigError: one line naming the parent and both digests.
    """
    saved = (state.get("corpus") or {}).get("sha256")
    task = child.data.build_task()
    if saved is None or not task.language_model or task.corpus.sha256 == saved:
        return
    raise ConfigError(
        f"cannot fine-tune from {str(parent_dir)!r}: it was trained on a corpus of sha256 "
        f"{saved}, and {task.corpus.source!r} now has sha256 {task.corpus.sha256}; the child "
        "would train on other text and score other windows than its parent (restore the "
        "corpus, or retrain the parent)"
    )


def stale_child(child_dir: str | Path, parent_dir: str | Path) -> str | None:
    """Why the child in ``child_dir`` is stale, in one line naming it, or None: it holds a
    checkpoint whose parent record's SHA-256 is not that of ``parent_dir``'s checkpoint now
    (the parent was retrained or replaced since the child was seeded), or none at all. None
    when ``child_dir`` holds no checkpoint (nothing to be stale).

    Raises:
        FileNotFoundError, ValueError: an unreadable checkpoint of either run.
    """
    if not checkpoint_path(child_dir).is_file():
        return None
    recorded = (parent_of(load_checkpoint(child_dir)) or {}).get("sha256")
    now = checkpoint_digest(parent_dir)
    if recorded == now:
        return None
    return (
        f"{Path(child_dir).name} was fine-tuned from a checkpoint of sha256 {recorded}, and "
        f"its parent {str(parent_dir)!r} now holds sha256 {now} (the parent was retrained)"
    )


def check_parent_unchanged(child_dir: str | Path) -> None:
    """Refuse to continue the child in ``child_dir`` when the parent it was fine-tuned from
    now holds another checkpoint (:func:`stale_child`): its training would go on from weights
    that no longer exist beside a parent that says otherwise. A run that is no child, or whose
    parent's checkpoint is gone (nothing to compare), passes.

    Raises:
        ConfigError: one line naming both checkpoints and what to do.
        FileNotFoundError, ValueError: an unreadable checkpoint of either run.
    """
    record = parent_of(load_checkpoint(child_dir)) or {}
    parent_dir = record.get("run_dir")
    if not isinstance(parent_dir, str) or not checkpoint_path(parent_dir).is_file():
        return
    stale = stale_child(child_dir, parent_dir)
    if stale:
        raise ConfigError(
            f"cannot resume: {stale}; fine-tune it again from the new parent, e.g. python "
            f"train.py --extend {shlex.quote(parent_dir)} run_dir=NEW_DIR (nothing was trained)"
        )


def parent_record(parent_dir: str | Path, state: dict[str, Any], child: Config) -> dict[str, Any]:
    """``{"run", "run_dir", "step", "sha256", "corpus_sha256", "changed"}`` of the parent in
    ``parent_dir`` (``state`` its loaded checkpoint) for ``child``: ``corpus_sha256`` is the
    corpus it was trained on (None for a synthetic task); ``changed`` maps each differing
    setting, ``run_dir`` and ``log_dir`` (where, not what) aside, to ``[parent value, child
    value]``."""
    parent = config_from_dict({**state["config"], "run_dir": str(parent_dir)})
    changed = {k: list(v) for k, v in changed_keys(parent, child).items() if k not in PLACES}
    return {
        "run": Path(parent_dir).resolve().name,
        "run_dir": str(parent_dir),
        "step": int(state["step"]),
        "sha256": checkpoint_digest(parent_dir),
        "corpus_sha256": (state.get("corpus") or {}).get("sha256"),
        "changed": changed,
    }


def seed_child(child: Config, parent_dir: str | Path, state: dict[str, Any]) -> dict[str, Any]:
    """Write the child's step-0 checkpoint into ``child.run_dir``: the parent's weights (from
    its loaded checkpoint ``state``), a fresh optimizer and schedule, the generator states of a
    fresh start, and the parent record in ``history``; and the parent in TensorBoard. Holds the
    child folder's lock while writing.

    Returns:
        The parent record (:func:`parent_record`).

    Raises:
        FileExistsError: the child's folder already holds a run (one line naming ``--resume``).
        RunLocked: another process trains into it.
        ValueError: the parent's weights do not fit the child's model.
        OSError: a file cannot be written.
    """
    run_dir = Path(child.run_dir)
    check_child(child, parent_dir, state)  # before the folder exists: a refusal leaves none
    record = parent_record(parent_dir, state, child)
    with removed_if_refused(run_dir), run_lock(run_dir):  # a failed seeding leaves no folder
        check_trainer_paths(run_dir)
        if check_fresh_start(run_dir):  # a child stopped before its first checkpoint
            clear_run(run_dir)
        if child.log_dir:  # events of an earlier child left in its own log_dir
            check_run_events(run_dir, child.log_dir, child.data.task, claim=True)
            clear_events(events_folder(run_dir, child.log_dir, child.data.task))
        run = start_run(child, None, torch.device("cpu"))
        load_model_state(run.model, state["model"], parent_dir)
        run.history = [{"step": 0, "parent": record}]
        save_with_parent_tensorboard(run, child, record)
    return record


def save_with_parent_tensorboard(run: Any, child: Config, record: dict[str, Any]) -> None:
    """Write the parent's TensorBoard record (:func:`write_parent_tensorboard`), then the
    step-0 checkpoint: a stop signal between the two leaves neither (the events are deleted
    while no checkpoint exists), so a child never has a checkpoint without its parent in
    TensorBoard, and one stopped before its checkpoint is seeded again."""
    try:
        write_parent_tensorboard(child, record)
        run.save()
    except BaseException:
        if not checkpoint_path(child.run_dir).is_file():
            clear_events(events_folder(child.run_dir, child.log_dir, child.data.task))
        raise


def write_parent_tensorboard(child: Config, record: dict[str, Any]) -> None:
    """Log the parent at step 0 in the child's folder: the HParams session with ``parent``,
    ``parent_step`` and ``parent_sha256`` beside the child's hyperparameters, and a ``parent``
    text. It is written before the training's own session, and TensorBoard shows a run's first
    session, so the HParams tab lists the parent."""
    shown = hparams(child) | {"seed": str(child.seed), "parent": record["run"]}
    shown |= {"parent_step": record["step"], "parent_sha256": record["sha256"][:16]}
    experiment, start, end = hparams_summary(shown, dict.fromkeys(HEADLINE, 0.0))
    writer = open_summary_writer(events_folder(child.run_dir, child.log_dir, child.data.task))
    try:
        for summary in (mark_axes(experiment), start, end):
            writer.file_writer.add_summary(summary, 0)
        changes = "\n".join(f"- `{k}`: {a!r} -> {b!r}" for k, (a, b) in record["changed"].items())
        writer.add_text(
            "parent",
            f"fine-tuned from `{record['run_dir']}` (step {record['step']}, sha256 "
            f"`{record['sha256']}`)\n\n{changes}",
            0,
        )
    finally:
        writer.close()


def extend(
    parent_dir: str | Path,
    overrides: list[str] | tuple[str, ...] = (),
    should_stop: Callable[[], bool] | None = None,
) -> TrainResult:
    """Fine-tune the run in ``parent_dir`` into a new run folder (see the module docstring).

    Raises:
        See :func:`child_config` and :func:`train_child`.
    """
    child, state = child_config(parent_dir, overrides)
    return train_child(child, parent_dir, state, should_stop)


def train_child(
    child: Config,
    parent_dir: str | Path,
    state: dict[str, Any],
    should_stop: Callable[[], bool] | None = None,
) -> TrainResult:
    """Seed ``child``'s folder from the parent (:func:`seed_child`) and train it.

    Raises:
        FileExistsError: the child's folder already holds a checkpoint (one line naming
            ``--resume``).
        See also :func:`seed_child` and :func:`lab.training.trainer.train`.
    """
    if checkpoint_path(child.run_dir).is_file():
        raise FileExistsError(
            f"run_dir={child.run_dir!r} already holds a run; continue it with python train.py "
            f"--resume {shlex.quote(child.run_dir)}, or give another run_dir=..."
        )
    seed_child(child, parent_dir, state)
    return train(child, resume=True, should_stop=should_stop)


def main(argv: list[str]) -> int:
    """``python train.py --extend PARENT_RUN_DIR [key=value ...]``: 0 done, 2 a bad input or a
    diverged run, 128 + signal on a stop."""
    parser = argparse.ArgumentParser(
        prog="python train.py --extend",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("parent", metavar="PARENT_RUN_DIR", help="a finished run to start from")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="changes to the parent's config, e.g. model.options.rope.scaling=yarn "
        "model.options.rope.scaling_factor=4 data.train_max_length=256 train.steps=200 "
        "run_dir=runs/child",
    )
    args = parser.parse_intermixed_args(argv)
    child = None
    try:
        child, state = child_config(args.parent, args.overrides)
        changed = changed_keys(config_from_dict({**state["config"], "run_dir": args.parent}), child)
        shown = ", ".join(f"{k}={b}" for k, (_, b) in changed.items() if k not in PLACES)
        print(f"{child.run_dir}: fine-tuning {args.parent} with {shown or 'no change'}", flush=True)
        result = train_child(child, args.parent, state)
    except (ConfigError, OSError, ValueError, TrainingDiverged, RunLocked) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except TrainingInterrupted as stop:
        hint = (
            ""
            if child is None or stop.saved_step is None
            else (f"; continue with: python train.py --resume {shlex.quote(child.run_dir)}")
        )
        print(f"{stop}{hint}", file=sys.stderr)
        return 128 + (stop.signum or signal.SIGINT)
    run = shlex.quote(str(result.run_dir))
    print(
        f"{result.run_dir}: fine-tuned from {args.parent} for {result.step} steps in "
        f"{result.seconds:.0f}s, loss {result.final_loss:.4f}"
    )
    print(f"test-set evaluation (eval.json records the parent): python eval.py {run}")
    return 0
