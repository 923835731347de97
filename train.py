"""Train one model: ``python train.py [--config configs/NAME.yaml] [key=value ...]``.

With no arguments it trains the default configuration (a small RoPE model on ``svo``) into
``runs/default``. ``--resume RUN_DIR`` continues an interrupted run exactly.
"""

import argparse
import sys

from lab.checkpoint import clear_run
from lab.config import ConfigError, flat_keys, load_config
from lab.trainer import TrainingDiverged, train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="keys: " + ", ".join(flat_keys()),
    )
    parser.add_argument("--config", help="YAML config file (see configs/)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a run already in run_dir (deletes it)"
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="e.g. model.position=alibi"
    )
    args = parser.parse_intermixed_args(argv)
    config = None
    try:
        if args.resume:
            if args.config or args.overrides:
                raise ConfigError(
                    "--resume takes the run's saved config; drop --config and overrides"
                )
            config = load_config(None, [f"run_dir={args.resume}"])
        else:
            config = load_config(args.config, args.overrides)
            if args.overwrite:
                clear_run(config.run_dir)
        result = train(config, resume=bool(args.resume))
    except (ConfigError, OSError, ValueError, TrainingDiverged) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if config is None:
            print("interrupted", file=sys.stderr)
        else:
            print(
                "interrupted; checkpoint saved; continue with: "
                f"python train.py --resume {config.run_dir}",
                file=sys.stderr,
            )
        return 130
    evals = ", ".join(f"{k} {v:.1%}" for k, v in result.eval.items())
    print(
        f"{result.run_dir}: {result.step} steps in {result.seconds:.0f}s, "
        f"loss {result.final_loss:.4f}, exact-match {evals}"
    )
    print(f"tensorboard --logdir {result.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
