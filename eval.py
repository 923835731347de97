"""Evaluate trained runs: ``python eval.py RUN_DIR_OR_PARENT [--out DIR] [eval.KEY=VALUE ...]``.

For every run (a folder holding ``checkpoint.pt``; a parent folder is searched recursively):
exact-match and per-token accuracy over a length grid up to ``eval.max_length_factor`` times the
longest training length (always at 1.1x, 1.25x, 1.5x, 2x, 3x and 4x of it), minimal pairs at
every length (the tasks with swapped pairs, docs/evaluation.md), an order-blindness check and
the diagnostics of where and why it fails (docs/diagnostics.md). A language-model run (task
``text``) gets held-out loss and perplexity at 1x, 2x, 4x ... of its training length and per
token position instead (docs/language-modelling.md).
Each run gets ``RUN_DIR/eval.json`` and TensorBoard curves ``by_length_set_smoothing_0/*``, and
cross-run reports (``results.csv``, ``results.json``, ``report.md``, ``accuracy_vs_length.png``)
go to the given folder. With ``--out DIR`` everything goes under ``DIR`` instead (a run's files
to ``DIR/<its path below the given folder>/``) and the run folders are left untouched. Every
override is checked against each run's saved config as ``train.py`` checks a new run (lengths
against the token limit, the task and the scheme), and every folder to write, before any
evaluation starts; ``DIR`` is created only when the first file is written into it, and is
never a run's folder or inside one, nor a sweep's folder (its reports would be replaced). An
extend study's folder takes no reports (give ``--out``); a smoke sweep's reports carry its
note, as the sweep's own did. Each
``eval.json`` names the checkpoint it evaluated (its step and SHA-256), and no write follows a
symbolic link to a folder below ``DIR`` or the run.

Examples::

    python eval.py runs/default
    python eval.py runs/sweep --out reports eval.samples=500 eval.lengths=[4,8,16,32]
    python eval.py runs/rope-copy eval.position_options.theta=40000   # an evaluable position option
"""

from __future__ import annotations

if __name__ == "__main__":  # first, so a stop signal during the imports is one line too
    from lab.common.signals import exit_at_once

    exit_at_once("eval.py")

import argparse
import contextlib
import shlex
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from lab.common.checkpoint import checkpoint_path
from lab.common.config import ConfigError, EvalConfig, flat_keys
from lab.common.files import check_not_folders, writable_folder
from lab.common.outputs import (
    LM_REPORT_NAMES,
    PROGRAMS,
    REPORT_FILES,
    foreign_files,
    output_problem,
    recorded_program,
)
from lab.common.runlock import LOCK_NAME, RunLocked, run_lock
from lab.common.runtime import configure_threads, resolve_device
from lab.common.signals import run_program
from lab.diagnostics.summary import run_line
from lab.evaluation.evaluate import apply_eval_overrides, find_runs, load_run
from lab.evaluation.labels import scheme_label
from lab.evaluation.runs import Plan, evaluate_plans, hold_runs, lm_summary_line, plan_run
from lab.reporting.report import REPORT_NAMES, write_reports
from lab.reporting.tables import length_table, summary_table
from lab.sweeps.summary import mark_rewritten
from lab.sweeps.sweep import recorded_smoke

ERRORS = (ConfigError, OSError, ValueError)


STOPPED = (
    "the eval.json files and reports already written are complete (every write is atomic); run "
    "the same command again to evaluate the rest"
)
"""What a stop signal outside the guarded sections leaves, said after its one line (see
:func:`lab.common.signals.run_main`)."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 on any bad input or broken run)."""
    args = parse_args(argv)
    try:
        device, runs = check_arguments(args)
    except ERRORS as error:
        return fail(error)
    with contextlib.ExitStack() as held:
        folder = Path(args.path)
        if (folder / LOCK_NAME).is_file() and not checkpoint_path(folder).is_file():
            try:  # a sweep's folder: not while a sweep, study or tuning writes it
                held.enter_context(run_lock(folder, "out_dir", "another sweep"))
            except RunLocked as error:
                return fail(error)
        return evaluate_all(args, argv, device, runs)


