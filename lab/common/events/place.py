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

The place is derived from the run folder each time it is used, with every link on the way
resolved: a sweep folder copied or renamed writes into ``NEWNAME-runs``, never into the
original's, and one reached through a link writes where its real folder's runs write. The
``-runs`` folder is claimed with a marker file (:data:`MARKER`) when first written: a folder
that exists without the marker is refused, never taken over, as is a link or a file in its
place or anywhere below it on a run's way; and no output folder may lie inside a claimed one
(:func:`claimed_above`).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from lab.common.sections import ConfigError

SWEEP = "sweep"
"""The ``log_dir`` value that puts a run's events in its sweep's ``-runs`` folder."""
RUNS_SUFFIX = "-runs"
"""Suffix of the folder beside ``out_dir`` that holds the runs' own TensorBoard events."""
MARKER = ".tensorboard-runs-of"
"""The file that claims a ``-runs`` folder for the sweep beside it (it names that folder)."""
EVENT_FOLDERS = ("evaluations", "hparams", "extrapolation")
"""Folders below a run's events folder that hold the events of its evaluations under other
settings (and TensorBoard logs of earlier versions)."""
_WARNED: set[str] = set()


def runs_root(out_dir: str | Path) -> str:
    """The folder of the TensorBoard events of the runs in ``out_dir``: ``OUT_DIR-runs`` beside
    it, links resolved (``runs/ablation`` -> ``/.../runs/ablation-runs``), one subfolder per
    task, one run folder below it (module docstring).

    Raises:
        ConfigError: an ``out_dir`` with no name of its own (``/``).
    """
    folder = os.path.realpath(str(out_dir))
    if not os.path.basename(folder):
        raise ConfigError(
            f"{str(out_dir)!r} has no folder name of its own for the runs' TensorBoard events "
            "beside it; give a folder below it"
        )
    return folder + RUNS_SUFFIX


def task_folder(task: str) -> str:
    """A folder name for ``task`` (a registered task's name is one already)."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", task).strip("._") or "task"


def _parent_and_name(run_dir: str | Path) -> tuple[str, str]:
    """``run_dir``'s real parent folder and its own real name (every link resolved)."""
    folder = os.path.realpath(str(run_dir))
    return os.path.dirname(folder), os.path.basename(folder)


def normalized_log_dir(log_dir: str, run_dir: str | Path = "", task: str = "") -> str:
    """``log_dir`` checked: ``""`` or :data:`SWEEP` (``run_dir`` and ``task`` are unused, kept
    so that every caller names the run).

    Raises:
        ConfigError: any other value (one line naming it and the allowed ones).
    """
    if log_dir in ("", SWEEP):
        return log_dir
    raise ConfigError(
        f"log_dir={log_dir!r} is not allowed; give '' (the run's TensorBoard events in its "
        f"run_dir) or {SWEEP!r} (in PARENT{RUNS_SUFFIX}/TASK/NAME beside the folder PARENT "
        "holding run_dir=PARENT/NAME, as a sweep does)"
    )


def migrated_log_dir(log_dir: object, run_dir: str, task: str) -> str:
    """The ``log_dir`` of a saved run as this version reads it: ``""`` and :data:`SWEEP` as
    they are; a path an earlier version wrote for a sweep's run (``../../OUT-runs/TASK/NAME``,
    NAME the run folder's own) as :data:`SWEEP`; any other (an earlier version's free path) as
    ``""``, with a one-line warning: its new events go to its run folder, and nothing is ever
    written or deleted at the old path."""
    if log_dir in (None, "", SWEEP):
        return log_dir or ""
    parts = str(log_dir).strip("/").split("/")
    earlier = parts[:2] == ["..", ".."] and len(parts) == 5 and parts[2].endswith(RUNS_SUFFIX)
    if earlier and parts[3] == task_folder(task) and parts[4] == os.path.basename(run_dir):
        return SWEEP
    if str(log_dir) not in _WARNED:
        _WARNED.add(str(log_dir))
        print(
            f"warning: {run_dir}: its saved log_dir={log_dir!r} is not a place this version "
            "writes to; its new TensorBoard events go to its run folder",
            file=sys.stderr,
        )
    return ""


