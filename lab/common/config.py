"""Typed run configuration: YAML files in ``configs/`` plus dotted ``key=value`` overrides.

Loading and merging is OmegaConf's (structured configs over dataclasses); each dataclass checks
its own values in ``__post_init__``. Every error becomes one :class:`ConfigError` line naming
the key or value and what is allowed. The sections and their limits live in
:mod:`lab.common.sections`; this module puts them together (:class:`Config`), reads and writes
configs, and applies overrides. Import every config name from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, is_dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import torch
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from data import Task, available_tasks, task_class
from lab.common.events.place import migrated_log_dir, normalized_log_dir
from lab.common.files import atomic_write
from lab.common.outputs import resolved
from lab.common.runtime import MAX_THREADS, check_precision, parse_device
from lab.common.sections import (
    EXACT_MATCH_ONLY,
    LM_ONLY,
    MAX_BATCH_TOKENS,
    MAX_EVAL_LENGTHS,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_STEPS,
    MAX_TOKENS,
    RENAMED_DATA_KEYS,
    ConfigError,
    DataConfig,
    EvalConfig,
    TrainConfig,
    check_diagnostics,
    check_finite,
    check_lengths,
    check_range,
    check_task_training,
    lm_multiple,
    migrate_data_keys,
    sequence_tokens,
)
from model import ModelConfig
from model.config import MAX_RANDOMIZED_POSITIONS, RENAMED_KEYS, migrate_keys
from model.position import build_position

__all__ = [
    "MAX_BATCH_TOKENS",
    "MAX_EVAL_LENGTHS",
    "MAX_SAMPLES",
    "MAX_SEED",
    "MAX_STEPS",
    "MAX_TOKENS",
    "RENAMED_DATA_KEYS",
    "RESUME_KEYS",
    "Config",
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "TrainConfig",
    "changed_keys",
    "check_diagnostics",
    "check_evaluable",
    "check_finite",
    "check_lengths",
    "check_overrides",
    "check_randomized_eval",
    "check_range",
    "config_from_dict",
    "config_to_dict",
    "declared_type",
    "flat_keys",
    "load_config",
    "lm_multiple",
    "load_yaml",
    "migrate_data_keys",
    "save_config",
    "sequence_tokens",
    "with_overrides",
]


@dataclass
class Config:
    """One run: model, data, training and evaluation settings, plus where and how to run.

    Attributes:
        seed: seeds parameters, data order and evaluation sets.
        device: ``auto`` (CUDA, then MPS, then CPU), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        threads: CPU threads for PyTorch; 1 by default, which degrades gracefully on a busy
            machine (README, "Threads"); 0 keeps PyTorch's default (one per core).
        precision: of the training steps: ``auto`` (bf16 autocast on CUDA, float32 elsewhere),
            ``fp32`` or ``bf16`` (see :func:`lab.common.runtime.autocast`). ``eval.py`` follows
            it unless ``eval.precision`` says otherwise; the periodic evaluation during training
            runs in ``auto`` (bf16 on CUDA, float32 elsewhere) whatever this setting.
        compile: wrap the model in ``torch.compile`` (lengths marked dynamic).
        run_dir: folder for the config, checkpoint, TensorBoard events and evaluation.
        log_dir: where the run's TensorBoard events go: ``""`` (in ``run_dir``) or ``sweep``
            (``PARENT-runs/TASK/NAME`` beside the folder holding ``run_dir=PARENT/NAME``, as a
            sweep sets it); :mod:`lab.common.events.place`. A fresh start or ``--overwrite``
            clears the event files there (``--resume`` keeps them).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = 0
    device: str = "auto"
    threads: int = 1
    precision: str = "auto"
    compile: bool = False
    run_dir: str = "runs/default"
    log_dir: str = ""

    def __post_init__(self) -> None:
        """Checks that span sections: every length against :data:`MAX_TOKENS` and the position
        scheme's table, finite model numbers, and the run-level fields."""
        check_finite(self.model, "model.")
        check_range("seed", self.seed, 0, MAX_SEED)
        check_range("threads", self.threads, 0, MAX_THREADS)
        try:
            parse_device(self.device)
            check_precision(self.precision)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if not self.run_dir.strip("'\" "):  # run_dir='' in double quotes reaches us as ''
            raise ConfigError(
                f"run_dir={self.run_dir!r} is empty; give a folder, e.g. run_dir=runs/mine"
            )
        self.data = self.data.resolved()  # here, not in DataConfig: its defaults stay null
        self.log_dir = normalized_log_dir(self.log_dir, self.run_dir, self.data.task)
        task = self.data.build_task()
        check_outside_inputs(self.run_dir, task)
        longest = self.data.train_max_length
        trained = sequence_tokens(task, longest)  # the longest training sequence, in tokens
        check_lengths(self.data, self.eval)
        check_task_training(self.data, self.train)
        if task.language_model and not self.model.causal:
            raise ConfigError(
                f"model.causal=false has no effect on task {self.data.task!r}: a language model "
                "predicts every token from the ones before it (no prompt to see whole), so its "
                "mask is causal either way; leave model.causal out"
            )
        self.model = self.model.with_training_context(trained)
        if self.train.batch_size * trained > MAX_BATCH_TOKENS:
            raise ConfigError(
                f"train.batch_size={self.train.batch_size} is too large: {self.train.batch_size} "
                f"rows of {trained} tokens (data.train_max_length={longest}) exceed "
                f"{MAX_BATCH_TOKENS} tokens per batch; give train.batch_size <= "
                f"{MAX_BATCH_TOKENS // trained}"
            )
        randomized = self.model.randomized_positions
        if randomized and randomized < trained:
            raise ConfigError(
                f"model.randomized_positions={randomized} is too small: the longest training "
                f"sequence ({trained} tokens at data.train_max_length={longest}) needs as many "
                f"distinct positions; give 0 (off) or a value in [{trained}, "
                f"{MAX_RANDOMIZED_POSITIONS}]"
            )
        with torch.device("meta"):  # the scheme's limit, without allocating its table
            limit = build_position(self.model).max_length()
        tokens = trained
        if limit is not None and tokens > limit:
            key = f"model.options.{self.model.position}.max_positions"
            raise ConfigError(
                f"{key}={limit} is shorter than the longest training sequence "
                f"({tokens} tokens at data.train_max_length={longest}); set {key} >= {tokens}"
            )
        check_randomized_eval(self, limit)


