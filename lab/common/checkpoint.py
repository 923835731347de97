"""Checkpoint files: written atomically, read without running code, one clear error when not.

Also what a run folder holds, so that ``--overwrite`` deletes only what the project wrote.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from lab.common.config import MAX_STEPS, config_from_dict
from lab.common.events.place import (
    EVENT_FOLDERS,
    events_folder,
    is_claimed_events_folder,
    migrated_log_dir,
)
from lab.common.files import TMP_SUFFIX, atomic_writer, file_sha256, writable_folder
from lab.common.outputs import (
    CHECKPOINT_NAME,
    CONFIG_NAME,
    EVAL_NAME,
    EVALUATION_FILES,
    EVENTS,
    REPORT_FILES,
    is_ours,
)
from lab.common.runlock import LOCK_NAME, RunLocked, run_lock
from lab.common.sections import ConfigError

RUN_FILES = (CHECKPOINT_NAME, CONFIG_NAME, EVENTS)
"""Files (glob patterns) that the training writes into a run folder and that are the project's
by their name; an evaluation's files and the reports are the project's by their content
(:func:`lab.common.outputs.is_ours`)."""
RUN_FOLDERS = EVENT_FOLDERS
"""Folders below a run folder whose events and ``eval.json`` files the project wrote (a
sweep's evaluations under other settings; TensorBoard logs of earlier versions)."""
TRAINER_FILES = (CHECKPOINT_NAME, CONFIG_NAME)
"""Files that only the training process writes (under the folder's lock)."""


def checkpoint_path(run_dir: str | Path) -> Path:
    """Where a run keeps its checkpoint: ``RUN_DIR/checkpoint.pt``."""
    return Path(run_dir) / CHECKPOINT_NAME


def saved_events_folder(run_dir: str | Path) -> Path:
    """:func:`lab.common.events.place.events_folder` of the run in ``run_dir`` as its
    ``config.yaml`` says (``run_dir`` itself when the file is missing, unreadable, or names no
    ``log_dir`` or one that is not allowed)."""
    try:
        saved = OmegaConf.to_container(OmegaConf.load(Path(run_dir) / CONFIG_NAME))
    except Exception:  # missing, not YAML (errors come from several libraries)
        return Path(run_dir)
    if not isinstance(saved, dict):
        return Path(run_dir)
    log_dir, data = saved.get("log_dir"), saved.get("data")
    task = data.get("task") if isinstance(data, dict) else None
    try:
        if not isinstance(task, str):
            return Path(run_dir)
        return events_folder(run_dir, migrated_log_dir(log_dir, str(run_dir), task), task)
    except ConfigError:
        return Path(run_dir)


def event_files(folder: str | Path) -> list[Path]:
    """The TensorBoard event files of a run's events folder: those directly in it and those
    in its :data:`RUN_FOLDERS` (an evaluation under other settings), regular files only, never
    found through a link."""
    folder = Path(folder)
    found = list(folder.glob(EVENTS))
    for sub in (folder / name for name in RUN_FOLDERS):
        if sub.is_dir() and not sub.is_symlink():
            for path in sub.rglob(EVENTS):
                if not any(p.is_symlink() for p in path.relative_to(folder).parents):
                    found.append(path)
    return sorted(p for p in found if p.is_file() and not p.is_symlink())


def clear_events(folder: str | Path) -> list[Path]:
    """Delete the event files of a run's own events folder (:func:`event_files`; a ``log_dir``
    apart from the run folder), then its :data:`RUN_FOLDERS` left empty; returns the deleted
    files. Call it only under the run folder's lock, for a run that starts afresh."""
    doomed = event_files(folder)
    for path in doomed:
        path.unlink(missing_ok=True)
    for sub in (Path(folder) / name for name in RUN_FOLDERS):
        if sub.is_dir() and not sub.is_symlink():
            for below in sorted(sub.rglob("*"), key=lambda p: -len(p.parts)):
                if below.is_dir() and not below.is_symlink() and not any(below.iterdir()):
                    below.rmdir()
            if not any(sub.iterdir()):
                sub.rmdir()
    return doomed


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write ``state`` with ``torch.save`` atomically (:func:`lab.common.files.atomic_writer`), so
    an interrupted or failed save leaves the previous checkpoint intact.

    Raises:
        OSError: the file cannot be written (disk full, read-only folder): one line naming the
            path and the system's reason, with the original ``errno`` (``torch.save`` hides a
            failed write in a chain that ends in "unexpected pos").
    """
    try:
        with atomic_writer(path) as file:
            torch.save(state, file)
    except (OSError, RuntimeError) as error:
        cause = _os_error(error)
        if cause is None:
            raise
        raise OSError(
            cause.errno,
            f"{cause.strerror}: cannot write {str(path)!r}; the previous checkpoint is kept",
        ) from None


def find_checkpoint(run_dir: str | Path) -> Path:
    """``RUN_DIR/checkpoint.pt``, checked to exist.

    Raises:
        FileNotFoundError: the folder or its checkpoint does not exist (one line; a run that
            another process is training, before its first checkpoint, says so and names it).
    """
    if not str(run_dir).strip():
        raise FileNotFoundError(f"run folder {str(run_dir)!r} is empty; give a run's folder")
    run_dir = Path(run_dir)
    if run_dir.is_file():
        raise FileNotFoundError(f"{str(run_dir)!r} is a file, not a run folder")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {str(run_dir)!r} does not exist")
    path = checkpoint_path(run_dir)
    if not path.is_file() and (run_dir / LOCK_NAME).is_file():
        try:
            with run_lock(run_dir):
                pass
        except RunLocked as busy:  # a run training now, before its first checkpoint
            raise FileNotFoundError(f"no checkpoint in {str(run_dir)!r} yet: {busy}") from None
    if not path.is_file():
        train = f"python train.py run_dir={shlex.quote(str(run_dir))}"
        if run_dir.resolve() in (Path.cwd(), *Path.cwd().parents):  # train.py refuses those
            train = "python train.py run_dir=runs/NAME, and give that folder"
        raise FileNotFoundError(
            f"no checkpoint in {str(run_dir)!r} (expected {CHECKPOINT_NAME}); "
            f"train it first with: {train}"
        )
    return path


def checkpoint_digest(run_dir: str | Path) -> str:
    """SHA-256 (hex) of ``RUN_DIR/checkpoint.pt``'s bytes: the identity of the trained run an
    ``eval.json`` was computed from (a retrained, replaced or other run has another).

    Raises:
        FileNotFoundError: see :func:`find_checkpoint`.
    """
    return file_sha256(find_checkpoint(run_dir))


def load_checkpoint(run_dir: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Read ``RUN_DIR/checkpoint.pt`` onto ``device`` with ``torch.load(weights_only=True)``:
    tensors and plain Python data only, so a crafted file cannot run code when it is read.

    Raises:
        FileNotFoundError: the folder or its checkpoint does not exist (one-line message).
        ValueError: the file is unreadable, holds objects other than tensors and plain data
            (refused without running them), or is not a checkpoint of this project.
    """
    path = find_checkpoint(run_dir)
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as error:
        text = str(error).strip()
        # torch words it "Unsupported global: GLOBAL io.open" or "Trying to load unsupported
        # GLOBAL posix.system whose module posix is blocked", depending on the object.
        found = re.search(r"[Uu]nsupported (?:global: )?GLOBAL ([\w.]+)", text)
        if found:
            raise ValueError(
                f"{str(path)!r} refused: it holds Python objects ({found.group(1)}) that could "
                "run code when loaded; only tensors and plain data are read"
            ) from None
        unpickler = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
        first = text.splitlines()[0] if text else type(error).__name__
        detail = unpickler.group(1) if unpickler else first
        raise ValueError(
            f"{str(path)!r} is not a readable checkpoint (truncated or damaged?): {detail}"
        ) from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise ValueError(f"{str(path)!r} is not a checkpoint of this project (no model/config)")
    check_fields(state, path)
    return state


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_rng(value: Any) -> bool:
    """A :func:`lab.common.runtime.capture_rng` dict: Python's state tuple, torch's byte tensor and,
    optionally, a list of CUDA byte tensors."""
    if not isinstance(value, dict) or not isinstance(value.get("torch"), torch.Tensor):
        return False
    python = value.get("python")
    if not (isinstance(python, tuple) and len(python) == 3 and isinstance(python[1], tuple)):
        return False
    cuda = value.get("cuda", [])
    return isinstance(cuda, list) and all(isinstance(t, torch.Tensor) for t in cuda)


