"""The README and docs/ pages point at things that exist: links, file paths and module names.

Code moves; a page that names a module or a file that is gone sends a reader nowhere. These
checks read the Markdown only, so a new scheme or task never needs a docs edit to pass them.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w/.])((?:lab|model|data|tests|configs)/[\w/]+\.(?:py|yaml))\b")
MODULE = re.compile(r"(?<![\w.])((?:lab|model|data)\.[a-z_]+(?:\.[a-z_]+)*)")

EXAMPLES = {"model/position/myscheme.py", "data/rotate.py"}
"""Files that docs/extending.md walks the reader through creating."""


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to ``-``."""
    slugs = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_resolves(page: Path) -> None:
    """Links to files exist, and so do the headings their ``#anchor`` names."""
    broken = []
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        name, _, anchor = target.partition("#")
        path = (page.parent / name).resolve() if name else page
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            broken.append(target)
    assert not broken, f"{page_id(page)}: broken links {broken}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_named_file_exists(page: Path) -> None:
    named = set(PATH.findall(page.read_text())) - EXAMPLES
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{page_id(page)}: names files that do not exist: {missing}"


def _unresolved(dotted: str) -> bool:
    """True when ``dotted`` (a module, then attribute names) names nothing. ``model.X`` and
    ``data.X`` where ``X`` is no module are config keys (``model.d_model``), not checked."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found = importlib.util.find_spec(".".join(parts[:end])) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            break
    if end == 1 and parts[0] != "lab":
        return False  # a config key such as model.options.rope.theta
    value = importlib.import_module(".".join(parts[:end]))
    for attribute in parts[end:]:
        if not hasattr(value, attribute):
            return True
        value = getattr(value, attribute)
    return False


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_named_module_exists(page: Path) -> None:
    names = {m.rstrip(".") for m in MODULE.findall(page.read_text())}
    missing = sorted(name for name in names if _unresolved(name))
    assert not missing, f"{page_id(page)}: names modules or attributes that do not exist: {missing}"


@pytest.mark.parametrize(
    ("page", "heading"), [("README.md", "## Files"), ("docs/design.md", "## Every file")]
)
def test_file_trees_name_existing_modules(page: str, heading: str) -> None:
    tree = (ROOT / page).read_text().split(heading, 1)[1].split("```", 2)[1]
    missing = []
    for line in tree.splitlines():
        words = line.split()
        if not words or not words[0].endswith(".py"):
            continue
        folder = Path(words[0]).parent
        for word in words:
            if not word.endswith(".py"):
                break
            path = ROOT / word if "/" in word else ROOT / folder / word
            if not path.exists():
                missing.append(word)
    assert not missing, f"{page}'s file tree names modules that do not exist: {missing}"