def check_outside_inputs(run_dir: str, task: Task, flag: str = "run_dir") -> None:
    """Refuse a ``run_dir`` (or another folder a command writes, named ``flag``: ``--out``)
    inside a folder the task reads (:meth:`data.Task.inputs`, e.g. a corpus folder): the run's
    checkpoint, reports and events would become the task's data, and the corpus's digest would
    change under the run.

    Raises:
        ConfigError: ``run_dir`` lies in such a folder (one line naming both).
    """
    run = resolved(run_dir)
    for key, value in task.inputs().items():
        folder = resolved(value)  # None: a symlink loop, refused where the task reads it
        inside = run is not None and folder is not None and run.is_relative_to(folder)
        if inside and folder.is_dir():
            raise ConfigError(
                f"{flag}={str(run_dir)!r} lies inside {key}={value!r}, which the task reads: "
                f"the run's own files would become its data; put the {flag} folder outside it"
            )


def check_randomized_eval(config: Config, limit: int | None) -> None:
    """With ``model.randomized_eval``, every evaluated sequence draws its positions from
    ``[0, model.randomized_positions)``, so that range must hold the longest sequence the run
    evaluates within the scheme's ``limit``: the periodic evaluation's 4x (every resume runs
    it) and ``eval.py``'s longest length (``eval.lengths`` or ``eval.max_length_factor``).

    Raises:
        ConfigError: one line naming both values and the length needed.
    """
    model, data, evaluation = config.model, config.data, config.eval
    if not model.randomized_eval:
        return
    task, longest = data.build_task(), data.train_max_length
    asked = {f"the periodic evaluation at 4x data.train_max_length={longest}": 4 * longest}
    if evaluation.lengths is not None:
        asked[f"eval.lengths={evaluation.lengths}"] = max(evaluation.lengths)
    else:
        factor = f"eval.max_length_factor={evaluation.max_length_factor}"
        asked[factor] = round(evaluation.max_length_factor * longest)
    needs = {where: sequence_tokens(task, length) for where, length in asked.items()}
    needs = {k: v for k, v in needs.items() if limit is None or v <= limit}  # others are skipped
    where, tokens = max(needs.items(), key=lambda item: item[1], default=("", 0))
    if model.randomized_positions < tokens:
        raise ConfigError(
            f"model.randomized_eval=true with model.randomized_positions="
            f"{model.randomized_positions} is too few positions: {where} evaluates sequences of "
            f"{tokens} tokens, each needing as many distinct positions; give "
            f"model.randomized_positions >= {tokens} (at most {MAX_RANDOMIZED_POSITIONS}) or "
            "model.randomized_eval=false"
        )


