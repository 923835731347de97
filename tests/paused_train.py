"""``python tests/paused_train.py WHERE STEP FLAGS [train.py arguments]``: run ``train.py`` in a
real process that pauses at a known point, so that a test can send it signals at that point
without timing guesses.

``WHERE`` is ``batch`` (pause when the loop fetches the batch of 0-based step ``STEP``, i.e.
after ``STEP`` completed steps) or ``save`` (pause inside the checkpoint save of step ``STEP``,
before the file is written). At the pause the process announces itself (see :func:`pause`) and
waits until ``FLAGS/go`` exists; signals that arrive meanwhile are handled as in any run. Under
``torchrun`` every rank pauses. Not a test module.
"""

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import lab.training.run  # noqa: E402
import lab.training.trainer  # noqa: E402
import train  # noqa: E402


def pause(flags: Path) -> None:
    """Announce the pause (``FLAGS/paused``, or ``FLAGS/pausedR`` for rank R under torchrun;
    it holds the process id), then wait (in Python, so signal handlers run) for the go flag."""
    name = f"paused{os.environ.get('RANK', '')}"
    (flags / f".{name}").write_text(str(os.getpid()))  # renamed whole: never seen empty
    (flags / f".{name}").rename(flags / name)
    while not (flags / "go").exists():
        time.sleep(0.01)


def main() -> int:
    where, step, flags, *argv = sys.argv[1:]
    step, flags = int(step), Path(flags)
    if where == "batch":
        real_batch = lab.training.trainer.training_batch

        def batch(task, seed, index, *args):
            if index == step:
                pause(flags)
            return real_batch(task, seed, index, *args)

        lab.training.trainer.training_batch = batch
    else:
        real_save = lab.training.run.save_checkpoint

        def save(state, path):
            if state["step"] == step:
                pause(flags)
            real_save(state, path)

        lab.training.run.save_checkpoint = save
    return train.main(argv)


if __name__ == "__main__":
    sys.exit(main())
