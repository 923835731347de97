"""Typed run configuration: YAML files in ``configs/`` plus dotted ``key=value`` overrides.

Loading and merging is OmegaConf's (structured configs over dataclasses); each dataclass checks
its own values in ``__post_init__``. Every error becomes one :class:`ConfigError` line naming
the key or value and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, get_type_hints

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from data import Task, available_tasks, build_task
from lab.files import atomic_write
from model import ModelConfig
from model.config import RENAMED_KEYS, migrate_keys


class ConfigError(ValueError):
    """A bad config file, key or value; the message is one line."""


@dataclass
class DataConfig:
    """Which task to train on, and at which lengths.

    Attributes:
        task: a registered task (``svo | copy | reverse | sort``).
        train_min_length: shortest training ``length`` (content items), inclusive.
        train_max_length: longest training ``length``, inclusive; each batch draws one length
            uniformly from this range.
        n_symbols: alphabet size of ``copy``, ``reverse`` and ``sort``.
        svo_facts: facts per ``svo`` prompt (1 is the default; more is harder).
    """

    task: str = "svo"
    train_min_length: int = 3
    train_max_length: int = 12
    n_symbols: int = 16
    svo_facts: int = 1

    def build_task(self) -> Task:
        """The task these settings describe (see :func:`data.build_task`)."""
        return build_task(self.task, self.n_symbols, self.svo_facts)

    def __post_init__(self) -> None:
        if self.task not in available_tasks():
            raise ConfigError(
                f"data.task={self.task!r} is not a known task; "
                f"choose one of {', '.join(available_tasks())}"
            )
        task = self.build_task()
        if not task.min_length <= self.train_min_length <= self.train_max_length:
            raise ConfigError(
                f"data.train_min_length={self.train_min_length} and "
                f"data.train_max_length={self.train_max_length} are invalid; need "
                f"{task.min_length} <= train_min_length <= train_max_length for task {self.task!r}"
            )


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
        target_accuracy: stop early once the in-distribution exact-match of a periodic
            evaluation reaches this value (``null`` trains the whole budget).
        eval_every: steps between periodic evaluations (also at the end).
        eval_samples: sequences per length in periodic evaluations.
        checkpoint_every: steps between checkpoints (also at the end and on Ctrl-C).
        log_every: steps between TensorBoard training scalars.
        progress: show a tqdm progress bar.
    """

    steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 100
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.98
    grad_clip: float = 1.0
    target_accuracy: float | None = None
    eval_every: int = 250
    eval_samples: int = 128
    checkpoint_every: int = 500
    log_every: int = 10
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_every", "checkpoint_every", "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"train.{name}={getattr(self, name)} is invalid; it must be >= 1")
        if self.eval_samples < 1:
            raise ConfigError(f"train.eval_samples={self.eval_samples} is invalid; it must be >= 1")
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


@dataclass
class EvalConfig:
    """Length-extrapolation and order-sensitivity evaluation (``eval.py``).

    Attributes:
        lengths: explicit length grid; ``null`` uses the default grid: 4 lengths spread over the
            training range and 8 evenly spaced lengths up to ``max_length_factor`` times the
            longest training length.
        max_length_factor: longest evaluated length over the longest training length.
        samples: sequences per length.
        batch_tokens: evaluation batch size in tokens (rows per batch = batch_tokens / length).
        probe_samples: prompts for the permutation probe and ``svo`` minimal pairs.
        threshold: exact-match level that defines the extrapolation ratio.
        position_options: evaluation-time overrides of the run's position options, e.g.
            ``eval.position_options.theta=20000`` for RoPE; only options its scheme marks evaluable
            (:meth:`model.ModelConfig.at_evaluation` checks them per run).
    """

    lengths: list[int] | None = None
    max_length_factor: float = 4.0
    samples: int = 256
    batch_tokens: int = 32768
    probe_samples: int = 256
    threshold: float = 0.9
    position_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_length_factor < 1:
            raise ConfigError(
                f"eval.max_length_factor={self.max_length_factor} is invalid; it must be >= 1"
            )
        for name in ("samples", "batch_tokens", "probe_samples"):
            if getattr(self, name) < 1:
                raise ConfigError(f"eval.{name}={getattr(self, name)} is invalid; it must be >= 1")
        if not 0 < self.threshold <= 1:
            raise ConfigError(f"eval.threshold={self.threshold} is invalid; it must be in (0, 1]")
        if self.lengths is not None and (not self.lengths or min(self.lengths) < 1):
            raise ConfigError(f"eval.lengths={self.lengths} is invalid; give lengths >= 1")


