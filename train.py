"""Train one model: ``python train.py [--config configs/NAME.yaml] [key=value ...]``.

With no arguments it trains the default configuration (a small RoPE model on ``svo``) into
``runs/default``. ``--resume RUN_DIR [key=value ...]`` continues an interrupted run exactly,
with its saved settings; only device, threads, compile, train.progress and train.steps (a
larger budget extends a run) may be given again. Ctrl-C or SIGTERM saves a checkpoint at the
next step and exits with 130 (SIGINT) or 143 (SIGTERM).

``torchrun --nproc_per_node N train.py ...`` trains the same model data-parallel on N
processes (see docs/sweeps.md, "One model on N processes"); rank 0 writes and prints.

``python train.py --extend PARENT_RUN_DIR [key=value ...]`` fine-tunes a finished run into a
new run folder, from its weights, with changed position options and lengths
(:mod:`lab.training.extend`).
"""

if __name__ == "__main__":  # first, so a stop signal during the imports is one line too
    from lab.common.signals import exit_at_once

    exit_at_once("train.py")

import argparse
import shlex
import signal
import sys

from lab.common.commands import Programs, hand_off, list_programs
from lab.common.config import (
    Config,
    ConfigError,
    check_evaluable,
    config_to_dict,
    flat_keys,
    load_config,
)
from lab.common.outputs import output_problem
from lab.common.runlock import RunLocked
from lab.common.runtime import cpu_threads
from lab.common.signals import exit_code, rank_prefix, run_program, signal_name
from lab.evaluation.labels import changed_task_options
from lab.training.distributed import is_main_process, leave_group
from lab.training.extend import check_parent_unchanged
from lab.training.resume import resume_config
from lab.training.run import TrainingDiverged, TrainingInterrupted, TrainResult
from lab.training.trainer import train
from model.layout import layout_label

STOPPED = (
    "a checkpoint on disk is complete (every write is atomic); continue a run that saved one "
    "with python train.py --resume RUN_DIR"
)
"""What a stop signal outside the guarded sections leaves, said after its one line (see
:func:`lab.common.signals.run_main`)."""

