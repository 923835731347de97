"""The extend-then-fine-tune study in one command:
``python sweep.py --extend-study [STUDY.yaml] [--workers N] [--overwrite] [key=value ...]``.

A study file (``configs/lm_extend.yaml``) names::

    out_dir: runs/lm_extend
    base: {...}            # run-config values of every run (the parents': task, model, L)
    seeds: [0]
    factor: 4              # the longer length: factor x the parents' training lengths
    zero_shot: {LABEL: {OPTION: VALUE}}   # eval.position_options of each parent, per rule
    fine_tune:
      settings: {...}      # run-config values of every child (steps, learning rate)
      rules: {LABEL: {OPTION: VALUE}}     # the child's position options, per rule
    scratch: {...}         # run-config values of the run trained from scratch (null: none);
                           # without train.steps it gets a parent's plus a child's tokens

It runs, in two stages of the sweep machinery (:func:`lab.sweeps.local.run_all`: parallel
workers, finished runs skipped, stopped ones resumed): first the parents (``parent-seedS``,
evaluated as trained and under each zero-shot rule, in ``evaluations/LABEL/``) and the runs
trained from scratch at the longer length (``scratch-seedS``); then the children
(``finetune-LABEL-seedS``), each seeded from its finished parent
(:func:`lab.training.extend.seed_child`) and trained by the ordinary loop. Children and runs
from scratch are evaluated up to the same longest length as the parents. The comparison is
:mod:`lab.lm.extend_report`.

Why a program of its own and not a sweep grid: a child needs its parent's finished checkpoint,
an order the sweep's grid (every point independent) does not have; two stages of the same
machinery give the order without touching it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from data import available_tasks, task_class
from lab.common.checkpoint import checkpoint_path, clear_run, load_checkpoint
from lab.common.config import (
    ConfigError,
    check_evaluable,
    check_outside_inputs,
    load_config,
    load_yaml,
)
from lab.common.files import atomic_write
from lab.common.outputs import output_problem, sweep_file_record
from lab.common.runlock import RunLocked, run_lock
from lab.lm.extend_report import write_extend_report, write_no_parent_report
from lab.lm.perplexity import check_lm_limits
from lab.sweeps.local import run_all, stopped_line
from lab.sweeps.summary import result_records, write_timing
from lab.sweeps.sweep import RunSpec, Sweep, check_program, dotted, prepare_out_dir
from lab.training.extend import check_architecture, seed_child, stale_child

STUDY_KEYS = ("out_dir", "base", "seeds", "factor", "zero_shot", "fine_tune", "scratch")
DEFAULT = Path(__file__).resolve().parents[2] / "configs" / "lm_extend.yaml"


@dataclass
class Study:
    """A planned study: its run specs by stage, and each child's parent spec name."""

    out_dir: str
    parents: list[RunSpec] = field(default_factory=list)
    scratch: list[RunSpec] = field(default_factory=list)
    children: list[RunSpec] = field(default_factory=list)
    parent_of: dict[str, str] = field(default_factory=dict)


