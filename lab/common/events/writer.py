"""A run's TensorBoard writer, opened so that its event file is read after the folder's others.

A reader (TensorBoard, ``EventAccumulator``) loads a folder's event files in name order, and
TensorBoard names a file ``events.out.tfevents.SECOND.HOST.PID.N``: by the second the writer
opened, then by the process id and a per-process counter compared as text. A writer that
opens in the same second as an earlier file of its folder can therefore be read first
(``...1234.10`` sorts before ``...1234.9``). For a resumed run that loses its curves: the
earlier file begins with the ``SessionLog.START`` of its own ``purge_step`` (step 1 for a run
from scratch) and, read last, purges every event after it, the resumed steps included.
:func:`open_summary_writer` waits for the next second when the folder holds a file of this
second, so that the new name sorts last.
"""

from __future__ import annotations

import time
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

PREFIX = "events.out.tfevents."
"""The start of every TensorBoard event file's name, before its 10-digit second."""
MAX_WAIT = 2.0
"""Seconds :func:`open_summary_writer` waits at most: a file named further ahead comes from a
clock that ran ahead (another machine), and no wait of ours orders it."""


def newest_second(folder: str | Path) -> int | None:
    """The largest creation second in the names of ``folder``'s event files (Unix seconds, an
    ``int``), or ``None`` when it holds none (or does not exist)."""
    seconds = []
    for path in Path(folder).glob(PREFIX + "*"):
        stamp = path.name[len(PREFIX) :].split(".", 1)[0]
        if stamp.isdigit():
            seconds.append(int(stamp))
    return max(seconds, default=None)


def open_summary_writer(folder: str | Path, purge_step: int | None = None) -> SummaryWriter:
    """A ``SummaryWriter`` on ``folder`` whose event file sorts after every event file already
    there (see the module's docstring): when one is named with the current second or the next
    (up to :data:`MAX_WAIT` ahead), this waits until the clock has passed it, at most
    :data:`MAX_WAIT` seconds. ``purge_step`` is ``SummaryWriter``'s (the first step this writer
    logs, after a resume).

    Raises:
        OSError: the folder cannot be created or written (from ``SummaryWriter``).
    """
    newest = newest_second(folder)
    if newest is not None:
        wait = newest + 1 - time.time()
        if 0 < wait <= MAX_WAIT:
            time.sleep(wait)
    return SummaryWriter(str(folder), purge_step=purge_step)
