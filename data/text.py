"""Language modelling on bytes of real text: the ``text`` task and the :class:`Corpus` it reads.

Tokens are bytes (id == byte value, 0..255) plus ``<bos>`` = 256, ``<sep>`` = 257 and
``<eos>`` = 258 (vocabulary 259; a window holds no special token, the ids exist so other byte
tasks share the vocabulary). A training example is a window of ``length + 1`` consecutive bytes
of the training split; the model is trained on next-token prediction at every position
(``answer_start = 1``: every token after the first is a target), so the task ``length`` IS the
window length in tokens.

The default corpus is the Python standard library's own ``.py`` source (present wherever
Python is, written by people, no download): the files under ``sysconfig.get_paths()["stdlib"]``,
sorted by relative POSIX path, without ``site-packages``, ``dist-packages`` and any folder named
``test``, ``tests``, ``idlelib``, ``lib2to3``, ``__pycache__`` or ``turtledemo``. The file of index
``i`` (sorted order) is held out when ``i % holdout_every == holdout_every - 1``; each split is
the concatenation of its files' bytes. ``data.options.text.path`` reads a user file (its last
``1 / holdout_every`` of bytes held out) or folder (split by file as above) instead. A corpus is
loaded once per process (:func:`load_corpus` caches it).
"""

from __future__ import annotations

import hashlib
import platform
import stat
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from data.base import BOS, EOS, SEP, Batch, Task, register

STDLIB = "python-stdlib"
"""``Corpus.source`` of the default corpus."""

EXCLUDED_FOLDERS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"}
    | {"turtledemo"}
)
"""Folder names whose files the standard-library corpus leaves out (installed packages,
test suites, generated or demo code)."""


def byte_vocab() -> list[str]:
    """The 259 token strings of the byte vocabulary: printable ASCII bytes as themselves,
    other bytes as ``\\xNN``, then ``<bos>``, ``<sep>``, ``<eos>`` (ids 256, 257, 258)."""
    readable = [chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in range(256)]
    return [*readable, BOS, SEP, EOS]


@dataclass(frozen=True)
class Corpus:
    """A text corpus as bytes, split into training and held-out text.

    Attributes:
        train: uint8 ``(n,)``: the training files' bytes, concatenated.
        heldout: uint8 ``(m,)``: the held-out files' bytes, concatenated.
        sha256: hex SHA-256 over every file in order: its relative POSIX path (UTF-8), a NUL,
            its size in decimal, a NUL, its bytes (a single file: its name); the split rule is
            in ``holdout_every``, recorded with the run's options.
        source: ``python-stdlib`` (:data:`STDLIB`) or the path given.
        python: ``platform.python_version()`` for the standard-library corpus, else None.
        files: ``(n_train, n_heldout)`` files (a single user file counts as ``(1, 1)``).
    """

    train: np.ndarray
    heldout: np.ndarray
    sha256: str
    source: str
    python: str | None
    files: tuple[int, int]

    def record(self) -> dict[str, Any]:
        """The JSON-ready identity of the corpus: ``{source, sha256, python, files,
        heldout_tokens}`` (what checkpoints and ``eval.json`` record)."""
        return {
            "source": self.source,
            "sha256": self.sha256,
            "python": self.python,
            "files": list(self.files),
            "heldout_tokens": int(self.heldout.size),
        }


