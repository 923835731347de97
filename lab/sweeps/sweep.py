"""A sweep: train and evaluate every combination of a grid, then write one comparison report.

A sweep file (YAML, see ``configs/ablation.yaml``) has four sections::

    out_dir: runs/ablation          # where the runs, the report and its TensorBoard go
    base: {model: {...}, ...}       # run-config values shared by every run
    grid: {model.position: [...]}   # dotted key -> list of values; the product is the run list
    when: {data.task=copy: {...}}   # extra values for runs whose grid value matches

Runs go to ``OUT_DIR/NAME/``; their TensorBoard events to ``OUT_DIR-runs/TASK/NAME/`` (each
run's ``log_dir=sweep``, :mod:`lab.common.events.place`), so that ``tensorboard --logdir
OUT_DIR`` lists only the sweep's comparison (:mod:`lab.reporting.sweep_tensorboard`: a run per
scheme and the figures), few enough runs for TensorBoard to show them all at once, however many
seeds. A run trained before this layout keeps its events in its own folder.

Runs that already finished (checkpoint marked finished and an ``eval.json`` computed from that
very checkpoint) are skipped; an unfinished one resumes from its checkpoint. A failing run is
recorded with its error and the others go on. Grid points that resolve to the same run config
(values spelled differently, or another task's options) are one run (:func:`expand`).

Train once, evaluate many: a grid axis over ``eval.position_options.KEY`` (an option the scheme
marks evaluable, e.g. RoPE's ``scaling``) does not multiply the trainings: the runs that differ
only there share one run folder, trained once, evaluated as trained (``RUN/eval.json``) and
under each setting (``RUN/evaluations/LABEL/eval.json``, ``LABEL`` built like folder names,
e.g. ``scalingyarn-scaling_factor4``); each is re-evaluated only when its settings or the
checkpoint changed. A single value of such a key (``eval.position_options.scaling_factor=2``,
on the command line or in ``base``) is an axis of one value: its own evaluation beside the
as-trained one, never a replacement of it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from lab.common.config import (
    Config,
    ConfigError,
    DataConfig,
    check_evaluable,
    config_from_dict,
    config_to_dict,
    declared_type,
    load_config,
    load_yaml,
    with_overrides,
)
from lab.common.events.place import SWEEP, check_events_root, claim_events_root, runs_root
from lab.common.files import check_not_folders, linked_below, writable_folder
from lab.common.outputs import PROGRAMS, SWEEP_JSON, SWEEP_RUNS, output_problem, recorded_program
from lab.common.runlock import run_lock
from lab.evaluation.labels import NOT_A_SETTING
from lab.lm.perplexity import check_lm_limits
from lab.sweeps.grid import (
    ALIASES,
    ALL,
    EVERY,
    check_when,
    expand_all,
    only_all,
    read_grid,
    spaceless,
    text,
)
from model import ModelConfig
from model.layout import named_schemes
from model.position import available_schemes, scheme_class

SWEEP_KEYS = ("out_dir", "base", "grid", "when", "smoke", "start_order")


@dataclass
class Sweep:
    """A parsed sweep file.

    Attributes:
        out_dir: folder of the runs, the report and the sweep's TensorBoard runs (the runs'
            own TensorBoard events go to :func:`lab.common.events.place.runs_root`).
        base: dotted ``key=value`` overrides shared by every run.
        grid: dotted key -> values; every combination is one run.
        when: ``"key=value"`` -> dotted overrides added to runs whose ``key`` has ``value``.
        command_line: single-value ``key=value`` overrides from the command line; they are
            applied after ``base`` and ``when``, so a value the user typed always wins.
        smoke: the file says ``smoke: true``: a pipeline check whose reports carry
            :data:`lab.stats.verdicts.SMOKE_NOTE` instead of significance tests and findings.
        start_order: grid keys whose axes come outermost in the order runs start (the others
            follow in grid order): ``[data.task]`` with ``data.task: [copy, svo]`` starts
            every copy run first. Names, folders and reports do not depend on it; with
            several workers it decides how evenly they finish (long runs first).
    """

    out_dir: str
    base: list[str]
    grid: dict[str, list[Any]]
    when: dict[str, list[str]]
    command_line: list[str] = field(default_factory=list)
    smoke: bool = False
    start_order: list[str] = field(default_factory=list)


@dataclass
class RunSpec:
    """One run of a sweep.

    Attributes:
        name: the run's subfolder of ``out_dir``.
        overrides: its full ``key=value`` list.
        overwrite: replace the run in its folder (trained with other settings) instead of
            skipping or resuming it; set by :func:`prepare_out_dir`.
        evaluations: label -> its ``eval.position_options.KEY=VALUE`` overrides (applied on top
            of ``overrides``); label ``""`` is ``RUN/eval.json``, any other
            ``RUN/evaluations/LABEL/eval.json`` (:func:`evaluation_folder`).
        aliases: the other grid points (``name [label]``) that resolve to this same run and
            evaluation (:func:`expand`): one run, counted once in the report.
        evaluated: label -> the evaluation settings it resolves to, as text.
    """

    name: str
    overrides: list[str]
    overwrite: bool = False
    evaluations: dict[str, list[str]] = field(default_factory=lambda: {"": []})
    aliases: list[str] = field(default_factory=list)
    evaluated: dict[str, str] = field(default_factory=dict)


def load_sweep(path: str | Path, overrides: list[str] = ()) -> Sweep:
    """Read a sweep file and apply command-line overrides.

    An override ``key=a,b,c`` makes ``key`` a grid axis with those values; ``key=a`` sets one
    value (replacing a grid axis of that key). ``position`` and ``task`` are short for
    ``model.position`` and ``data.task``; ``out_dir=...`` moves the sweep. The grid value
    ``all`` of ``data.task`` or ``model.position`` (in the file or on the command line,
    ``task=all``) stands for every registered task or scheme, in registry order
    (:data:`lab.sweeps.grid.EVERY`).

    Raises:
        ConfigError: missing file, unknown section, a grid that is not a mapping of key ->
            values or has an empty axis, a ``when`` block on no grid value, bad override, or a
            run config that does not validate (one line, naming the key).
    """
    sweep = _read_sweep_file(Path(path))
    in_file = dict(sweep.grid)
    for item in overrides:
        _apply_override(sweep, item)
    problem = output_problem(sweep.out_dir, "out_dir")
    if problem:
        raise ConfigError(problem)
    sweep.grid = {key: expand_all(key, values) for key, values in sweep.grid.items()}
    for item in [*sweep.base, *sweep.command_line]:
        key, _, value = item.partition("=")
        if value == ALL and key not in EVERY and declared_type(key) not in (str, None):
            raise ConfigError(f"{item} is invalid; {only_all()}")
    check_when(sweep.when, [in_file, sweep.grid], str(path))
    for key in sweep.grid:
        if key.startswith("eval.") and not key.startswith(EVAL_AXIS):
            raise ConfigError(
                f"{key} cannot be a grid axis; only {EVAL_AXIS}KEY can (one trained run "
                f"evaluated several ways); give {key} one value"
            )
    for spec in expand(sweep):  # validate every run and evaluation before any training starts
        for extra in spec.evaluations.values():
            config = load_config(None, [*spec.overrides, *extra])
            check_evaluable(config, spec.name)
            check_lm_limits(config)
    return sweep


def _read_sweep_file(path: Path) -> Sweep:
    """The sweep of file ``path`` before command-line overrides; ``eval.position_options.*``
    values of ``base`` become grid axes of one value (a label, see :func:`expand`).

    Raises:
        ConfigError: missing file or unknown section (one line).
    """
    if not path.is_file():
        raise ConfigError(f"sweep file {str(path)!r} does not exist; see configs/")
    raw = OmegaConf.to_container(load_yaml(path))
    assert isinstance(raw, dict)
    if set(raw) - set(SWEEP_KEYS):
        unknown = sorted(set(raw) - set(SWEEP_KEYS))
        raise ConfigError(
            f"sweep file {str(path)!r} has unknown sections {unknown}; "
            f"allowed: {', '.join(SWEEP_KEYS)}"
        )
    grid = read_grid(raw.get("grid"), str(path))
    for section in ("base", "when"):
        if not isinstance(raw.get(section) or {}, dict):
            raise ConfigError(
                f"sweep file {str(path)!r}: {section} must be a mapping of dotted keys or "
                f"sections; got {raw[section]!r}"
            )
    for condition, values in (raw.get("when") or {}).items():
        if not isinstance(values, dict):
            raise ConfigError(
                f"sweep file {str(path)!r}: when block {condition!r} must be a mapping of "
                f"settings, e.g. {{train: {{steps: 500}}}}; got {values!r}"
            )
    when = {spaceless(k): dotted(v) for k, v in (raw.get("when") or {}).items()}
    base = dotted(raw.get("base") or {})
    for item in [o for o in base if o.startswith(EVAL_AXIS)]:  # a label too (see below)
        base.remove(item)
        key, _, value = item.partition("=")
        grid.setdefault(key, [value])
    smoke = raw.get("smoke", False)
    if not isinstance(smoke, bool):
        raise ConfigError(f"sweep file {str(path)!r}: smoke must be true or false; got {smoke!r}")
    order = raw.get("start_order", [])
    order = [] if order is None else order  # 'start_order:' with no value: none
    listed = isinstance(order, list) and all(isinstance(k, str) for k in order)
    keys = [ALIASES.get(k, k) for k in order] if listed else None
    if keys is None or not all(k in grid for k in keys) or len(set(keys)) < len(keys):
        raise ConfigError(
            f"sweep file {str(path)!r}: start_order={order!r} is invalid; give a list of its "
            f"grid keys, each once ({', '.join(grid)})"
        )
    out_dir = str(raw.get("out_dir", "runs/sweep"))
    return Sweep(out_dir, base, grid, when, smoke=smoke, start_order=keys)


LAYOUT_KEY = "model.layout"
"""The key whose command-line grid values are separated by ``;``: a comma separates a layout's
layers (``model.layout=rope,rope,none`` is one layout, as in ``train.py``;
``model.layout='rope,none;none,rope'`` two)."""


def _apply_override(sweep: Sweep, item: str) -> None:
    """Apply one command-line ``key=value`` or ``key=v1,v2,...`` to ``sweep`` (see
    :func:`load_sweep`); :data:`LAYOUT_KEY`'s values are separated by ``;``.

    Raises:
        ConfigError: not ``key=value``, an empty value in a list, or ``run_dir`` (one line).
    """
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {item!r} is not key=value or key=v1,v2,...")
    key = ALIASES.get(key, key)
    if key == "run_dir":
        raise ConfigError("run_dir is set per run by the sweep; use out_dir=... instead")
    separator = ";" if key == LAYOUT_KEY else ","  # a layout's commas separate its layers
    if key == "out_dir":
        sweep.out_dir = value
    elif separator in value:
        values = value.split(separator)
        if not all(v.strip() for v in values):
            raise ConfigError(f"override {item!r} has an empty value in its list")
        sweep.grid[key] = values
    elif key in sweep.grid or key.startswith(EVAL_AXIS) or (key in EVERY and value == ALL):
        sweep.grid[key] = [value]  # an evaluation option is a label, never the as-trained
    else:
        sweep.command_line.append(f"{key}={value}")


EVAL_AXIS = "eval.position_options."
"""Prefix of the grid keys that change an evaluation, not a training."""

EVALUATIONS = "evaluations"
"""Subfolder of a run folder holding its evaluations under other position options."""


def evaluation_folder(run_dir: str | Path, label: str) -> Path | None:
    """Where the evaluation ``label`` of a run goes: None (the run folder itself) for ``""``,
    else ``RUN_DIR/evaluations/LABEL``."""
    return Path(run_dir) / EVALUATIONS / label if label else None


def check_settings_axes(grid: dict[str, list]) -> list[str]:
    """The grid's keys, in order, once no axis is over a key that is no setting
    (:data:`lab.evaluation.labels.NOT_A_SETTING`, the seed aside) with more than one value: its
    runs would be one run, trained several times and counted as several seeds.

    Raises:
        ConfigError: one line naming the key and its values.
    """
    for key, values in grid.items():
        if key in NOT_A_SETTING and key != "seed" and len(set(map(str, values))) > 1:
            raise ConfigError(
                f"{key}={','.join(map(str, values))} changes how a run is logged or run, not "
                "what it computes: its runs would be one run counted as several seeds; give "
                "one value"
            )
    return list(grid)


def expand(sweep: Sweep) -> list[RunSpec]:
    """Every distinct run of the grid as a :class:`RunSpec`, in grid order with the axes of
    ``sweep.start_order`` outermost (the order the runs start in).

    Precedence, lowest first: ``base``, matching ``when`` blocks, command-line values, the
    run's grid values. A grid value of another task's or position scheme's options
    (``data.options.T.KEY`` in a run of another task, ``model.options.S.KEY`` in a run of
    another scheme) changes nothing that run computes: it is left out of that run's name and
    settings. Grid points that resolve to the same run config (:func:`run_identity`: values
    spelled differently, ``seed=0,00``, or differing only in another task's or scheme's
    options) are one run, the first one's; ``aliases`` names the others.

    Grid keys under :data:`EVAL_AXIS` give one spec several ``evaluations`` instead of several
    specs, after its as-trained one (``when`` blocks that match them may set ``eval.*`` values
    only).

    Raises:
        ConfigError: a run config that does not validate, a ``when`` block keyed on an
            evaluation axis that changes the training, two different runs that would share
            a folder, or an axis that is no setting (:func:`check_settings_axes`) (one line).
    """
    specs: dict[str, RunSpec] = {}  # identity -> spec
    folders: dict[str, str] = {}  # run name -> identity
    for chosen in grid_points(sweep):
        name, label, overrides, at_eval = _grid_point(sweep, chosen)
        config = load_config(None, overrides)
        identity = run_identity(config)
        if folders.setdefault(name, identity) != identity:
            if label:
                raise ConfigError(
                    f"a when block keyed on {EVAL_AXIS}* changes the training of {name!r}; "
                    "such blocks may set eval.* values only"
                )
            raise ConfigError(
                f"two runs of the grid would share the folder "
                f"{os.path.join(sweep.out_dir, name)!r} ({chosen}); give each grid value once"
            )
        spec = specs.get(identity)
        if spec is not None and not label and any(k.startswith(EVAL_AXIS) for k in chosen):
            continue  # an evaluation axis of another scheme's option: evaluated as trained only
        if spec is None:
            spec = specs[identity] = RunSpec(name, overrides)  # its as-trained evaluation first
            spec.evaluated[""] = _evaluation_identity(config, [])
            if not label:
                continue
        evaluated = _evaluation_identity(config, at_eval) if label else spec.evaluated[""]
        if label in spec.evaluations and spec.evaluated[label] != evaluated:
            raise ConfigError(
                f"two evaluations of {spec.name!r} would share the folder "
                f"{str(evaluation_folder(spec.name, label))!r} ({chosen}); give each value once"
            )
        if evaluated in spec.evaluated.values():  # the same run and evaluation, spelled anew
            spelled = "-".join(_short(k, v) for k, v in chosen.items())
            kept = next(k for k, v in spec.evaluated.items() if v == evaluated)
            spec.aliases.append(f"{spelled} = {spec.name}{f' [{kept}]' if kept else ''}")
            continue
        spec.evaluations[label] = at_eval
        spec.evaluated[label] = evaluated
    return list(specs.values())


def _grid_point(sweep: Sweep, chosen: dict[str, Any]) -> tuple[str, str, list[str], list[str]]:
    """One grid point's run name, evaluation label, run overrides (``run_dir`` last) and
    evaluation overrides; grid values of another task's options are left out of all four."""
    given = [*sweep.base, *sweep.command_line, *(f"{k}={text(v)}" for k, v in chosen.items())]
    task, schemes = _task_of(given), _schemes_of(given)
    chosen = {
        k: v
        for k, v in chosen.items()
        if not _other_task_option(k, task)
        and not _other_scheme_option(k, schemes)
        and not _other_scheme_evaluation(k, schemes)
    }
    trained = {k: v for k, v in chosen.items() if not k.startswith(EVAL_AXIS)}
    evaluated = {k: v for k, v in chosen.items() if k.startswith(EVAL_AXIS)}
    extra = [
        o
        for condition, overrides in sweep.when.items()
        if _matches(condition, chosen)
        for o in overrides
    ]
    name = "-".join(_short(k, v) for k, v in trained.items()) or "run"
    label = "-".join(_short(k, v) for k, v in evaluated.items())
    at_eval = [o for o in extra if evaluated and o.startswith("eval.")]
    at_eval += [f"{k}={text(v)}" for k, v in evaluated.items()]
    extra = [o for o in extra if o not in at_eval]
    overrides = [
        *sweep.base,
        *extra,
        *sweep.command_line,
        *(f"{k}={text(v)}" for k, v in trained.items()),
    ]
    overrides.append(f"log_dir={SWEEP}")
    overrides.append(f"run_dir={os.path.join(sweep.out_dir, name)}")
    return name, label, overrides, at_eval


