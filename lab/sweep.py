"""A sweep: train and evaluate every combination of a grid, then write one comparison report.

A sweep file (YAML, see ``configs/ablation.yaml``) has four sections::

    out_dir: runs/ablation          # where the runs and the report go
    base: {model: {...}, ...}       # run-config values shared by every run
    grid: {model.position: [...]}   # dotted key -> list of values; the product is the run list
    when: {data.task=copy: {...}}   # extra values for runs whose grid value matches

Runs that already finished (checkpoint marked finished and ``eval.json`` present) are skipped;
an unfinished one resumes from its checkpoint. A failing run is recorded with its error and the
others go on.
"""

from __future__ import annotations

import itertools
import os
import signal
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from lab.config import ConfigError, load_config

ALIASES = {"position": "model.position", "task": "data.task"}
SWEEP_KEYS = ("out_dir", "base", "grid", "when")


@dataclass
class Sweep:
    """A parsed sweep file.

    Attributes:
        out_dir: folder of the runs and the report.
        base: dotted ``key=value`` overrides shared by every run.
        grid: dotted key -> values; every combination is one run.
        when: ``"key=value"`` -> dotted overrides added to runs whose ``key`` has ``value``.
        command_line: single-value ``key=value`` overrides from the command line; they are
            applied after ``base`` and ``when``, so a value the user typed always wins.
    """

    out_dir: str
    base: list[str]
    grid: dict[str, list[Any]]
    when: dict[str, list[str]]
    command_line: list[str] = field(default_factory=list)


@dataclass
class RunSpec:
    """One run of a sweep: its name (the subfolder) and its full override list."""

    name: str
    overrides: list[str]


