"""Checkpoint files: written atomically, read with one clear error when missing or broken."""

import shutil
from pathlib import Path
from typing import Any

import torch

from lab.files import atomic_writer

CHECKPOINT_NAME = "checkpoint.pt"


def checkpoint_path(run_dir: str | Path) -> Path:
    """Where a run keeps its checkpoint: ``RUN_DIR/checkpoint.pt``."""
    return Path(run_dir) / CHECKPOINT_NAME


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write ``state`` with ``torch.save`` atomically (:func:`lab.files.atomic_writer`), so an
    interrupted save leaves the previous checkpoint intact."""
    with atomic_writer(path) as file:
        torch.save(state, file)


def clear_run(run_dir: str | Path) -> None:
    """Delete what a run writes into ``run_dir`` (checkpoint, config, evaluation, TensorBoard
    events and reports), leaving any other file alone."""
    run_dir = Path(run_dir)
    patterns = [CHECKPOINT_NAME, "config.yaml", "eval.json", "events.out.tfevents.*"]
    patterns += ["report.md", "results.csv", "results.json", "accuracy_vs_length.png"]
    for pattern in patterns:
        for path in run_dir.glob(pattern):
            path.unlink()
    for folder in ("hparams", "extrapolation"):
        shutil.rmtree(run_dir / folder, ignore_errors=True)


def load_checkpoint(run_dir: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Read ``RUN_DIR/checkpoint.pt`` onto ``device``.

    Raises:
        FileNotFoundError: the folder or its checkpoint does not exist (one-line message).
        ValueError: the file is not a checkpoint of this project.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {str(run_dir)!r} does not exist")
    path = checkpoint_path(run_dir)
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint in {str(run_dir)!r} (expected {CHECKPOINT_NAME}); "
            "train it first with: python train.py run_dir=" + str(run_dir)
        )
    try:
        state = torch.load(path, map_location=device, weights_only=False)
    except Exception as error:
        raise ValueError(f"{str(path)!r} is not a readable checkpoint: {error}") from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise ValueError(f"{str(path)!r} is not a checkpoint of this project (no model/config)")
    return state