PROGRAMS: Programs = {
    "--extend": (
        "lab.training.extend",
        "PARENT_RUN_DIR [key=value ...]: fine-tune a finished run into a new run folder, from "
        "its weights, with changed position options and lengths (--extend --help)",
    ),
}
"""Flags that run another program: given first, the rest of the command line goes to that
module's ``main(argv)`` and its exit code is this program's."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    handed = hand_off("train.py", argv, PROGRAMS)
    if handed is not None:
        return handed
    parser = argparse.ArgumentParser(  # no abbreviations: --ext must not train the default run
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="keys: " + ", ".join(flat_keys()),
        allow_abbrev=False,
    )
    parser.add_argument("--config", help="YAML config file (see configs/)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in run_dir (deletes only the files a run writes; refuses a folder "
        "that holds no run)",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="e.g. model.position=alibi"
    )
    list_programs(parser, PROGRAMS)
    args = parser.parse_intermixed_args(argv)
    try:
        return run(args)
    finally:
        leave_group()


def run(args: argparse.Namespace) -> int:
    """Train as ``args`` say; print the outcome (rank 0 only, errors on every rank). Maps each
    way a run ends to its exit status: 0 done, 2 a bad input or a diverged run, 128 + signal
    on a stop, 1 when the other processes of a ``torchrun`` are lost."""
    run_dir = args.resume
    try:
        config = run_config(args)
        run_dir = config.run_dir
        if is_main_process():
            print_start(config)
        result = train(config, resume=bool(args.resume), overwrite=args.overwrite)
    except (ConfigError, OSError, ValueError, TrainingDiverged, RunLocked) as error:
        print(f"{rank_prefix()}error: {error}", file=sys.stderr)
        return 2
    except TrainingInterrupted as stop:
        hint = ""
        if stop.saved_step is not None:
            hint = f"; continue with: python train.py --resume {shlex.quote(str(run_dir))}"
        print(f"{rank_prefix()}{stop}{hint}", file=sys.stderr)
        return 128 + (stop.signum or signal.SIGINT)
    except RuntimeError as error:
        if not rank_prefix():
            raise
        print(
            f"{rank_prefix()}error: lost the other processes ({str(error).splitlines()[0]}); "
            "torchrun's report below names the one that failed first; the last checkpoint "
            "on disk is kept",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt as stop:  # a signal before training started (see lab.common.signals)
        print(
            f"{rank_prefix()}interrupted by {signal_name(stop)} during start-up; no checkpoint "
            "was written",
            file=sys.stderr,
        )
        return exit_code(stop)
    if is_main_process():
        print_result(result, config)
    return 0


def run_config(args: argparse.Namespace) -> Config:
    """The config to train: the saved one with the allowed overrides (``--resume``), else the
    defaults, ``--config`` and the overrides.

    A new run's ``eval.position_options`` are checked against its scheme as a sweep checks
    them (:func:`lab.common.config.check_evaluable`), so no run is trained that its evaluation
    then refuses, and its ``run_dir`` as every output folder is
    (:func:`lab.common.outputs.output_problem`: not empty, the root, a file, a sweep's folder
    or inside another run's).

    Raises:
        ConfigError: ``--config`` with ``--resume``, or a bad file, key, value or ``run_dir``
            (one line).
        FileNotFoundError, ValueError: ``--resume`` without a readable checkpoint.
    """
    if args.resume:
        if args.config:
            raise ConfigError("--resume takes the run's saved config; drop --config")
        check_parent_unchanged(args.resume)  # a fine-tuned child of a since-retrained parent
        return resume_config(args.resume, args.overrides)
    config = load_config(args.config, args.overrides)
    check_evaluable(config)
    problem = output_problem(config.run_dir, "run_dir")
    if problem:
        raise ConfigError(problem)
    return config


def print_start(config: Config) -> None:
    """One line: the run folder, the scheme (a hybrid's layout), the task (with its changed
    options), the CPU threads and the precision."""
    values = config_to_dict(config)
    task_options = changed_task_options(values["data"])
    scheme = layout_label(values["model"]) or config.model.position  # what the model runs
    print(
        f"{config.run_dir}: {scheme} on {config.data.task}{task_options}, "
        f"{cpu_threads(config.threads)} CPU thread(s) (threads=N to change), "
        f"precision {config.precision}",
        flush=True,
    )


def print_result(result: TrainResult, config: Config) -> None:
    """What the run did (or that it was already finished) and the next commands."""
    if not result.losses:
        print(
            f"{result.run_dir}: already finished at step {result.step}; nothing to train (extend "
            f"it with: python train.py --resume {shlex.quote(str(result.run_dir))} "
            f"train.steps=N, N > {result.step})"
        )
        return
    evals = "validation exact-match " + ", ".join(f"{k} {v:.1%}" for k, v in result.eval.items())
    if config.data.build_task().language_model:  # lab.training.run_logs.periodic_lm_eval
        evals = "validation " + ", ".join(
            f"{k.replace('_', ' ')} {v:.2f}" for k, v in result.eval.items()
        )
    target = config.train.target_accuracy
    target = "" if target is None or result.reached_target else f" (target {target} not reached)"
    print(
        f"{result.run_dir}: {result.step} steps in {result.seconds:.0f}s, "
        f"loss {result.final_loss:.4f}, {evals}{target}"
    )
    run = shlex.quote(str(result.run_dir))
    print(f"test-set evaluation (eval.json, report, plots): python eval.py {run}")
    from lab.common.events.place import events_folder

    events = events_folder(result.run_dir, config.log_dir, config.data.task)
    print(f"tensorboard --logdir {shlex.quote(str(events))}")


if __name__ == "__main__":
    run_program("train.py", main, STOPPED)
