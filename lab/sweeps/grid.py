"""The checks of a sweep file's ``grid`` and ``when`` sections, and the grid value ``all``.

A grid is a mapping of dotted key -> one value or a list of values (text, numbers, true/false
or null), each axis with at least one value; the value :data:`ALL` of ``data.task`` or
``model.position`` stands for every registered task or scheme (:data:`EVERY`). A ``when`` block
is keyed ``KEY=VALUE`` on a grid key and one of its values. Anything else is one
:class:`lab.common.config.ConfigError` line naming the key and what is allowed, before any run
starts: a nested value once crashed the sweep with a traceback, an empty axis swept nothing
with exit status 0, and a ``when`` key with a typo was silently never applied.
"""

from __future__ import annotations

from typing import Any

from data import available_tasks, task_class
from lab.common.config import ConfigError, declared_type
from model.position import available_schemes

ALIASES = {"position": "model.position", "task": "data.task"}
"""Command-line and sweep-file short names of grid keys."""

ALL = "all"
"""The grid value that stands for every registered name of a key of :data:`EVERY`."""


def exact_match_tasks() -> tuple[str, ...]:
    """The registered tasks scored by exact-match, sorted: every task but the language-model
    ones (``text``: perplexity, no early stopping; ``configs/lm.yaml`` sweeps it)."""
    return tuple(name for name in available_tasks() if not task_class(name).language_model)


EVERY = {"data.task": exact_match_tasks, "model.position": available_schemes}
"""Grid keys whose value :data:`ALL` expands, each to its registry's names (tasks sorted, the
exact-match ones only; schemes in registration order), so a sweep of every task or scheme
never lists them by hand."""

KINDS = {"data.task": "task", "model.position": "scheme"}
"""What the names of a key of :data:`EVERY` are, in error messages."""

SCALARS = (str, int, float, bool, type(None))
"""The types of one grid value (a YAML scalar)."""


def read_grid(raw: Any, where: str) -> dict[str, list[Any]]:
    """The ``grid`` section ``raw`` of a sweep file as dotted key -> list of values (short keys
    of :data:`ALIASES` spelled out; one value is a list of one).

    Args:
        raw: the section as YAML gives it (None: no grid).
        where: the sweep file, for messages.

    Raises:
        ConfigError: ``raw`` not a mapping, a key that is not text, a value that is a mapping
            or a list holding a list or mapping, or an empty list (one line naming the key).
    """
    if raw is None:
        return {}
    allowed = (
        "a value or a list of values (text, numbers, true/false, null), "
        "e.g. grid: {model.position: [rope, alibi], seed: [0, 1]}"
    )
    if not isinstance(raw, dict):
        raise ConfigError(
            f"sweep file {where!r}: grid must be a mapping of dotted key -> {allowed}; got {raw!r}"
        )
    grid = {}
    for key, value in raw.items():
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if not isinstance(key, str) or not all(isinstance(v, SCALARS) for v in values):
            raise ConfigError(
                f"sweep file {where!r}: grid key {key!r} has the value {value!r}; give {allowed}"
            )
        if not values:
            raise ConfigError(
                f"sweep file {where!r}: grid key {key!r} has no values; give at least one, "
                "or remove the key"
            )
        grid[ALIASES.get(key, key)] = values
    return grid


SPACELESS = ("model.layout", "model.heads")
"""Keys whose text means the same with spaces or without (the model drops them, so a run's
name and label do too)."""


def spaceless(condition: str) -> str:
    """A ``when`` condition ``KEY=VALUE`` with the spaces of a :data:`SPACELESS` key's value
    dropped (``'model.layout=rope, none'`` -> ``'model.layout=rope,none'``); others as given."""
    key, sep, value = condition.partition("=")
    return f"{key}{sep}{''.join(value.split())}" if key.strip() in SPACELESS else condition


def expand_all(key: str, values: list[Any]) -> list[Any]:
    """``values`` of grid key ``key`` with :data:`ALL` replaced, in place, by every registered
    name of ``key``, the spaces of a :data:`SPACELESS` key's text dropped, and repeated values
    dropped (the first kept).

    Raises:
        ConfigError: a value of a key of :data:`EVERY` that is neither a registered name nor
            :data:`ALL`, or :data:`ALL` for any other key whose values are not text (one line).
    """
    if key in SPACELESS:  # 'rope, none' is the layout, run and label of 'rope,none'
        values = ["".join(v.split()) if isinstance(v, str) else v for v in values]
    if key not in EVERY:
        if ALL in values and declared_type(key) not in (str, None):
            raise ConfigError(f"{key}={ALL} is invalid; {only_all()}")
        return list(dict.fromkeys(values))
    names = EVERY[key]()
    expanded = [name for v in values for name in (names if v == ALL else [v])]
    for value in expanded:
        if key == "data.task" and value in available_tasks() and value not in names:
            raise ConfigError(
                f"{key}={value!r} is a language-model task (perplexity, no exact-match), which "
                f"a grid of exact-match tasks cannot take; sweep it with a sweep file that sets "
                f"it in base, e.g. python sweep.py --config configs/lm.yaml"
            )
        if value not in names:
            kind = KINDS[key]
            raise ConfigError(
                f"{key}={value!r} is not a known {kind}; choose one of {', '.join(names)}, "
                f"or {ALL} (every registered {kind})"
            )
    return list(dict.fromkeys(expanded))


def only_all() -> str:
    """The rule of :data:`ALL`, for messages."""
    return (
        f"the value {ALL} (every registered name) is only for "
        f"{' and '.join(EVERY)}; give this key's values, e.g. seed=0,1,2"
    )


def check_when(when: dict[str, list[str]], grids: list[dict[str, list[Any]]], where: str) -> None:
    """Check that every ``when`` block is keyed ``KEY=VALUE`` on a grid key and one of its
    values, so no block is silently never applied.

    Args:
        when: condition -> its overrides, as read from the file.
        grids: the grids a value may come from (the file's, and the one after the command
            line's overrides): a block for a value the command line left out is no error.
        where: the sweep file, for messages.

    Raises:
        ConfigError: a condition that is not ``KEY=VALUE``, whose key is no grid key, or whose
            value is in no grid (for ``data.task`` and ``model.position``: not a registered
            name; :data:`ALL` is not one), one line naming it and the allowed ones.
    """
    keys = list(dict.fromkeys(k for grid in grids for k in grid))
    for condition in when:
        key, sep, value = str(condition).partition("=")
        key = ALIASES.get(key, key)
        if not sep or key not in keys:
            raise ConfigError(
                f"sweep file {where!r}: when block {condition!r} is not KEY=VALUE with KEY a "
                f"grid key ({', '.join(keys) or 'the grid is empty'}), e.g. data.task=copy"
            )
        if key in EVERY:
            allowed = list(EVERY[key]())
        else:
            allowed = list(dict.fromkeys(text(v) for grid in grids for v in grid.get(key, [])))
        if value not in allowed:
            raise ConfigError(
                f"sweep file {where!r}: when block {condition!r} names {key}={value!r}, which "
                f"is not a value of the grid; a block applies to one of: {', '.join(allowed)}"
            )


def text(value: Any) -> str:
    """A grid value as an override writes it: ``None`` is ``null``, anything else ``str``."""
    return "null" if value is None else str(value)