def read_study(path: str | Path, overrides: list[str] = ()) -> dict[str, Any]:
    """The study file as a dict, with ``out_dir=``, ``seeds=0,1``, ``factor=8`` and other
    ``key=value`` overrides (into ``base``) applied.

    Raises:
        ConfigError: a missing file, an unknown section or a bad override (one line).
    """
    raw = OmegaConf.to_container(load_yaml(path))
    unknown = sorted(set(raw) - set(STUDY_KEYS))
    if unknown:
        raise ConfigError(
            f"study {str(path)!r} has unknown sections {unknown}; allowed: {', '.join(STUDY_KEYS)}"
        )
    check_sections(raw)
    raw["base"] = dotted(raw.get("base"))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not key=value")
        if key == "out_dir":
            raw["out_dir"] = value
        elif key in ("seeds", "seed"):
            try:
                raw["seeds"] = [int(s) for s in value.split(",")]
            except ValueError:
                raise ConfigError(
                    f"{item} is invalid; give comma-separated integer seeds, e.g. seeds=0,1"
                ) from None
        elif key == "factor":
            raw["factor"] = int(value) if value.isascii() and value.isdigit() else value
        else:
            raw["base"].append(item)
    factor = raw.get("factor", 4)
    if not _is_int(factor) or factor < 2 or factor & (factor - 1):
        raise ConfigError(
            f"factor={factor!r} is invalid; it must be a power of two >= 2 (2, 4, 8, ...): "
            "parents are evaluated at train_max_length * 2**k, the children's length among them"
        )
    seeds = raw.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(_is_int(s) for s in seeds):
        raise ConfigError(f"seeds={seeds!r} is invalid; give a list of integer seeds, e.g. [0, 1]")
    raw["seeds"] = list(dict.fromkeys(seeds))  # seeds=0,0 (or 0,00) is one run per arm, once
    return raw


def check_sections(raw: dict[str, Any]) -> None:
    """Refuse a study section of the wrong kind (``scratch: 5``, ``zero_shot: [1]``, a rule
    that is no mapping, ``fine_tune.settings: [1]``), before anything reads it.

    Raises:
        ConfigError: one line naming the section, what it holds and what it must be.
    """
    tune = raw.get("fine_tune")
    sections = {k: raw.get(k) for k in ("base", "zero_shot", "fine_tune", "scratch")}
    if isinstance(tune, dict):
        unknown = sorted(set(tune) - {"settings", "rules"})
        if unknown:
            raise ConfigError(f"fine_tune has unknown keys {unknown}; allowed: settings, rules")
        sections |= {f"fine_tune.{k}": tune.get(k) for k in ("settings", "rules")}
    for name in ("zero_shot", "fine_tune.rules"):
        if isinstance(sections.get(name), dict):
            sections |= {f"{name}.{label}": v for label, v in sections[name].items()}
    for name, value in sections.items():
        if value is not None and not isinstance(value, dict):
            raise ConfigError(
                f"{name}={value!r} is not a mapping; give {name} as KEY: VALUE entries "
                "(see configs/lm_extend.yaml)"
            )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def training_tokens(config: Any) -> int:
    """Tokens one run of ``config`` trains on: ``train.steps x train.batch_size`` windows of
    ``data.train_max_length`` tokens (an LM run's windows all have that length)."""
    return config.train.steps * config.train.batch_size * config.data.train_max_length


def equal_budget_steps(parent: list[str], child: list[str], scratch: list[str]) -> int:
    """The steps that give the run from scratch (overrides ``scratch``) the training tokens of
    a parent plus one child (:func:`training_tokens` of each), rounded to the nearest step: an
    arm compared with the fine-tuned ones gets the same budget."""
    tokens = training_tokens(load_config(None, parent)) + training_tokens(load_config(None, child))
    own = load_config(None, scratch)
    return max(1, round(tokens / (own.train.batch_size * own.data.train_max_length)))


def check_language_model(base: list[str]) -> None:
    """Refuse a study whose parents (``base`` overrides) train an exact-match task, before any
    config is built: its report compares perplexity by length, and would fail only after every
    arm trained (or on a language-model setting that task cannot take).

    Raises:
        ConfigError: one line naming the task and the language-model tasks.
    """
    given = [item.partition("=")[2] for item in base if item.startswith("data.task=")]
    task = given[-1] if given else load_config(None, []).data.task
    if task in available_tasks() and not task_class(task).language_model:
        tasks = [name for name in available_tasks() if task_class(name).language_model]
        raise ConfigError(
            f"data.task={task!r} is not a language-model task; the extend study compares "
            f"perplexity by length: use one of {', '.join(tasks)}"
        )