def grid_points(sweep: Sweep) -> Iterator[dict[str, Any]]:
    """Every combination of the grid's values as key -> value, keys in grid order (run names
    follow it), combinations in start order: the axes of ``sweep.start_order`` outermost (one
    that the command line fixed to one value is no axis any more).

    Raises:
        ConfigError: an axis over a key that is no setting (:func:`check_settings_axes`).
    """
    keys = check_settings_axes(sweep.grid)
    first = [k for k in sweep.start_order if k in keys]
    started = [*first, *(k for k in keys if k not in first)]
    for values in itertools.product(*(sweep.grid[k] for k in started)):
        point = dict(zip(started, values, strict=True))
        yield {k: point[k] for k in keys}


def run_identity(config: Config) -> str:
    """What a run computes, as text: its whole config except ``run_dir``, ``log_dir`` and the
    options sections of tasks and position schemes other than its own (which it never reads: a
    scheme is built from its own section alone), and, under ``model.layout`` or ``model.heads``
    with no ``eval.position_options``, ``model.position`` (which then changes nothing). Two grid
    points with the same identity are one run (:func:`expand`)."""
    values = config_to_dict(config)
    values.pop("run_dir")
    values.pop("log_dir")
    data, model = values["data"], values["model"]
    data["options"] = {k: v for k, v in data["options"].items() if k == data["task"]}
    used = {model["position"], *config.model.member_options}  # a hybrid's schemes too
    model["options"] = {k: v for k, v in model["options"].items() if k in used}
    if (config.model.layout or config.model.heads) and not config.eval.position_options:
        model.pop("position")  # the layout sets every layer; position names only the member
        # that eval.position_options would change (model.layout.layout_position)
    return json.dumps(values, sort_keys=True, default=str)