def stdlib_files() -> tuple[Path, list[Path]]:
    """The standard library folder and its corpus files (relative paths, sorted by POSIX path)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [
        p.relative_to(root)
        for p in root.rglob("*.py")
        if p.is_file() and not EXCLUDED_FOLDERS & set(p.relative_to(root).parts[:-1])
    ]
    return root, sorted(files, key=lambda p: p.as_posix())


def suffixes(extensions: str | None) -> tuple[str, ...] | None:
    """The file-name endings of the comma-separated ``extensions`` (None: every file)."""
    return None if extensions is None else tuple(s.strip() for s in extensions.split(","))


def folder_files(root: Path, extensions: str | None) -> list[Path]:
    """The regular files below a user folder (relative, sorted by POSIX path), hidden ones
    left out, with one of the comma-separated ``extensions`` (None: every file)."""
    endings = suffixes(extensions)
    files = [
        p.relative_to(root)
        for p in root.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
        and (endings is None or p.name.endswith(endings))
    ]
    return sorted(files, key=lambda p: p.as_posix())


def _split_files(root: Path, files: list[Path], holdout_every: int) -> tuple[list, list, str]:
    """Train bytes, held-out bytes (lists of per-file arrays) and the SHA-256 of ``files``."""
    digest = hashlib.sha256()
    train, heldout = [], []
    for i, relative in enumerate(files):
        data = _read(root / relative, str(root / relative))
        digest.update(f"{relative.as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
        side = heldout if i % holdout_every == holdout_every - 1 else train
        side.append(np.frombuffer(data, dtype=np.uint8))
    return train, heldout, digest.hexdigest()


def _read(file: Path, shown: str) -> bytes:
    """The bytes of ``file``; an unreadable one is one ValueError line naming ``shown``."""
    try:
        return file.read_bytes()
    except OSError as error:
        raise ValueError(
            f"cannot read the corpus file {shown!r}: {error.strerror or error} "
            "(data.options.text.path)"
        ) from None


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)


def _kind(path: Path) -> str:
    """What ``path`` is, in words, when it is neither a regular file nor a folder."""
    mode = path.stat().st_mode
    kinds = {
        stat.S_ISFIFO: "a named pipe (FIFO)",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((words for test, words in kinds.items() if test(mode)), "not a regular file")


def _user_files(path: str, extensions: str | None) -> tuple[Path, list[Path]] | Path:
    """The folder and its corpus files for ``path``, or the single regular file it names.

    Raises:
        ValueError: ``path`` does not exist, is neither a regular file nor a folder (a FIFO,
            a device), is a file given ``extensions``, or cannot be listed (one line).
    """
    key = f"data.options.text.path={path!r}"
    root = Path(path).expanduser()
    if not root.exists():
        raise ValueError(f"{key} does not exist; give a text file or a folder of them")
    if root.is_file():
        if extensions is not None:
            raise ValueError(
                f"{key} is a single file, and data.options.text.extensions={extensions!r} "
                "only selects the files of a folder; set data.options.text.extensions=null"
            )
        return root
    if not root.is_dir():
        raise ValueError(
            f"{key} is {_kind(root)}, not a regular file or folder; give a text file or a "
            "folder of them"
        )
    try:
        return root, folder_files(root, extensions)
    except OSError as error:
        raise ValueError(f"{key}: cannot list its files: {error}") from None


@lru_cache(maxsize=8)
def load_corpus(path: str | None = None, holdout_every: int = 10, extensions: str | None = None):
    """The corpus of ``path`` (None: the standard library), read once per process.

    Raises:
        ValueError: ``path`` does not exist or is not a regular file or folder, a file is
            given ``extensions`` or cannot be read, a folder holds no matching file, or a split
            is empty (one line naming the path and what to change).
    """
    if path is None:
        root, files = stdlib_files()
        endings = suffixes(extensions)
        files = [f for f in files if endings is None or f.name.endswith(endings)]
    else:
        found = _user_files(path, extensions)
        if isinstance(found, Path):
            return _single_file(found, path, holdout_every)
        root, files = found
    if not files:
        raise ValueError(_no_files(path, extensions))
    train, heldout, sha = _split_files(root, files, holdout_every)
    if not train or not heldout:
        raise ValueError(
            f"corpus {path or STDLIB!r} has {len(files)} file(s): too few to hold out one in "
            f"every {holdout_every} and train on the rest; lower "
            "data.options.text.holdout_every or add files"
        )
    python = platform.python_version() if path is None else None
    files_count = (len(train), len(heldout))
    return Corpus(_joined(train), _joined(heldout), sha, path or STDLIB, python, files_count)


def _no_files(path: str | None, extensions: str | None) -> str:
    """Why a corpus folder gave no file, naming the folder and the endings asked for."""
    where = "the standard library" if path is None else f"data.options.text.path={path!r}"
    if extensions is None:
        return f"{where} holds no (non-hidden) regular file; give a folder with text files"
    return (
        f"{where} holds no file ending in {' or '.join(suffixes(extensions) or ())} "
        f"(data.options.text.extensions={extensions!r}); change the endings, or set them to "
        "null for every file"
    )


def _single_file(file: Path, path: str, holdout_every: int) -> Corpus:
    """A user file split by bytes: its last ``1 / holdout_every`` held out."""
    data = np.frombuffer(_read(file, path), dtype=np.uint8)
    digest = hashlib.sha256(f"{file.name}\0{data.size}\0".encode())
    digest.update(data.tobytes())
    cut = data.size - data.size // holdout_every
    if cut < 2 or cut == data.size:
        what = "is empty" if not data.size else f"has {data.size} bytes"
        raise ValueError(
            f"data.options.text.path={path!r} {what}: too few to train on and hold out its "
            f"last 1/{holdout_every} (data.options.text.holdout_every); give a longer file"
        )
    return Corpus(data[:cut], data[cut:], digest.hexdigest(), path, None, (1, 1))


@dataclass(frozen=True)
class TextOptions:
    """Options of ``text``.

    Attributes:
        path: a text file or folder to read; null: the Python standard library's source.
        holdout_every: every ``holdout_every``-th file (in sorted order) is held out; a single
            file holds out its last ``1 / holdout_every`` of bytes. 2..1000.
        extensions: comma-separated file-name endings read from a folder, e.g. ``.txt,.md``;
            null: every (non-hidden) file of a user folder, ``.py`` for the standard library.
    """

    path: str | None = None
    holdout_every: int = 10
    extensions: str | None = None

    def __post_init__(self) -> None:
        if not 2 <= self.holdout_every <= 1000:
            raise ValueError(
                f"holdout_every={self.holdout_every} is invalid; it must be in [2, 1000]"
            )
        if self.path is not None and not self.path.strip():
            raise ValueError(
                f"path={self.path!r} is empty (an unset shell variable?); give a file or "
                "folder, or null for the standard library's source"
            )
        if self.extensions is not None and not all(s.strip() for s in self.extensions.split(",")):
            raise ValueError(
                f"extensions={self.extensions!r} is invalid: an ending is empty; give file-name "
                "endings separated by commas, such as '.txt,.md', or null"
            )


@register("text")
class TextTask(Task):
    """Next-byte prediction on windows of ``length + 1`` bytes of the corpus's training split
    (``length`` model inputs, every one of them a training target)."""

    Options = TextOptions
    train_lengths = (64, 64)
    language_model = True

    def __init__(self, options: TextOptions | None = None) -> None:
        super().__init__(options)
        self.vocab = byte_vocab()

    def inputs(self) -> dict[str, str]:
        path = self.options.path
        return {} if path is None else {"data.options.text.path": path}

    @property
    def corpus(self) -> Corpus:
        """The task's corpus (loaded on first use, once per process).

        Raises:
            ValueError: see :func:`load_corpus`.
        """
        o = self.options
        return load_corpus(o.path, o.holdout_every, o.extensions)

    def check_length(self, length: int) -> None:
        super().check_length(length)
        size = self.corpus.train.size
        if length + 1 > size:
            raise ValueError(
                f"task 'text' at length {length} needs windows of {length + 1} bytes; the "
                f"corpus's training split has {size}"
            )

    def sample(self, rng: np.random.Generator, length: int, n: int) -> Batch:
        """``n`` windows of ``length + 1`` training bytes, starts uniform over the split:
        ``Batch(tokens int64 (n, length + 1), answer_start=1, length=length)``.

        Raises:
            ValueError: ``length`` < 1, longer than the training split, or ``n`` < 1.
        """
        self.check_length(length)
        if n < 1:
            raise ValueError(f"batch size must be >= 1, got {n}")
        train = self.corpus.train
        starts = rng.integers(0, train.size - length, size=n)  # (n,)
        tokens = train[starts[:, None] + np.arange(length + 1)]  # (n, length + 1)
        return Batch(torch.from_numpy(tokens.astype(np.int64)), 1, length)

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        raise NotImplementedError("task 'text' has no prompts: it samples windows (sample)")

    def solve(self, prompt: Sequence[str]) -> list[str]:
        raise NotImplementedError("task 'text' is language modelling: there is no exact answer")

    def decode(self, tokens: Sequence[int] | Tensor) -> str:
        """The text of ``tokens`` (bytes as UTF-8, invalid sequences replaced; special ids as
        their names)."""
        ids = tokens.tolist() if isinstance(tokens, Tensor) else list(tokens)
        parts, run = [], bytearray()
        for i in ids:
            if i < 256:
                run.append(i)
                continue
            parts.append(run.decode("utf-8", errors="replace"))
            parts.append(self.vocab[i])
            run = bytearray()
        return "".join([*parts, run.decode("utf-8", errors="replace")])
