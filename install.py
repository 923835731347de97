"""Install the project's dependencies into the running Python, choosing the PyTorch build.

PyPI's default torch wheel for Linux is a CUDA build of several GB. On a Linux machine
without an NVIDIA GPU this script first installs the CPU build of the pinned torch from
PyTorch's CPU wheel index, then the requirements file, which then has nothing left to fetch
for torch. Everywhere else (a Linux machine with an NVIDIA GPU, macOS, Windows: their PyPI
wheels already fit) it installs the requirements file as it is.

    python3 -m venv .venv && .venv/bin/python install.py          # what sweep.py needs
    .venv/bin/python install.py --dev                             # and the tests' tools
    .venv/bin/python install.py --torch cpu --dry-run             # print the pip commands

Only the standard library is used: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
"""PyTorch's wheel index of CPU-only builds (Linux x86_64 and aarch64, macOS, Windows)."""

BUILDS = ("auto", "cpu", "default")
"""``--torch`` choices: ``auto`` picks ``cpu`` on Linux without an NVIDIA GPU, else ``default``
(PyPI's wheel: CUDA on Linux, the only build on macOS and Windows)."""


def has_nvidia_gpu() -> bool:
    """Whether this machine shows an NVIDIA GPU: a device node ``/dev/nvidia0``, an entry under
    ``/proc/driver/nvidia/gpus/``, or a GPU listed by ``nvidia-smi -L``."""
    if Path("/dev/nvidia0").exists():
        return True
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def choose_build(choice: str, platform: str, gpu: bool) -> str:
    """The torch build to install: ``"cpu"`` or ``"default"``.

    Args:
        choice: one of :data:`BUILDS`; ``"auto"`` resolves by ``platform`` and ``gpu``.
        platform: ``sys.platform`` (``"linux"``, ``"darwin"``, ``"win32"``, ...).
        gpu: whether the machine has an NVIDIA GPU (:func:`has_nvidia_gpu`).

    Raises:
        ValueError: ``choice`` is not one of :data:`BUILDS`.
    """
    if choice not in BUILDS:
        raise ValueError(f"--torch {choice!r}: expected one of {', '.join(BUILDS)}")
    if choice != "auto":
        return choice
    return "cpu" if platform.startswith("linux") and not gpu else "default"


def torch_pin(requirements: Path) -> str:
    """The ``torch==VERSION`` line of the runtime requirements file.

    Raises:
        ValueError: the file pins no single torch version.
    """
    pins = re.findall(r"^torch==([\w.+-]+)\s*$", requirements.read_text(), flags=re.M)
    if len(pins) != 1:
        raise ValueError(f"{requirements}: expected one 'torch==VERSION' line, found {len(pins)}")
    return f"torch=={pins[0]}"


def installed_torch() -> str | None:
    """The torch version installed in this Python (``"2.13.0+cpu"``), or None."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def pip_commands(build: str, dev: bool, installed: str | None) -> list[list[str]]:
    """The pip commands to run, in order, for ``build`` (:func:`choose_build`).

    The CPU step is left out when the pinned torch version is already installed (whatever its
    build: ``installed`` is :func:`installed_torch`), so re-running the install fetches nothing;
    uninstall torch first to change its build.
    """
    requirements = ROOT / "requirements.txt"
    pip = [sys.executable, "-m", "pip", "install"]
    commands = []
    pin = torch_pin(requirements)
    wanted = pin.split("==", 1)[1]
    have_pin = installed is not None and installed.split("+")[0] == wanted
    if build == "cpu" and not have_pin:
        # --retries 2: a machine that cannot reach the index falls back to pip's other
        # sources (its find-links, extra indexes) within seconds instead of a minute.
        commands.append([*pip, pin, "--index-url", CPU_INDEX, "--retries", "2"])
    name = "requirements-dev.txt" if dev else "requirements.txt"
    commands.append([*pip, "-r", str(ROOT / name)])
    return commands


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, print the chosen build and run (or with ``--dry-run`` print) the pip
    commands; returns pip's first non-zero exit status, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dev", action="store_true", help="also the tests' tools")
    parser.add_argument("--torch", default="auto", choices=BUILDS, help="torch build")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    gpu = has_nvidia_gpu()
    build = choose_build(args.torch, sys.platform, gpu)
    reason = "asked for" if args.torch != "auto" else f"{sys.platform}, NVIDIA GPU: {gpu}"
    print(f"install.py: torch build {build} ({reason})", flush=True)
    for command in pip_commands(build, args.dev, installed_torch()):
        print("+ " + " ".join(command), flush=True)
        if not args.dry_run:
            status = subprocess.call(command)
            if status:
                return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