def _evaluation_identity(config: Config, at_eval: list[str]) -> str:
    """The evaluation settings ``at_eval`` resolve to for ``config``, as text."""
    settings = with_overrides(config, at_eval).eval if at_eval else config.eval
    values = OmegaConf.to_container(OmegaConf.structured(settings))
    values["position_options"] = {  # 2 and 2.0 are one value
        k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in values["position_options"].items()
    }
    return json.dumps(values, sort_keys=True)


def _task_of(overrides: list[str]) -> str:
    """The task the last ``data.task=`` of ``overrides`` names (the default task if none)."""
    tasks = [o.partition("=")[2] for o in overrides if o.partition("=")[0] == "data.task"]
    return tasks[-1] if tasks else DataConfig.task


def _position_of(overrides: list[str]) -> str:
    """The scheme the last ``model.position=`` of ``overrides`` names (the default if none)."""
    schemes = [o.partition("=")[2] for o in overrides if o.partition("=")[0] == "model.position"]
    return schemes[-1] if schemes else ModelConfig.position


def _schemes_of(overrides: list[str]) -> set[str]:
    """The schemes a run of ``overrides`` uses: its ``model.position`` and those its last
    ``model.layout`` or ``model.heads`` name (a hybrid, :mod:`model.layout`), and ``none``
    with ``model.nope_every``."""
    last = {o.partition("=")[0]: o.partition("=")[2] for o in overrides}
    schemes = {_position_of(overrides)} | ({"none"} if last.get("model.nope_every") else set())
    for key in ("model.layout", "model.heads"):
        if last.get(key) not in (None, "null"):
            schemes.update(named_schemes(last[key]))
    return schemes