def load_config(
    path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> Config:
    """Build a :class:`Config` from defaults, an optional YAML file and ``key=value`` overrides.

    ``model.vocab_size`` is taken from the task's vocabulary; setting it to anything else is an
    error.

    Raises:
        ConfigError: missing file, unknown key, bad value or bad override syntax (one line).
    """
    sources = [load_yaml(path)] if path is not None else []
    sources.append(_parse_overrides(overrides))
    config = _merged(Config, sources)
    vocab_size = config.data.build_task().vocab_size
    given = [OmegaConf.select(s, "model.vocab_size") for s in sources]
    if any(v is not None and v != vocab_size for v in given):
        raise ConfigError(
            f"model.vocab_size is set by the task ({config.data.task!r} has {vocab_size} tokens); "
            "remove model.vocab_size from the config"
        )
    config.model = replace(config.model, vocab_size=vocab_size)
    check_given_position(config, sources)
    keys = ("eval.diagnostics", "eval.diagnostic_samples")
    keys += tuple(f"eval.{k}" for k in (*LM_ONLY, *EXACT_MATCH_ONLY))
    set_here = {k for k in keys if any(OmegaConf.select(s, k) is not None for s in sources)}
    check_diagnostics(config.data, config.eval, set_here)  # settings that would do nothing
    return config


def check_given_position(config: Config, sources: list) -> None:
    """Refuse a ``model.position`` that the sources set but the layout does not run.

    A layout (``model.layout`` or ``model.heads``) sets every layer's scheme; a
    ``model.position`` left at its default then names the layout's first scheme
    (:func:`model.layout.layout_position`). Spelled out (``model.position=rope`` with
    ``model.layout=alibi,alibi``) it is a contradiction, not a default, and the run would be
    labelled with a scheme it does not have.

    Raises:
        ConfigError: the given position is not among the layout's schemes (one line).
    """
    given = [OmegaConf.select(s, "model.position") for s in sources]
    given = [value for value in given if value is not None]
    if not given or given[-1] == config.model.position:
        return
    layout = {}  # as given: a plain layout (alibi,alibi) is cleared from the built config
    for key in ("model.layout", "model.heads"):
        values = [v for v in (OmegaConf.select(s, key) for s in sources) if v is not None]
        if values:
            layout[key] = values[-1]
    named = ", ".join(f"{key}={value!r}" for key, value in layout.items())
    raise ConfigError(
        f"model.position={given[-1]!r} is not run by {named}, which sets every layer's scheme "
        f"(here {config.model.position!r}); give model.position one of the layout's schemes or "
        "leave it out"
    )


RESUME_KEYS = (
    "device",
    "threads",
    "compile",
    "train.progress",
    "train.steps",
    "train.log_every",
    "train.checkpoint_every",
    "train.extrapolation_every",
)
"""Keys that ``--resume`` may change: where and how the run executes, how often it logs,
saves and scores 2x and 4x (none changes a weight or a stop step), and the step budget (a
longer budget extends a run; see :func:`lab.training.trainer.train`)."""


def with_overrides(config: Config, overrides: list[str] | tuple[str, ...]) -> Config:
    """``config`` with ``key=value`` overrides applied (parsed as :func:`load_config` does).

    Raises:
        ConfigError: bad override syntax, unknown key or bad value (one line).
    """
    return _merged(config, [_parse_overrides(overrides)])


def _merged(base: Config | type[Config], sources: list) -> Config:
    """``base`` (the class: every default) with ``sources`` merged on top, validated; an
    OmegaConf or a section's ValueError becomes one :class:`ConfigError` line."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(base), *sources)
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        if not getattr(error, "full_key", None) and str(error).startswith("Merge error"):
            raise ConfigError(_container_problem(base, sources)) from None  # eval=[1]
        raise ConfigError(_one_line(error)) from None
    except TypeError as error:  # a mapping given where a list belongs, or the other way
        if "incompatible container" not in str(error):
            raise
        raise ConfigError(_container_problem(base, sources)) from None
    except ValueError as error:
        raise ConfigError(str(error)) from None
    assert isinstance(config, Config)
    return config


def _container_problem(base: Config | type[Config], sources: list) -> str:
    """The one line for a mapping given where a list belongs or the other way round: the
    first key of ``sources`` that cannot merge onto ``base`` alone, named at the level where
    the kinds differ."""
    structured = OmegaConf.structured(base)
    for source in sources:
        tree = OmegaConf.to_container(OmegaConf.create(source))
        for key, value in _leaves(tree).items():
            try:
                OmegaConf.merge(structured, _nested(key, value))
            except TypeError:
                return _kind_line(structured, key, tree)
            except OmegaConfBaseException as error:
                if str(error).startswith("Merge error"):  # a list given for a section
                    return _kind_line(structured, key, tree)
                continue  # another problem: the whole merge names it
    return "a mapping was given where a list belongs, or the other way round"


def _kind_line(structured: DictConfig, key: str, tree: dict) -> str:
    """``'eval.lengths={'a': 1} is a mapping, but eval.lengths is a list; give a list'``: the
    shortest prefix of ``key`` whose given value and default differ in kind."""
    parts = key.split(".")
    for i in range(1, len(parts) + 1):
        prefix, given = ".".join(parts[:i]), tree
        for part in parts[:i]:
            given = given.get(part) if isinstance(given, dict) else None
        wanted = _node(structured, parts[:i])
        if isinstance(wanted, ListConfig) and isinstance(given, dict):
            return f"{prefix}={given!r} is a mapping, but {prefix} is a list; give a list"
        if isinstance(wanted, DictConfig) and isinstance(given, list):
            return f"{prefix}={given!r} is a list, but {prefix} is a mapping; give a mapping"
        if isinstance(wanted, DictConfig) and i == len(parts) and not isinstance(given, dict):
            return (
                f"{prefix}={given!r} is a single value, but {prefix} is a mapping of settings; "
                f"give {prefix}.KEY=VALUE"
            )
    return f"{key}: a mapping was given where a list belongs, or the other way round"


def _node(config: DictConfig, parts: list[str]) -> Any:
    """The node of ``config`` at the path ``parts`` (a typed list or mapping node even when its
    value is null), or None where the path leaves the config."""
    node: Any = config
    for part in parts:
        if not isinstance(node, DictConfig) or part not in node:
            return None
        node = node._get_node(part)
    return node


def _leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b": value}`` for every container or value one level below a mapping's keys, down
    to the first non-mapping (a list is a leaf: it replaces, it does not merge)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {prefix: tree} if prefix and not tree else {}
    for key, value in tree.items():
        out |= _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def _nested(key: str, value: Any) -> DictConfig:
    """``a.b.c`` and a value as the config ``{a: {b: {c: value}}}``."""
    for part in reversed(key.split(".")):
        value = {part: value}
    return OmegaConf.create(value)


def check_evaluable(config: Config, where: str = "") -> None:
    """Check ``config.eval.position_options`` against the run's position scheme: only options
    the scheme marks evaluable, each with a valid value (:meth:`model.ModelConfig.at_evaluation`).
    ``train.py`` checks it before training, a sweep before any run and ``eval.py`` before any
    evaluation, so no run is saved with evaluation settings that its evaluation refuses; a
    ``randomized_eval=true`` given there needs as many positions as :func:`check_randomized_eval`.

    Raises:
        ConfigError: one line naming the option and the scheme's evaluable ones (after
            ``where: `` when ``where`` is given).
    """
    try:
        evaluated = config.model.at_evaluation(config.eval.position_options)
        if evaluated.randomized_eval and not config.model.randomized_eval:
            replace(config, model=evaluated)  # its checks: enough positions to evaluate on
    except ValueError as error:
        raise ConfigError(f"{where}: {error}" if where else str(error)) from None


def check_overrides(overrides: list[str] | tuple[str, ...]) -> None:
    """Check the keys and value types of ``key=value`` overrides, without the checks that need
    a whole config (a task's lengths, a scheme's table): for overrides that will be applied to
    saved runs, whose tasks are not known yet.

    Raises:
        ConfigError: bad override syntax, unknown key or a value of the wrong type (one line).
    """
    try:
        OmegaConf.merge(OmegaConf.structured(Config), _parse_overrides(overrides))
    except OmegaConfBaseException as error:
        raise ConfigError(_one_line(error)) from None


def changed_keys(before: Config, after: Config) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> ``(before, after)`` for every leaf value that differs; a key only one side
    has (e.g. another scheme's options, kept by one config only) has None on the other."""
    old, new = _flatten(config_to_dict(before)), _flatten(config_to_dict(after))
    keys = [*old, *(k for k in new if k not in old)]
    return {k: (old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)}


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_from_dict(values: dict[str, Any]) -> Config:
    """Rebuild a saved :class:`Config` (from a checkpoint or ``config.yaml``).

    Raises:
        ConfigError: the values do not fit this version's config, or a saved
            ``model.vocab_size`` is not the vocabulary of the saved task (one line).
    """
    try:
        if isinstance(values.get("model"), dict):  # runs saved before model.options existed
            values = {**values, "model": migrate_keys(values["model"])}
        if isinstance(values.get("data"), dict):  # runs saved before data.options existed
            values = {**values, "data": migrate_data_keys(values["data"])}
        if values.get("log_dir"):  # an earlier version's path (lab.common.events.place)
            task = (values.get("data") or {}).get("task") or DataConfig.task
            run_dir = str(values.get("run_dir") or "")
            values = {**values, "log_dir": migrated_log_dir(values["log_dir"], run_dir, task)}
        merged = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.create(values))
        config = OmegaConf.to_object(merged)
    except (OmegaConfBaseException, ValueError) as error:
        raise ConfigError(f"saved config is incompatible: {_one_line(error)}") from None
    assert isinstance(config, Config)
    saved = values.get("model", {}).get("vocab_size") if isinstance(values, dict) else None
    vocab = config.data.build_task().vocab_size
    if saved is not None and saved != vocab:  # its weights would be run on another task's tokens
        raise ConfigError(
            f"saved config is inconsistent: model.vocab_size={saved}, but its task "
            f"{config.data.task!r} has {vocab} tokens (a config naming another task than the "
            "one the run was trained on?)"
        )
    return config


