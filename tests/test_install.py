"""install.py: the torch build it chooses and the pip commands it runs (none are run here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import install

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("platform", "gpu", "build"),
    [
        ("linux", False, "cpu"),
        ("linux", True, "default"),
        ("darwin", False, "default"),
        ("win32", False, "default"),
        ("win32", True, "default"),
    ],
)
def test_auto_picks_the_cpu_build_only_on_linux_without_a_gpu(platform, gpu, build) -> None:
    assert install.choose_build("auto", platform, gpu) == build


def test_an_explicit_build_wins_and_a_bad_one_is_named() -> None:
    assert install.choose_build("cpu", "darwin", True) == "cpu"
    assert install.choose_build("default", "linux", False) == "default"
    with pytest.raises(ValueError, match=r"--torch 'gpu': expected one of auto, cpu, default"):
        install.choose_build("gpu", "linux", False)


def test_the_pin_is_the_requirements_files_torch_line(tmp_path: Path) -> None:
    line = re.search(r"^torch==.*$", (ROOT / "requirements.txt").read_text(), flags=re.M)
    assert install.torch_pin(ROOT / "requirements.txt") == line.group(0).strip()
    (tmp_path / "r.txt").write_text("numpy\ntorch>=2\n")
    with pytest.raises(ValueError, match="expected one 'torch==VERSION' line, found 0"):
        install.torch_pin(tmp_path / "r.txt")


def test_the_cpu_build_comes_from_the_cpu_index_before_the_requirements() -> None:
    pin = install.torch_pin(ROOT / "requirements.txt")
    first, second = install.pip_commands("cpu", dev=False, installed=None)
    pip = [sys.executable, "-m", "pip", "install"]
    assert first == [*pip, pin, "--index-url", install.CPU_INDEX, "--retries", "2"]
    assert second[-2:] == ["-r", str(ROOT / "requirements.txt")]


def test_the_default_build_and_a_reinstall_fetch_only_the_requirements() -> None:
    version = install.torch_pin(ROOT / "requirements.txt").split("==")[1]
    for build, installed in [("default", None), ("cpu", version + "+cpu"), ("cpu", version)]:
        (only,) = install.pip_commands(build, dev=True, installed=installed)
        assert only[-2:] == ["-r", str(ROOT / "requirements-dev.txt")]
    assert len(install.pip_commands("cpu", dev=True, installed="1.0.0")) == 2


def test_dry_run_prints_the_choice_and_the_commands_and_runs_nothing() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "install.py"), "--torch", "cpu", "--dev", "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "install.py: torch build cpu (asked for)"
    assert lines[-1].endswith("-m pip install -r " + str(ROOT / "requirements-dev.txt"))
    assert all(line.startswith("+ ") for line in lines[1:])


def test_the_readme_and_ci_install_through_install_py() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command_1 = "python3 -m venv .venv && .venv/bin/python install.py && .venv/bin/python sweep.py"
    command_2 = (
        "python3 -m venv .venv && .venv/bin/python install.py --dev && .venv/bin/python -m pytest"
    )
    assert command_1 in readme and command_2 in readme
    assert command_2 in ci