def _other_scheme_option(key: str, schemes: set[str]) -> bool:
    """``key`` is an option of a position scheme other than ``schemes``
    (``model.options.OTHER.KEY``)."""
    parts = key.split(".")
    return len(parts) > 3 and parts[:2] == ["model", "options"] and parts[2] not in schemes


def _other_scheme_evaluation(key: str, schemes: set[str]) -> bool:
    """``key`` is ``eval.position_options.KEY`` with ``KEY`` an evaluable option of some
    registered scheme but of none of ``schemes``: the RoPE rules of a sweep over several
    schemes apply to its RoPE runs, and the others are evaluated as trained only (a key no
    scheme can change at evaluation stays an error, named by the evaluation)."""
    if not key.startswith(EVAL_AXIS):
        return False
    option = key.removeprefix(EVAL_AXIS)
    evaluable = {name for name in available_schemes() if option in scheme_class(name).evaluable}
    return bool(evaluable) and not evaluable & schemes


def _other_task_option(key: str, task: str) -> bool:
    """``key`` is an option of another task than ``task`` (``data.options.OTHER.KEY``)."""
    parts = key.split(".")
    return len(parts) > 3 and parts[:2] == ["data", "options"] and parts[2] != task


RUNTIME_KEYS = (*(key for key in NOT_A_SETTING if key != "seed"), "compile")
"""Keys that say how a run executes, logs or is shown, not what it computes (the ones runs of
one arm may differ in, :data:`lab.evaluation.labels.NOT_A_SETTING`): a sweep may change them
freely."""