@dataclass
class Config:
    """One run: model, data, training and evaluation settings, plus where and how to run.

    Attributes:
        seed: seeds parameters, data order and evaluation sets.
        device: ``auto`` (CUDA, then MPS, then CPU), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        threads: CPU threads for PyTorch (0 keeps PyTorch's default).
        compile: wrap the model in ``torch.compile`` (lengths marked dynamic).
        run_dir: folder for the config, checkpoint, TensorBoard events and evaluation.
    """

    model: ModelConfig = field(
        default_factory=lambda: ModelConfig(d_model=64, n_layers=3, n_heads=4, d_ff=256)
    )
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = 0
    device: str = "auto"
    threads: int = 0
    compile: bool = False
    run_dir: str = "runs/default"


def load_config(
    path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> Config:
    """Build a :class:`Config` from defaults, an optional YAML file and ``key=value`` overrides.

    ``model.vocab_size`` is taken from the task's vocabulary; setting it to anything else is an
    error.

    Raises:
        ConfigError: missing file, unknown key, bad value or bad override syntax (one line).
    """
    sources = [_load_file(path)] if path is not None else []
    sources.append(_parse_overrides(overrides))
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), *sources)
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        raise ConfigError(_one_line(error)) from None
    except ValueError as error:
        raise ConfigError(str(error)) from None
    assert isinstance(config, Config)
    vocab_size = config.data.build_task().vocab_size
    given = [OmegaConf.select(s, "model.vocab_size") for s in sources]
    if any(v is not None and v != vocab_size for v in given):
        raise ConfigError(
            f"model.vocab_size is set by the task ({config.data.task!r} has {vocab_size} tokens); "
            "remove model.vocab_size from the config"
        )
    config.model = replace(config.model, vocab_size=vocab_size)
    return config


def config_from_dict(values: dict[str, Any]) -> Config:
    """Rebuild a saved :class:`Config` (from a checkpoint or ``config.yaml``).

    Raises:
        ConfigError: the values do not fit this version's config (one line).
    """
    try:
        if isinstance(values.get("model"), dict):  # runs saved before model.options existed
            values = {**values, "model": migrate_keys(values["model"])}
        merged = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.create(values))
        config = OmegaConf.to_object(merged)
    except (OmegaConfBaseException, ValueError) as error:
        raise ConfigError(f"saved config is incompatible: {_one_line(error)}") from None
    assert isinstance(config, Config)
    return config


def config_to_dict(config: Config) -> dict[str, Any]:
    """Plain nested dict of a :class:`Config` (for checkpoints, JSON and YAML)."""
    values = OmegaConf.to_container(OmegaConf.structured(config))
    assert isinstance(values, dict)
    return values


def save_config(config: Config, path: str | Path) -> None:
    """Write ``config`` as YAML to ``path`` (atomically; a symlink there is replaced)."""
    atomic_write(path, OmegaConf.to_yaml(OmegaConf.structured(config)))


def flat_keys(cls: type = Config, prefix: str = "") -> list[str]:
    """Dotted names of every config key, e.g. ``model.position``."""
    keys = []
    types = get_type_hints(cls)
    for f in fields(cls):
        kind = types[f.name]
        keys += (
            flat_keys(kind, f"{prefix}{f.name}.") if is_dataclass(kind) else [f"{prefix}{f.name}"]
        )
    return keys


def _load_file(path: str | Path) -> DictConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist; see the files in configs/")
    try:
        loaded = OmegaConf.load(path)
    except Exception as error:  # YAML syntax errors come from several libraries
        raise ConfigError(
            f"config file {str(path)!r} is not valid YAML: {_one_line(error)}"
        ) from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of sections")
    return loaded


def _parse_overrides(overrides: list[str] | tuple[str, ...]) -> DictConfig:
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override {item!r} is not key=value, e.g. model.position=rope")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as error:
        raise ConfigError(_one_line(error)) from None


def _one_line(error: Exception) -> str:
    """First line of an OmegaConf error, with the allowed keys when a key is unknown."""
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    full_key = getattr(error, "full_key", None)
    renamed = full_key and RENAMED_KEYS.get(full_key.removeprefix("model."))
    if type(error).__name__ == "ConfigKeyError" and renamed:
        return f"config key {full_key!r} was renamed; use model.{renamed} instead"
    if type(error).__name__ == "ConfigKeyError" and full_key:
        section = full_key.rsplit(".", 1)[0] + "." if "." in full_key else ""
        if section:
            allowed = [k for k in flat_keys() if k.startswith(section)]
        else:
            allowed = [f.name for f in fields(Config)]
        leaf = full_key.rsplit(".", 1)[-1]
        near = [k for k in flat_keys() if k.rsplit(".", 1)[-1] == leaf and k != full_key]
        hint = f" (did you mean {' or '.join(near)}?)" if near else ""
        return f"unknown config key {full_key!r}{hint}; allowed keys: {', '.join(allowed)}"
    if full_key:
        return f"{full_key}: {message}"
    return message
