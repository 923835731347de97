"""The prompt positions each task's exact solver reads (``Task.read_positions``) and the mask
over model inputs built from them (``data.base.source_mask``): one entry per answer token, in
range, and holding the tokens the answer is made of, for every registered task."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch

from data import EOS, available_tasks, build_task, task_class
from data.base import source_mask
from data.passkey import PREFIX, SUFFIX
from data.svo import NOUNS

WITH_POSITIONS = {
    "copy",
    "reverse",
    "duplicate",
    "odds_first",
    "svo",
    "count",
    "selective_copy",
    "associative_recall",
    "flip_flop",
    "passkey",
    "missing_duplicate",
}
"""The tasks whose solver names the positions it reads; a new task with ``read_positions`` adds
itself here and its property to ``PROPERTIES``."""

EXACT = [name for name in available_tasks() if not task_class(name).language_model]


def rows(task, length: int, n: int = 64) -> list[tuple[list[str], list[str]]]:
    """``(prompt, real answer)`` of ``n`` seeded rows at ``length``, as token strings."""
    batch = task.sample(np.random.default_rng([11, length]), length, n)
    out = []
    for row in batch.tokens.tolist():
        tokens = [task.vocab[i] for i in row]
        answer = tokens[batch.answer_start :]
        out.append((tokens[1 : batch.answer_start - 1], answer[: answer.index(EOS)]))
    return out


def lengths(task) -> tuple[int, int, int]:
    """The training range's ends and four times its top (the evaluation's longest)."""
    low, high = task.train_lengths
    return low, high, 4 * high


def copies(task, prompt: Sequence[str], answer: list[str], read: list[list[int]]) -> None:
    """Each answer token is the prompt token at its one read position."""
    assert all(len(r) == 1 for r in read)
    assert [prompt[r[0]] for r in read] == answer


def copies_the_agent(task, prompt, answer, read) -> None:
    copies(task, prompt, answer, read)
    assert prompt[read[0][0]] in NOUNS


def counts(task, prompt, answer, read) -> None:
    """As many positions as the count says, each before ``#`` and holding the query symbol."""
    (positions,) = read
    assert len(positions) == int(answer[0].removeprefix("="))
    assert all(p < len(prompt) - 2 and prompt[p] == prompt[-1] for p in positions)


def recalls(task, prompt, answer, read) -> None:
    """A value is read at the pair of its asked key, an echoed key in the query list."""
    copies(task, prompt, answer, read)
    at = prompt.index("?")
    asked = prompt[at + 1 :]
    keys = [r[0] for r in read[0::2]] if task.options.echo_keys else []
    values = [r[0] for r in (read[1::2] if task.options.echo_keys else read)]
    assert keys == list(range(at + 1, len(prompt))) if task.options.echo_keys else not keys
    assert all(v % 2 == 1 and v < at for v in values)
    assert [prompt[v - 1] for v in values] == asked


def reads_the_last_write(task, prompt, answer, read) -> None:
    copies(task, prompt, answer, read)
    (p,) = read[0]
    assert prompt[p - 1] == "w" and "w" not in prompt[p + 1 :: 2]


def reads_the_key(task, prompt, answer, read) -> None:
    """The digits are consecutive, right after ``pass key is`` and right before ``.``."""
    copies(task, prompt, answer, read)
    first, last = read[0][0], read[-1][0]
    assert [r[0] for r in read] == list(range(first, last + 1))
    assert "".join(prompt[first - len(PREFIX) : first]).replace("\\x20", " ") == PREFIX
    assert prompt[last + 1] == SUFFIX


PROPERTIES: dict[str, Callable[..., None]] = {
    "copy": copies,
    "reverse": copies,
    "duplicate": copies,
    "odds_first": copies,
    "selective_copy": copies,
    "svo": copies_the_agent,
    "count": counts,
    "associative_recall": recalls,
    "flip_flop": reads_the_last_write,
    "passkey": reads_the_key,
    "missing_duplicate": copies,
}


@pytest.mark.parametrize(
    ("name", "options"),
    [(name, {}) for name in EXACT] + [("associative_recall", {"echo_keys": False})],
)
def test_read_positions_name_what_each_answer_token_is_made_of(name: str, options: dict) -> None:
    """In and past the training range: None for every row or for none; otherwise one entry
    per solver answer token, indices in the prompt, non-empty (empty only for a count of 0),
    and the task's property holds."""
    task = build_task(name, options)
    for length in lengths(task):
        for prompt, answer in rows(task, length):
            read = task.read_positions(prompt)
            assert (read is not None) == (name in WITH_POSITIONS), (name, prompt)
            if read is None:
                continue
            assert len(read) == len(task.solve(prompt)) == len(answer)
            assert all(0 <= p < len(prompt) for r in read for p in r)
            empty = [a for r, a in zip(read, answer, strict=True) if not r]
            assert all(name == "count" and a == "=0" for a in empty)
            PROPERTIES[name](task, prompt, answer, read)