def changed_settings(spec: RunSpec) -> list[str]:
    """What differs between the run saved in ``spec``'s folder and what ``spec`` asks for: its
    settings, and for a language-model run the corpus it reads (:func:`corpus_change`).

    ``eval.*``, :data:`RUNTIME_KEYS` and the options of tasks other than the run's are ignored:
    a changed evaluation re-evaluates the run, and where it runs, or another task's options,
    change no result.

    Returns:
        ``["key: saved -> asked", ...]`` in key order; empty when the folder holds no
        checkpoint or the same settings.

    Raises:
        ConfigError, FileNotFoundError, ValueError: the spec or the saved checkpoint is invalid.
    """
    from lab.common.checkpoint import checkpoint_path, load_checkpoint

    config = load_config(None, spec.overrides)
    if not checkpoint_path(config.run_dir).is_file():
        return []
    state = load_checkpoint(config.run_dir)
    saved = config_from_dict(state["config"])
    before, after = _flat(json.loads(run_identity(saved))), _flat(json.loads(run_identity(config)))
    changed = [
        f"{key}: {before.get(key)} -> {after.get(key)}"
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key)
        and not key.startswith("eval.")
        and key not in RUNTIME_KEYS
    ]
    return changed + corpus_change(config, state)


def corpus_change(config: Config, state: dict[str, Any]) -> list[str]:
    """``["corpus.sha256: OLD12 -> NEW12 (SOURCE)"]`` when the language-model run saved in
    ``state`` was trained on another corpus than ``config``'s reads now (a file of it changed,
    another Python's standard library), else ``[]``: the same path is another run's data then,
    as :func:`lab.training.resume.check_corpus` holds for ``--resume`` and ``eval.py``."""
    saved = (state.get("corpus") or {}).get("sha256")
    if saved is None:
        return []
    task = config.data.build_task()
    if not task.language_model or task.corpus.sha256 == saved:
        return []
    return [f"corpus.sha256: {saved[:12]} -> {task.corpus.sha256[:12]} ({task.corpus.source})"]


