"""Choose each scheme's learning rate, alike for every scheme: ``python sweep.py --select-lr``.

Position schemes do not all train best at one learning rate (at the passkey study's 3e-3,
learned and sinusoidal positions stay on the guessing plateau that 1e-3 leaves), so a
comparison that tunes the rate on one scheme favours it. This command trains every scheme of
a sweep file at every rate of a small grid, on tuning seeds of its own (not the sweep's
evaluation seeds) and at the sweep's step budget, and picks each scheme's rate from the
**in-distribution validation set only** (the periodic check that early stopping reads:
:func:`lab.training.run_logs.periodic_eval`), never from the test set or from longer lengths:

- exact-match tasks: most (task, seed) arms that reach ``train.target_accuracy``; then fewest
  steps in all (an arm that never reached it counts the whole budget); then the highest mean
  validation exact-match at the training lengths;
- language-model tasks: the lowest mean validation perplexity at the training length.

Ties keep the rate listed first. It writes ``lr_selection.json`` (every arm's numbers, the
criterion, what was chosen and why) into the tuning folder, and a copy of the sweep file
whose ``when`` blocks set each scheme's ``train.lr``, so the comparison then runs with one
command: ``python sweep.py --config THAT_FILE``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from data import task_class
from lab.common.checkpoint import checkpoint_path, load_checkpoint
from lab.common.config import ConfigError, load_config
from lab.common.files import atomic_write
from lab.common.runlock import RunLocked
from lab.reporting.pages import SELECTION, TUNING_SUFFIX
from lab.sweeps.local import parallel_runs, run_all
from lab.sweeps.summary import write_timing
from lab.sweeps.sweep import RunSpec, expand, load_sweep, prepare_out_dir
from lab.sweeps.workers import MAX_WORKERS

DEFAULT_SWEEP = Path(__file__).resolve().parents[2] / "configs" / "ablation.yaml"
DEFAULT_RATES = "3e-4,1e-3,3e-3"
DEFAULT_SEEDS = "100"
"""Tuning seeds: apart from every committed sweep's evaluation seeds (0 to 5), so the runs a
rate is chosen on are never the runs it is then judged on."""

SELECTED = "selected_sweep.yaml"
"""The sweep file with the chosen rates, in the tuning folder unless ``--write`` moves it."""
HEADER = "with each scheme's learning rate chosen by"
"""What the first line of every sweep file this command writes says (after the source's name)."""

CRITERION = (
    "in-distribution validation only: exact-match tasks rank (1) arms reaching "
    "train.target_accuracy, most first, (2) total steps, an arm below the target counting the "
    "whole budget, fewest first, (3) mean validation exact-match at the training lengths; "
    "language-model tasks rank mean validation perplexity at the training length, lowest "
    "first; ties keep the rate listed first"
)


@dataclass(frozen=True)
class Arm:
    """One tuning run: ``scheme`` trained on ``task`` with seed ``seed`` at rate ``lr``.

    Attributes:
        steps: optimizer steps taken (the budget when the target was never reached).
        budget: ``train.steps``, the same for every arm of a task.
        reached_target: it stopped on the accuracy target (exact-match tasks).
        validation: mean validation exact-match at the training lengths (fraction), or the
            validation perplexity at the training length (language-model tasks).
        language_model: the task is scored by perplexity.
    """

    scheme: str
    task: str
    seed: int
    lr: float
    steps: int
    budget: int
    reached_target: bool
    validation: float
    language_model: bool


def rank_key(arms: list[Arm]) -> tuple[float, ...]:
    """The sort key of one rate's arms (smaller is better), by :data:`CRITERION`.

    Args:
        arms: every arm of one scheme at one rate (one per task and tuning seed).

    Raises:
        ValueError: ``arms`` empty.
    """
    if not arms:
        raise ValueError("rank_key needs at least one arm")
    exact = [a for a in arms if not a.language_model]
    text = [a for a in arms if a.language_model]
    reached = sum(a.reached_target for a in exact)
    steps = sum(a.steps if a.reached_target else a.budget for a in exact)
    accuracy = sum(a.validation for a in exact) / len(exact) if exact else 0.0
    perplexity = sum(a.validation for a in text) / len(text) if text else 0.0
    return (-reached, steps, -accuracy, perplexity)


def choose(arms: list[Arm], rates: list[float]) -> dict[str, float]:
    """Each scheme's rate: the one of ``rates`` whose arms rank first (:func:`rank_key`);
    ties keep the earlier rate of ``rates``.

    Raises:
        ValueError: a scheme has no arm at some rate of ``rates``.
    """
    chosen = {}
    for scheme in dict.fromkeys(a.scheme for a in arms):
        keys = {}
        for lr in rates:
            at = [a for a in arms if a.scheme == scheme and a.lr == lr]
            if not at:
                raise ValueError(f"scheme {scheme!r} has no finished tuning run at lr={lr:g}")
            keys[lr] = rank_key(at)
        chosen[scheme] = min(rates, key=lambda lr: (keys[lr], rates.index(lr)))
    return chosen


def not_learned(arms: list[Arm], configs: list[Any]) -> list[str]:
    """The schemes none of whose exact-match tuning runs reached the accuracy target at any
    rate, where ``configs`` (the tuning runs') set one: their ranking is a tie of failures, so
    a rate chosen for them would be chosen by the order of ``--lrs``, not by what it measured.
    """
    targeted = {c.model.position for c in configs if c.train.target_accuracy is not None}
    schemes = dict.fromkeys(a.scheme for a in arms if not a.language_model)
    return [
        s
        for s in schemes
        if s in targeted and not any(a.reached_target for a in arms if a.scheme == s)
    ]


def why(arms: list[Arm], scheme: str, lr: float) -> str:
    """One line saying what the chosen rate's arms measured, against the other rates."""
    parts = []
    for rate in dict.fromkeys(a.lr for a in arms if a.scheme == scheme):
        at = [a for a in arms if a.scheme == scheme and a.lr == rate]
        exact = [a for a in at if not a.language_model]
        text = [a for a in at if a.language_model]
        words = []
        if exact:
            reached = sum(a.reached_target for a in exact)
            steps = sum(a.steps if a.reached_target else a.budget for a in exact)
            accuracy = 100 * sum(a.validation for a in exact) / len(exact)
            words.append(
                f"{reached}/{len(exact)} reached the target, {steps} steps, "
                f"validation exact-match {accuracy:.1f}%"
            )
        if text:
            perplexity = sum(a.validation for a in text) / len(text)
            words.append(f"validation perplexity {perplexity:.2f}")
        mark = " (chosen)" if rate == lr else ""
        parts.append(f"lr={rate:g}{mark}: {'; '.join(words)}")
    return " | ".join(parts)


def read_arm(spec: RunSpec, record: dict[str, Any]) -> Arm:
    """The :class:`Arm` of one tuning run, from its config and its checkpoint's last periodic
    check (validation sets only). A run that failed or did not finish (diverged at a high
    rate, say, with or without a checkpoint) counts as never reaching the target, at the whole
    budget and 0% exact-match or infinite perplexity: that rate lost, it is not left out.

    Raises:
        ConfigError: the spec's config does not validate (one line).
    """
    config = load_config(None, spec.overrides)
    language_model = task_class(config.data.task).language_model
    path = checkpoint_path(config.run_dir)
    state = load_checkpoint(config.run_dir) if path.is_file() else {}
    failed = record.get("status") in ("failed", "cancelled") or not state.get("finished")
    evals = {} if failed else state.get("eval") or {}
    if language_model:
        validation = float(evals.get("perplexity_1x", float("inf")))
    else:
        validation = float(evals.get("in_dist", 0.0))
    budget = int(config.train.steps)
    return Arm(
        scheme=str(config.model.position),
        task=str(config.data.task),
        seed=int(config.seed),
        lr=float(config.train.lr),
        steps=budget if failed else int(state["step"]),
        budget=budget,
        reached_target=bool(state.get("reached_target")) and not failed,
        validation=validation,
        language_model=language_model,
    )


def selected_sweep_file(source: Path, chosen: dict[str, float], command: str) -> str:
    """The text of ``source`` (a sweep file) with each scheme's chosen ``train.lr`` in a
    ``when: {model.position=SCHEME: ...}`` block and the tuned schemes as its position axis,
    under a header naming the command that chose them.

    The file's comments are not kept (it is rewritten from its parsed YAML).
    """
    raw = yaml.safe_load(source.read_text()) or {}
    grid = raw.setdefault("grid", {}) or {}
    raw["grid"] = grid
    grid.pop("position", None)
    grid["model.position"] = list(chosen)
    when = raw.setdefault("when", {}) or {}
    raw["when"] = when
    for scheme, lr in chosen.items():
        block = when.setdefault(f"model.position={scheme}", {}) or {}
        when[f"model.position={scheme}"] = block
        block.pop("train.lr", None)
        block.setdefault("train", {})["lr"] = lr
    header = (
        f"# {source.name} {HEADER}\n# {command}\n"
        "# (in-distribution validation only; lr_selection.json in the tuning folder has every "
        "arm's numbers)\n"
    )
    return header + yaml.safe_dump(raw, sort_keys=False)


def tuning_sweep(args: argparse.Namespace):
    """The tuning sweep: the sweep file's grid without its evaluation-only axes, every rate of
    ``--lrs`` and the tuning seeds, into ``OUT_DIR-lr`` unless ``out_dir=`` is given.

    Raises:
        ConfigError: a bad rate or seed list, or what :func:`lab.sweeps.sweep.load_sweep`
            refuses (one line).
    """
    rates = parse_numbers(args.lrs, "--lrs", float)
    seeds = parse_numbers(args.seeds, "--seeds", int)
    lr = next((item for item in args.overrides if item.startswith("train.lr=")), None)
    if lr is not None:
        raise ConfigError(
            f"{lr} beside --select-lr: the tuning takes its rates from --lrs, and the sweep it "
            "writes sets each scheme's train.lr, which a command-line train.lr would override; "
            "give the rates as --lrs instead"
        )
    original = load_sweep(args.config, args.overrides)
    given = any(item.startswith("out_dir=") for item in args.overrides)
    overrides = [
        *args.overrides,
        f"train.lr={','.join(repr(r) for r in rates)}",  # exactly as given: arms match by ==
        f"seed={','.join(map(str, seeds))}",
        *([] if given else [f"out_dir={original.out_dir}{TUNING_SUFFIX}"]),
    ]
    sweep = load_sweep(args.config, overrides)
    sweep.grid = {k: v for k, v in sweep.grid.items() if not k.startswith("eval.position_options.")}
    judged = sorted({int(load_config(None, s.overrides).seed) for s in expand(original)})
    shared = sorted(set(seeds) & set(judged))
    if shared:
        raise ConfigError(
            f"--seeds={args.seeds!r} includes the sweep's own seed(s) {shared}: a rate would be "
            f"chosen on runs it is then judged on; tune on other seeds (default {DEFAULT_SEEDS})"
        )
    return sweep, rates


def check_plain(specs: list[RunSpec], configs: list[Any]) -> None:
    """Refuse tuning runs of hybrid layouts: a rate is chosen per ``model.position``, and a
    layout's model is not the scheme its ``model.position`` names.

    Also refuse two tuning runs that would be one arm (same scheme, task, seed and rate): the
    grid varies another setting (``model.window=4,8``), whose models would be pooled.

    Raises:
        ConfigError: a run sets ``model.layout``, ``model.heads`` or ``model.nope_every``, or
            two runs are one arm.
    """
    arms: dict[tuple, str] = {}
    for spec, config in zip(specs, configs, strict=True):
        model = config.model
        key = (model.position, config.data.task, config.seed, config.train.lr)
        if key in arms:
            raise ConfigError(
                f"--select-lr chooses one rate per model.position, and runs {arms[key]!r} and "
                f"{spec.name!r} differ in a setting other than the scheme, task, seed and rate; "
                "tune each setting as its own sweep"
            )
        arms[key] = spec.name
        for key in ("layout", "heads", "nope_every"):
            if getattr(model, key):
                raise ConfigError(
                    f"--select-lr chooses one rate per model.position, and run {spec.name!r} "
                    f"sets model.{key}={getattr(model, key)!r} (a hybrid layout, not the scheme "
                    "it names); tune a sweep without layouts"
                )


def check_target(target: Path, out_dir: Path) -> None:
    """Refuse a ``--write`` target before any run trains: a folder, a missing folder, a run's
    folder, a file of the tuning folder ``out_dir`` other than its ``selected_sweep.yaml``
    (its ``lr_selection.json`` or ``sweep.json``), or an existing file this command did not
    write.

    Raises:
        ConfigError: one line naming ``target`` and what is wrong.
    """
    parent = target.parent
    problem = None
    if target.is_dir():
        problem = "is a folder"
    elif not parent.is_dir():
        problem = f"is in {str(parent)!r}, which is not an existing folder"
    elif (parent / "config.yaml").is_file() or checkpoint_path(parent).is_file():
        problem = "is inside a run's folder"
    elif parent.resolve() == out_dir.resolve() and target.name != SELECTED:
        problem = "is a file of the tuning folder, which this command writes itself"
    elif target.is_symlink() or (target.exists() and not target.is_file()):
        problem = "is a link or no regular file (a FIFO would block the read)"
    elif target.exists() and HEADER not in target.read_text(errors="replace")[:400]:
        problem = "is a file this command did not write (it would be replaced)"
    if problem:
        raise ConfigError(f"--write={str(target)!r} {problem}; give a new .yaml file's path")


def parse_numbers(value: str, flag: str, kind: type) -> list:
    """``"a,b,c"`` -> distinct positive numbers of ``kind``, in order.

    Raises:
        ConfigError: an empty list or entry (``1e-3,,2e-3``: a typo, not two rates), a value
            that is not a ``kind`` or not above 0 (one line).
    """
    items = [item.strip() for item in value.split(",")]
    if not all(items):
        items = []  # refused below, with the allowed values
    try:
        numbers = [kind(item) for item in items]
    except ValueError:
        numbers = []
    ok = (lambda n: 0 < n < 1) if kind is float else (lambda n: n >= 0)
    if not numbers or not all(ok(n) for n in numbers):
        allowed = "learning rates in (0, 1)" if kind is float else "seeds >= 0"
        raise ConfigError(f"{flag}={value!r} is invalid; give comma-separated {allowed}")
    return list(dict.fromkeys(numbers))


RECIPE = ("model.d_model", "model.n_layers", "model.n_heads", "model.d_ff", "model.dropout")
RECIPE += ("train.steps", "train.batch_size", "train.min_lr", "train.warmup_steps")
RECIPE += ("train.eval_every", "train.target_accuracy", "data.task")
"""The settings ``lr_selection.json`` records of its tuning runs (``recipe``), which a result
page compares with the runs it publishes (:func:`lab.reporting.pages.recipe_differences`)."""


def recipe(configs: list[Any]) -> dict[str, list]:
    """:data:`RECIPE` key -> the sorted distinct values the tuning runs' configs have."""
    values: dict[str, set] = {key: set() for key in RECIPE}
    for config in configs:
        for key in RECIPE:
            section, name = key.split(".")
            values[key].add(getattr(getattr(config, section), name))
    return {key: sorted(found, key=str) for key, found in values.items()}


def kept_seconds(out_dir: Path, records: list[dict], seconds: float) -> float:
    """The tuning's wall time: this pass's, unless it trained nothing (every run finished
    already) and the folder's ``lr_selection.json`` records the time of the pass that did."""
    if any(r["status"] in ("trained", "evaluated") for r in records):
        return seconds
    try:
        earlier = json.loads((out_dir / SELECTION).read_text()).get("seconds")
    except (OSError, ValueError, AttributeError):
        return seconds
    return float(earlier) if isinstance(earlier, (int, float)) else seconds


def write_selection(out_dir: Path, arms: list[Arm], chosen: dict[str, float], meta: dict) -> Path:
    """Write ``OUT_DIR/lr_selection.json``: the criterion, every arm, each scheme's rate and
    why; returns its path."""
    path = out_dir / SELECTION
    record = {
        **meta,
        "criterion": CRITERION,
        "chosen": chosen,
        "why": {scheme: why(arms, scheme, lr) for scheme, lr in chosen.items()},
        "arms": [vars(arm) for arm in arms],
    }
    atomic_write(path, json.dumps(record, indent=2, allow_nan=False, default=str) + "\n")
    return path


def main(argv: list[str]) -> int:
    """``python sweep.py --select-lr``: 0 chosen and written, 2 a bad input, 128 + signal on
    a stop (finished tuning runs are kept; the same command resumes)."""
    args = build_parser().parse_intermixed_args(argv)
    started = time.perf_counter()
    try:
        if not 0 <= args.workers <= MAX_WORKERS:
            raise ConfigError(
                f"--workers={args.workers} is invalid; it must be >= 0 (0 = auto) and <= "
                f"{MAX_WORKERS}"
            )
        sweep, rates = tuning_sweep(args)
        specs = expand(sweep)
        configs = [load_config(None, spec.overrides) for spec in specs]
        check_plain(specs, configs)
        target = Path(args.write) if args.write else Path(sweep.out_dir) / SELECTED
        if args.write:  # the default, in the tuning folder, is this command's own file
            check_target(target, Path(sweep.out_dir))
        with contextlib.ExitStack() as held:  # out_dir's lock while the tuning runs train
            prepare_out_dir(sweep, specs, args.overwrite, "select-lr", held)
            gpus = torch.cuda.device_count()
            workers = parallel_runs(len(specs), args.workers, 0, gpus, os.cpu_count() or 1)
            print(f"{len(specs)} tuning runs into {sweep.out_dir}/ with {workers} worker(s)")
            records, signum = run_all(specs, workers, gpus)
        if signum is not None:
            print(
                "\ninterrupted: finished tuning runs are kept; run the same command again "
                "to resume",
                file=sys.stderr,
            )
            return 128 + signum
        arms = [read_arm(spec, rec) for spec, rec in zip(specs, records, strict=True)]
        command = shlex.join(["python", "sweep.py", "--select-lr", *argv])
        chosen = choose(arms, rates)
        seconds = kept_seconds(Path(sweep.out_dir), records, time.perf_counter() - started)
        meta = {"command": command, "rates": rates, "seeds": sorted({a.seed for a in arms})}
        meta |= {"recipe": recipe(configs)}
        path = write_selection(Path(sweep.out_dir), arms, chosen, meta | {"seconds": seconds})
        write_timing(records, Path(sweep.out_dir), seconds, workers, command=command, files=[path])
        failed = not_learned(arms, configs)
        if failed:
            print(
                f"error: no rate learned {', '.join(failed)} within the tuning budget (no run "
                f"reached train.target_accuracy at any of --lrs={args.lrs}): a rate would be "
                f"chosen by the order of --lrs; give more train.steps or other --lrs "
                f"({path} has every run's numbers; no sweep file was written)",
                file=sys.stderr,
            )
            return 1
        atomic_write(target, selected_sweep_file(Path(args.config), chosen, command))
    except (ConfigError, OSError, ValueError, RunLocked) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for scheme, lr in chosen.items():
        print(f"{scheme}: lr={lr:g}  ({why(arms, scheme, lr)})")
    again = [item for item in args.overrides if not item.startswith("out_dir=")]
    print(f"wrote {path} and {target}; run the comparison at those rates with")
    print(f"  {shlex.join(['python', 'sweep.py', '--config', str(target), *again])}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python sweep.py --select-lr``."""
    parser = argparse.ArgumentParser(
        prog="python sweep.py --select-lr",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--config", default=str(DEFAULT_SWEEP), help="sweep file (default configs/ablation.yaml)"
    )
    parser.add_argument("--lrs", default=DEFAULT_RATES, help=f"rates (default {DEFAULT_RATES})")
    parser.add_argument(
        "--seeds", default=DEFAULT_SEEDS, help=f"tuning seeds (default {DEFAULT_SEEDS})"
    )
    parser.add_argument("--workers", type=int, default=0, help="parallel runs (default: auto)")
    parser.add_argument(
        "--overwrite", action="store_true", help="retrain tuning runs trained with other settings"
    )
    parser.add_argument(
        "--write",
        help="where to write the sweep file with the chosen rates "
        "(default OUT_DIR/selected_sweep.yaml of the tuning folder)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="as sweep.py's, e.g. task=copy train.steps=2000 position=rope,alibi",
    )
    return parser
