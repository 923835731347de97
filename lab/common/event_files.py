"""A run folder's TensorBoard event files as a record of each step once.

TensorBoard's own answer to a run that resumes from an earlier step is the ``purge_step`` the
training writer sets: a reader that honours it hides the events of the steps after the
checkpoint that an earlier, killed process had logged. Not every reader does (event files are
also read by scripts and other viewers), so on resume :func:`drop_events_after` also rewrites
the event files without those events: each step is then in the files once.
"""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from lab.common.files import atomic_writer

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