def check_unchanged(spec: RunSpec) -> None:
    """Refuse a run folder that holds a run trained with other settings than ``spec`` asks for
    (:func:`changed_settings`); call it under the folder's lock, where the run is trained,
    skipped or re-evaluated.

    Raises:
        ConfigError: one line naming the run folder and every differing key.
    """
    changed = changed_settings(spec)
    if changed:
        config = load_config(None, spec.overrides)
        raise ConfigError(
            f"run_dir={config.run_dir!r} holds a run trained with other settings since this "
            f"sweep began (another sweep into the same out_dir?): {'; '.join(changed)}; it is "
            "not this sweep's, so it was neither trained, skipped nor re-evaluated; use "
            "another out_dir=..., or --overwrite to retrain it"
        )


def _check_run_links(config: Any, out_dir: str, events_root: str) -> None:
    """Refuse a run folder below ``out_dir``, or its events folder below ``events_root``, that
    is (or passes through) a symbolic link.

    Raises:
        OSError: one line naming the link.
    """
    from lab.common.events.place import events_folder

    link = linked_below(config.run_dir, out_dir)
    if link is not None:
        raise OSError(
            f"refusing to write into {str(link)!r}: it is a symbolic link; a sweep writes "
            f"only below out_dir={out_dir!r} (remove or rename the link)"
        )
    events = os.path.abspath(events_folder(config.run_dir, config.log_dir, config.data.task))
    link = linked_below(events, events_root)
    if link is not None:
        raise OSError(
            f"refusing to write into {str(link)!r}: it is a symbolic link; a sweep writes "
            f"its runs' TensorBoard events only below {events_root!r} (remove or rename "
            "the link)"
        )


def recorded_smoke(out_dir: str | Path) -> bool:
    """Whether the ``sweep.json`` in ``out_dir`` records a smoke sweep (``"smoke": true``,
    :func:`lab.sweeps.summary.write_timing`); False when there is no such file or it is broken."""
    try:
        return json.loads((Path(out_dir) / SWEEP_JSON).read_text()).get("smoke") is True
    except (OSError, ValueError, AttributeError):
        return False


def check_program(out_dir: str | Path, program: str) -> None:
    """Refuse ``out_dir`` when it holds the results of another program (an extend study's
    for a sweep, or the reverse): its ``sweep.json``, ``results.json`` and figures would be
    replaced by ones of another kind, and a page published from it would mislabel them.

    Raises:
        ConfigError: ``out_dir`` holds another program's sweep (one line naming both).
    """
    made_by = recorded_program(out_dir)
    if made_by is not None and made_by != program:
        raise ConfigError(
            f"out_dir={str(out_dir)!r} holds the results of `{PROGRAMS[made_by]}`; "
            f"`{PROGRAMS[program]}` would replace its {SWEEP_JSON}, results and figures: "
            f"give another out_dir"
        )


def check_sweep_runs(out_dir: str) -> None:
    """Refuse an ``out_dir/_sweep`` (or its ``mean`` or ``figures``, the report's own
    TensorBoard runs, checked again there) that is a symbolic link or a file.

    Raises:
        OSError: one line naming it.
    """
    for sub in ("mean", "figures"):
        link = linked_below(Path(out_dir) / SWEEP_RUNS / sub, out_dir)
        if link is not None or (Path(out_dir) / SWEEP_RUNS).is_file():
            raise OSError(
                f"refusing to write into {str(link or Path(out_dir) / SWEEP_RUNS)!r}: it "
                f"is a symbolic link or a file; a sweep writes only below "
                f"out_dir={out_dir!r} (remove or rename it)"
            )


