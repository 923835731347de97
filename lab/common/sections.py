"""The sections of a run's config and the limits they enforce: :class:`DataConfig`,
:class:`TrainConfig`, :class:`EvalConfig` (``model`` is :class:`model.ModelConfig`), each checking
its own values in ``__post_init__``, and :func:`check_lengths`, which checks every length a run
evaluates. Every error is one :class:`ConfigError` line naming the key or value and what is
allowed. :mod:`lab.common.config` assembles them into a run's :class:`lab.common.config.Config`
and loads it; import them from there.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from data import Task, available_tasks, build_task, task_class, task_options
from lab.common.runtime import PRECISIONS
from registry import options_dict

MAX_TOKENS = 4096
"""Longest model input, in tokens, that a run may train on or evaluate (the periodic 4x
evaluation and ``eval.py``'s grid included). It bounds memory and time: attention is quadratic
in length, so a typo such as ``data.train_max_length=10000000`` fails at once, by name, instead
of in a multi-GB allocation."""


MAX_SAMPLES = 100_000
"""Most sequences per length that an evaluation may draw (``train.eval_samples``,
``eval.samples``, ``eval.probe_samples``): at 100,000 a 95% Wilson interval is already
narrower than +-0.4%, and a typo such as ``train.eval_samples=100000000`` would otherwise keep a
periodic evaluation (during which a stop signal waits) running for many minutes."""

MAX_BATCH_TOKENS = 2**18
"""Most tokens in one batch: ``train.batch_size`` times the longest training sequence, and
``eval.batch_tokens``. 2**18 = 262,144 is 64 rows (the default batch) of :data:`MAX_TOKENS`
tokens, 170 times the default ablation's training batch and 8 times the default evaluation
batch; a typo such as ``train.batch_size=10000000`` fails by name instead of in an allocation."""

MAX_STEPS = 10**7
"""Most optimizer steps (``train.steps``; also the largest ``eval_every``, ``checkpoint_every``
and ``log_every``): 2,500 times the default ablation's budget, days of CPU time."""

MAX_EVAL_LENGTHS = 256
"""Most lengths in ``eval.lengths``: the default grid has 10; each length is a full pass over
``eval.samples`` sequences plus the probes."""

MAX_LM_TOKENS = 2**24
"""Most held-out tokens a language-model evaluation scores per length (``eval.lm_tokens``):
16.8M tokens is more than the default corpus holds out, and minutes of CPU time per length."""

MAX_SEED = 2**32 - 1
"""Largest ``seed``: NumPy's legacy seeding and most tools take 32-bit seeds; larger ones make
``torch.manual_seed`` overflow (a traceback at the first step)."""


def sequence_tokens(task: Task, length: int) -> int:
    """Model input tokens (``S - 1``) of one ``task`` sequence at ``length`` content items.

    Every built-in task spends at least one token per content item, so a ``length`` above
    :data:`MAX_TOKENS` is reported without building the sequence.
    """
    if length > MAX_TOKENS:
        return length
    return int(task.sample(np.random.default_rng(0), length, 1).inputs.shape[1])


def check_finite(section: object, prefix: str) -> None:
    """Raise :class:`ConfigError` naming the first float field of ``section`` that is NaN or
    infinite (``prefix`` is the section's dotted name, e.g. ``"train."``)."""
    for f in fields(section):
        value = getattr(section, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{prefix}{f.name}={value} is invalid; it must be a finite number")


class ConfigError(ValueError):
    """A bad config file, key or value; the message is one line."""


def check_range(key: str, value: float, low: float, high: float) -> None:
    """Raise :class:`ConfigError` naming ``key`` unless ``low <= value <= high``, e.g.
    ``train.batch_size=10000000 is invalid; it must be >= 1 and <= 262144``."""
    if not low <= value <= high:
        raise ConfigError(f"{key}={value} is invalid; it must be >= {low} and <= {high}")


RENAMED_DATA_KEYS = {"n_symbols": "options.TASK.n_symbols"}
"""Keys of ``data.*`` that moved into a task's options (old name -> new name under data)."""


@dataclass
class DataConfig:
    """Which task to train on, with which options, and at which lengths.

    Attributes:
        task: a registered task (:func:`data.available_tasks` lists them).
        train_min_length: shortest training ``length`` (content items), inclusive; ``null``
            takes the task's default (its ``train_lengths``).
        train_max_length: longest training ``length``, inclusive; each batch draws one length
            uniformly from this range; ``null`` takes the task's default.
        options: per-task options, ``{task name: {option: value}}`` (``data.options.copy.
            n_symbols=10``); each section is checked against its task's ``Options`` dataclass and
            the active task's section is filled with every default, so a saved config holds every
            value the run used. Sections of other tasks may be given (a sweep's shared base).
    """

    task: str = "svo"
    train_min_length: int | None = None
    train_max_length: int | None = None
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def build_task(self) -> Task:
        """The task these settings describe (see :func:`data.build_task`)."""
        return build_task(self.task, self.options.get(self.task))

    def __post_init__(self) -> None:
        """Check the task, every options section and the lengths; nothing is filled in here
        (:meth:`resolved` does, once the whole config is merged)."""
        if self.task not in available_tasks():
            raise ConfigError(
                f"data.task={self.task!r} is not a known task; "
                f"choose one of {', '.join(available_tasks())}"
            )
        for name in {**dict(self.options), self.task: {}}:
            if name not in available_tasks():
                names = ", ".join(available_tasks())
                raise ConfigError(f"data.options.{name} names no task; choose among {names}")
            task_options(name, dict(self.options.get(name) or {}))
        task = self.build_task()
        low, high = self.train_range
        if not task.min_length <= low <= high:
            raise ConfigError(
                f"data.train_min_length={low} and data.train_max_length={high} are invalid; "
                f"need {task.min_length} <= train_min_length <= train_max_length for task "
                f"{self.task!r} with data.options.{self.task}="
                f"{options_dict(task.options) or '{}'}"
            )

    @property
    def train_range(self) -> tuple[int, int]:
        """``(train_min_length, train_max_length)``, a ``null`` one from the task's default."""
        low, high = task_class(self.task).train_lengths
        given = (self.train_min_length, self.train_max_length)
        return (low if given[0] is None else given[0], high if given[1] is None else given[1])

    def resolved(self) -> DataConfig:
        """These settings with every default written out: both lengths, and the active task's
        options section holding every option (what a saved run records)."""
        sections = {k: dict(v) for k, v in self.options.items()}
        sections[self.task] = options_dict(task_options(self.task, sections.get(self.task)))
        low, high = self.train_range
        return replace(self, train_min_length=low, train_max_length=high, options=sections)


def migrate_data_keys(data_values: dict[str, Any]) -> dict[str, Any]:
    """Saved ``data`` section of an older run (a copy) that means what it meant when saved:
    :data:`RENAMED_DATA_KEYS` moved into the active task's options (dropped for a task without
    that option, where it did nothing), and each option the task's ``Options.SAVED_BEFORE``
    names that the section lacks set to the value runs used before it existed (a run saved
    before ``parity`` had ``scratchpad`` trained on the one-bit answer). A run saved by this
    version holds every option of its task, so nothing is filled in for it."""
    values = dict(data_values)
    task = values.get("task", "svo")
    options = {k: dict(v) for k, v in (values.get("options") or {}).items()}
    for old, new in RENAMED_DATA_KEYS.items():
        if old not in values:
            continue
        value, key = values.pop(old), new.rsplit(".", 1)[1]
        if task in available_tasks() and key in options_dict(task_class(task).Options()):
            options.setdefault(task, {})[key] = value
    if task in available_tasks():
        for key, value in getattr(task_class(task).Options, "SAVED_BEFORE", {}).items():
            options.setdefault(task, {}).setdefault(key, value)
    if options:
        values["options"] = options
    return values


@dataclass
class TrainConfig:
    """Optimisation: AdamW with linear warmup then cosine decay, gradient clipping.

    Attributes:
        steps: optimizer steps (the budget).
        batch_size: sequences per step.
        lr: peak learning rate.
        min_lr: learning rate at the end of the cosine decay.
        warmup_steps: steps of linear warmup from 0 to ``lr``.
        weight_decay: AdamW decoupled weight decay on matrices (not on norms and biases).
        beta1, beta2: AdamW moment coefficients.
        grad_clip: clip the global gradient norm to this value (0 disables).
        target_accuracy: stop early once a periodic evaluation's exact-match reaches this
            value at EVERY training length (the minimum over them; ``null`` trains the whole
            budget). A run that ends at its budget below it is marked not learned.
        target_checks: consecutive periodic evaluations that must meet ``target_accuracy``
            before the run stops (1: the first one that does), so a run is not caught at the
            edge of learning by one lucky check.
        eval_every: steps between periodic evaluations (also at the end).
        extrapolation_every: steps between the periodic evaluations that also score 2x and
            4x the longest training length (curves to watch; early stopping never reads
            them); a multiple of ``eval_every``, and the last evaluation always scores them.
            0: every periodic evaluation.
        eval_samples: sequences per length in periodic evaluations.
        checkpoint_every: steps between checkpoints (also at the end and on Ctrl-C).
        log_every: steps between TensorBoard training scalars.
        progress: show a tqdm progress bar.
    """

    steps: int = 1500
    batch_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.98
    grad_clip: float = 1.0
    target_accuracy: float | None = None
    target_checks: int = 1
    eval_every: int = 250
    extrapolation_every: int = 0
    eval_samples: int = 128
    checkpoint_every: int = 500
    log_every: int = 10
    progress: bool = True

    def __post_init__(self) -> None:
        check_finite(self, "train.")
        for name in ("steps", "eval_every", "checkpoint_every", "log_every", "target_checks"):
            check_range(f"train.{name}", getattr(self, name), 1, MAX_STEPS)
        check_range("train.batch_size", self.batch_size, 1, MAX_BATCH_TOKENS)
        check_range("train.extrapolation_every", self.extrapolation_every, 0, MAX_STEPS)
        if self.extrapolation_every % self.eval_every:
            raise ConfigError(
                f"train.extrapolation_every={self.extrapolation_every} is invalid; it must be 0 "
                f"(every check) or a multiple of train.eval_every={self.eval_every}"
            )
        if not 1 <= self.eval_samples <= MAX_SAMPLES:
            raise ConfigError(
                f"train.eval_samples={self.eval_samples} is invalid; it must be in "
                f"[1, {MAX_SAMPLES}]"
            )
        if not 0 < self.min_lr <= self.lr:
            raise ConfigError(
                f"train.lr={self.lr} and train.min_lr={self.min_lr} are invalid; "
                "need 0 < min_lr <= lr"
            )
        if not 0 <= self.warmup_steps < self.steps:
            raise ConfigError(
                f"train.warmup_steps={self.warmup_steps} is invalid; it must be in "
                f"[0, train.steps={self.steps})"
            )
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ConfigError(
                f"train.target_accuracy={self.target_accuracy} is invalid; "
                "it must be in (0, 1] or null"
            )
        for name in ("grad_clip", "weight_decay"):
            if getattr(self, name) < 0:
                raise ConfigError(f"train.{name}={getattr(self, name)} is invalid; it must be >= 0")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError(
                    f"train.{name}={getattr(self, name)} is invalid; it must be in [0, 1)"
                )


DIAGNOSTICS = ("none", "basic", "full")
"""Values of ``eval.diagnostics``: none, the default set, and the default set with RoPE's
frequency use (:class:`EvalConfig`). Not ``off``: YAML 1.1 reads ``off`` as false."""


@dataclass
class EvalConfig:
    """Length-extrapolation and order-sensitivity evaluation (``eval.py``).

    Attributes:
        lengths: explicit length grid; ``null`` uses the default grid: 4 lengths spread over the
            training range and 1.1, 1.25, 1.5, 2, 3 and 4 times the longest training length (up
            to ``max_length_factor``). The multiples are always evaluated.
        max_length_factor: longest evaluated length over the longest training length.
        samples: sequences per length.
        batch_tokens: evaluation batch size in tokens (rows per batch = batch_tokens / length).
        probe_samples: prompts for the permutation probe, and minimal pairs per length.
        position_options: evaluation-time overrides of the run's position options, e.g.
            ``eval.position_options.theta=20000`` for RoPE; only options its scheme marks evaluable
            (:meth:`model.ModelConfig.at_evaluation` checks them per run).
        precision: dtype of the length grid's forward passes (exact-match, token accuracy):
            ``null`` (the default) follows the run's ``precision`` (so ``auto``, the default of
            both, is bf16 autocast on CUDA and float32 elsewhere), or ``auto``, ``fp32`` or
            ``bf16`` (:func:`lab.common.runtime.compute_dtype`). The permutation probe and the
            minimal pairs always run in float32. ``eval.json`` records the device and dtype used.
        lm_tokens: language-model tasks only (``text``): held-out tokens scored at every
            evaluation length (the same first tokens of the held-out split for every length,
            scheme and seed; see :mod:`lab.lm.perplexity`). 1..2**24.
        stride: language-model tasks only: ``null`` scores non-overlapping windows; an integer
            slides windows by ``stride`` tokens and scores only each window's last ``stride``
            (Press et al. 2022, "Train Short, Test Long", sliding-window evaluation). >= 1.
        diagnostics: why a run fails past its training length (docs/diagnostics.md):
            ``basic`` (the default) adds, at every length, the failure modes and oracle-length
            exact-match (from the same logits) and the attention statistics and solver
            alignment of the first ``diagnostic_samples`` sequences (one extra float32 pass);
            ``full`` adds RoPE's frequency use and p-RoPE at evaluation (RoPE runs only);
            ``none`` measures none of them. Synthetic tasks only: a language-model run
            measures none, so ``full`` or a given ``basic`` is refused for it
            (:func:`check_diagnostics`).
        diagnostic_samples: sequences per length for the attention statistics: the first
            ``diagnostic_samples`` of the ``samples`` sequences (the default reads at most
            ``samples``; a given value above ``samples``, with ``diagnostics=none`` or for a
            language-model run is refused: :func:`check_diagnostics`). 1..MAX_SAMPLES.
    """

    lengths: list[int] | None = None
    max_length_factor: float = 4.0
    samples: int = 256
    batch_tokens: int = 32768
    probe_samples: int = 256
    position_options: dict[str, Any] = field(default_factory=dict)
    precision: str | None = None
    lm_tokens: int = 65536
    stride: int | None = None
    diagnostics: str = "basic"
    diagnostic_samples: int = 32

    def __post_init__(self) -> None:
        check_finite(self, "eval.")
        if self.diagnostics not in DIAGNOSTICS:
            raise ConfigError(
                f"eval.diagnostics={self.diagnostics!r} is invalid; use one of "
                f"{', '.join(DIAGNOSTICS)}"
            )
        check_range("eval.lm_tokens", self.lm_tokens, 1, MAX_LM_TOKENS)
        if self.stride is not None:
            check_range("eval.stride", self.stride, 1, MAX_TOKENS)
        if self.precision is not None and self.precision not in PRECISIONS:
            raise ConfigError(
                f"eval.precision={self.precision!r} is invalid; use one of "
                f"{', '.join(PRECISIONS)}, or null (the run's precision)"
            )
        if self.max_length_factor < 1:  # its upper bound depends on the run: check_lengths
            raise ConfigError(
                f"eval.max_length_factor={self.max_length_factor} is invalid; it must be >= 1"
            )
        check_range("eval.batch_tokens", self.batch_tokens, 1, MAX_BATCH_TOKENS)
        for name in ("samples", "probe_samples", "diagnostic_samples"):
            if not 1 <= getattr(self, name) <= MAX_SAMPLES:
                value = getattr(self, name)
                raise ConfigError(
                    f"eval.{name}={value} is invalid; it must be in [1, {MAX_SAMPLES}]"
                )
        if self.lengths is not None and not all(
            isinstance(n, int) and not isinstance(n, bool) for n in self.lengths
        ):
            raise ConfigError(
                f"eval.lengths={self.lengths} is invalid; give a list of integers >= 1, "
                "e.g. [4, 8, 16]"
            )
        if self.lengths is not None and (not self.lengths or min(self.lengths) < 1):
            raise ConfigError(f"eval.lengths={self.lengths} is invalid; give lengths >= 1")
        if self.lengths is not None and len(self.lengths) > MAX_EVAL_LENGTHS:
            raise ConfigError(
                f"eval.lengths has {len(self.lengths)} lengths; the maximum is {MAX_EVAL_LENGTHS}"
            )
        if self.lengths is not None and max(self.lengths) > MAX_TOKENS:
            # every task spends at least one token per content item (see sequence_tokens)
            raise ConfigError(
                f"eval.lengths={self.lengths} is too long: eval.py needs length "
                f"{max(self.lengths)} (over {MAX_TOKENS} tokens for any task); the maximum is "
                f"{MAX_TOKENS} tokens per sequence"
            )


def check_lengths(data: DataConfig, evaluation: EvalConfig) -> None:
    """Check every length a run of ``data`` evaluated with ``evaluation`` uses against
    :data:`MAX_TOKENS`: the periodic evaluation at 4x ``data.train_max_length`` and
    ``eval.py``'s grid (``eval.lengths``, or ``eval.max_length_factor`` times the longest training
    length). A run's config checks it when built; ``eval.py`` with its overrides too, before any
    evaluation (:func:`lab.evaluation.evaluate.evaluation_lengths`).

    Raises:
        ConfigError: one line naming the setting, the length it needs and the maximum.
    """
    task = data.build_task()
    longest = data.train_range[1]
    asked = {  # key=value -> (the longest length it makes a run use, where)
        f"data.train_max_length={longest}": (4 * longest, "the periodic 4x evaluation"),
    }
    if evaluation.lengths is not None:
        asked[f"eval.lengths={evaluation.lengths}"] = (max(evaluation.lengths), "eval.py")
    elif task_class(data.task).language_model:  # its lengths stop at the last power of 2
        multiple = lm_multiple(evaluation.max_length_factor)
        where = f"eval.py (a language-model run's lengths are 1x, 2x, 4x ... up to {multiple}x)"
        factor = f"eval.max_length_factor={evaluation.max_length_factor}"
        asked[factor] = (multiple * longest, where)
    else:
        factor = f"eval.max_length_factor={evaluation.max_length_factor}"
        asked[factor] = (round(evaluation.max_length_factor * longest), "eval.py")
    for setting, (length, where) in asked.items():
        try:
            tokens = sequence_tokens(task, length)
        except ValueError as error:  # a length the task's options cannot make
            raise ConfigError(f"{setting}: {where} needs length {length}, but {error}") from None
        if tokens > MAX_TOKENS:
            size = f"{tokens} tokens" if length <= MAX_TOKENS else f"over {MAX_TOKENS} tokens"
            raise ConfigError(
                f"{setting} is too long: {where} needs length {length} ({size} for task "
                f"{data.task!r}); the maximum is {MAX_TOKENS} tokens per sequence"
            )


def lm_multiple(factor: float) -> int:
    """The longest multiple of the training length a language-model run evaluates at
    ``eval.max_length_factor=factor``: the largest power of 2 not above it (65 -> 64)."""
    multiple = 1
    while multiple * 2 <= factor:
        multiple *= 2
    return multiple


def check_task_training(data: DataConfig, train: TrainConfig) -> None:
    """Check the training settings a task forbids: a language-model task (``text``) has no
    exact-match to stop on, so ``train.target_accuracy`` must be null.

    Raises:
        ConfigError: one line naming the value and the task.
    """
    if task_class(data.task).language_model and train.target_accuracy is not None:
        raise ConfigError(
            f"train.target_accuracy={train.target_accuracy} is invalid for task {data.task!r}: "
            "a language-model task has no exact-match to stop on; set it to null"
        )


LM_ONLY = ("stride", "lm_tokens")
"""``eval.*`` keys that only a language-model run reads (:func:`check_diagnostics` refuses
them, set to another value than the default, for any other task)."""

EXACT_MATCH_ONLY = ("samples", "probe_samples")
"""``eval.*`` keys that a language-model run never reads (it scores the same held-out tokens,
``eval.lm_tokens``, at every length): :func:`check_diagnostics` refuses them, set to another
value than the default, for a language-model task."""


def check_diagnostics(
    data: DataConfig, evaluation: EvalConfig, given: Collection[str] = ()
) -> None:
    """Refuse diagnostics settings that would do nothing. ``given`` names the keys the user set
    (a YAML file or ``key=value`` overrides); the defaults pass even when given (``basic`` and
    ``diagnostic_samples=32`` do nothing for a language-model run, and a run's saved
    ``config.yaml``, given back as ``--config``, writes them out).

    Refused: ``eval.diagnostics=full`` for a language-model task, which measures no
    diagnostics; a given ``eval.diagnostic_samples`` other than the default for a
    language-model task, with ``eval.diagnostics=none``, or above ``eval.samples`` (the
    attention statistics read the first ``diagnostic_samples`` of the ``samples`` sequences);
    a given :data:`LM_ONLY` key other than its default for a task that is no language model,
    and a given :data:`EXACT_MATCH_ONLY` key other than its default for one that is.

    Raises:
        ConfigError: one line naming the value, why it does nothing and what to set instead.
    """
    mode, count, task = evaluation.diagnostics, evaluation.diagnostic_samples, data.task
    lm = task_class(task).language_model
    default = EvalConfig()
    for key in LM_ONLY if not lm else EXACT_MATCH_ONLY:
        value = getattr(evaluation, key)
        if f"eval.{key}" in given and value != getattr(default, key):
            what = (
                "sets how a language-model run (data.task=text) scores held-out text"
                if not lm
                else "sets how many sequences an exact-match task scores; a language-model "
                "run scores eval.lm_tokens held-out tokens at every length"
            )
            raise ConfigError(
                f"eval.{key}={value} has no effect on task {task!r}: it {what}; leave it out"
            )
    if lm and mode != default.diagnostics and mode != "none":
        raise ConfigError(
            f"eval.diagnostics={mode} has no effect on task {task!r}: a language-model run "
            "measures no diagnostics (its eval.json has the loss at every position instead); "
            "set eval.diagnostics=none or leave it out"
        )
    if "eval.diagnostic_samples" not in given or count == default.diagnostic_samples:
        return  # the default, as a run's saved config.yaml writes it out
    if lm or mode == "none":
        where = f"on task {task!r} (a language-model run)" if lm else "with eval.diagnostics=none"
        raise ConfigError(
            f"eval.diagnostic_samples={count} has no effect {where}: no attention statistics "
            "are measured; leave eval.diagnostic_samples out"
            + ("" if lm else " or set eval.diagnostics=basic or full")
        )
    if count > evaluation.samples:
        raise ConfigError(
            f"eval.diagnostic_samples={count} is more than eval.samples={evaluation.samples}: "
            "the attention statistics read the first diagnostic_samples of the eval.samples "
            f"sequences per length; give eval.diagnostic_samples <= {evaluation.samples}"
        )
