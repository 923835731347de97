"""Synthetic tasks that need order, one file per family, behind :class:`data.base.Task`.

A new task is one :class:`Task` subclass decorated with ``@register("name")``, with its
``Options`` dataclass and default ``train_lengths``, imported below.
"""

from typing import Any

from data.arithmetic import ParityTask  # noqa: F401  (registers the arithmetic tasks)
from data.base import BOS, EOS, PAD, SEP, Batch, Task, available_tasks, register, task_class
from data.counting import CountTask  # noqa: F401  (registers the counting tasks)
from data.passkey import PasskeyTask  # noqa: F401  (registers passkey)
from data.recall import FlipFlopTask  # noqa: F401  (registers the recall tasks)
from data.sequence import CopyTask, ReverseTask, SortTask  # noqa: F401  (registers them)
from data.strings import DuplicateTask  # noqa: F401  (registers the string tasks)
from data.svo import SVOTask  # noqa: F401  (registers svo)
from data.text import TextTask  # noqa: F401  (registers text)
from registry import build_options


def task_options(name: str, values: dict[str, Any] | None = None) -> Any:
    """The typed options of task ``name`` from plain ``values`` (missing keys keep defaults).

    Raises:
        ValueError: unknown task, unknown option or bad value; one line such as
            ``data.options.copy.n_symbols=100 is invalid; it must be in 2..62``.
    """
    return build_options(name, task_class(name).Options, values, section="data.options")


def build_task(name: str, options: dict[str, Any] | None = None) -> Task:
    """Instantiate the task registered as ``name`` with its options.

    Args:
        name: a registered task (:func:`available_tasks` lists them).
        options: option name -> value (``data.options.NAME``); None keeps every default.

    Raises:
        ValueError: unknown task or invalid option, naming the value and what is allowed.
    """
    return task_class(name)(task_options(name, options))


__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "SEP",
    "Batch",
    "Task",
    "available_tasks",
    "build_task",
    "register",
    "task_class",
    "task_options",
]