def prepare_out_dir(
    sweep: Sweep,
    specs: list[RunSpec],
    overwrite: bool = False,
    program: str = "sweep",
    held: contextlib.ExitStack | None = None,
) -> None:
    """Check ``sweep.out_dir`` and every run before any run starts: the folder is writable, no
    run folder is a symbolic link (writes never leave ``out_dir`` through one), each run's
    device exists, and every run already there was trained with the settings this sweep
    asks for (:func:`changed_settings`); no report name is a folder (:func:`check_sweep_runs`
    too); the runs' events folder (:func:`runs_root`, created here) is writable and links
    down to no ``log_dir``; ``out_dir`` holds no other ``program``'s results
    (:func:`check_program`). With ``overwrite``, runs trained with
    other settings are marked to be replaced (``spec.overwrite``); the training replaces each
    under its folder's lock, after checking everything (:func:`lab.training.trainer.train`), so
    nothing is deleted here. With ``held``, the lock of ``out_dir`` is taken into it once the
    folder exists, before its runs are looked at: one sweep, study or tuning at a time writes a
    folder (:func:`lab.common.runlock.run_lock`).

    Raises:
        ConfigError: runs trained with other settings, without ``overwrite`` (one line naming
            the first such run and its differing keys), or another program's ``out_dir``.
        RunLocked: another process holds ``out_dir`` (one line naming it).
        ValueError: a device this machine does not have (one line).
        OSError: the folder cannot be written, or a run folder (or its events folder) is a
            symbolic link.
    """
    from lab.common.runtime import resolve_device
    from lab.reporting.report import REPORT_NAMES

    check_program(sweep.out_dir, program)
    events_root = os.path.abspath(runs_root(sweep.out_dir))
    check_events_root(events_root, sweep.out_dir)  # before out_dir is created
    writable_folder(sweep.out_dir)
    if held is not None:
        held.enter_context(run_lock(sweep.out_dir, "out_dir", "another sweep"))
        check_program(sweep.out_dir, program)  # again: it may have written since
    check_not_folders(sweep.out_dir, [*REPORT_NAMES, SWEEP_JSON])
    check_sweep_runs(sweep.out_dir)
    changed = {}
    for spec in specs:
        config = load_config(None, spec.overrides)
        resolve_device(config.device)
        _check_run_links(config, sweep.out_dir, events_root)
        try:
            changed[spec.name] = changed_settings(spec)
        except ValueError:  # an unreadable checkpoint: that run fails with its error, alone
            changed[spec.name] = []
    stale = [spec for spec in specs if changed[spec.name]]
    if stale and not overwrite:
        raise ConfigError(
            f"{len(stale)} of {len(specs)} runs in {sweep.out_dir}/ were trained with other "
            f"settings ({stale[0].name}: {'; '.join(changed[stale[0].name])}); use another "
            "out_dir=..., or --overwrite to retrain those runs"
        )
    for spec in stale:
        spec.overwrite = True
    claim_events_root(events_root, sweep.out_dir)  # every check passed
    writable_folder(events_root)