def evaluate_all(
    args: argparse.Namespace, argv: list[str] | None, device: torch.device, runs: list[Path]
) -> int:
    """Evaluate ``runs`` and write the reports (see :func:`main`)."""
    out = Path(args.out) if args.out else Path(args.path)
    try:
        writable_folder(out, create=False)  # created when the first file is written into it
        check_not_folders(out, REPORT_NAMES + LM_REPORT_NAMES)
        smoke = report_mode(Path(args.path), out)
    except ERRORS as error:
        return fail(error)
    status, plans = plan_runs(args, runs)
    if not plans:
        return status
    with contextlib.ExitStack() as held:
        try:
            hold_runs(plans, held)
        except RunLocked as error:
            return fail(error)
        failures = []  # a run that fails is reported (status 2), and the others go on
        bar = tqdm(total=sum(p.steps for p in plans), unit="length", disable=args.no_progress)
        results = evaluate_plans(
            plans,
            device,
            bar,
            out if args.out else None,
            lambda e, run: failures.append(fail(e, run)),
        )
        bar.close()
        if failures:
            status = 2
        if not results:
            return status or 2
        try:
            paths = write_reports(results, out, smoke)
            mark_rewritten(out, shlex.join(["python", "eval.py", *(argv or sys.argv[1:])]))
        except ERRORS as error:
            return fail(error)
        print_summary(results, len(runs) == 1, out, bool(args.out), paths)
        return status


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (argparse exits 2 on a syntax error)."""
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="eval keys: " + ", ".join(k for k in flat_keys() if k.startswith("eval.")),
    )
    parser.add_argument("path", nargs="?", help="a run folder, or a folder of run folders")
    parser.add_argument("--out", help="folder for the cross-run reports (default: PATH)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (default 1; 0 = PyTorch default)"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("overrides", nargs="*", metavar="eval.KEY=VALUE")
    args = parser.parse_intermixed_args(argv)
    if args.path is None:  # checked here: argparse would also call the optional overrides required
        parser.error("the following argument is required: path")
    return args


def check_arguments(args: argparse.Namespace) -> tuple[torch.device, list[Path]]:
    """The device and the runs the arguments name, with the overrides checked up front.

    Raises:
        ConfigError, OSError, ValueError: a ``--out`` refused as every output folder is
            (:func:`lab.common.outputs.output_problem`: empty, the root, a file, a run's
            folder or inside one, a sweep's folder other than the path given), a bad override,
            device or thread count, or no run under the path (one line).
    """
    if args.out is not None and not args.out.strip():  # e.g. --out "$UNSET"
        raise ConfigError(
            "--out is empty; give a folder for the reports, or leave --out out to write "
            "into each run"
        )
    problem = output_problem(args.out, "--out", same_as=args.path) if args.out else None
    if problem:
        raise ConfigError(problem)
    apply_eval_overrides(EvalConfig(), args.overrides)  # reject bad overrides up front
    device = resolve_device(args.device)
    configure_threads(args.threads)
    return device, find_runs(args.path)


def report_mode(path: Path, out: Path) -> bool:
    """Whether the reports are a smoke sweep's (the sweep folder ``path`` records
    ``"smoke": true``, :func:`lab.sweeps.sweep.recorded_smoke`): they then carry its note
    instead of tests and findings, as the sweep's own did.

    Raises:
        ConfigError: ``out`` holds an extend study's results (``python sweep.py
            --extend-study``), whose figures and tables are of another kind than these reports
            and would be replaced, or a file of a report's name that the project did not write
            (:func:`lab.common.outputs.foreign_files`; one line naming the folder and the way
            out).
    """
    if recorded_program(out) == "extend-study":
        raise ConfigError(
            f"{str(out)!r} holds the results of `{PROGRAMS['extend-study']}`; eval.py's reports "
            f"would replace its figures and tables with ones of another kind: give --out DIR, "
            f"or run the study's command again to re-evaluate it"
        )
    foreign = foreign_files(out, REPORT_FILES)
    if foreign:
        raise ConfigError(
            f"{str(out)!r} holds {', '.join(foreign)} that this project did not write; the "
            "reports would replace them: give --out a folder of its own"
        )
    return recorded_smoke(path)


def plan_runs(args: argparse.Namespace, runs: list[Path]) -> tuple[int, list[Plan]]:
    """The plan of every run (:func:`lab.evaluation.runs.plan_run`), before any evaluation.

    Returns:
        ``(status, plans)``: a broken run is reported and skipped (status 2); a value refused
        for one run refuses the command (status 2 and no plans).
    """
    status = 0
    plans = []
    out = Path(args.out) if args.out else None
    for run in runs:
        try:
            config = load_run(run, torch.device("cpu"))[0]  # fail early on a broken run
        except ERRORS as error:
            status = fail(error, run)
            continue
        try:  # a value refused for one run refuses the command, before any evaluation
            plans.append(plan_run(run, config, args.overrides, out, args.path))
        except ERRORS as error:
            return fail(error, run), []
    return status, plans


def print_summary(
    results: list[dict], single: bool, out: Path, given_out: bool, paths: dict[str, Path]
) -> None:
    """Print the length table (one run), the summary table, the notes, each run's "where it
    fails" line (docs/diagnostics.md) and where files went (a language-model run: one line of
    perplexities, :func:`lab.evaluation.runs.lm_summary_line`)."""
    exact = [r for r in results if r.get("kind") != "lm"]
    if single and exact:
        print(f"\n{results[0]['run_dir']}: {results[0]['task']}, {scheme_label(results[0])}\n")
        print(length_table(results[0]))
    print()
    if exact:
        print(summary_table(exact, out))
    for result in results:
        if result.get("kind") == "lm":
            print(lm_summary_line(result, out))
    for result in results:
        for note in result["summary"]["notes"]:
            print(f"note: {Path(result['run_dir']).name}: {note}")
    for result in exact:
        if result.get("diagnostics"):  # made from the numbers, as the saved line was
            print(f"where it fails: {Path(result['run_dir']).name}: {run_line(result)}")
    placed = f"under {out}" if given_out else "in each run"
    print(f"\neval.json {placed}; reports: {', '.join(str(p) for p in paths.values())}")


def fail(error: Exception, run: Path | None = None) -> int:
    """Print one ``error:`` line on stderr (naming ``run`` if given); returns exit status 2."""
    where = f"{run}: " if run is not None and str(run) not in str(error) else ""
    tqdm.write(f"error: {where}{error}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    run_program("eval.py", main, STOPPED)