def plan(raw: dict[str, Any]) -> Study:
    """Every run of the study as a :class:`RunSpec`, each config checked (see the module
    docstring for names and stages).

    Raises:
        ConfigError: a run config that does not validate (one line).
    """
    out_dir, factor = str(raw.get("out_dir", "runs/lm_extend")), int(raw.get("factor", 4))
    problem = output_problem(out_dir, "out_dir")
    if problem:
        raise ConfigError(problem)
    out_dir = os.path.normpath(out_dir)  # runs/x/, ./runs/x: the run_dir a child records
    rules = (raw.get("fine_tune") or {}).get("rules")
    for where, labels in (("zero_shot", raw.get("zero_shot")), ("fine_tune.rules", rules)):
        check_rules(labels or {}, where)
    study = Study(out_dir)
    for seed in raw.get("seeds") or [0]:
        base = [*raw["base"], f"seed={seed}"]
        parent = load_config(None, base)
        check_outside_inputs(out_dir, parent.data.build_task(), "out_dir")
        check_parents_plain(parent)
        low, high = parent.data.train_min_length, parent.data.train_max_length
        if parent.eval.max_length_factor < factor:
            raise ConfigError(
                f"eval.max_length_factor={parent.eval.max_length_factor:g} is below "
                f"factor={factor}: parents must be evaluated at the children's length; give "
                f"eval.max_length_factor >= {factor}"
            )
        longer = [f"data.train_min_length={factor * low}", f"data.train_max_length={factor * high}"]
        longer.append(f"eval.max_length_factor={parent.eval.max_length_factor / factor:g}")
        check_settings(raw, [*base, *longer])
        spec = RunSpec(f"parent-seed{seed}", [*base, f"run_dir={out_dir}/parent-seed{seed}"])
        for label, options in (raw.get("zero_shot") or {}).items():
            spec.evaluations[label] = dotted(options, "eval.position_options.")
        study.parents.append(spec)
        if raw.get("scratch") is not None:
            name = f"scratch-seed{seed}"
            extra = [*base, *longer, *dotted(raw["scratch"]), f"run_dir={out_dir}/{name}"]
            if not any(item.startswith("train.steps=") for item in dotted(raw["scratch"])):
                child = [*base, *longer, *dotted((raw.get("fine_tune") or {}).get("settings"))]
                extra.append(f"train.steps={equal_budget_steps(base, child, extra)}")
            study.scratch.append(RunSpec(name, extra))
        position = parent.model.position
        kept = dotted(parent.model.options[position], f"model.options.{position}.")
        tune = raw.get("fine_tune") or {}
        for label, options in (tune.get("rules") or {}).items():
            name = f"finetune-{label}-seed{seed}"
            rule = dotted(options, f"model.options.{position}.")
            child = [*base, *kept, *longer, *dotted(tune.get("settings")), *rule]
            study.children.append(RunSpec(name, [*child, f"run_dir={out_dir}/{name}"]))
            study.parent_of[name] = spec.name
            with rule_named(f"fine_tune.rules.{label}", position):
                check_architecture(parent, load_config(None, study.children[-1].overrides))
    check_evaluations(study, position)
    return study


def check_evaluations(study: Study, position: str) -> None:
    """Check every run's evaluations (each zero-shot rule) before anything trains: the rule's
    options, and for text the corpus-sized limits ``train.py`` checks (:func:`check_lm_limits`).

    Raises:
        ConfigError: one line naming the run or rule.
    """
    for spec in [*study.parents, *study.scratch, *study.children]:
        for label, extra in spec.evaluations.items():
            config = load_config(None, [*spec.overrides, *extra])
            with rule_named(f"zero_shot.{label}", position):
                check_evaluable(config, spec.name)
            check_lm_limits(config)