def run_one(
    spec: RunSpec,
    device: str | None = None,
    threads: int | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Train (or resume, or skip) and evaluate one run; never raises.

    ``should_stop`` is polled between training steps (a worker's stop event); when it turns
    true the training saves a checkpoint and the run is ``interrupted``. The run's settings are
    checked under its folder's lock when it is skipped, re-evaluated or trained
    (:func:`check_unchanged`), so a run another sweep trained there since this one began fails.

    Returns:
        ``{"name", "run_dir", "status", "error", "result"}``: status ``trained``, ``evaluated``
        (training had finished; only the evaluation was redone), ``skipped`` (both were
        current), ``failed``, ``interrupted`` (Ctrl-C; a checkpoint was saved) or ``cancelled``
        (the sweep was interrupted before this run started); ``result`` is the run's first
        evaluation (the ``eval.json`` content) when it has one, and ``results`` every one of
        ``spec.evaluations``, in order (``evaluated`` when any had to be redone).
    """
    from lab.common.runlock import run_lock
    from lab.evaluation.evaluate import evaluate_run
    from lab.training.trainer import train

    record: dict[str, Any] = {"name": spec.name, "status": "trained", "error": None, "result": None}
    if should_stop is not None and should_stop():
        record["status"] = "cancelled"
        return record
    try:
        config = _on_worker(load_config(None, spec.overrides), device, threads)
        record["run_dir"] = config.run_dir
        with run_lock(config.run_dir):  # what is there now, and whose it is
            config, saved, finished, plans = _current(spec, config)
            if all(existing for *_, existing in plans):
                results = [existing for *_, existing in plans]
                record.update(status="skipped", result=results[0], results=results)
                return record
        if finished:
            record["status"] = "evaluated"
        else:
            check = None if spec.overwrite else lambda: check_unchanged(spec)
            train(config, saved, should_stop, spec.overwrite, check)
        with run_lock(config.run_dir):  # the run evaluated is the one trained or checked
            check_unchanged(spec)
            results = [
                existing
                or evaluate_run(config.run_dir, settings, device=config.device, write_to=folder)
                for settings, folder, existing in plans
            ]
        record.update(result=results[0], results=results)
    except KeyboardInterrupt as stop:  # lab.training.trainer.TrainingInterrupted names its signal
        record.update(status="interrupted", signal=getattr(stop, "signum", None))
    except Exception as error:  # a failing run is reported, never stops the sweep
        record.update(status="failed", error=f"{type(error).__name__}: {error}")
        record["traceback"] = traceback.format_exc()
    return record


def _current(spec: RunSpec, config: Config) -> tuple[Config, bool, bool, list[tuple]]:
    """What ``spec``'s folder holds now (call it under the folder's lock), checked to be the run
    ``spec`` asks for unless it is to be replaced (:func:`check_unchanged`): ``(config, saved,
    finished, plans)``, ``config`` with the saved run's ``log_dir`` (a run keeps its events
    where it began them: its folder, for an older sweep), ``saved`` a checkpoint to resume or
    skip, ``finished`` its training ended, ``plans`` :func:`_evaluation_plans`."""
    from lab.common.checkpoint import checkpoint_path, load_checkpoint

    if not spec.overwrite:
        check_unchanged(spec)
    saved = checkpoint_path(config.run_dir).is_file() and not spec.overwrite
    state = load_checkpoint(config.run_dir) if saved else {}
    if saved:
        saved_log_dir = config_from_dict(state["config"]).log_dir  # read as this version does
        config = with_overrides(config, [f"log_dir={saved_log_dir}"])
    finished = saved and state.get("finished", False)
    return config, saved, finished, _evaluation_plans(spec, config, finished)


def _on_worker(config: Config, device: str | None, threads: int | None) -> Config:
    """``config`` with the worker's ``device`` and ``threads`` where the sweep did not set its
    own, and without progress bars on a worker (``threads`` given: bars of parallel workers
    would interleave)."""
    runtime = []
    if device is not None and config.device == "auto":
        runtime.append(f"device={device}")
    if threads is not None and config.threads == 0:
        runtime.append(f"threads={threads}")
    if threads is not None:
        runtime.append("train.progress=false")
    return with_overrides(config, runtime)


def _evaluation_plans(spec: RunSpec, config: Config, finished: bool) -> list[tuple[Any, Any, Any]]:
    """One ``(eval config, folder of its eval.json or None, its saved result or None)`` per
    evaluation of ``spec``, in order; saved results are looked up only for a ``finished`` run
    (one that is not is trained, then evaluated anew), and only when made on ``config``'s
    device type in the dtype its settings give there."""
    from lab.common.runtime import resolve_device
    from lab.evaluation.evaluate import apply_eval_overrides, load_evaluation

    device = resolve_device(config.device)  # where evaluate_run would evaluate
    return [
        (settings, folder, finished and load_evaluation(config.run_dir, settings, folder, device))
        for label, extra in spec.evaluations.items()
        for settings in [apply_eval_overrides(config.eval, extra)]
        for folder in [evaluation_folder(config.run_dir, label)]
    ]


def _flat(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> ``{"a.b": value, ...}``."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def dotted(section: dict[str, Any] | None, prefix: str = "") -> list[str]:
    """Nested mapping -> ``["a.b=value", ...]`` (lists as ``[x,y]``, None as ``null``; no
    mapping: ``[]``)."""
    items = []
    for key, value in (section or {}).items():
        if isinstance(value, dict):
            items += dotted(value, f"{prefix}{key}.")
        elif isinstance(value, list):
            items.append(f"{prefix}{key}=[{','.join(map(str, value))}]")
        else:
            items.append(f"{prefix}{key}={'null' if value is None else value}")
    return items


def _matches(condition: str, chosen: dict[str, Any]) -> bool:
    key, _, value = condition.partition("=")
    key = ALIASES.get(key, key)
    return key in chosen and text(chosen[key]) == value


def _short(key: str, value: Any) -> str:
    leaf = key.rsplit(".", 1)[-1]
    text = folder_safe(str(value))
    return text if leaf in ("position", "task") else f"{leaf}{text}"


def folder_safe(text: str) -> str:
    """``text`` as part of one folder name: each path separator and each run of two or more
    dots becomes ``_``, so a grid value (a corpus path, ``..``) never nests a run's folder or
    moves it out of ``out_dir``."""
    return re.sub(r"\.\.+", "_", text.replace("/", "_").replace("\\", "_"))
