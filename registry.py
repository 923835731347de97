"""Registries of named classes and their typed options, shared by :mod:`model` and :mod:`data`.

A :class:`Registry` maps names to classes (position schemes, tasks) and answers an unknown name
with one line listing the known ones. Every registered class declares ``Options``, a frozen
dataclass whose fields have defaults and simple types (``int``, ``float``, ``bool``, ``str``) and
whose ``__post_init__`` checks value ranges: :func:`build_options` builds it from a plain dict
(YAML, CLI, checkpoints), :func:`options_dict` turns it back into one for saving.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import asdict, fields
from typing import Any, Generic, TypeVar, get_type_hints

T = TypeVar("T", bound=type)


class Registry(Generic[T]):
    """Classes by name, in registration order.

    Args:
        kind: what is registered, for messages (``"position scheme"``, ``"task"``).
        key: the config key that names one (``"model.position"``, ``"data.task"``).
    """

    def __init__(self, kind: str, key: str) -> None:
        self.kind, self.key = kind, key
        self._classes: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Class decorator that registers the class as ``name`` and sets its ``name``.

        Raises:
            ValueError: ``name`` is registered already.
        """

        def add(cls: T) -> T:
            if name in self._classes:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            cls.name = name
            self._classes[name] = cls
            return cls

        return add

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._classes)

    def lookup(self, name: str) -> T:
        """The class registered as ``name``.

        Raises:
            ValueError: the name is not registered; the message lists the registered names,
                e.g. ``model.position='rop' is not a known scheme; choose one of none, ...``.
        """
        if name not in self._classes:
            noun = self.kind.split()[-1]  # "position scheme" -> "a known scheme"
            raise ValueError(
                f"{self.key}={name!r} is not a known {noun}; "
                f"choose one of {', '.join(self._classes)}"
            )
        return self._classes[name]


def build_options(
    owner: str, cls: type, values: dict[str, Any] | None, section: str = "model.options"
) -> Any:
    """``cls(**values)`` with every key and type checked.

    Args:
        owner: the scheme's (or task's) name, for messages (``SECTION.OWNER.KEY``).
        cls: its ``Options`` dataclass.
        values: option name -> value; missing options keep their defaults. Integers and
            numeric strings are accepted for float options (YAML writes ``10000`` for
            ``10000.0`` and reads ``inf`` or ``1e4`` as text); non-finite floats are refused.
        section: the config section holding the options, for messages.

    Raises:
        ValueError: one line naming the bad key or value and what is allowed.
    """
    values = dict(values or {})
    types = get_type_hints(cls)
    allowed = [f.name for f in fields(cls)]
    for key, value in values.items():
        if key not in allowed:  # a field, not a class constant such as a maximum
            names = ", ".join(allowed) if allowed else "none"
            raise ValueError(
                f"{section}.{owner}.{key} is not an option of {owner!r}; its options: {names}"
            )
        kind = types[key]
        if kind is float and isinstance(value, (int, str)) and not isinstance(value, bool):
            with contextlib.suppress(ValueError):  # a string that is no number fails below
                values[key] = value = float(value)  # YAML reads "inf" and "1e4" as strings
        if not isinstance(kind, type):  # e.g. a dict or union: the dataclass checks it
            continue
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ValueError(
                f"{section}.{owner}.{key}={value!r} is invalid; it must be a {kind.__name__}"
            )
        if kind is float and not math.isfinite(value):
            raise ValueError(
                f"{section}.{owner}.{key}={value} is invalid; it must be a finite number"
            )
    try:
        return cls(**values)
    except ValueError as error:
        raise ValueError(f"{section}.{owner}.{error}") from None


def options_dict(options: Any) -> dict[str, Any]:
    """Plain dict of an options dataclass (for configs, JSON and reports)."""
    return asdict(options)


def describe(owner: str, options: Any) -> str:
    """One-line label, e.g. ``rope(theta=10000.0, rotary_fraction=1.0)`` or ``none``.

    Args:
        owner: the scheme's (or task's) name.
        options: its options dataclass, or the saved dict of it.
    """
    values = options if isinstance(options, dict) else options_dict(options)
    inner = ", ".join(f"{k}={v}" for k, v in values.items())
    return f"{owner}({inner})" if inner else owner