FIELDS: dict[str, tuple[Any, str]] = {
    "model": (
        lambda v: (
            isinstance(v, dict)
            and all(isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in v.items())
        ),
        "a dict of tensors",
    ),
    "config": (lambda v: isinstance(v, dict), "a dict"),
    "optimizer": (lambda v: isinstance(v, dict), "a dict"),
    "scheduler": (lambda v: isinstance(v, dict), "a dict"),
    "step": (lambda v: _is_int(v) and 0 <= v <= MAX_STEPS, f"an integer >= 0 and <= {MAX_STEPS}"),
    "rng": (_is_rng, "a dict of generator states (python, torch)"),
    "rank_rng": (lambda v: isinstance(v, list) and all(map(_is_rng, v)), "a list of rng dicts"),
    "finished": (lambda v: isinstance(v, bool), "true or false"),
    "final_loss": (lambda v: isinstance(v, float) or _is_int(v), "a number"),
    "eval": (lambda v: isinstance(v, dict), "a dict"),
    "reached_target": (lambda v: v is None or isinstance(v, bool), "true, false or null"),
    "target_streak": (
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "a whole number >= 0",
    ),
    "eval_pending": (lambda v: isinstance(v, bool), "true or false"),
    "history": (
        lambda v: isinstance(v, list) and all(isinstance(h, dict) for h in v),
        "a list of dicts",
    ),
}
"""Every field a checkpoint may hold (``model`` and ``config`` always), with a test of its type
and the type in words: what :func:`lab.training.trainer.Run.save` writes and --resume and
``eval.py`` read."""


