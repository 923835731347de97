"""Perplexity of a language model by evaluation length and by token position: the ``eval.json``
of a run on a language-model task (``kind: "lm"``, :data:`lab.lm.record.LM_SCHEMA`).

The lengths are ``L * 2**k`` (``L`` the training length, ``k = 0, 1, ...`` while ``2**k <=
eval.max_length_factor``). Every length scores the SAME held-out targets (the first
``eval.lm_tokens``, rounded down to a multiple of the longest length,
:mod:`lab.lm.windows`), so lengths, schemes and seeds compare on the same text, as in Press et
al. 2022 ("Train Short, Test Long", Fig. 1: perplexity against evaluation length). Loss is the
cross-entropy of the logits in float32, in nats per token; perplexity is ``exp`` of the mean
loss over every scored token.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from tqdm import tqdm

from data import Task
from lab.common.config import Config, ConfigError, EvalConfig, config_to_dict, lm_multiple
from lab.common.machine import machine_info
from lab.common.runtime import autocast, compute_dtype
from lab.evaluation.extrapolation import multiple_label, unsupported_reason
from lab.lm.record import LM_SCHEMA_VERSION, MIN_INTERVAL_WINDOWS
from lab.lm.windows import Windows, check_window_tokens, evaluation_windows, scored_tokens

BOOTSTRAP_SAMPLES = 1000
"""Resamples of windows for a perplexity's 95% interval (seeded: ``default_rng(0)``)."""
BOOTSTRAP_BUDGET = 2**22
"""Most resampled windows held at once: resamples are drawn in chunks of
``BOOTSTRAP_BUDGET // windows`` rows (at least one), so 65,000 sliding windows need about
100 MB, not 1.5 GB; the draws, and so the interval, are those of one draw of every resample."""


def lm_lengths(config: Config, e: EvalConfig) -> dict[str, int]:
    """``{label: length}``: ``"1x": L, "2x": 2L, ...`` up to ``eval.max_length_factor``.

    Raises:
        ConfigError: ``eval.lengths`` is set (a language-model run evaluates the multiples).
    """
    if e.lengths is not None:
        raise ConfigError(
            f"eval.lengths={e.lengths} is for exact-match tasks; a language-model run "
            f"({config.data.task!r}) evaluates train_max_length * 2**k up to "
            "eval.max_length_factor: set eval.lengths=null"
        )
    high, lengths, multiple = config.data.train_max_length, {}, 1
    while multiple <= lm_multiple(e.max_length_factor):  # what the config's check_lengths checks
        lengths[multiple_label(multiple)] = high * multiple
        multiple *= 2
    return lengths


def lm_plan(config: Config, e: EvalConfig, task: Task) -> tuple[dict[str, int], int]:
    """The lengths (:func:`lm_lengths`) and the scored tokens per length
    (:func:`lab.lm.windows.scored_tokens`), checked before any evaluation.

    Raises:
        ConfigError: ``eval.lengths`` set, ``eval.lm_tokens`` out of the corpus's range, or
            ``eval.stride`` longer than the training length, or so short that a length would
            evaluate over :data:`lab.lm.windows.MAX_WINDOW_TOKENS` tokens (one line each).
    """
    lengths = lm_lengths(config, e)
    if e.stride is not None and e.stride > config.data.train_max_length:
        raise ConfigError(
            f"eval.stride={e.stride} is longer than the shortest evaluation length "
            f"({config.data.train_max_length}): windows would skip tokens; give eval.stride <= "
            f"{config.data.train_max_length}"
        )
    n_tokens = scored_tokens(task.corpus, e.lm_tokens, list(lengths.values()))
    check_window_tokens(n_tokens, lengths, e.stride)
    return lengths, n_tokens


def check_lm_limits(config: Config) -> None:
    """For a language-model run, :func:`lm_plan` of ``config``'s own evaluation settings (the
    corpus-sized limits train.py checks before a folder); nothing for an exact-match task.

    Raises:
        ConfigError: as :func:`lm_plan` (one line).
    """
    task = config.data.build_task()
    if task.language_model:
        lm_plan(config, config.eval, task)


