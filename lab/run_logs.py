"""What a training run logs to TensorBoard besides its training scalars: periodic evaluation,
decoded samples, and the hyperparameters with the final exact-match (HPARAMS tab)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams as hparams_summary

from data import Batch, Task
from lab.batches import SAMPLE_STREAM, data_rng, validation_set
from lab.config import Config, config_to_dict
from lab.extrapolation import EvaluationStopped, evaluate_batch, unsupported_reason
from lab.metrics import score_answers
from model import Transformer


def periodic_lengths(config: Config) -> dict[str, list[int]]:
    """Lengths of the periodic evaluation: the training range's ends and middle, 2x and 4x."""
    low, high = config.data.train_min_length, config.data.train_max_length
    return {"in_dist": sorted({low, (low + high) // 2, high}), "2x": [2 * high], "4x": [4 * high]}


def periodic_eval(
    model: Transformer,
    task: Task,
    config: Config,
    writer: SummaryWriter,
    step: int,
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, float] | None:
    """Exact-match and per-token accuracy at the periodic lengths, logged under ``eval/``.

    Scored on validation sets (:func:`lab.batches.validation_set`: their own seed stream, never
    a sequence of the evaluation set), so early stopping does not read the test data.

    Returns:
        ``{"in_dist", "2x", "4x"}`` -> exact-match (lengths a scheme cannot encode left out), or
        None when ``should_stop()`` turned true between batches: a stop signal never waits for
        a whole evaluation, and nothing of the unfinished one is logged.
    """
    scores = {}
    try:
        for name, lengths in periodic_lengths(config).items():
            results = [
                evaluate_batch(
                    model, validation(task, config, n), config.eval.batch_tokens, should_stop
                )
                for n in lengths
            ]
            scores[name] = [r for r in results if r.supported]
    except EvaluationStopped:
        return None
    summary = {}
    for name, results in scores.items():
        if not results:
            continue
        summary[name] = sum(r.exact_match for r in results) / len(results)
        token_accuracy = sum(r.token_accuracy for r in results) / len(results)
        writer.add_scalar(f"eval/exact_match_{name}", summary[name], step)
        writer.add_scalar(f"eval/token_accuracy_{name}", token_accuracy, step)
    return summary


_VALIDATION: dict[tuple, Batch] = {}


def validation(task: Task, config: Config, length: int) -> Batch:
    """The run's validation set at ``length``, drawn once per process and then reused."""
    key = (task.name, tuple(task.vocab), config.seed, length, config.train.eval_samples)
    key += (config.eval.samples,)
    if key not in _VALIDATION:
        _VALIDATION[key] = validation_set(task, config.seed, length, *key[-2:])
    return _VALIDATION[key]


@torch.inference_mode()
def write_samples(
    model: Transformer, task: Task, config: Config, writer: SummaryWriter, step: int, n: int = 3
) -> None:
    """Log a few decoded predictions, in distribution and at 2x, as TensorBoard text."""
    device = next(model.parameters()).device
    model.eval()
    lines = []
    for name, lengths in periodic_lengths(config).items():
        if name == "4x":
            continue
        batch = task.sample(data_rng(config.seed, SAMPLE_STREAM, step), lengths[-1], n).to(device)
        if unsupported_reason(model, batch.inputs.shape[1]) is not None:
            continue
        scores = score_answers(model(batch.inputs, prefix_len=batch.answer_start), batch)
        rows = zip(batch.tokens, scores.predictions, scores.exact, strict=True)
        for row, predicted, exact in rows:
            prompt = task.decode(row[: batch.answer_start])
            target = task.decode(row[batch.answer_start :])
            mark = "right" if exact else "WRONG"  # pads (after <eos>) do not count
            lines.append(
                f"| {name} | `{prompt}` | `{target}` | `{task.decode(predicted)}` | {mark} |"
            )
    table = "| lengths | prompt | target | predicted | |\n|---|---|---|---|---|\n" + "\n".join(
        lines
    )
    writer.add_text("samples", table, step)


def write_hparams(
    writer: SummaryWriter, config: Config, evals: dict[str, float], step: int
) -> None:
    """Record the run's hyperparameters and final exact-match for TensorBoard's HParams tab.

    Written into the run's own event file (``SummaryWriter.add_hparams`` would open a
    subfolder that TensorBoard lists as a second run).
    """
    metrics = {f"hparam/exact_match_{name}": value for name, value in evals.items()}
    for summary in hparams_summary(hparams(config), metrics):
        writer.file_writer.add_summary(summary, step)
    for name, value in metrics.items():
        writer.add_scalar(name, value, step)


def hparams(config: Config) -> dict[str, Any]:
    """The hyperparameters shown in TensorBoard's HPARAMS tab (scalars only)."""
    flat = {}
    for section in ("model", "data", "train"):
        for key, value in config_to_dict(config)[section].items():
            if isinstance(value, (int, float, str, bool)):
                flat[f"{section}.{key}"] = value
    position = config.model.position
    for key, value in config.model.options[position].items():  # the active scheme's options
        flat[f"model.options.{position}.{key}"] = value
    flat["seed"] = config.seed
    return flat