def check_fields(state: dict[str, Any], path: str | Path) -> None:
    """Check the type of every field of :data:`FIELDS` that ``state`` holds.

    Raises:
        ValueError: one line naming the file, the field, its value's type and what it must be
            (a ``step`` saved as text would otherwise be a ``TypeError`` in --resume).
    """
    for name, (valid, wanted) in FIELDS.items():
        if name in state and not valid(state[name]):
            value = state[name]
            shown = repr(value) if isinstance(value, (str, int, float, bool)) else "a value"
            raise ValueError(
                f"{str(path)!r} is not a valid checkpoint: its {name!r} is {shown[:40]} "
                f"({type(value).__name__}); it must be {wanted}"
            )


def is_run(run_dir: str | Path) -> bool:
    """``run_dir`` provably holds a run of this project: a readable checkpoint, or (a run
    stopped before its first checkpoint) a ``config.yaml`` this project reads back as a run's
    together with the TensorBoard events that training writes (in ``run_dir``, or in the
    ``log_dir`` its ``config.yaml`` names). A user's folder with a valid ``config.yaml`` and no
    events is not a run."""
    run_dir = Path(run_dir)
    try:
        load_checkpoint(run_dir)
        return True
    except (FileNotFoundError, ValueError):
        pass
    folders = {run_dir, saved_events_folder(run_dir)}
    if not any(p.is_file() and not p.is_symlink() for f in folders for p in f.glob(EVENTS)):
        return False
    try:
        config_from_dict(OmegaConf.to_container(OmegaConf.load(run_dir / CONFIG_NAME)))
    except Exception:  # missing, not YAML (errors come from several libraries), not a config
        return False
    return True