def config_to_dict(config: Config) -> dict[str, Any]:
    """Plain nested dict of a :class:`Config` (for checkpoints, JSON and YAML)."""
    values = OmegaConf.to_container(OmegaConf.structured(config))
    assert isinstance(values, dict)
    return values


def save_config(config: Config, path: str | Path) -> None:
    """Write ``config`` as YAML to ``path`` (atomically; a symlink there is replaced)."""
    atomic_write(path, OmegaConf.to_yaml(OmegaConf.structured(config)))


def flat_keys() -> list[str]:
    """Dotted names of every config key, e.g. ``model.position``."""
    return list(_field_types())


def declared_type(key: str) -> Any:
    """The declared type of the dotted config key ``key`` (``seed`` -> ``int``; a task option
    ``data.options.TASK.KEY`` too); None for a key of no declared type (a scheme's option) or
    an unknown one."""
    return _field_types().get(key) or _task_option_type(key)


def load_yaml(path: str | Path) -> DictConfig:
    """Read a YAML file holding a mapping (a run config or a sweep file).

    Raises:
        ConfigError: a missing file, a YAML syntax error or a top level that is not a mapping
            (one line naming the file).
    """
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
    """``key=value`` items as a config; later items win.

    A value is read as YAML (``3`` an int, ``null`` None, ``[1,2]`` a list), except for a key
    typed ``str`` or ``str | None`` (a config field or a task option), which keeps the literal
    text (``null`` alone meaning None for the latter): ``run_dir=007`` is the folder ``007``,
    not 7, ``data.options.modular_arithmetic.operations=*`` the text ``*``, not a YAML alias,
    and ``data.options.text.path=`` (an unset shell variable) the empty text, which the option
    refuses, not null (its default).
    """
    typed, literal = [], []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not key=value, e.g. model.position=rope")
        kind = _field_types().get(key) or _task_option_type(key)
        if kind == str | None and value == "null":
            typed.append((key, value, item))
        elif kind is str or kind == str | None:
            literal.append((key, value, item))
        else:
            typed.append((key, value, item))
    try:
        parsed = OmegaConf.from_dotlist([item for _, _, item in typed])
        for key, value, _ in literal:  # in the given order: the last one wins
            OmegaConf.update(parsed, key, value, force_add=True)
    except OmegaConfBaseException as error:
        raise ConfigError(_one_line(error)) from None
    except yaml.YAMLError as error:  # a value YAML cannot read, e.g. an unquoted *
        problem = str(error).splitlines()[0]
        raise ConfigError(
            f"cannot read the overrides {' '.join(item for _, _, item in typed)!r} as YAML "
            f"({problem}); quote the value, e.g. 'key=\"*\"'"
        ) from None
    return parsed


