"""What a training run logs to TensorBoard besides its training scalars: periodic evaluation
with the validation loss, decoded samples, the hyperparameters with the headline metrics
(HPARAMS tab), and a Custom Scalars layout that compares the schemes of one task side by side.

Comparison view. Every run mirrors its periodic validation figures under
``compare/TASK/...`` and adds the chart group ``task TASK`` to the Custom Scalars layout
(TensorBoard merges the groups of all runs by title), so each chart of a group holds one line
per run of that task: the schemes side by side, and no other task squeezed into the same axes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams as hparams_summary

from data import Batch, Task
from data.streams import SAMPLE_STREAM, data_rng, validation_set
from lab.common.config import Config, config_to_dict
from lab.common.events.tags import LENGTH_CHART, LENGTH_COMPARE
from lab.common.runtime import autocast
from lab.evaluation.extrapolation import (
    EvaluationStopped,
    LengthResult,
    evaluate_batch,
    unsupported_reason,
)
from lab.evaluation.metrics import score_answers
from lab.lm.windows import validation_windows
from model import Transformer

AXES = {"scheme": "model.position", "task": "data.task", "seed": "seed", "lr": "train.lr"}
"""The ablation axes, first in the HParams tab (marked as differing: TensorBoard lists those
first, then by name), under short names; value: the config key."""

NOISE = frozenset(
    {"train.progress", "train.log_every", "train.checkpoint_every", "train.eval_every"}
    | {"train.extrapolation_every"}
)
"""Config keys left out of the HParams tab: they change how a run reports, not what it learns."""

HEADLINE = {
    "headline/exact_match_in_dist": (
        "TEST exact-match in dist",
        "eval.py, test set: exact-match in distribution (mean over the training-range lengths)",
    ),
    "headline/reached_target": (
        "reached target (1 yes, 0 no)",
        "0: the run ended at its step cap below train.target_accuracy (not learned); "
        "from eval.json's reached_target",
    ),
    "headline/exact_match_1.25x": (
        "TEST exact-match 1.25x",
        "eval.py, test set: exact-match at 1.25x the longest training length",
    ),
    "headline/exact_match_1.5x": ("TEST exact-match 1.5x", "eval.py, test set: at 1.5x"),
    "headline/exact_match_2x": ("TEST exact-match 2x", "eval.py, test set: at 2x"),
    "headline/exact_match_4x": ("TEST exact-match 4x", "eval.py, test set: at 4x"),
    "headline/pair_accuracy_in_dist": (
        "TEST minimal pairs in dist",
        "eval.py, test set: minimal pairs with both members right, in distribution",
    ),
    "headline/permutation_tvd": (
        "TEST permutation TVD",
        "eval.py: next-token change when the prompt is shuffled (0: order-blind)",
    ),
    "hparam/validation_exact_match_in_dist": (
        "validation exact-match in dist",
        "last periodic evaluation, validation set (early stopping reads it; not the test set)",
    ),
    "hparam/validation_exact_match_2x": (
        "validation exact-match 2x",
        "last periodic evaluation at 2x, validation set",
    ),
    "hparam/validation_exact_match_4x": (
        "validation exact-match 4x",
        "last periodic evaluation at 4x, validation set",
    ),
    "hparam/validation_reached_target": (
        "validation reached target",
        "1: the last periodic evaluation reached train.target_accuracy (early stop); 0: it did not",
    ),
    "hparam/steps_to_target": (
        "steps to target (validation)",
        "step whose periodic evaluation (validation set) reached train.target_accuracy",
    ),
    "hparam/final_loss": ("final training loss", "training loss of the last step"),
    "eval/loss_in_dist": (
        "validation loss in dist",
        "last validation loss in distribution (periodic evaluation)",
    ),
}
"""The HParams tab's metrics, in the order of its columns: the test-set figures of ``eval.py``
(``headline/*``, :func:`lab.evaluation.tensorboard.write_tensorboard`) first, then the
validation figures of the training's periodic evaluation, named as such. Tag -> (column title,
description); each tag is a scalar of the run's own folder."""


def periodic_lengths(config: Config) -> dict[str, list[int]]:
    """Lengths of the periodic evaluation: EVERY training length (``train_min_length`` to
    ``train_max_length``, both included), 2x and 4x the longest.

    Every training length is validated because early stopping reads the minimum over them
    (:func:`periodic_eval`): a run must know each length it was trained on, not their mean.
    """
    low, high = config.data.train_min_length, config.data.train_max_length
    return {"in_dist": list(range(low, high + 1)), "2x": [2 * high], "4x": [4 * high]}


def loss_lengths(config: Config) -> list[int]:
    """Lengths of the periodic validation loss: the training range's ends and middle (a
    logged curve, not a stopping criterion: three lengths keep its cost, about a third of an
    evaluation of every length, and its values as they were)."""
    low, high = config.data.train_min_length, config.data.train_max_length
    return sorted({low, (low + high) // 2, high})


def reached_target(evals: dict[str, float], target: float | None) -> bool:
    """Whether a periodic evaluation meets ``train.target_accuracy``: the MINIMUM exact-match
    over the training lengths (``evals["in_dist_min"]``) must reach ``target``, so a run never
    stops on a mean that one weak length hides; None (no target) is never reached.
    """
    return target is not None and "in_dist_min" in evals and evals["in_dist_min"] >= target


def periodic_eval(
    model: Transformer,
    task: Task,
    config: Config,
    writer: SummaryWriter,
    step: int,
    should_stop: Callable[[], bool] | None = None,
    extrapolate: Callable[[dict[str, float]], bool] | None = None,
) -> dict[str, float] | None:
    """Exact-match and per-token accuracy at the periodic lengths, logged under ``eval/``.

    Scored on validation sets (:func:`data.streams.validation_set`: their own seed stream,
    never a sequence of the evaluation set), so early stopping does not read the test data.
    The training lengths come first; ``extrapolate``, given their summary, says whether 2x and
    4x are scored too at this check (None: always; see ``train.extrapolation_every``). They
    are curves to watch, and early stopping never reads them.

    Returns:
        ``{"in_dist", "in_dist_min", "2x", "4x"}`` -> exact-match (fractions in [0, 1]):
        ``in_dist`` is the mean and ``in_dist_min`` the minimum over every training length
        (what early stopping reads, :func:`reached_target`); 2x and 4x are left out where the
        scheme cannot encode them or this check skips them. None when ``should_stop()`` turned
        true between batches: a stop signal never waits for a whole evaluation, and nothing
        of the unfinished one is logged.
    A language-model task is scored by :func:`periodic_lm_eval` instead.
    """
    if task.language_model:
        return periodic_lm_eval(model, task, config, writer, step, should_stop)
    groups = periodic_lengths(config)
    try:
        scores = {"in_dist": scored(model, task, config, groups["in_dist"], should_stop)}
        if extrapolate is None or extrapolate(exact_match_summary(scores)):
            for name in ("2x", "4x"):
                scores[name] = scored(model, task, config, groups[name], should_stop)
    except EvaluationStopped:
        return None
    summary = exact_match_summary(scores)
    for name, results in scores.items():
        if not results:
            continue
        token_accuracy = sum(r.token_accuracy for r in results) / len(results)
        writer.add_scalar(f"eval/exact_match_{name}", summary[name], step)
        writer.add_scalar(f"eval/token_accuracy_{name}", token_accuracy, step)
        writer.add_scalar(f"compare/{task.name}/exact_match_{name}", summary[name], step)
    if "in_dist_min" in summary:
        writer.add_scalar("eval/exact_match_in_dist_min", summary["in_dist_min"], step)
    lengths = loss_lengths(config)
    loss = sum(
        validation_loss(model, validation(task, config, n), config.eval.batch_tokens)
        for n in lengths
    ) / len(lengths)
    writer.add_scalar("eval/loss_in_dist", loss, step)
    writer.add_scalar(f"compare/{task.name}/validation_loss", loss, step)
    return summary


def scored(
    model: Transformer,
    task: Task,
    config: Config,
    lengths: list[int],
    should_stop: Callable[[], bool] | None,
) -> list[LengthResult]:
    """The validation results at ``lengths`` that the scheme can encode (one per length).

    Raises:
        EvaluationStopped: ``should_stop()`` turned true between batches.
    """
    results = [
        evaluate_batch(model, validation(task, config, n), config.eval.batch_tokens, should_stop)
        for n in lengths
    ]
    return [r for r in results if r.supported]


def exact_match_summary(scores: dict[str, list[LengthResult]]) -> dict[str, float]:
    """Length group -> mean exact-match over its lengths (groups with none left out), and
    ``in_dist_min``, the minimum over the training lengths."""
    summary = {
        name: sum(r.exact_match for r in results) / len(results)
        for name, results in scores.items()
        if results
    }
    if scores.get("in_dist"):
        summary["in_dist_min"] = min(r.exact_match for r in scores["in_dist"])
    return summary


LM_MULTIPLES = {"1x": 1, "2x": 2, "4x": 4}
"""Multiples of the training length a language-model run's periodic check scores."""


def periodic_lm_eval(
    model: Transformer,
    task: Task,
    config: Config,
    writer: SummaryWriter,
    step: int,
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, float] | None:
    """A language-model run's periodic check: validation loss and perplexity on held-out
    windows (:func:`lab.lm.windows.validation_windows`, not the evaluation's tokens) at 1x, 2x
    and 4x the training length, logged as ``eval/loss_*`` and ``eval/perplexity_*`` (1x also as
    ``eval/loss_in_dist``, and mirrored under ``compare/TASK/``). It stops nothing: a
    language-model run has no target (:func:`lab.common.sections.check_task_training`).

    Returns:
        ``{"perplexity_1x", "perplexity_2x", "perplexity_4x"}`` (lengths the scheme cannot
        encode left out); None when ``should_stop()`` turned true between lengths (nothing of
        the unfinished check is logged).
    """
    losses = {}
    for label, multiple in LM_MULTIPLES.items():
        length = multiple * config.data.train_max_length
        if unsupported_reason(model, length) is not None:
            continue
        if should_stop is not None and should_stop():
            return None
        losses[label] = validation_loss(
            model, validation(task, config, length), config.eval.batch_tokens
        )
    summary = {}
    for label, loss in losses.items():
        summary[f"perplexity_{label}"] = math.exp(loss)
        for name, value in (("loss", loss), ("perplexity", math.exp(loss))):
            writer.add_scalar(f"eval/{name}_{label}", value, step)
            writer.add_scalar(f"compare/{task.name}/validation_{name}_{label}", value, step)
    writer.add_scalar("eval/loss_in_dist", losses["1x"], step)
    writer.add_scalar(f"compare/{task.name}/validation_loss", losses["1x"], step)
    return summary


@torch.inference_mode()
def validation_loss(model: Transformer, batch: Batch, batch_tokens: int) -> float:
    """Mean cross-entropy (nats per answer token, ``<eos>`` included, pads excluded) of
    ``batch``'s answers, teacher-forced in chunks of about ``batch_tokens`` tokens, as the
    training loss."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    rows = max(1, batch_tokens // batch.inputs.shape[1])
    total, count = 0.0, 0
    for start in range(0, batch.tokens.shape[0], rows):
        chunk = batch.rows(slice(start, start + rows)).to(device)
        with autocast(device):
            logits = model(chunk.inputs, prefix_len=chunk.answer_start)  # (B, S-1, V)
        answer = logits[:, chunk.answer_slice].float()  # (B, A, V)
        losses = F.cross_entropy(
            answer.flatten(0, 1), chunk.answer_targets.flatten(), reduction="none"
        )  # (B * A,)
        real = chunk.answer_mask.flatten()  # (B * A,)
        total += float(losses[real].sum())
        count += int(real.sum())
    model.train(was_training)
    return total / count


_VALIDATION: dict[tuple, Batch] = {}


def validation(task: Task, config: Config, length: int) -> Batch:
    """The run's validation set at ``length``, drawn once per process and then reused (a
    language-model task's: ``train.eval_samples`` held-out windows,
    :func:`lab.lm.windows.validation_windows`)."""
    key = (task.name, tuple(task.vocab), config.seed, length, config.train.eval_samples)
    if task.language_model:
        key += (task.corpus.sha256, config.eval.lm_tokens)
        if key not in _VALIDATION:
            _VALIDATION[key] = validation_windows(task.corpus, *key[2:5], config.eval.lm_tokens)
        return _VALIDATION[key]
    key += (config.eval.samples,)
    if key not in _VALIDATION:
        _VALIDATION[key] = validation_set(task, config.seed, length, *key[-2:])
    return _VALIDATION[key]


@torch.inference_mode()
def write_samples(
    model: Transformer, task: Task, config: Config, writer: SummaryWriter, step: int, n: int = 3
) -> None:
    """Log a few decoded predictions, in distribution, at 2x and at 4x, as TensorBoard text (a
    language-model task: :func:`write_lm_samples`)."""
    if task.language_model:
        write_lm_samples(model, task, config, writer, step, n)
        return
    device = next(model.parameters()).device
    model.eval()
    lines = []
    for name, lengths in periodic_lengths(config).items():
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


@torch.inference_mode()
def write_lm_samples(
    model: Transformer, task: Task, config: Config, writer: SummaryWriter, step: int, n: int = 3
) -> None:
    """Log the first ``n`` validation windows at the training length with the model's
    teacher-forced next-byte predictions (argmax) and their accuracy, as TensorBoard text: the
    same windows at every check, so the text shows what the model learns."""
    device = next(model.parameters()).device
    model.eval()
    batch = validation(task, config, config.data.train_max_length)
    tokens = batch.tokens[:n].to(device)  # (n, L + 1)
    predicted = model(tokens[:, :-1], prefix_len=1).argmax(dim=-1)  # (n, L)
    lines = []
    for row, guess in zip(tokens.tolist(), predicted.tolist(), strict=True):
        right = sum(g == t for g, t in zip(guess, row[1:], strict=True)) / len(guess)
        text, guessed = (quoted(task.decode(ids)) for ids in (row[1:], guess))
        lines.append(f"| `{text}` | `{guessed}` | {right:.0%} |")
    header = "| held-out text | predicted, byte by byte | right |\n|---|---|---|\n"
    writer.add_text("samples", header + "\n".join(lines), step)


def quoted(text: str) -> str:
    """``text`` on one Markdown table line: escapes for newlines and the like, no bare ``|``
    or backtick."""
    escaped = text.encode("unicode_escape").decode("ascii")
    return escaped.replace("`", "'").replace("|", "\\|")


def write_hparams(
    writer: SummaryWriter,
    config: Config,
    evals: dict[str, float],
    step: int,
    final_loss: float | None,
    reached_target: bool,
) -> None:
    """Record the run's hyperparameters and headline metrics for TensorBoard's HParams tab.

    Written into the run's own event file (``SummaryWriter.add_hparams`` would open a
    subfolder that TensorBoard lists as a second run). The experiment lists every
    :data:`HEADLINE` metric in its order (test-set ``headline/*`` first; ``eval.py`` adds their
    values later), each with its column title, and marks the :data:`AXES` as differing, so
    TensorBoard shows them first. The seed is written as its decimal string: the HParams table
    prints every number with 5 significant digits (seed 0 as ``0.0000``).

    Args:
        evals: the final periodic evaluation (:func:`periodic_eval`): ``{"in_dist", "2x",
            "4x"}`` -> validation exact-match, logged as ``hparam/validation_exact_match_*``.
        step: the last step; it is also ``steps_to_target`` when the target was reached.
        final_loss: training loss of the last step (None: no step ran in this process and
            none was saved).
        reached_target: whether the training stopped because it reached
            ``train.target_accuracy`` at every training length (the run's
            ``TrainResult.reached_target``). Logged as ``hparam/validation_reached_target``
            (1 or 0) when a target is set.
    """
    metrics = {
        f"hparam/validation_{name}"  # a language-model run's perplexities (periodic_lm_eval)
        if name.startswith("perplexity")
        else f"hparam/validation_exact_match_{name}": value
        for name, value in evals.items()
    }
    if final_loss is not None:
        metrics["hparam/final_loss"] = final_loss
    target = config.train.target_accuracy
    if target is not None:
        metrics["hparam/validation_reached_target"] = float(reached_target)
        if reached_target:
            metrics["hparam/steps_to_target"] = step
    shown = hparams(config) | {"seed": str(config.seed)}
    experiment, start, end = hparams_summary(shown, dict.fromkeys(HEADLINE, 0.0))
    for summary in (mark_axes(experiment), start, end):
        writer.file_writer.add_summary(summary, step)
    for name, value in metrics.items():
        writer.add_scalar(name, value, step)


def mark_axes(experiment: Any) -> Any:
    """The experiment summary with the :data:`AXES` marked as differing and every metric
    titled and described (:data:`HEADLINE`)."""
    value = experiment.value[0]
    data = HParamsPluginData.FromString(value.metadata.plugin_data.content)
    for info in data.experiment.hparam_infos:
        info.differs = info.name in AXES
    for info in data.experiment.metric_infos:
        info.display_name, info.description = HEADLINE.get(info.name.tag, ("", ""))
    value.metadata.plugin_data.content = data.SerializeToString()
    return experiment


def hparams(config: Config) -> dict[str, Any]:
    """The hyperparameters shown in TensorBoard's HPARAMS tab (scalars only): the
    :data:`AXES` first, then every other setting but the :data:`NOISE`."""
    flat = {}
    for section in ("model", "data", "train"):
        for key, value in config_to_dict(config)[section].items():
            if isinstance(value, (int, float, str, bool)):
                flat[f"{section}.{key}"] = value
    position = config.model.position
    for key, value in config.model.options[position].items():  # the active scheme's options
        scalar = isinstance(value, (int, float, str, bool))
        flat[f"model.options.{position}.{key}"] = value if scalar else str(value)  # a list
    flat["seed"] = config.seed
    axes = {name: flat[key] for name, key in AXES.items()}
    rest = {k: v for k, v in flat.items() if k not in AXES.values() and k not in NOISE}
    return axes | rest


COMPARE_CHARTS = {
    "exact-match in distribution (validation)": "exact_match_in_dist",
    "exact-match at 2x (validation)": "exact_match_2x",
    "exact-match at 4x (validation)": "exact_match_4x",
    "validation loss": "validation_loss",
    LENGTH_CHART: LENGTH_COMPARE,
}
"""Chart title -> leaf tag of ``compare/TASK/...`` in a task's Custom Scalars group."""


def comparison_layout(task: str) -> dict[str, dict[str, list]]:
    """The Custom Scalars group ``task TASK: every run``: one chart per figure of
    :data:`COMPARE_CHARTS`, one line per run of the task (a sweep adds one line per scheme,
    the mean over seeds, in ``task TASK: mean over seeds``,
    :mod:`lab.reporting.sweep_tensorboard`)."""
    return {
        f"task {task}: every run": {
            title: ["Multiline", [f"^compare/{task}/{tag}$"]]
            for title, tag in COMPARE_CHARTS.items()
        }
    }


def write_layout(writer: SummaryWriter, config: Config) -> None:
    """Add the run's task group to the Custom Scalars layout (:func:`comparison_layout`)."""
    writer.add_custom_scalars(comparison_layout(config.data.task))