@contextlib.contextmanager
def rule_named(where: str, position: str) -> Iterator[None]:
    """Prefix a :class:`ConfigError` raised while checking a rule with the rule's place in the
    study file and the parents' scheme, whose options a rule sets (a RoPE rule given to ALiBi
    parents once read as a bad ``model.options.alibi.scaling`` the user never wrote)."""
    try:
        yield
    except ConfigError as error:
        raise ConfigError(
            f"{where} sets options of the parents' scheme {position!r}: {error}"
        ) from None


STUDY_SET = {
    "data.train_min_length": "factor",
    "data.train_max_length": "factor",
    "eval.max_length_factor": "factor and base",
    "model.": "base (the parents' model) and fine_tune.rules",
}
"""Key prefixes that ``fine_tune.settings`` and ``scratch`` may not set -> what sets them: the
lengths come from ``factor``, the model from the parents and its position options from the
rules, so the report's labels and pairs say what each run is."""


def check_settings(raw: dict[str, Any], longer: list[str]) -> None:
    """Refuse bad ``fine_tune.settings`` (every child's, on top of a parent's config at the
    longer lengths ``longer``) in a line naming that section, not the first rule; refuse in
    ``fine_tune.settings`` and ``scratch`` any key the study itself sets (:data:`STUDY_SET`).

    Raises:
        ConfigError: ``fine_tune.settings: `` and the config's one-line error, or the section,
            the key and what sets it.
    """
    settings = dotted((raw.get("fine_tune") or {}).get("settings"))
    for where, items in (("fine_tune.settings", settings), ("scratch", dotted(raw.get("scratch")))):
        for item in items:
            key = item.partition("=")[0]
            owner = next((v for k, v in STUDY_SET.items() if key.startswith(k)), None)
            if owner is not None:
                raise ConfigError(
                    f"{where} sets {item}, which the study sets from {owner}: the report would "
                    f"label and pair that run as what the study says it is; leave it out"
                )
    try:
        load_config(None, [*longer, *settings])
    except ConfigError as error:
        raise ConfigError(f"fine_tune.settings: {error}") from None


def check_parents_plain(parent: Any) -> None:
    """Refuse parents trained under a context-extension rule (``base`` setting
    ``model.options.rope.scaling``): the report calls them "as trained" and measures each
    rule against them.

    Raises:
        ConfigError: one line naming the option.
    """
    options = parent.model.scheme_options
    if getattr(options, "scaling", "none") != "none":
        raise ConfigError(
            f"base sets model.options.{parent.model.position}.scaling={options.scaling}: the "
            "parents are the as-trained baseline every rule is measured against; give rules "
            "in zero_shot and fine_tune.rules only"
        )


LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")
"""A rule's label: it names a folder (``RUN/evaluations/LABEL``, ``finetune-LABEL-seedN``)."""


def check_label(label: str, where: str) -> None:
    """Refuse a ``zero_shot`` or ``fine_tune.rules`` label that is not a plain folder name, before
    anything trains (a ``..`` or ``/`` was refused only when the parent was evaluated).

    Raises:
        ConfigError: one line naming the label and what a label may hold.
    """
    if not LABEL.fullmatch(label) or ".." in label:
        raise ConfigError(
            f"{where} label {label!r} is not a plain name: it names a folder, so give letters, "
            "digits and . _ = + - (no '/' or '..'), e.g. linear"
        )


def check_rules(rules: dict[str, Any], where: str) -> None:
    """Refuse, before anything trains, a rule whose label is no folder name
    (:func:`check_label`), a zero-shot rule that sets no option (it would evaluate the parent
    as trained under a rule's name) and two rules of one section with the same options (one
    arm under two labels: the report keeps one of them).

    Raises:
        ConfigError: one line naming the section, the labels and what is allowed.
    """
    seen: dict[str, str] = {}
    for label, options in rules.items():
        check_label(str(label), where)
        if where == "zero_shot" and not options:
            raise ConfigError(
                f"zero_shot.{label} sets no option; a zero-shot rule changes "
                "eval.position_options, e.g. {scaling: linear, scaling_factor: 4}"
            )
        key = json.dumps(options or {}, sort_keys=True, default=str)
        if key in seen:
            raise ConfigError(
                f"{where}.{seen[key]} and {where}.{label} set the same options ({options}); "
                "give each rule once"
            )
        seen[key] = str(label)


