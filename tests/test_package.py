"""The installable package: pyproject.toml declares what requirements*.txt list, a setuptools
build, every package folder and every top-level module, so ``pip install -e .`` installs the
whole project and a new subpackage or entry script cannot be forgotten."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_ROOTS = ("model", "data", "lab")
"""Top-level folders that hold the project's code as packages."""


def requirements(name: str) -> list[str]:
    """The requirement lines of ``name`` itself, in order (comments, blanks and ``-r`` dropped)."""
    lines = (line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines())
    return [line for line in lines if line and not line.startswith("-r")]


def included(name: str) -> list[str]:
    """The files ``name`` pulls in with ``-r``."""
    lines = (line.strip() for line in (ROOT / name).read_text().splitlines())
    return [line.split(None, 1)[1] for line in lines if line.startswith("-r")]


def test_dependencies_are_requirements_txt() -> None:
    assert PROJECT["project"]["dependencies"] == requirements("requirements.txt")
    assert "torch==2.13.0" in PROJECT["project"]["dependencies"]  # pinned, as tested


@pytest.mark.parametrize(("extra", "file"), [("cluster", "requirements-cluster.txt")])
def test_the_cluster_extra_is_its_requirements_file(extra: str, file: str) -> None:
    assert included(file) == ["requirements.txt"]
    assert PROJECT["project"]["optional-dependencies"][extra] == requirements(file)


def test_the_dev_extra_is_its_requirements_file_and_what_that_includes() -> None:
    assert included("requirements-dev.txt") == ["requirements-cluster.txt"]
    expected = requirements("requirements-cluster.txt") + requirements("requirements-dev.txt")
    assert PROJECT["project"]["optional-dependencies"]["dev"] == expected


def test_the_build_is_setuptools() -> None:
    build = PROJECT["build-system"]
    assert build["build-backend"] == "setuptools.build_meta"
    assert any(r.startswith("setuptools") for r in build["requires"])


def package_folders() -> set[str]:
    """Dotted names of every folder of code under the package roots."""
    found = set()
    for top in PACKAGE_ROOTS:
        for path in [ROOT / top, *(ROOT / top).rglob("*")]:
            if path.is_dir() and path.name != "__pycache__" and any(path.glob("*.py")):
                found.add(".".join(path.relative_to(ROOT).parts))
    return found


def test_every_package_folder_is_declared_and_a_package() -> None:
    """A new subpackage is found by the declared patterns (setuptools' find, which takes the
    folders with an ``__init__.py`` whose names match them); a folder of code without an
    ``__init__.py``, which the find would skip, fails here."""
    folders = package_folders()
    assert {"model.position", "lab.training", "lab.properties"} <= folders
    missing_init = sorted(
        f for f in folders if not (ROOT / f.replace(".", "/")).joinpath("__init__.py").is_file()
    )
    assert not missing_init, f"folders of code without __init__.py: {missing_init}"
    find = PROJECT["tool"]["setuptools"]["packages"]["find"]
    assert all(any(fnmatch.fnmatchcase(f, p) for p in find["include"]) for f in folders)


def test_every_top_level_folder_of_code_is_a_package_root() -> None:
    """A new top-level package (a folder with modules, not tests) would not install unless it
    joins the roots."""
    folders = [p for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")]
    with_code = {p.name for p in folders if p.name != "tests" and any(p.glob("*.py"))}
    assert with_code == set(PACKAGE_ROOTS)


def test_every_top_level_module_is_declared() -> None:
    """Every script at the project root (train.py, eval.py, ...) installs as a module, except
    install.py: it runs before the project is installed, to install it."""
    modules = {path.stem for path in ROOT.glob("*.py")} - {"install"}
    assert {"train", "eval", "sweep", "bench", "properties"} <= modules
    assert sorted(PROJECT["tool"]["setuptools"]["py-modules"]) == sorted(modules)
