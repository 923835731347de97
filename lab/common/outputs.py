"""Every file the project writes into a run, sweep or study folder, and where a command may write.

The writers take their file names from here (the trainer, ``eval.json`` and a run's passkey
heatmap, the cross-run reports of both kinds, ``sweep.json``, the extend study's report), and so
does ``--overwrite`` (:func:`lab.common.checkpoint.run_files`), which deletes a file only when
its content proves it the project's (:func:`is_ours`): a user's ``report.md``, a PNG not drawn
by matplotlib or a JSON file named ``eval.json`` that is no evaluation stays. :func:`output_problem`
is the one check of every output folder a command is given (``out_dir``, ``run_dir``, ``--out``).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path

from lab.common.events.place import MARKER, claimed_above
from lab.common.files import file_sha256, output_file

CHECKPOINT_NAME = "checkpoint.pt"
CONFIG_NAME = "config.yaml"
EVENTS = "events.out.tfevents.*"
EVAL_NAME = "eval.json"
HEATMAP_NAME = "passkey.png"
"""A run's passkey heatmap, beside its ``eval.json`` (:mod:`lab.lm.passkey_figure`)."""
SWEEP_JSON = "sweep.json"
REWRITTEN = "reports_rewritten_by"
"""The key of a ``sweep.json`` whose folder's reports a later ``eval.py`` rewrote (its command):
they are no longer the sweep's, and publishing refuses them
(:func:`lab.reporting.readme.check_complete`)."""
SWEEP_RUNS = "_sweep"
"""A sweep's own TensorBoard runs (means over seeds, figures), below its ``out_dir``; each re-run
of the sweep rewrites them."""
"""A sweep's (or study's) timing and provenance (:func:`lab.sweeps.summary.write_timing`)."""

PNG = (b"\x89PNG\r\n\x1a\n", b"tEXtSoftware\x00Matplotlib")
"""How a figure the project drew begins, and what its first 4 KiB hold."""
PASSKEY_FIGURE = "passkey_grid.png"
ATTENTION_FIGURE = "attention_vs_length.png"
SYNTHETIC_REPORT_NAMES = (
    "results.csv",
    "results.json",
    "report.md",
    "accuracy_vs_length.png",
    "learning_speed.png",
    "order_sensitivity.png",
    PASSKEY_FIGURE,
    ATTENTION_FIGURE,
)
"""The synthetic runs' cross-run report (:func:`lab.reporting.report.write_synthetic_reports`;
the passkey heatmaps only when a run holds a passkey grid, the attention figure only when a run
holds diagnostics)."""
LM_REPORT_NAMES = (
    "lm_results.csv",
    "lm_results.json",
    "lm_report.md",
    "perplexity_vs_length.png",
    "loss_vs_position.png",
)
"""The language-model runs' cross-run report (:func:`lab.lm.report.write_lm_reports`)."""
STUDY_NAMES = ("extend_report.md", "extend_results.csv", "results.json", "perplexity_vs_length.png")
"""The extend study's report (:func:`lab.lm.extend_report.write_extend_report`)."""

REPORT_FILES: dict[str, tuple[bytes, bytes]] = {
    "report.md": (b"# Evaluation report\n", b""),
    "results.csv": (b"run,position,task,seed,length,", b""),
    "results.json": (b"[", b'"schema_version"'),
    "lm_report.md": (b"# Language-model report\n", b""),
    "lm_results.csv": (b"position,task,seed,length,label,", b""),
    "lm_results.json": (b"[", b'"kind": "lm"'),
    **{name: PNG for name in (*SYNTHETIC_REPORT_NAMES, *LM_REPORT_NAMES) if name.endswith(".png")},
}
"""Every report file ``eval.py RUN`` writes into a run folder (:data:`SYNTHETIC_REPORT_NAMES`,
:data:`LM_REPORT_NAMES`) -> how it begins and what its first 4 KiB hold when the project wrote
it."""
EVALUATION_FILES: dict[str, tuple[bytes, bytes]] = {HEATMAP_NAME: PNG}
"""Files an evaluation writes beside its ``eval.json`` (in a run folder or
``RUN/evaluations/LABEL``) -> their beginning and a needle, as :data:`REPORT_FILES`."""
SWEEP_ENVELOPE = {"seconds": (int, float), "workers": int, "runs": dict, "machine": str}
"""Fields every ``sweep.json`` the project wrote holds -> their types."""
EVAL_ENVELOPE = {"schema_version": int, "run_dir": str, "config": dict, "lengths": list}
"""Fields every ``eval.json`` the project wrote holds, of every schema version and both kinds
(synthetic and language-model), -> their types."""


