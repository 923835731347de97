"""``python tests/paused_entry.py FLAGS NAME SCRIPT [arguments]``: run the entry point
``SCRIPT`` (``eval.py``, ``sweep.py``, ...) as ``python SCRIPT arguments`` would, pausing
inside the atomic write of the first file named ``NAME`` (after its temporary file is created,
before it is renamed into place), so that a test can send signals while a report is being
written. At the pause the process writes ``FLAGS/paused`` (its process id) and waits, in
Python so signal handlers run, until ``FLAGS/go`` exists. Not a test module.
"""

import contextlib
import os
import runpy
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import lab.common.files  # noqa: E402  (standard library only: the entry point still imports torch)


def main() -> None:
    flags, name, script, *argv = sys.argv[1:]
    real = lab.common.files.atomic_writer

    @contextlib.contextmanager
    def paused_writer(path, mode="wb"):
        with real(path, mode) as file:
            if Path(path).name == name and not (Path(flags) / "paused").exists():
                (Path(flags) / ".paused").write_text(str(os.getpid()))  # renamed whole: never
                (Path(flags) / ".paused").rename(Path(flags) / "paused")  # seen empty
                while not (Path(flags) / "go").exists():
                    time.sleep(0.01)
            yield file

    lab.common.files.atomic_writer = paused_writer
    sys.argv = [script, *argv]
    runpy.run_path(str(ROOT / script), run_name="__main__")  # exits through sys.exit


if __name__ == "__main__":
    main()