def events_folder(run_dir: str | Path, log_dir: str = "", task: str = "") -> Path:
    """The folder of a run's TensorBoard events (module docstring): ``run_dir`` itself, or with
    ``log_dir=sweep`` ``PARENT-runs/TASK/NAME`` for the run of ``task`` in ``PARENT/NAME``.

    Raises:
        ConfigError: a ``log_dir`` :func:`normalized_log_dir` refuses.
    """
    if normalized_log_dir(log_dir) != SWEEP:
        return Path(run_dir)
    parent, name = _parent_and_name(run_dir)
    return Path(runs_root(parent)) / task_folder(task) / name


def check_run_events(run_dir: str | Path, log_dir: str, task: str, claim: bool = False) -> None:
    """With ``log_dir=sweep``, check the way to the events folder of the run of ``task`` in
    ``run_dir``: its ``-runs`` folder (:func:`check_events_root`, the run's parent folder as
    the sweep's) and every folder below it on the way, none a link or a file; with ``claim``,
    then create and claim the ``-runs`` folder (:func:`claim_events_root`). Nothing for
    ``log_dir=""`` (the run folder is checked as every output folder is).

    Raises:
        OSError: one line naming the folder and why (nothing is created, written or deleted).
    """
    if log_dir != SWEEP:
        return
    parent = _parent_and_name(run_dir)[0]
    root = Path(runs_root(parent))
    check_events_root(root, parent)
    events = events_folder(run_dir, log_dir, task)
    for folder in (*(events / name for name in EVENT_FOLDERS), events, events.parent):
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise OSError(
                f"refusing to write TensorBoard events into {str(events)!r}: {str(folder)!r} is "
                "a symbolic link or a file (remove or rename it; nothing was deleted or written)"
            )
    if claim:
        claim_events_root(root, parent)


def claimed_above(path: str | Path) -> Path | None:
    """The claimed ``-runs`` folder (:data:`MARKER`) that ``path`` is or lies inside, or None."""
    path = Path(os.path.realpath(str(path)))
    return next((p for p in (path, *path.parents) if (p / MARKER).exists()), None)


def check_events_root(root: str | Path, out_dir: str | Path) -> None:
    """Refuse to write runs' events below ``root`` (the ``-runs`` folder beside ``out_dir``)
    unless it is absent or claimed by :data:`MARKER` (an unclaimed folder of that name is
    never taken over: what is in it cannot be told from a user's), and refuse an ``out_dir``
    that is, or lies inside, a claimed ``-runs`` folder.

    Raises:
        OSError: one line naming the folder and why (nothing is created or deleted).
    """
    root, out_dir = Path(root), Path(out_dir)
    claimed = claimed_above(out_dir)
    if claimed is not None:
        raise OSError(
            f"{str(out_dir)!r} is inside {str(claimed)!r}, the TensorBoard events folder of "
            f"a sweep's runs (its {MARKER} file); give a folder outside it"
        )
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise OSError(
            f"refusing to write TensorBoard events into {str(root)!r}: it is a symbolic link or "
            f"a file; the runs of {str(out_dir)!r} keep theirs there (remove or rename it)"
        )
    marker = root / MARKER
    if marker.is_symlink() or (marker.exists() and not marker.is_file()):
        raise OSError(f"{str(marker)!r} is not a plain file; remove it (it claims {str(root)!r})")
    if root.is_dir() and not marker.is_file():
        raise OSError(
            f"refusing to write TensorBoard events into {str(root)!r}: it exists and no "
            f"{MARKER} file claims it for the runs in {str(out_dir)!r}; move it away, or, if "
            f"it holds only their events (an earlier version's sweep), create that file in it"
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


def is_claimed_events_folder(folder: str | Path) -> bool:
    """``folder`` is a run's events folder ``ROOT/TASK/NAME`` in a claimed ``-runs`` folder
    ``ROOT``, reached through no link: one whose event files a run may delete."""
    folder = Path(folder)
    way = [folder, folder.parent, folder.parents[1]]
    marker = folder.parents[1] / MARKER
    return marker.is_file() and not any(p.is_symlink() for p in [*way, marker])
