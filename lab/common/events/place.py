"""Where a run's TensorBoard events go: ``log_dir`` (:class:`lab.common.config.Config`).

Two places, never a free path, so that a run only ever writes (and, starting afresh, deletes)
event files in a folder that is its own:

- ``log_dir=""`` (the default): the run folder itself.
- ``log_dir=sweep``: ``PARENT-runs/TASK/NAME`` beside the folder ``PARENT`` that holds the run
  folder ``PARENT/NAME`` (a sweep's ``out_dir``; ``runs/ablation/rope-svo-seed0`` ->
  ``runs/ablation-runs/svo/rope-svo-seed0``). Beside, not below: TensorBoard lists every folder
  below the one it opens that holds event files as a run, and its Scalars, Custom Scalars and
  Images tabs select no run at all when there are more than 40 (a default ablation with 6
  seeds has 60); so ``tensorboard --logdir OUT_DIR`` opens on the sweep's comparison alone.

The place is derived from the run folder each time it is used, so a sweep folder copied or
renamed writes into ``NEWNAME-runs``, never into the original's. The ``-runs`` folder is
claimed with a marker file (:data:`MARKER`) when first written: a folder that exists without
the marker and holds anything but run folders of this sweep is refused, never taken over, as is
a link or a file in its place; and a folder holding the marker is refused as a sweep's
``out_dir`` (it holds another sweep's events).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from lab.common.sections import ConfigError

SWEEP = "sweep"
"""The ``log_dir`` value that puts a run's events in its sweep's ``-runs`` folder."""
RUNS_SUFFIX = "-runs"
"""Suffix of the folder beside ``out_dir`` that holds the runs' own TensorBoard events."""
MARKER = ".tensorboard-runs-of"
"""The file that claims a ``-runs`` folder for the sweep beside it (it names that folder)."""


def runs_root(out_dir: str | Path) -> str:
    """The folder of the TensorBoard events of the runs in ``out_dir``: ``OUT_DIR-runs`` beside
    it (``runs/ablation`` -> ``runs/ablation-runs``), one subfolder per task, one run folder
    below it (module docstring).

    Raises:
        ConfigError: an ``out_dir`` with no name of its own (``/``).
    """
    folder = os.path.normpath(str(out_dir))
    if os.path.basename(folder) in ("", ".", ".."):
        folder = os.path.normpath(os.path.abspath(folder))
    if not os.path.basename(folder):
        raise ConfigError(f"out_dir={str(out_dir)!r} has no folder name; give a folder below it")
    return folder + RUNS_SUFFIX


def task_folder(task: str) -> str:
    """A folder name for ``task`` (a registered task's name is one already)."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", task).strip("._") or "task"


def _parent_and_name(run_dir: str | Path) -> tuple[str, str]:
    """``run_dir``'s parent folder and its own name, taken lexically (``..`` resolved against
    the current folder only when the path names no folder of its own)."""
    folder = os.path.normpath(str(run_dir))
    if os.path.basename(folder) in ("", ".", ".."):
        folder = os.path.normpath(os.path.abspath(folder))
    return os.path.dirname(folder) or ".", os.path.basename(folder)


def normalized_log_dir(log_dir: str, run_dir: str | Path, task: str) -> str:
    """``log_dir`` checked: ``""`` or :data:`SWEEP`; a relative path that an earlier version
    wrote for a sweep's run (``../../OUT-runs/TASK/NAME``, NAME the run folder's own) reads as
    :data:`SWEEP`.

    Raises:
        ConfigError: any other value (one line naming it and the allowed ones).
    """
    if log_dir in ("", SWEEP):
        return log_dir
    parts = str(log_dir).split("/")
    name = _parent_and_name(run_dir)[1]
    earlier = parts[:2] == ["..", ".."] and len(parts) == 5 and parts[2].endswith(RUNS_SUFFIX)
    if earlier and parts[3] == task_folder(task) and parts[4] == name:
        return SWEEP
    raise ConfigError(
        f"log_dir={log_dir!r} is not allowed; give '' (the run's TensorBoard events in its "
        f"run_dir) or {SWEEP!r} (in PARENT{RUNS_SUFFIX}/TASK/NAME beside the folder PARENT "
        "holding run_dir=PARENT/NAME, as a sweep does)"
    )


def events_folder(run_dir: str | Path, log_dir: str = "", task: str = "") -> Path:
    """The folder of a run's TensorBoard events (module docstring): ``run_dir`` itself, or with
    ``log_dir=sweep`` ``PARENT-runs/TASK/NAME`` for the run of ``task`` in ``PARENT/NAME``.

    Raises:
        ConfigError: a ``log_dir`` :func:`normalized_log_dir` refuses.
    """
    if normalized_log_dir(log_dir, run_dir, task) != SWEEP:
        return Path(run_dir)
    parent, name = _parent_and_name(run_dir)
    return Path(runs_root(parent)) / task_folder(task) / name


def check_run_events(run_dir: str | Path, log_dir: str, claim: bool = False) -> None:
    """With ``log_dir=sweep``, check the ``-runs`` folder the run in ``run_dir`` writes below
    (:func:`check_events_root`, its parent folder as the sweep's ``out_dir``) and, with
    ``claim``, create and claim it (:func:`claim_events_root`); nothing for ``log_dir=""``.

    Raises:
        OSError: see :func:`check_events_root`.
    """
    if log_dir != SWEEP:
        return
    parent = _parent_and_name(run_dir)[0]
    (claim_events_root if claim else check_events_root)(runs_root(parent), parent)


def check_events_root(root: str | Path, out_dir: str | Path) -> None:
    """Refuse to write runs' events below ``root`` (the ``-runs`` folder beside ``out_dir``)
    unless it is absent or this sweep's own: claimed by :data:`MARKER`, or (an earlier
    version's, unclaimed) holding only ``TASK/NAME`` folders named after run folders of
    ``out_dir``; and refuse an ``out_dir`` that is itself a claimed ``-runs`` folder.

    Raises:
        OSError: one line naming the folder and why (nothing is created or deleted).
    """
    root, out_dir = Path(root), Path(out_dir)
    if (out_dir / MARKER).is_file():
        raise OSError(
            f"out_dir={str(out_dir)!r} holds the TensorBoard events of another sweep's runs "
            f"(it has a {MARKER} file); give another out_dir"
        )
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise OSError(
            f"refusing to write TensorBoard events into {str(root)!r}: it is a symbolic link or "
            f"a file; the runs of out_dir={str(out_dir)!r} keep theirs there (remove or rename it)"
        )
    if not root.is_dir() or (root / MARKER).is_file():
        return
    runs = {p.name for p in out_dir.iterdir() if p.is_dir()} if out_dir.is_dir() else set()
    for task in root.iterdir():
        inside = list(task.iterdir()) if task.is_dir() and not task.is_symlink() else None
        if inside is None or any(not p.is_dir() or p.name not in runs for p in inside):
            raise OSError(
                f"refusing to write TensorBoard events into {str(root)!r}: it exists and is not "
                f"the events folder of out_dir={str(out_dir)!r} (it holds {task.name!r}, and no "
                f"{MARKER} file); move it away or give another out_dir"
            )


def claim_events_root(root: str | Path, out_dir: str | Path) -> None:
    """Create ``root`` (checked by :func:`check_events_root`) and write its :data:`MARKER`.

    Raises:
        OSError: see :func:`check_events_root`; or the folder cannot be created.
    """
    check_events_root(root, out_dir)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    marker = root / MARKER
    if not marker.is_file():
        marker.write_text(f"TensorBoard events of the runs in {Path(out_dir).name}/\n")