def test_the_tasks_with_positions_are_the_named_ones() -> None:
    """The registry's tasks whose ``read_positions`` is not None, and each has a property."""
    named = set()
    for name in EXACT:
        task = build_task(name)
        prompt, _ = rows(task, task.train_lengths[1], n=1)[0]
        if task.read_positions(prompt) is not None:
            named.add(name)
    assert named == WITH_POSITIONS == set(PROPERTIES)


def test_read_positions_by_hand() -> None:
    assert build_task("copy").read_positions(list("abc")) == [[0], [1], [2]]
    assert build_task("reverse").read_positions(list("abc")) == [[2], [1], [0]]
    assert build_task("duplicate").read_positions(list("ab")) == [[0], [1], [0], [1]]
    assert build_task("odds_first").read_positions(list("abcde")) == [[0], [2], [4], [1], [3]]
    assert build_task("selective_copy").read_positions(list(".a..cb.")) == [[1], [4], [5]]
    assert build_task("count").read_positions(list("acaba#a")) == [[0, 2, 4]]
    assert build_task("count").read_positions(list("acaba#d")) == [[]]
    assert build_task("flip_flop").read_positions(list("w1i0r1w0i1r")) == [[7]]
    svo = build_task("svo")
    passive = ["old", "man", "is-bitten-by", "big", "dog", ".", "agent?", "is-bitten-by"]
    assert svo.read_positions(passive) == [[4]]
    active = ["big", "dog", "bites", "old", "man", ".", "agent?", "bites"]
    assert svo.read_positions(active) == [[1]]
    prompt = ["k3", "v1", "k7", "v4", "?", "k7", "k3"]
    assert build_task("associative_recall").read_positions(prompt) == [[5], [3], [6], [1]]
    values_only = build_task("associative_recall", {"echo_keys": False})
    assert values_only.read_positions(prompt) == [[3], [1]]
    text = "The sky pass key is 907. The"
    passkey = build_task("passkey", {"digits": 3})
    tokens = [passkey.vocab[b] for b in text.encode()]
    assert passkey.read_positions(tokens) == [[20], [21], [22]]


def test_source_mask_marks_input_one_plus_each_read_position() -> None:
    """``[b, a, 1 + p]`` for each read ``p``, nothing else; all False at ``<eos>`` and pads; the
    input token under each True is the answer token (selective copy, padded answers)."""
    task = build_task("selective_copy")
    batch = task.sample(np.random.default_rng(5), 12, 32)
    mask = source_mask(task, batch)
    answers = batch.answer_targets  # (B, A)
    assert mask.dtype == torch.bool and mask.shape == (*answers.shape, batch.inputs.shape[1])
    expected = torch.zeros_like(mask)
    for b, row in enumerate(batch.tokens.tolist()):
        prompt = [task.vocab[i] for i in row[1 : batch.answer_start - 1]]
        for a, read in enumerate(task.read_positions(prompt)):
            for p in read:
                expected[b, a, 1 + p] = True
    assert torch.equal(mask, expected)
    real = answers != task.token_id(EOS)
    real &= batch.answer_mask  # (B, A): real answer tokens, not <eos> or pads
    assert (~batch.answer_mask).any() and (~real).any()
    assert torch.equal(mask.sum(dim=2), real.long())
    b, a, j = mask.nonzero(as_tuple=True)
    assert torch.equal(batch.inputs[b, j], answers[b, a])


def test_source_mask_of_counts_and_of_tasks_without_positions() -> None:
    task = build_task("count")
    batch = task.assemble(
        np.array([[task.token_id(t) for t in "acaba#a"]]), np.array([[task.token_id("=3")]]), 5
    )
    mask = source_mask(task, batch)
    assert mask.shape == (1, 2, 10)
    assert mask[0, 0].nonzero().flatten().tolist() == [1, 3, 5] and not mask[0, 1].any()
    sort = build_task("sort")
    assert source_mask(sort, sort.sample(np.random.default_rng(0), 6, 4)) is None
