"""Evaluate trained runs: ``python eval.py RUN_DIR_OR_PARENT [--out DIR] [eval.KEY=VALUE ...]``.

For every run (a folder holding ``checkpoint.pt``; a parent folder is searched recursively):
exact-match and per-token accuracy over a length grid up to ``eval.max_length_factor`` times the
longest training length (always at 1.1x, 1.25x, 1.5x, 2x, 3x and 4x of it), minimal pairs at
every length (``svo``, ``copy``, ``reverse``) and an order-blindness check.
Each run gets ``RUN_DIR/eval.json`` and TensorBoard curves ``by_length_set_smoothing_0/*``, and
cross-run reports (``results.csv``, ``results.json``, ``report.md``, ``accuracy_vs_length.png``)
go to the given folder. With ``--out DIR`` everything goes under ``DIR`` instead (a run's files
to ``DIR/<its path below the given folder>/``) and the run folders are left untouched. Every
override is checked against each run's saved config as ``train.py`` checks a new run (lengths
against the token limit, the task and the scheme), and every folder to write, before any
evaluation starts; ``DIR`` is created only when the first file is written into it, and never
a folder holding another run. Each ``eval.json`` names the checkpoint it evaluated (its step and
SHA-256), and no write follows a symbolic link to a folder below ``DIR`` or the run.

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
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from lab.common.checkpoint import CHECKPOINT_NAME, checkpoint_path
from lab.common.config import Config, ConfigError, EvalConfig, flat_keys, with_overrides
from lab.common.files import check_not_folders, linked_below, writable_folder
from lab.common.runtime import configure_threads, resolve_device
from lab.common.signals import run_program
from lab.evaluation.evaluate import (
    apply_eval_overrides,
    evaluate_run,
    evaluation_lengths,
    find_runs,
    load_run,
)
from lab.evaluation.labels import scheme_label
from lab.evaluation.record import EVAL_NAME
from lab.reporting.report import REPORT_NAMES, write_reports
from lab.reporting.tables import length_table, summary_table

ERRORS = (ConfigError, OSError, ValueError)


STOPPED = (
    "the eval.json files and reports already written are complete (every write is atomic); run "
    "the same command again to evaluate the rest"
)
"""What a stop signal outside the guarded sections leaves, said after its one line (see
:func:`lab.common.signals.run_main`)."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 on any bad input or broken run)."""
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
    try:
        if args.out is not None and not args.out.strip():  # e.g. --out "$UNSET"
            raise ConfigError(
                "--out is empty; give a folder for the reports, or leave --out out to write "
                "into each run"
            )
        apply_eval_overrides(EvalConfig(), args.overrides)  # reject bad overrides up front
        device = resolve_device(args.device)
        configure_threads(args.threads)
        runs = find_runs(args.path)
    except ERRORS as error:
        return fail(error)

    out = Path(args.out) if args.out else Path(args.path)
    try:
        writable_folder(out, create=False)  # created when the first file is written into it
        check_not_folders(out, REPORT_NAMES)
    except OSError as error:
        return fail(error)
    status = 0
    plans = []  # (run, eval config, folder for its eval.json, number of progress steps)
    for run in runs:
        try:
            config = load_run(run, torch.device("cpu"))[0]  # fail early on a broken run
        except ERRORS as error:
            status = fail(error, run)
            continue
        try:  # a value refused for one run refuses the command, before any evaluation
            plans.append(
                plan_run(run, config, args.overrides, out if args.out else None, args.path)
            )
        except ERRORS as error:
            return fail(error, run)
    if not plans:
        return status
    results = []
    bar = tqdm(total=sum(p[3] for p in plans), unit="length", disable=args.no_progress)
    for run, eval_config, write_to, _ in plans:
        bar.set_description(run.name)
        try:
            root = out if args.out else run  # writes never follow a link out of it
            results.append(evaluate_run(run, eval_config, device, bar, write_to, root=root))
        except ERRORS as error:
            status = fail(error, run)
    bar.close()
    if not results:
        return status or 2

    single = len(runs) == 1
    try:
        paths = write_reports(results, out)
    except ERRORS as error:
        return fail(error)
    if single:
        print(f"\n{results[0]['run_dir']}: {results[0]['task']}, {scheme_label(results[0])}\n")
        print(length_table(results[0]))
    print()
    print(summary_table(results, out))
    for result in results:
        for note in result["summary"]["notes"]:
            print(f"note: {Path(result['run_dir']).name}: {note}")
    placed = f"under {out}" if args.out else "in each run"
    print(f"\neval.json {placed}; reports: {', '.join(str(p) for p in paths.values())}")
    return status


def plan_run(
    run: Path, config: Config, overrides: list[str], out: Path | None, given: str
) -> tuple[Path, EvalConfig, Path, int]:
    """Check ``overrides`` against the saved ``config`` of ``run`` as ``train.py`` checks a new
    run (every length against :data:`lab.common.config.MAX_TOKENS`, the task's shortest length, the
    scheme's evaluable options) and where its ``eval.json`` goes (``out`` mirrors the runs'
    paths below ``given``; None writes into the run), creating nothing.

    Returns:
        ``(run, eval config, folder for its eval.json, progress steps)``.

    Raises:
        ConfigError, ValueError: a value this run cannot be evaluated with (one line).
        OSError: the folder cannot be written, or ``--out`` is another run's folder (its
            ``eval.json`` would be replaced).
    """
    eval_config = apply_eval_overrides(config.eval, overrides)
    with_overrides(config, overrides)  # the whole-config checks (lengths, table sizes)
    config.model.at_evaluation(eval_config.position_options)  # evaluable options only
    steps = len(evaluation_lengths(config, eval_config, config.data.build_task())[1]) + 1
    write_to = run if out is None else out / run.relative_to(given)
    if out is not None and checkpoint_path(write_to).is_file() and not write_to.samefile(run):
        raise OSError(
            f"--out {str(write_to)!r} holds another run ({CHECKPOINT_NAME}); its eval.json "
            "would be replaced: give --out a folder of its own"
        )
    link = linked_below(write_to, out) if out is not None else None
    if link is not None:  # refused here, before any run is evaluated (again at the writes)
        raise OSError(
            f"refusing to write into {str(link)!r}: it is a symbolic link; writes never leave "
            f"{str(out)!r} through a link (remove or rename it)"
        )
    check_not_folders(write_to, [EVAL_NAME])
    return run, eval_config, writable_folder(write_to, create=False), steps


def fail(error: Exception, run: Path | None = None) -> int:
    """Print one ``error:`` line on stderr (naming ``run`` if given); returns exit status 2."""
    where = f"{run}: " if run is not None and str(run) not in str(error) else ""
    tqdm.write(f"error: {where}{error}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    run_program("eval.py", main, STOPPED)
