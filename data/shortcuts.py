"""Shortcut rules for ``svo``: position heuristics a model could use instead of reading order.

Each rule maps prompts to predicted answers without understanding who did what to whom. They are
baselines: a task on which one of them scores well tests the heuristic, not order. On ``svo``
each scores 50% in expectation at every length (the voice is uniform); ``tests/test_data.py``
checks the figures and the report prints them next to the models.

- ``first_noun``: the agent is the first noun (the subject). With the question's other half,
  "the patient is the last noun", it scored 100% on the active-only task ``svo`` replaced.
- ``fixed_offset``: the noun at a fixed distance before ``<sep>`` (the last noun).
- ``order_blind``: the noun with the smaller token id; any function of the bag of tokens is
  right on exactly one member of a minimal pair.

Shape notation: ``n`` prompts, ``P`` prompt tokens (``<bos>``, ``<sep>`` and the answer
excluded; see :class:`data.svo.SVOTask` for the layout).
"""

from collections.abc import Callable

import numpy as np

from data.base import Batch
from data.svo import NOUNS, SVOTask


def _nouns(task: SVOTask, prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and the last noun of every prompt, int ``(n,)`` each."""
    is_noun = np.isin(prompts, [task.token_id(w) for w in NOUNS])  # (n, P)
    rows = np.arange(len(prompts))
    return prompts[rows, is_noun.argmax(axis=1)], prompts[:, -4]


def first_noun(task: SVOTask, prompts: np.ndarray) -> np.ndarray:
    """The first noun. Returns int ``(n,)``."""
    return _nouns(task, prompts)[0]


def fixed_offset(task: SVOTask, prompts: np.ndarray) -> np.ndarray:
    """The token 4 places before ``<sep>`` (the last noun). Returns int ``(n,)``."""
    return prompts[:, -4]


def order_blind(task: SVOTask, prompts: np.ndarray) -> np.ndarray:
    """The noun with the smaller token id. Returns int ``(n,)``."""
    return np.minimum(*_nouns(task, prompts))


SHORTCUTS: dict[str, Callable[[SVOTask, np.ndarray], np.ndarray]] = {
    "first_noun": first_noun,
    "fixed_offset": fixed_offset,
    "order_blind": order_blind,
}
"""Name -> rule, in the order reports list them."""


def shortcut_accuracy(task: SVOTask, batch: Batch) -> dict[str, float]:
    """Exact-match of every rule in :data:`SHORTCUTS` on ``batch`` (rows of ``task``)."""
    tokens = batch.tokens.numpy()  # (n, S)
    prompts = tokens[:, 1 : batch.answer_start - 1]  # (n, P): no <bos>, no <sep>
    answers = tokens[:, batch.answer_start]  # (n,)
    return {
        name: float((rule(task, prompts) == answers).mean()) for name, rule in SHORTCUTS.items()
    }
