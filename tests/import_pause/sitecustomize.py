"""Put this folder on ``PYTHONPATH`` with ``PAUSE_FLAGS=DIR`` set, and a Python process pauses
when it first imports ``torch``: it writes ``DIR/paused`` (holding its process id) and waits,
in Python so signal handlers run, until ``DIR/go`` exists. A test can then signal an entry
point in the middle of its imports, at a moment it controls. Not a test module.
"""

import os
import sys
import time
from pathlib import Path


class _PauseAtTorch:
    """A ``sys.meta_path`` finder that finds nothing: it only pauses at the first ``torch``."""

    def __init__(self, flags: Path) -> None:
        self.flags = flags
        self.done = False

    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not self.done:
            self.done = True
            (self.flags / "paused").write_text(str(os.getpid()))
            while not (self.flags / "go").exists():
                time.sleep(0.01)
        return None


if os.environ.get("PAUSE_FLAGS"):
    sys.meta_path.insert(0, _PauseAtTorch(Path(os.environ["PAUSE_FLAGS"])))
