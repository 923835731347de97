"""An evaluation's TensorBoard events, built in memory and written as one file atomically.

``SummaryWriter`` writes from a background thread: a full disk there prints a writer-thread
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

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.summary.writer.record_writer import RecordWriter

from lab.common.files import atomic_writer

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
        (atomically), then delete the folder's other files ending in ``suffix``: the new
        evaluation replaces earlier ones, which stay when the write fails.

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
                for event in [head, *self.events]:
                    writer.write(event.SerializeToString())
        except OSError as error:
            raise OSError(
                error.errno,
                f"{error.strerror or error}: cannot write {str(path)!r}; the earlier "
                "TensorBoard events of this evaluation are kept",
            ) from None
        for old in folder.glob(f"events.out.tfevents.*{suffix}"):
            if old != path and not old.is_dir():
                old.unlink()
        return path