@torch.inference_mode()
def token_losses(
    model: torch.nn.Module, windows: Windows, batch_tokens: int, precision: str = "auto"
) -> torch.Tensor:
    """Cross-entropy (nats) of every target of every window: float32 ``(W, length)``, computed
    from float32 logits, forward passes in ``precision`` and in chunks of about
    ``batch_tokens`` tokens (at least one window)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    rows = max(1, batch_tokens // windows.length)
    losses = []
    for start in range(0, windows.tokens.shape[0], rows):
        chunk = windows.tokens[start : start + rows].to(device)  # (B, length + 1)
        with autocast(device, precision):
            logits = model(chunk[:, :-1], prefix_len=1)  # (B, length, V)
        loss = F.cross_entropy(
            logits.float().flatten(0, 1), chunk[:, 1:].flatten(), reduction="none"
        )  # (B * length,)
        losses.append(loss.view(chunk.shape[0], -1).cpu())
    model.train(was_training)
    return torch.cat(losses)


def bootstrap_interval(window_losses: np.ndarray, tokens: np.ndarray) -> tuple[float, float]:
    """95% percentile bootstrap interval of the perplexity ``exp(sum(l_i t_i) / sum(t_i))``
    over windows (``window_losses`` their mean losses, ``tokens`` their scored tokens), from
    :data:`BOOTSTRAP_SAMPLES` resamples of the windows with replacement (Efron and Tibshirani
    1993, "An Introduction to the Bootstrap", ch. 13), seeded ``default_rng(0)``."""
    rng, n = np.random.default_rng(0), len(window_losses)
    rows, means = max(1, BOOTSTRAP_BUDGET // n), []
    for start in range(0, BOOTSTRAP_SAMPLES, rows):
        picks = rng.integers(0, n, size=(min(rows, BOOTSTRAP_SAMPLES - start), n))  # (r, W)
        weights = tokens[picks]  # (r, W)
        means.append((window_losses[picks] * weights).sum(axis=1) / weights.sum(axis=1))
    low, high = np.percentile(np.exp(np.concatenate(means)), [2.5, 97.5])
    return float(low), float(high)


def length_row(
    label: str, multiple: int, windows: Windows, losses: torch.Tensor | None, reason: str | None
) -> dict[str, Any]:
    """The ``lengths`` entry of one length (:data:`lab.lm.record.LM_SCHEMA`); ``losses`` is
    :func:`token_losses` (None when the scheme cannot encode the length: ``reason`` says why)."""
    row = {"length": windows.length, "multiple": multiple, "label": label}
    row |= {"windows": int(windows.tokens.shape[0]), "tokens_scored": windows.scored_tokens}
    if losses is None:
        figures = dict.fromkeys(("loss", "perplexity", "perplexity_low", "perplexity_high"))
        return row | figures | {"window_losses": None, "supported": False, "reason": reason}
    positions = torch.arange(windows.length)  # (length,)
    scored = positions[None, :] >= windows.first_scored[:, None]  # (W, length)
    sums = (losses.double() * scored).sum(dim=1)  # (W,)
    counts = scored.sum(dim=1).double()  # (W,)
    loss = float(sums.sum() / counts.sum())
    low = high = None  # too few windows for an interval (lm_record's notes say so)
    if len(counts) >= MIN_INTERVAL_WINDOWS:
        low, high = bootstrap_interval((sums / counts).numpy(), counts.numpy())
    return row | {
        "loss": loss,
        "perplexity": math.exp(loss),
        "perplexity_low": low,
        "perplexity_high": high,
        "window_losses": (sums / counts).tolist(),
        "supported": True,
        "reason": None,
    }


def evaluate_lm(
    model: torch.nn.Module,
    config: Config,
    eval_config: EvalConfig | None = None,
    progress: tqdm | None = None,
) -> dict[str, Any]:
    """Loss and perplexity of ``model`` at each length (:func:`lm_lengths`) on the same
    held-out tokens, and the mean loss at each token position at the longest supported length.

    Args:
        model: a :class:`model.Transformer` (or a module with its forward, ``.config`` and
            ``.position``) on its device.
        config: the run's config (a language-model task).
        eval_config: evaluation settings; None uses ``config.eval``.
        progress: a tqdm bar advanced once per length and once at the end.

    Returns:
        The content of ``eval.json`` (:data:`lab.lm.record.LM_SCHEMA`) with the run's fields
        (``run_dir``, ``train_steps``, ``checkpoint``) None.

    Raises:
        ConfigError: see :func:`lm_plan`.
    """
    started = time.perf_counter()
    e = eval_config or config.eval
    task = config.data.build_task()
    lengths, n_tokens = lm_plan(config, e, task)
    precision = e.precision or config.precision
    rows, positions = [], {"length": None, "loss": []}
    for label, length in lengths.items():
        if progress is not None:
            progress.set_postfix_str(f"length {length}")
        windows = evaluation_windows(task.corpus, n_tokens, length, e.stride)
        reason = unsupported_reason(model, length)
        losses = None if reason else token_losses(model, windows, e.batch_tokens, precision)
        rows.append(length_row(label, length // lengths["1x"], windows, losses, reason))
        if losses is not None:  # the longest supported length so far
            positions = {"length": length, "loss": losses.double().mean(dim=0).tolist()}
        if progress is not None:
            progress.update(1)
    record = lm_record(config, e, task, rows, positions)
    device = next(model.parameters()).device
    record["device"] = str(device)
    record["dtype"] = str(compute_dtype(device, precision)).removeprefix("torch.")
    if progress is not None:
        progress.update(1)
    record["eval_seconds"] = time.perf_counter() - started
    return record


def lm_record(
    config: Config, e: EvalConfig, task: Task, rows: list[dict], positions: dict[str, Any]
) -> dict[str, Any]:
    """The ``eval.json`` dict (:data:`lab.lm.record.LM_SCHEMA`) of the length ``rows``; the
    run's fields None, ``device``/``dtype`` empty and ``eval_seconds`` 0 (filled in later)."""
    d = config.data
    saved = config_to_dict(config)
    saved["eval"] = OmegaConf.to_container(OmegaConf.structured(e))
    notes = [
        f"{row['label']}: length {row['length']} is unsupported: {row['reason']}"
        for row in rows
        if not row["supported"]
    ]
    notes += [
        f"{row['label']}: {row['windows']} window(s) scored: too few for a 95% interval (needs "
        f"{MIN_INTERVAL_WINDOWS}), so none is given and no per-window test is made; raise "
        "eval.lm_tokens or give eval.stride"
        for row in rows
        if row["supported"] and row["perplexity_low"] is None
    ]
    return {
        "kind": "lm",
        "schema_version": LM_SCHEMA_VERSION,
        "run_dir": None,
        "config": saved,
        "position": config.model.position,
        "task": d.task,
        "seed": config.seed,
        "train_lengths": [d.train_min_length, d.train_max_length],
        "train_steps": None,
        "reached_target": None,
        "eval_seconds": 0.0,
        "checkpoint": None,
        "machine": machine_info(),
        "device": "",
        "dtype": "",
        "corpus": task.corpus.record(),
        "stride": e.stride,
        "lengths": rows,
        "positions": positions,
        "summary": {"perplexity": {r["label"]: r["perplexity"] for r in rows}, "notes": notes},
        "passkey": None,
    }
