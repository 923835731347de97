"""Start a test's child process as a terminal starts a foreground command: with the default
action for SIGINT, SIGTERM and SIGHUP. A test runner started in the background of a
non-interactive shell (as CI may be) passes SIGINT on ignored, and a program rightly leaves an
ignored signal ignored, so a test that sends Ctrl-C would otherwise see nothing happen."""

from __future__ import annotations

import signal


def foreground() -> None:
    """``preexec_fn`` for :class:`subprocess.Popen`: default stop-signal actions in the child."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
