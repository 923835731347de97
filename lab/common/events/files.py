"""A run folder's TensorBoard event files as a record of each step once.

TensorBoard's own answer to a run that resumes from an earlier step is the ``purge_step`` the
training writer sets: a reader that honours it hides the events of the steps after the
checkpoint that an earlier, killed process had logged. Not every reader does (event files are
also read by scripts and other viewers), so on resume :func:`drop_events_after` also rewrites
the event files without those events: each step is then in the files once.

An evaluation's events are built in memory by :class:`EventLog` and written as one file
atomically. ``SummaryWriter`` writes from a background thread: a full disk there prints a
writer-thread
traceback, the caller never hears of it, and a truncated event file is left behind. An
:class:`EventLog` takes the same calls (``add_scalar``, ``add_figure``, ``add_custom_scalars``)
and :meth:`EventLog.write` puts every event into one file through
:func:`lab.common.files.atomic_writer` in the caller's thread: the file is complete or absent,
and a failed write is one ``OSError`` line naming it. Event files that ``eval.py`` writes into a
run folder are small (a few curves and figures), so holding them in memory costs little.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.summary.writer.record_writer import RecordWriter

from lab.common.events.tags import LENGTH_CURVES
from lab.common.files import atomic_writer

WRITER = "position-lab EventLog"
"""``source_metadata.writer`` of the first event of every file :class:`EventLog` writes."""
TRAINING_EVENTS = "events.out.tfevents.*"
"""Event files of a run folder; those of an evaluation end in ``.extrapolation`` (their step
is a length, not a training step) and are left alone."""


def drop_events_after(run_dir: str | Path, step: int, redo_eval: bool = False) -> list[Path]:
    """Rewrite every training event file of ``run_dir`` without its summaries of steps after
    ``step`` (the checkpoint a run resumes from); other records (file version, session logs,
    the layout) stay. With ``redo_eval`` (the checkpoint's periodic evaluation is pending and
    will be redone), the summaries of ``step`` itself other than the training scalars
    (``train/*``) go too: a stop that cut the evaluation short may have logged part of it. Each
    file is replaced atomically (:func:`lab.common.files.atomic_writer`), and files that need no
    change are not touched. Call it only under the run folder's lock.

    Returns:
        the rewritten files.

    Raises:
        OSError: a file cannot be rewritten (it is left as it was).
    """
    changed = []
    for path in sorted(Path(run_dir).glob(TRAINING_EVENTS)):
        if path.is_symlink() or not path.is_file() or path.name.endswith(".extrapolation"):
            continue
        records = list(RawEventFileLoader(str(path)).Load())
        kept = [raw for raw in records if not _after(raw, step, redo_eval)]
        if len(kept) == len(records):
            continue
        with atomic_writer(path) as file:
            writer = RecordWriter(file)
            for raw in kept:
                writer.write(raw)
        changed.append(path)
    return changed


def _after(raw: bytes, step: int, redo_eval: bool = False) -> bool:
    """The record is a summary (scalars, text, images) logged at a step after ``step``; with
    ``redo_eval``, or one at ``step`` that is not a training scalar (``train/*``)."""
    event = event_pb2.Event.FromString(raw)
    if not event.HasField("summary"):
        return False
    if event.step > step:
        return True
    tags = [value.tag for value in event.summary.value]
    return redo_eval and event.step == step and any(not t.startswith("train/") for t in tags)


_COUNTER = itertools.count()
"""Numbers event files of one process apart (as TensorBoard's own writer does)."""


class EventLog:
    """Summaries kept in memory in call order, for :meth:`write`."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add_scalar(self, tag: str, value: float, step: int = 0) -> None:
        """A scalar ``value`` of ``tag`` at ``step`` (``SummaryWriter.add_scalar``)."""
        from torch.utils.tensorboard.summary import scalar  # slow import, only when needed

        self._add(scalar(tag, float(value)), step)

    def add_figure(self, tag: str, figure: Any, step: int = 0, close: bool = True) -> None:
        """A matplotlib ``figure`` as an image of ``tag`` (``SummaryWriter.add_figure``)."""
        from torch.utils.tensorboard._utils import figure_to_image
        from torch.utils.tensorboard.summary import image

        self._add(image(tag, figure_to_image(figure, close), dataformats="CHW"), step)

    def add_text(self, tag: str, text: str, step: int = 0) -> None:
        """A markdown ``text`` of ``tag`` at ``step`` (``SummaryWriter.add_text``)."""
        from torch.utils.tensorboard.summary import text as text_summary

        self._add(text_summary(tag, text), step)

    def add_custom_scalars(self, layout: dict[str, dict[str, list]]) -> None:
        """The Custom Scalars ``layout`` (``SummaryWriter.add_custom_scalars``)."""
        from torch.utils.tensorboard.summary import custom_scalars

        self._add(custom_scalars(layout), None)

    def _add(self, summary: Any, step: int | None) -> None:
        event = Event(summary=summary, wall_time=time.time())
        if step is not None:
            event.step = int(step)
        self.events.append(event)

    def write(self, folder: str | Path, suffix: str) -> Path:
        """Write every event into a new ``events.out.tfevents.*SUFFIX`` file of ``folder``
        (atomically), then delete the folder's other files ending in ``suffix`` that this
        project wrote (:func:`written_here`): the new evaluation replaces earlier ones, which
        stay when the write fails; anyone else's files stay too.

        Returns:
            the new file.

        Raises:
            OSError: the file cannot be written (disk full, read-only folder): one line naming
                it and the system's reason, with the original ``errno``; nothing is left of it.
        """
        folder = Path(folder)
        stamp = f"{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_COUNTER)}"
        path = folder / f"events.out.tfevents.{stamp}{suffix}"
        try:
            with atomic_writer(path) as file:
                writer = RecordWriter(file)
                head = Event(wall_time=time.time(), file_version="brain.Event:2")
                head.source_metadata.writer = WRITER
                for event in [head, *self.events]:
                    writer.write(event.SerializeToString())
        except OSError as error:
            raise OSError(
                error.errno,
                f"{error.strerror or error}: cannot write {str(path)!r}; the earlier "
                f"TensorBoard events of {str(folder)!r} are kept",
            ) from None
        for old in folder.glob(f"events.out.tfevents.*{suffix}"):
            if old != path and not old.is_symlink() and old.is_file() and written_here(old):
                old.unlink()
        return path


def written_here(path: str | Path) -> bool:
    """The event file ``path`` is provably one this project wrote, so that a newer evaluation
    may replace it: its first event names :data:`WRITER`, or (written by an earlier version)
    one of its summaries has a tag of the length curves every evaluation logs. A file that is
    not an event file, or another program's, is never deleted."""
    try:
        records = RawEventFileLoader(str(path)).Load()
        for count, raw in enumerate(records):
            event = event_pb2.Event.FromString(raw)
            if count == 0 and event.source_metadata.writer == WRITER:
                return True
            if any(LENGTH_CURVES in value.tag for value in event.summary.value):
                return True
    except Exception:  # not a TFRecord file, or a torn one (errors come from several layers)
        return False
    return False