def run_files(run_dir: str | Path) -> list[Path]:
    """The files of ``run_dir`` that the project wrote, each checked to be a regular file
    (never a folder or a link's target): :data:`RUN_FILES` by name; ``eval.json``, the passkey
    heatmap and every report of :data:`lab.common.outputs.REPORT_FILES` when their content proves
    them the project's (:func:`lab.common.outputs.is_ours`); the same evaluation files and the
    events in :data:`RUN_FOLDERS` (not followed through links); and interrupted writes
    (``.NAME.*.tmp``) of all of them."""
    run_dir = Path(run_dir)
    found = [p for pattern in RUN_FILES for p in run_dir.glob(pattern)]
    proved = (EVAL_NAME, *EVALUATION_FILES, *REPORT_FILES)
    found += [run_dir / name for name in proved if is_ours(run_dir / name)]
    for folder in (run_dir / name for name in RUN_FOLDERS):
        if folder.is_dir() and not folder.is_symlink():
            for path in folder.rglob("*"):
                inside = not any(p.is_symlink() for p in path.relative_to(run_dir).parents)
                evaluation = path.name in (EVAL_NAME, *EVALUATION_FILES) and is_ours(path)
                if inside and (evaluation or path.match(EVENTS) or path.match("*.tmp")):
                    found.append(path)
    names = [*TRAINER_FILES, *proved]
    found += [p for name in names for p in run_dir.glob(f".{name}.*{TMP_SUFFIX}")]
    return sorted({p for p in found if p.is_file() and not p.is_symlink()})


def clear_run(run_dir: str | Path) -> list[Path]:
    """Delete the files the project wrote into a run folder (:func:`run_files`), then the
    folders of :data:`RUN_FOLDERS` left empty, and the event files of the run's events folder
    in its sweep's ``-runs`` folder when its ``config.yaml`` names one and that folder is
    claimed (:mod:`lab.common.events.place`); every other file and folder stays. Everything
    is checked before anything is deleted: the folder must provably hold a run
    (:func:`is_run`) and be writable.

    Returns:
        the deleted files.

    Raises:
        FileExistsError: ``run_dir`` holds files but no run of this project (nothing deleted).
        OSError: the folder is not writable (nothing deleted).
    """
    run_dir = Path(run_dir)
    others = [p for p in run_dir.iterdir() if p.name != LOCK_NAME] if run_dir.is_dir() else []
    if not others:
        return []
    if not is_run(run_dir):
        raise FileExistsError(
            f"run_dir={str(run_dir)!r} holds files but no run of this project (no readable "
            f"{CHECKPOINT_NAME}, nor a {CONFIG_NAME} with TensorBoard events); --overwrite "
            "replaces only runs, so nothing was deleted; pick another run_dir"
        )
    writable_folder(run_dir)

    def last_the_proof(path: Path) -> tuple[bool, bool]:
        # what makes the folder a run (is_run: config.yaml with the events) goes last, so a
        # clear cut short (a crash, a failing delete) leaves a folder that is still a run, or
        # one that holds a config.yaml alone; either may be started or cleared again
        return path == run_dir / CONFIG_NAME, path.parent == run_dir and path.match(EVENTS)

    elsewhere = saved_events_folder(run_dir)  # read before config.yaml goes
    doomed = sorted(run_files(run_dir), key=last_the_proof)
    for path in doomed:
        path.unlink(missing_ok=True)
    if elsewhere != run_dir and is_claimed_events_folder(elsewhere):
        doomed += clear_events(elsewhere)  # its sweep's events folder, claimed by the sweep
    for folder in (run_dir / name for name in RUN_FOLDERS):
        if folder.is_dir() and not folder.is_symlink():
            for sub in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)):
                if sub.is_dir() and not sub.is_symlink() and not any(sub.iterdir()):
                    sub.rmdir()
            if not any(folder.iterdir()):
                folder.rmdir()
    return doomed


def check_trainer_paths(run_dir: str | Path) -> None:
    """Check that the files only the training writes (:data:`TRAINER_FILES`) can be written
    into ``run_dir``: none of them is a folder (a file or a link there is replaced atomically).
    Called before anything is deleted or trained, so that ``--overwrite`` never clears a run
    and then fails at its first save.

    Raises:
        IsADirectoryError: one line naming the folder in the way (nothing deleted).
    """
    for name in TRAINER_FILES:
        path = Path(run_dir) / name
        if path.is_dir() and not path.is_symlink():
            raise IsADirectoryError(
                f"run_dir={str(run_dir)!r} holds a folder named {name}, where the run writes "
                f"its {name}; remove or rename that folder (nothing was deleted or trained)"
            )


