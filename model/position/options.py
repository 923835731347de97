"""Typed per-scheme (and per-task) options: built from plain dicts (YAML, CLI, checkpoints),
validated, and turned back into dicts for saving.

Every scheme declares ``Options``, a frozen dataclass whose fields have defaults and simple
types (``int``, ``float``, ``bool``, ``str``); its ``__post_init__`` checks value ranges.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, fields
from typing import Any, get_type_hints


def build_options(
    scheme: str, cls: type, values: dict[str, Any] | None, section: str = "model.options"
) -> Any:
    """``cls(**values)`` with every key and type checked.

    Args:
        scheme: the scheme's (or task's) name, for messages (``SECTION.SCHEME.KEY``).
        cls: the scheme's ``Options`` dataclass.
        values: option name -> value; missing options keep their defaults. Integers and
            numeric strings are accepted for float options (YAML writes ``10000`` for
            ``10000.0`` and reads ``inf`` or ``1e4`` as text); non-finite floats are refused.

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
                f"{section}.{scheme}.{key} is not an option of {scheme!r}; its options: {names}"
            )
        kind = types[key]
        if kind is float and isinstance(value, (int, str)) and not isinstance(value, bool):
            with contextlib.suppress(ValueError):  # a string that is no number fails below
                values[key] = value = float(value)  # YAML reads "inf" and "1e4" as strings
        if not isinstance(kind, type):  # e.g. a dict or union: the dataclass checks it
            continue
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ValueError(
                f"{section}.{scheme}.{key}={value!r} is invalid; it must be a {kind.__name__}"
            )
        if kind is float and not math.isfinite(value):
            raise ValueError(
                f"{section}.{scheme}.{key}={value} is invalid; it must be a finite number"
            )
    try:
        return cls(**values)
    except ValueError as error:
        raise ValueError(f"{section}.{scheme}.{error}") from None


def options_dict(options: Any) -> dict[str, Any]:
    """Plain dict of an options dataclass (for configs, JSON and reports)."""
    return asdict(options)


def describe(scheme: str, options: Any) -> str:
    """One-line label, e.g. ``rope(theta=10000.0, rotary_fraction=1.0)`` or ``none``.

    Args:
        scheme: the scheme's name.
        options: its options dataclass, or the saved dict of it.
    """
    values = options if isinstance(options, dict) else options_dict(options)
    inner = ", ".join(f"{k}={v}" for k, v in values.items())
    return f"{scheme}({inner})" if inner else scheme
