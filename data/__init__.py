"""Synthetic tasks that need order, one file per family, behind :class:`data.base.Task`.

A new task is one :class:`Task` subclass decorated with ``@register("name")`` plus, if it takes
options, one line in :func:`build_task`.
"""

from data.base import BOS, EOS, SEP, Batch, Task, available_tasks, register, task_class
from data.sequence import CopyTask, ReverseTask, SortTask
from data.svo import SVOTask  # noqa: F401  (registers svo)


def build_task(name: str, n_symbols: int = 16) -> Task:
    """Instantiate the task registered as ``name`` with its options.

    Args:
        name: a registered task (``svo``, ``copy``, ``reverse``, ``sort``).
        n_symbols: alphabet size of the symbol tasks.

    Raises:
        ValueError: unknown task or invalid option, naming the value and what is allowed.
    """
    cls = task_class(name)
    if issubclass(cls, (CopyTask, ReverseTask, SortTask)):
        return cls(n_symbols=n_symbols)
    return cls()


__all__ = [
    "BOS",
    "EOS",
    "SEP",
    "Batch",
    "Task",
    "available_tasks",
    "build_task",
    "register",
    "task_class",
]