def check_fresh_start(run_dir: str | Path, files: bool = True) -> bool:
    """Check that a new run (neither resumed nor overwriting) may start in ``run_dir``; with
    ``files`` False only the checkpoint is checked (the ranks of ``torchrun`` other than 0,
    which write nothing).

    Returns:
        True when the folder holds the files of a run stopped before its first checkpoint
        (:func:`is_run`: its ``config.yaml`` and TensorBoard events): the caller clears them
        (:func:`clear_run`) so that the new run's steps are not logged twice. False when there
        is nothing of the project's to clear (a ``config.yaml`` alone is rewritten).

    Raises:
        FileExistsError: ``run_dir`` holds a checkpoint, or files the project writes (events,
            ``eval.json``, reports) but no run; one line naming ``--resume`` and
            ``--overwrite``.
    """
    run_dir = Path(run_dir)
    quoted = shlex.quote(str(run_dir))
    if checkpoint_path(run_dir).is_file():
        raise FileExistsError(
            f"run_dir={str(run_dir)!r} already holds a run; continue it with "
            f"python train.py --resume {quoted}, pick another run_dir=..., or replace it with "
            "--overwrite"
        )
    found = [p for p in run_files(run_dir) if p.name != CONFIG_NAME] if files else []
    if not found:
        return False
    if is_run(run_dir):
        return True
    raise FileExistsError(
        f"run_dir={str(run_dir)!r} holds files the project writes ({found[0].name}) but no run "
        f"to --resume (no {CHECKPOINT_NAME}) and nothing --overwrite may replace (no "
        f"{CONFIG_NAME} of a run); pick another run_dir"
    )


def remove_partial_writes(run_dir: str | Path) -> list[Path]:
    """Delete the temporary files of checkpoint and config writes that a killed run left in
    ``run_dir`` (``.checkpoint.pt.*.tmp``). Call it only while holding the folder's lock.

    Returns:
        the deleted paths.
    """
    removed = []
    for name in TRAINER_FILES:
        for path in Path(run_dir).glob(f".{name}.*{TMP_SUFFIX}"):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def load_model_state(model: torch.nn.Module, weights: dict[str, Any], run_dir: str | Path) -> None:
    """``model.load_state_dict(weights)`` with a one-line error.

    Raises:
        ValueError: the weights do not fit the model built from the saved config; the message
            keeps the first mismatch and counts the others.
    """
    try:
        model.load_state_dict(weights)
    except (RuntimeError, ValueError) as error:
        # load_state_dict: a header line, then one line per mismatch; keep the first mismatch.
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        detail = lines[min(1, len(lines) - 1)] if lines else type(error).__name__
        more = f" (and {len(lines) - 2} more)" if len(lines) > 2 else ""
        raise ValueError(
            f"checkpoint in {str(run_dir)!r} does not fit its saved model config: {detail}{more}"
        ) from None


def _os_error(error: BaseException | None) -> OSError | None:
    """The first :class:`OSError` in ``error``'s chain of causes and contexts, or None."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.errno is not None:
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def looks_like_run(folder: str | Path) -> bool:
    """``folder`` holds a run's files, judged without reading them (fast enough to ask of every
    folder above a path): a ``checkpoint.pt``, or a ``config.yaml`` beside TensorBoard events
    (a run stopped before its first checkpoint)."""
    folder = Path(folder)
    if checkpoint_path(folder).is_file():
        return True
    return (folder / CONFIG_NAME).is_file() and any(folder.glob(EVENTS))


def nested_run_problem(path: str | Path, key: str = "run_dir") -> str | None:
    """Why ``path`` cannot be a run's (or a study's) folder because it lies inside another run's
    folder (its ``evaluations/``, or anywhere below it), as one line naming ``key``; or None.
    Such a folder would have its files deleted or mixed when that run is overwritten or cleared
    (:func:`clear_run` deletes every event file below its :data:`RUN_FOLDERS`). The one check
    every entry point that creates run folders applies."""
    resolved = Path(path).expanduser().resolve()
    for above in resolved.parents:
        if looks_like_run(above):
            return (
                f"{key}={str(path)!r} is inside the run folder {str(above)!r}; a run's folder "
                "is never inside another run's (overwriting that run would delete its files): "
                "give a folder outside it"
            )
    return None