def seed_children(
    study: Study, records: dict[str, dict], overwrite: bool = False
) -> tuple[list[RunSpec], list[dict]]:
    """Seed each child whose parent finished and that has no checkpoint yet (or is to be
    replaced: marked so, or, with ``overwrite``, fine-tuned from a parent checkpoint that is no
    longer the parent's); returns the children to run and the records of those that cannot
    (their parent failed or was stopped, their parent was retrained and ``overwrite`` is off,
    or seeding was refused: another corpus, an override that reshapes a weight)."""
    ready, blocked = [], []
    for spec in study.children:
        parent = records.get(study.parent_of[spec.name], {})
        error = None
        if parent.get("status") not in ("trained", "evaluated", "skipped"):
            error = f"parent {study.parent_of[spec.name]} did not finish ({parent.get('status')})"
        else:
            try:
                prepare_child(spec, parent["run_dir"], overwrite)
            except (ConfigError, OSError, ValueError, RunLocked) as refused:
                error = f"{type(refused).__name__}: {refused}"
        if error is None:
            ready.append(spec)
        else:
            blocked.append({"name": spec.name, "status": "failed", "error": error, "result": None})
    return ready, blocked


def prepare_child(spec: RunSpec, parent_dir: str, overwrite: bool) -> None:
    """Make ``spec``'s child folder ready to train from the parent in ``parent_dir``: under the
    child's lock, check that an existing child was fine-tuned from the parent's checkpoint as it
    is now (:func:`lab.training.extend.stale_child`) and clear it when it is to be replaced;
    then seed it when it has no checkpoint (:func:`lab.training.extend.seed_child`).

    Raises:
        ConfigError: the child is stale and ``overwrite`` is off (one line naming it), or
            seeding is refused (see :func:`lab.training.extend.check_child`).
        OSError, ValueError, RunLocked: an unreadable checkpoint, a folder in use.
    """
    config = load_config(None, spec.overrides)
    with run_lock(config.run_dir):
        stale = stale_child(config.run_dir, parent_dir)
        if stale and not overwrite:
            raise ConfigError(f"{stale}; --overwrite re-makes it from the parent as it is now")
        if (stale or spec.overwrite) and checkpoint_path(config.run_dir).is_file():
            clear_run(config.run_dir)
    spec.overwrite = False
    if not checkpoint_path(config.run_dir).is_file():
        seed_child(config, parent_dir, load_checkpoint(parent_dir))


def run_study(
    study: Study, workers: int, overwrite: bool, held: contextlib.ExitStack | None = None
) -> tuple[list[dict], int | None]:
    """Run both stages (see the module docstring); ``(records, signal)`` as
    :func:`lab.sweeps.local.run_all` returns them, over every run. With ``held``, the lock of
    ``out_dir`` is taken into it (:func:`lab.sweeps.sweep.prepare_out_dir`)."""
    every = [*study.parents, *study.scratch, *study.children]
    prepare_out_dir(Sweep(study.out_dir, [], {}, {}), every, overwrite, "extend-study", held)
    gpus = torch.cuda.device_count()
    first = [*study.parents, *study.scratch]
    records, signum = run_all(first, min(workers, len(first)), gpus)
    if signum is not None or not study.children:
        return records, signum
    ready, blocked = seed_children(study, {r["name"]: r for r in records}, overwrite)
    more, signum = run_all(ready, min(workers, len(ready)), gpus) if ready else ([], None)
    return [*records, *more, *blocked], signum