def _task_option_type(key: str) -> Any:
    """Declared type of the task option ``data.options.TASK.KEY`` (None for any other key)."""
    parts = key.split(".")
    if len(parts) != 4 or parts[:2] != ["data", "options"] or parts[2] not in available_tasks():
        return None
    options = task_class(parts[2]).Options
    hints = get_type_hints(options)
    return hints[parts[3]] if parts[3] in {f.name for f in fields(options)} else None


@cache
def _field_types(cls: type = Config, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> declared type of every leaf field, in field order, e.g.
    ``{"model.vocab_size": int, ..., "run_dir": str}``."""
    types = {}
    hints = get_type_hints(cls)
    for name, kind in ((f.name, hints[f.name]) for f in fields(cls)):
        if is_dataclass(kind):
            types.update(_field_types(kind, f"{prefix}{name}."))
        else:
            types[f"{prefix}{name}"] = kind
    return types


def _one_line(error: Exception) -> str:
    """First line of an OmegaConf error, with the allowed keys when a key is unknown."""
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    full_key = getattr(error, "full_key", None)
    renamed = full_key and RENAMED_KEYS.get(full_key.removeprefix("model."))
    if type(error).__name__ == "ConfigKeyError" and renamed:
        return f"config key {full_key!r} was renamed; use model.{renamed} instead"
    renamed_data = full_key and RENAMED_DATA_KEYS.get(full_key.removeprefix("data."))
    if type(error).__name__ == "ConfigKeyError" and renamed_data:
        example = renamed_data.replace("TASK", "copy")
        return (
            f"config key {full_key!r} was renamed; use data.{renamed_data} instead, "
            f"e.g. data.{example}"
        )
    if type(error).__name__ == "ConfigKeyError" and full_key:
        section = full_key.rsplit(".", 1)[0] + "." if "." in full_key else ""
        if section:
            allowed = [k for k in flat_keys() if k.startswith(section)]
        else:
            allowed = [f.name for f in fields(Config)]
        leaf = full_key.rsplit(".", 1)[-1]
        near = [k for k in flat_keys() if k.rsplit(".", 1)[-1] == leaf and k != full_key]
        near += [
            f"data.options.{t}.{leaf}"
            for t in available_tasks()
            if _task_option_type(f"data.options.{t}.{leaf}") is not None
        ]
        hint = f" (did you mean {' or '.join(near)}?)" if near else ""
        return f"unknown config key {full_key!r}{hint}; allowed keys: {', '.join(allowed)}"
    if full_key:
        expected = _expected_type(full_key)
        if expected:
            return f"{full_key}: {message.rstrip('.')}; expected {expected}"
        return f"{full_key}: {message}"
    return message


def _expected_type(full_key: str) -> str | None:
    """``eval.lengths`` -> ``"a list of integers, e.g. [4, 8, 16], or null"``: what a config
    field accepts, in words, for error messages; None for an unknown key."""
    kind: Any = Config
    for part in re.sub(r"\[\d+\]", "", full_key).split("."):
        hints = get_type_hints(kind) if is_dataclass(kind) else {}
        if part not in hints:
            return None
        kind = hints[part]
    if re.search(r"\[\d+\]$", full_key):  # one item of a list
        kind = next(a for a in get_args(kind) if get_origin(a) is list)
        kind = get_args(kind)[0]
    return _describe(kind)


def _describe(kind: Any) -> str:
    """A type in words: ``int`` -> ``an integer``, ``list[int] | None`` -> ``a list of ...``."""
    args = [a for a in get_args(kind) if a is not type(None)]
    if get_origin(kind) is list:
        return f"a list of {_describe(args[0]).split(' ', 1)[1]}s, e.g. [4, 8, 16]"
    if args and len(args) < len(get_args(kind)):  # X | None
        return f"{_describe(args[0])}, or null"
    words = {int: "an integer", float: "a number", bool: "a boolean (true or false)", str: "a text"}
    return words.get(kind, f"a {getattr(kind, '__name__', kind)}")