def foreign_files(folder: str | Path, names: Iterable[str]) -> list[str]:
    """The ``names`` that are files in ``folder`` the project did not write (:func:`is_ours`):
    a command that writes files of those names there would replace a user's."""
    folder = Path(folder)
    return [n for n in names if (folder / n).exists() and not is_ours(folder / n)]


def is_ours(path: str | Path) -> bool:
    """``path`` is a regular file (not a link) that the project wrote, by its content: an
    ``eval.json`` parses to an object with :data:`EVAL_ENVELOPE`, a ``sweep.json`` to one with
    :data:`SWEEP_ENVELOPE`; a file of
    :data:`REPORT_FILES` or :data:`EVALUATION_FILES` begins as listed there. Any other name:
    False (the callers match the names they write by name, e.g. the trainer's)."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return False
    envelope = {EVAL_NAME: EVAL_ENVELOPE, SWEEP_JSON: SWEEP_ENVELOPE}.get(path.name)
    if envelope is not None:
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and all(
            isinstance(data.get(key), kind) and not isinstance(data.get(key), bool)
            for key, kind in envelope.items()
        )
    signature = REPORT_FILES.get(path.name) or EVALUATION_FILES.get(path.name)
    if signature is None:
        return False
    start, needle = signature
    try:
        with path.open("rb") as file:
            head = file.read(4096)
    except OSError:
        return False
    return head.startswith(start) and needle in head


OUTPUT_KINDS = ("out_dir", "run_dir", "--out")
"""What :func:`output_problem` checks: a sweep's or study's folder, a run's folder, or the folder
``eval.py --out`` writes its reports and ``eval.json`` files to."""


def resolved(value: str | Path) -> Path | None:
    """``value`` as an absolute path, ``~`` expanded and symlinks followed, or None when it
    cannot be resolved (a symlink loop: ``RuntimeError`` before Python 3.13, ``OSError``
    after)."""
    try:
        return Path(value).expanduser().resolve()
    except (RuntimeError, OSError):
        return None


def events_problem(path: Path, flag: str) -> str | None:
    """Why ``path`` (resolved) lies in TensorBoard folders a sweep rewrites: the ``-runs`` folder
    its :data:`MARKER` claims, or its own :data:`SWEEP_RUNS` tree; None when it does not."""
    claimed = claimed_above(path)
    if claimed is not None:
        return (
            f"{flag} is inside {str(claimed)!r}, the folder of a sweep's runs' TensorBoard "
            f"events (its {MARKER} file); give a folder outside it"
        )
    tree = next((p for p in (path, *path.parents) if p.name == SWEEP_RUNS), None)
    if tree is not None and (tree.parent / SWEEP_JSON).is_file():
        return (
            f"{flag} is inside {str(tree)!r}, a sweep's TensorBoard comparison runs (each "
            "re-run rewrites them); give a folder outside it"
        )
    return None


def output_problem(value: str, key: str = "out_dir", same_as: str | None = None) -> str | None:
    """Why ``value`` cannot be the output folder ``key`` (one of :data:`OUTPUT_KINDS`), as one
    line naming ``key`` and the value, or None when it can: the one check every entry point
    applies to the folder it writes into.

    Refused for every kind: an empty value (an unset shell variable), a value starting with
    ``~`` (never expanded: it would make a folder named ``~``), a symlink loop or a link to
    nothing (a dangling link), the filesystem root, a
    path that exists but is not a folder, and a folder inside another run's folder (one of its
    parents holds a ``checkpoint.pt``). Also refused: for ``run_dir``, a sweep's folder (it holds
    ``sweep.json``; its runs go below it) and a folder holding another run below it
    (:func:`run_below`); for ``out_dir`` and ``--out``, a run's folder itself;
    for ``out_dir`` and ``run_dir``, ``.`` or ``..`` (the ``-runs`` folder beside a sweep, and a
    run's own name in every message, are its last part); for ``--out``, a sweep's folder (its
    reports would be replaced) unless ``--out`` is the folder ``same_as`` (``eval.py PATH --out
    PATH`` writes where ``eval.py PATH`` does).
    """
    if key not in OUTPUT_KINDS:
        raise ValueError(f"output kind {key!r} is not one of {', '.join(OUTPUT_KINDS)}")
    flag = f"{key} {value!r}" if key.startswith("-") else f"{key}={value!r}"
    example = f"{key} runs/x" if key.startswith("-") else f"{key}=runs/x"
    if not value.strip():
        return f"{flag} is invalid; give a folder, e.g. {example}"
    if value.startswith("~"):
        return f"{flag} starts with '~', which is not expanded here; give the path itself"
    path = resolved(value)
    if path is None:
        return f"{flag} is a symlink loop (its links point at each other); give a real folder"
    if Path(value).expanduser().is_symlink() and not path.exists():
        return (
            f"{flag} is a symbolic link to {str(path)!r}, which does not exist; give a real "
            "folder (or create the link's target)"
        )
    if path == Path(path.anchor):
        return f"{flag} is the filesystem root; give a folder of its own, e.g. {example}"
    if key != "--out" and Path(value).name in ("", ".", ".."):
        why = "its runs' events go beside it, in a folder" if key == "out_dir" else "a run is"
        return (
            f"{flag} names no folder of its own ({why} named after it); give a folder, e.g. "
            f"{example}"
        )
    if path.exists() and not path.is_dir():
        return f"{flag} is a file, not a folder; give a folder"
    events = events_problem(path, flag)
    if events is not None:
        return events
    if same_as is not None and path == resolved(same_as):
        return None
    return runs_problem(path, flag, key)


def runs_problem(path: Path, flag: str, key: str) -> str | None:
    """Why the folder ``path`` (resolved) cannot be the output folder ``key`` for the runs and
    sweeps around it (:func:`output_problem`'s last checks), as one line naming ``flag``."""
    run = next((p for p in path.parents if (p / CHECKPOINT_NAME).is_file()), None)
    if run is not None:
        return (
            f"{flag} is inside the folder of the run {str(run)!r}, whose files it could "
            "replace; give a folder outside every run's"
        )
    below = run_below(path) if key == "run_dir" else None
    if below is not None:
        return (
            f"{flag} holds the run {str(below)!r} below it, whose files a run here could "
            "replace (--overwrite); give a folder of its own"
        )
    if key != "run_dir" and (path / CHECKPOINT_NAME).is_file():
        return f"{flag} holds another run ({CHECKPOINT_NAME}); give a folder of its own"
    if key != "out_dir" and (path / SWEEP_JSON).is_file():
        return (
            f"{flag} is a sweep's folder ({SWEEP_JSON}), whose reports it would replace; give "
            "a folder of its own"
        )
    return None


RUN_SEARCH_DEPTH = 3
"""How many folder levels below a ``run_dir`` :func:`run_below` looks for another run: a sweep's
runs lie one level below its ``out_dir``, a run's evaluations two."""
RUN_SEARCH_FOLDERS = 10_000
"""How many folders :func:`run_below` opens at most, so a ``run_dir`` given as a home folder
is checked in bounded time."""


def run_below(path: Path) -> Path | None:
    """A run folder (one holding ``checkpoint.pt``) up to :data:`RUN_SEARCH_DEPTH` levels below
    ``path``, symbolic links not followed, at most :data:`RUN_SEARCH_FOLDERS` folders opened;
    None when there is none (or ``path`` is no folder). Folders that cannot be read are passed
    over."""
    level, opened = [path], 0
    for _ in range(RUN_SEARCH_DEPTH):
        below = []
        for folder in level:
            if opened >= RUN_SEARCH_FOLDERS:
                return None
            opened += 1
            try:
                entries = [e for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for entry in entries:
                if os.path.isfile(os.path.join(entry.path, CHECKPOINT_NAME)):
                    return Path(entry.path)
                below.append(Path(entry.path))
        level = below
    return None


def output_file_in_place(
    name: str, flag: str = "--out", ours: Callable[[bytes], bool] | None = None
) -> Path:
    """:func:`lab.common.files.output_file` for a command's result file, whose folder is also
    checked as every output folder is (:func:`output_problem`: not a run's folder nor inside
    one, not a sweep's).

    Raises:
        ValueError: one line naming ``flag`` and the value.
        OSError: the folder is not writable.
    """
    out = output_file(name, flag, ours)
    problem = output_problem(str(out.parent), "--out")
    if problem:
        raise ValueError(f"{flag}={name!r} lies in a folder refused for output: {problem}")
    return out


def placeless(command: str) -> list[str]:
    """The words of ``command`` (a sweep's command line) without its ``out_dir=`` value: two
    commands that differ only there made the same sweep in another folder."""
    return [word for word in shlex.split(command) if not word.startswith("out_dir=")]


EXECUTION_FLAGS = ("--workers", "--runs-per-device", "--launcher", "--slurm.")
"""Command-line flags (with a value; ``--slurm.`` stands for each of its flags) that decide
how a sweep runs, not what it computes."""
EXECUTION_SWITCHES = ("--overwrite",)
"""Flags without a value that decide which runs a pass retrains, not what they compute."""
EXECUTION_KEYS = ("out_dir=", "threads=", "device=", "train.progress=")
"""``key=value`` words that decide where and how a sweep runs, not what it computes."""


def essential(command: str) -> list[str]:
    """The words of ``command`` (a sweep's command line) that decide what it computes: without
    :data:`EXECUTION_FLAGS` (and their values), :data:`EXECUTION_SWITCHES` and
    :data:`EXECUTION_KEYS`. Two commands with the same words made the same sweep, however many
    workers or threads ran it, on which launcher, wherever, and whether a pass retrained."""
    kept, words = [], iter(shlex.split(command))
    for word in words:
        flag = word.partition("=")[0]
        if flag.startswith(EXECUTION_FLAGS) and flag.startswith("--"):
            if "=" not in word:
                next(words, None)  # --workers 2: its value too
            continue
        if flag not in EXECUTION_SWITCHES and not word.startswith(EXECUTION_KEYS):
            kept.append(word)
    return kept


PROJECT = Path(__file__).resolve().parents[2]
"""The project's folder: sweep files inside it are recorded by their path relative to it."""
DEFAULT_SWEEP_FILE = "configs/ablation.yaml"
"""The sweep file of ``python sweep.py`` without ``--config``."""


def sweep_file_words(words: list[str]) -> tuple[str | None, list[str]]:
    """``(the file, the other words)`` of a ``python sweep.py`` command line's words after
    ``sweep.py``: ``--config X`` (or ``--config=X``), ``--extend-study [X]`` (default
    configs/lm_extend.yaml), ``--quick`` (configs/quick.yaml), else :data:`DEFAULT_SWEEP_FILE`;
    the file is None for another program (``--publish``, ``--compare``, ``--select-lr``)."""
    rest, found, i = [], None, 0
    while i < len(words):
        word = words[i]
        if word.startswith("--config="):
            found = word.partition("=")[2]
        elif word == "--config" and i + 1 < len(words):
            found, i = words[i + 1], i + 1
        elif word == "--quick":
            found = "configs/quick.yaml"
        elif word == "--extend-study":
            found = "configs/lm_extend.yaml"
            nxt = words[i + 1] if i + 1 < len(words) else ""
            if nxt and not nxt.startswith("-") and "=" not in nxt:
                found, i = nxt, i + 1
            rest.append(word)
        else:
            rest.append(word)
        i += 1
    if found is None and words and words[0] in ("--publish", "--compare", "--select-lr"):
        return None, rest
    return found or DEFAULT_SWEEP_FILE, rest


def sweep_file_record(path: str | Path) -> dict[str, str]:
    """``{"path", "sha256"}`` of the sweep file a sweep read: its path relative to the
    project when inside it, so that publishing compares it with the file the page names."""
    resolved = Path(path).resolve()
    shown = resolved.relative_to(PROJECT) if resolved.is_relative_to(PROJECT) else resolved
    return {"path": shown.as_posix(), "sha256": file_sha256(resolved)}


UNFINISHED = ("failed", "interrupted", "cancelled")
"""Statuses of a pass that did not finish its sweep: the next pass of the same command goes on
with it, and its wall time adds to that pass's; publishing refuses such a pass's folder."""


PROGRAMS = {
    "sweep": "python sweep.py",
    "extend-study": "python sweep.py --extend-study",
    "select-lr": "python sweep.py --select-lr",
}
"""The programs whose results a sweep folder holds -> how their recorded command begins."""


def recorded_program(out_dir: str | Path) -> str | None:
    """Which of :data:`PROGRAMS` made the sweep in ``out_dir``, read from the command its
    ``sweep.json`` records; None when it records none (or there is no such file)."""
    try:
        command = json.loads((Path(out_dir) / SWEEP_JSON).read_text()).get("command")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(command, str) or not command.startswith(PROGRAMS["sweep"]):
        return None
    for program in ("extend-study", "select-lr"):
        if command.startswith(f"{PROGRAMS[program]} ") or command == PROGRAMS[program]:
            return program
    return "sweep"