def main(argv: list[str]) -> int:
    """``python sweep.py --extend-study``: 0 done, 1 a run failed, 2 a bad input, 128 + signal
    on a stop (finished runs are kept; the same command resumes)."""
    parser = argparse.ArgumentParser(
        prog="python sweep.py --extend-study",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "study", nargs="?", default=str(DEFAULT), help="study file (default configs/lm_extend.yaml)"
    )
    parser.add_argument(
        "--workers", type=int, default=0, help="parallel runs (default: one per CPU core)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="retrain runs trained with other settings"
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="out_dir=..., seeds=0,1, or run-config values of every run",
    )
    args = parser.parse_intermixed_args(argv)
    with contextlib.ExitStack() as held:  # out_dir's lock, until the report is written
        return run_command(args, argv, held)


def run_command(args: argparse.Namespace, argv: list[str], held: contextlib.ExitStack) -> int:
    """Plan, run and report the study of ``args``; the exit code (see :func:`main`)."""
    started = time.perf_counter()
    try:
        raw = read_study(args.study, args.overrides)
        out_dir = str(raw.get("out_dir", "runs/lm_extend"))
        if not output_problem(out_dir, "out_dir"):  # else plan names the problem
            check_program(os.path.normpath(out_dir), "extend-study")
        check_language_model(raw["base"])
        study = plan(raw)
        workers = args.workers or torch.cuda.device_count() or os.cpu_count() or 1
        records, signum = run_study(study, workers, args.overwrite, held)
    except (ConfigError, OSError, ValueError, RunLocked) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    command = shlex.join(["python", "sweep.py", "--extend-study", *argv])
    seconds = time.perf_counter() - started
    if signum is not None:  # its time and counts, so the pass that goes on adds to them
        write_timing(
            records,
            Path(study.out_dir),
            seconds,
            workers,
            command=command,
            sweep_file=sweep_file_record(args.study),
        )
        print("\n" + stopped_line(signum, command), file=sys.stderr)
        return 128 + signum
    return finish(records, study, seconds, workers, command, sweep_file_record(args.study))


def finish(
    records: list[dict],
    study: Study,
    seconds: float,
    workers: int,
    command: str | None = None,
    study_file: dict[str, str] | None = None,
) -> int:
    """Write ``results.json`` (every evaluation), ``sweep.json`` (with ``command``, the command
    line that made the study, and ``study_file``, its file's path and SHA-256) and the comparison
    (:func:`lab.lm.extend_report.write_extend_report`; when no parent finished, a report that
    says so, and one ``error:`` line); print it; 1 when a run failed."""
    out_dir = Path(study.out_dir)
    results = result_records(records)
    failed = [r for r in records if r["status"] in ("failed", "interrupted")]
    for record in failed:
        print(f"FAILED {record['name']}: {record.get('error')}", file=sys.stderr)
    text = json.dumps(results, indent=1, allow_nan=False) + "\n"
    written = [atomic_write(out_dir / "results.json", text)]

    def timing(files: list[Path]) -> None:
        write_timing(
            records, out_dir, seconds, workers, command=command, files=files, sweep_file=study_file
        )

    parents = {r["name"]: r for r in records if r["name"] in {p.name for p in study.parents}}
    if not any(r["status"] in ("trained", "evaluated", "skipped") for r in parents.values()):
        why = {n: f"{r['status']} ({r.get('error') or 'no error'})" for n, r in parents.items()}
        report = write_no_parent_report(out_dir, why)
        timing(written)
        print(
            f"error: no comparison: no parent finished ({len(parents)} did not); see {report}",
            file=sys.stderr,
        )
        return 1
    try:
        paths = write_extend_report(results, out_dir)
    except (KeyError, ValueError) as error:  # records without per-window losses (not LM runs)
        timing(written)
        print(f"error: no comparison written: {error}", file=sys.stderr)
        return 1
    timing([*written, *paths.values()])
    print(paths["report"].read_text())
    print(f"{len(records)} runs in {seconds / 60:.1f} min; report: {paths['report']}")
    return 1 if failed else 0