def load_sweep(path: str | Path, overrides: list[str] = ()) -> Sweep:
    """Read a sweep file and apply command-line overrides.

    An override ``key=a,b,c`` makes ``key`` a grid axis with those values; ``key=a`` sets one
    value (replacing a grid axis of that key). ``position`` and ``task`` are short for
    ``model.position`` and ``data.task``; ``out_dir=...`` moves the sweep.

    Raises:
        ConfigError: missing file, unknown section, bad override, or a run config that does not
            validate (one line, naming the key).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"sweep file {str(path)!r} does not exist; see configs/")
    raw = OmegaConf.to_container(OmegaConf.load(path))
    if not isinstance(raw, dict) or set(raw) - set(SWEEP_KEYS):
        unknown = sorted(set(raw) - set(SWEEP_KEYS)) if isinstance(raw, dict) else raw
        raise ConfigError(
            f"sweep file {str(path)!r} has unknown sections {unknown}; "
            f"allowed: {', '.join(SWEEP_KEYS)}"
        )
    grid = {ALIASES.get(k, k): _as_list(v) for k, v in (raw.get("grid") or {}).items()}
    when = {k: _dotted(v) for k, v in (raw.get("when") or {}).items()}
    sweep = Sweep(str(raw.get("out_dir", "runs/sweep")), _dotted(raw.get("base") or {}), grid, when)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not key=value or key=v1,v2,...")
        key = ALIASES.get(key, key)
        if key == "run_dir":
            raise ConfigError("run_dir is set per run by the sweep; use out_dir=... instead")
        if key == "out_dir":
            sweep.out_dir = value
        elif "," in value:
            values = value.split(",")
            if not all(values):
                raise ConfigError(f"override {item!r} has an empty value in its list")
            sweep.grid[key] = values
        elif key in sweep.grid:
            sweep.grid[key] = [value]
        else:
            sweep.command_line.append(f"{key}={value}")
    for spec in expand(sweep):
        load_config(None, spec.overrides)  # validate every run before any training starts
    return sweep


def expand(sweep: Sweep) -> list[RunSpec]:
    """Every combination of the grid as a :class:`RunSpec`, in grid order.

    Precedence, lowest first: ``base``, matching ``when`` blocks, command-line values, the
    run's grid values.
    """
    keys = list(sweep.grid)
    specs = []
    for values in itertools.product(*(sweep.grid[k] for k in keys)):
        chosen = dict(zip(keys, values, strict=True))
        extra = [
            o
            for condition, overrides in sweep.when.items()
            if _matches(condition, chosen)
            for o in overrides
        ]
        name = "-".join(_short(k, v) for k, v in chosen.items()) or "run"
        run_dir = os.path.join(sweep.out_dir, name)
        grid_overrides = [f"{k}={v}" for k, v in chosen.items()]
        specs.append(
            RunSpec(
                name,
                [*sweep.base, *extra, *sweep.command_line, *grid_overrides, f"run_dir={run_dir}"],
            )
        )
    return specs


def init_worker(stop: Any) -> None:
    """Process-pool initializer: keep the sweep's stop event; leave the terminal's process
    group (POSIX), so Ctrl-C reaches only the parent, which then sets ``stop``."""
    global _STOP
    _STOP = stop
    if hasattr(os, "setpgid"):
        os.setpgid(0, 0)
    else:  # Windows: Ctrl-C reaches every process of the console
        signal.signal(signal.SIGINT, signal.SIG_IGN)


_STOP: Any = None  # a multiprocessing.Event in pool workers, set when the sweep is interrupted


def run_one(spec: RunSpec, device: str | None = None, threads: int | None = None) -> dict[str, Any]:
    """Train (or resume, or skip) and evaluate one run; never raises.

    Returns:
        ``{"name", "run_dir", "status", "error", "result"}``: status ``trained``, ``evaluated``
        (training had finished; only the evaluation was redone), ``skipped`` (both were
        current), ``failed``, ``interrupted`` (Ctrl-C; a checkpoint was saved) or ``cancelled``
        (the sweep was interrupted before this run started); ``result`` is the run's
        evaluation (the ``eval.json`` content) when it has one.
    """
    from lab.checkpoint import checkpoint_path, load_checkpoint
    from lab.evaluation import evaluate_run, load_evaluation
    from lab.trainer import train

    overrides = list(spec.overrides)
    if device is not None:
        overrides.append(f"device={device}")
    if threads is not None:
        overrides += [f"threads={threads}", "train.progress=false"]
    record: dict[str, Any] = {"name": spec.name, "status": "trained", "error": None, "result": None}
    should_stop = _STOP.is_set if _STOP is not None else None
    if should_stop is not None and should_stop():
        record["status"] = "cancelled"
        return record
    try:
        config = load_config(None, overrides)
        record["run_dir"] = config.run_dir
        finished = checkpoint_path(config.run_dir).is_file() and load_checkpoint(
            config.run_dir
        ).get("finished", False)
        existing = load_evaluation(config.run_dir, config.eval) if finished else None
        if existing is not None:
            record.update(status="skipped", result=existing)
            return record
        if finished:
            record["status"] = "evaluated"
        else:
            resume = checkpoint_path(config.run_dir).is_file()
            train(config, resume=resume, should_stop=should_stop)
        record["result"] = evaluate_run(config.run_dir, config.eval, device=config.device)
    except KeyboardInterrupt:
        record["status"] = "interrupted"
    except Exception as error:  # a failing run is reported, never stops the sweep
        record.update(status="failed", error=f"{type(error).__name__}: {error}")
        record["traceback"] = traceback.format_exc()
    return record


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _dotted(section: dict[str, Any], prefix: str = "") -> list[str]:
    """Nested mapping -> ``["a.b=value", ...]``."""
    items = []
    for key, value in section.items():
        if isinstance(value, dict):
            items += _dotted(value, f"{prefix}{key}.")
        elif isinstance(value, list):
            items.append(f"{prefix}{key}=[{','.join(map(str, value))}]")
        else:
            items.append(f"{prefix}{key}={'null' if value is None else value}")
    return items


def _matches(condition: str, chosen: dict[str, Any]) -> bool:
    key, _, value = condition.partition("=")
    key = ALIASES.get(key, key)
    return key in chosen and str(chosen[key]) == value


def _short(key: str, value: Any) -> str:
    leaf = key.rsplit(".", 1)[-1]
    return str(value) if leaf in ("position", "task") else f"{leaf}{value}"
