"""Tests of the synthetic tasks: determinism, correct answers, lengths, batches and errors.

Expected answers are checked on the decoded text (what a person would read), parsed
independently of the generators, so a generator bug cannot hide behind its own bookkeeping.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import torch

from data import BOS, EOS, PAD, SEP, Batch, Task, available_tasks, build_task, register, task_class
from data.shortcuts import SHORTCUTS, first_noun, fixed_offset, order_blind, shortcut_accuracy
from data.streams import training_batch
from data.svo import ADJECTIVES, AGENT, NOUNS, STOP, VERBS

ACTIVE = {active for active, _ in VERBS}
PASSIVE = {passive for _, passive in VERBS}

TASKS = available_tasks()
"""Every registered task: the registry-wide tests follow it, so a new task is covered for free."""
SYMBOL_TASKS = ("copy", "reverse", "sort")
"""The tasks whose answers are hand-checked below (their rules are spelled out in the tests)."""
N_SYMBOL_TASKS = tuple(
    name for name in TASKS if "n_symbols" in {f.name for f in fields(task_class(name).Options)}
)
"""Every task with an ``n_symbols`` option (an alphabet of 2..62 symbols)."""
PROMPT_TASKS = [
    pytest.param(
        name,
        marks=[
            pytest.mark.skip(
                reason="a language-model task samples windows of text, not "
                "<bos> prompt <sep> answer <eos> rows (tests/test_text.py)"
            )
        ]
        if task_class(name).language_model
        else [],
    )
    for name in TASKS
]
"""Every task, a language-model one skipped with the reason: for tests of the row framing."""
KNOWN_MINIMUMS = {"copy": 1, "reverse": 1, "sort": 1, "odds_first": 2, "svo": 3}
"""Shortest lengths read off the task definitions by hand."""


def length_of(task: Task, length: int = 7) -> int:
    """``length``, raised to the task's shortest one."""
    return max(length, task.min_length)


def split_text(task: Task, row: torch.Tensor) -> tuple[list[str], list[str]]:
    """``(prompt words, answer words)`` of one decoded sequence ``<bos> prompt <sep> answer <eos>``.

    Asserts the framing: exactly one ``<bos>`` (first), one ``<sep>``, one ``<eos>`` (last, or
    followed only by ``<pad>`` in a task whose answers vary in length).
    """
    words = task.decode(row).split(" ")
    if task.pad_id is not None:
        end = words.index(EOS) + 1
        assert set(words[end:]) <= {PAD}
        words = words[:end]
    assert words[0] == BOS and words.count(BOS) == 1
    assert words[-1] == EOS and words.count(EOS) == 1
    assert words.count(SEP) == 1
    sep = words.index(SEP)
    return words[1:sep], words[sep + 1 : -1]


def tokens_of(text: str) -> list[str]:
    """Token strings of space-separated text."""
    return text.split(" ")


def ids(task: Task, text: str) -> np.ndarray:
    """One prompt ``(1, n)`` from space-separated token strings."""
    return np.array([[task.token_id(t) for t in text.split()]])


# ---------------------------------------------------------------------------------------------
# Registry and determinism
# ---------------------------------------------------------------------------------------------


def test_registry_holds_the_built_in_tasks() -> None:
    assert {"svo", *SYMBOL_TASKS, *KNOWN_MINIMUMS} <= set(TASKS)
    assert len(TASKS) >= 14 and list(TASKS) == sorted(TASKS)
    for name in TASKS:
        assert build_task(name).name == name


@pytest.mark.parametrize("name", TASKS)
def test_same_seed_gives_identical_tokens(name: str) -> None:
    task = build_task(name)
    a = task.sample(np.random.default_rng(123), length_of(task), 32)
    b = build_task(name).sample(np.random.default_rng(123), length_of(task), 32)  # a fresh task
    assert a.tokens.dtype == torch.int64
    assert torch.equal(a.tokens, b.tokens)
    assert (a.answer_start, a.length) == (b.answer_start, b.length)


@pytest.mark.parametrize("name", TASKS)
def test_different_seeds_give_different_tokens(name: str) -> None:
    task = build_task(name)
    a = task.sample(np.random.default_rng(1), length_of(task), 32)
    b = task.sample(np.random.default_rng(2), length_of(task), 32)
    assert a.tokens.shape == b.tokens.shape
    assert not torch.equal(a.tokens, b.tokens)
    # Not just one row: most of the 32 rows differ.
    assert (a.tokens != b.tokens).any(dim=1).sum() >= 30


@pytest.mark.parametrize("name", TASKS)
def test_training_batches_are_a_function_of_seed_and_step(name: str) -> None:
    """The batch of a step is the same from a fresh task instance (a resumed run), and another
    step or seed draws another one."""
    task = build_task(name)
    lengths = range(task.train_lengths[0], task.train_lengths[1] + 1)
    a = training_batch(task, 0, 5, 16, lengths)
    b = training_batch(build_task(name), 0, 5, 16, lengths)
    assert torch.equal(a.tokens, b.tokens)
    assert (a.length, a.answer_start) == (b.length, b.answer_start)
    assert a.length in lengths
    for seed, step in ((0, 6), (1, 5)):
        other = training_batch(task, seed, step, 16, lengths)
        assert other.tokens.shape != a.tokens.shape or not torch.equal(other.tokens, a.tokens)


@pytest.mark.parametrize("name", PROMPT_TASKS)
@pytest.mark.parametrize("offset", [0, 1, 3, 10])
def test_every_task_samples_framed_solved_rows_of_the_requested_length(
    name: str, offset: int
) -> None:
    """At and past the shortest length: one ``<bos> prompt <sep> answer <eos>`` per row, the
    answer the task's own solver gives, and a shape that depends on the length only."""
    task = build_task(name)
    length = task.min_length + offset
    batch = task.sample(np.random.default_rng(length), length, 40)
    assert batch.length == length
    assert batch.tokens.shape[0] == 40
    assert batch.answer_start == len(split_text(task, batch.tokens[0])[0]) + 2
    for row in batch.tokens:
        prompt, answer = split_text(task, row)
        assert len(prompt) == batch.answer_start - 2
        assert answer == task.solve(prompt), (name, length, prompt)


def test_svo_minimal_pairs_are_deterministic() -> None:
    task = build_task("svo")
    a1, b1 = task.minimal_pairs(np.random.default_rng(5), 9, 16)
    a2, b2 = task.minimal_pairs(np.random.default_rng(5), 9, 16)
    assert torch.equal(a1.tokens, a2.tokens) and torch.equal(b1.tokens, b2.tokens)


# ---------------------------------------------------------------------------------------------
# Hand-checked answers of the symbol tasks
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "prompt", "answer"),
    [
        ("copy", "a c b", "a c b"),
        ("copy", "b b a c", "b b a c"),
        ("reverse", "a c b", "b c a"),
        ("reverse", "a b b c a", "a c b b a"),
        ("sort", "c a b", "a b c"),
        ("sort", "b a c a b", "a a b b c"),
        ("copy", "c", "c"),
        ("reverse", "c", "c"),
        ("sort", "c", "c"),
    ],
)
def test_symbol_task_answers_hand_checked(name: str, prompt: str, answer: str) -> None:
    task = build_task(name, {"n_symbols": 3})
    assert task.vocab[-3:] == ["a", "b", "c"]
    prompts = ids(task, prompt)
    batch = task.assemble(prompts, task.answer(prompts), len(prompt.split()))
    assert task.decode(batch.tokens[0]) == f"{BOS} {prompt} {SEP} {answer} {EOS}"
    assert task.decode(batch.answer_targets[0]) == f"{answer} {EOS}"


def test_sort_orders_by_alphabet_position_not_by_character_code() -> None:
    """Symbols run a..z, A..Z, 0..9; sort follows that order (``'A' < 'a'`` in ASCII)."""
    task = build_task("sort", {"n_symbols": 62})
    prompts = ids(task, "9 A z a Z 0")
    batch = task.assemble(prompts, task.answer(prompts), 6)
    assert split_text(task, batch.tokens[0])[1] == tokens_of("a z A Z 0 9")


@pytest.mark.parametrize("name", SYMBOL_TASKS)
@pytest.mark.parametrize("length", [1, 2, 5, 13, 40])
def test_symbol_task_samples_are_right_and_have_the_requested_length(
    name: str, length: int
) -> None:
    task = build_task(name, {"n_symbols": 10})
    symbols = task.vocab[-10:]
    batch = task.sample(np.random.default_rng(length), length, 50)
    assert batch.length == length
    # <bos> + prompt + <sep> + answer + <eos>
    assert batch.tokens.shape == (50, 2 * length + 3)
    assert batch.answer_start == length + 2
    for row in batch.tokens:
        prompt, answer = split_text(task, row)
        assert len(prompt) == length and len(answer) == length
        assert set(prompt) <= set(symbols)
        expected = {
            "copy": prompt,
            "reverse": prompt[::-1],
            "sort": sorted(prompt, key=symbols.index),
        }[name]
        assert answer == expected


@pytest.mark.parametrize("name", SYMBOL_TASKS)
def test_symbol_tasks_use_the_whole_alphabet_and_nothing_else(name: str) -> None:
    task = build_task(name, {"n_symbols": 5})
    batch = task.sample(np.random.default_rng(0), 20, 64)
    prompt = batch.tokens[:, 1 : batch.answer_start - 1]
    used = {task.vocab[i] for i in prompt.unique().tolist()}
    assert used == {"a", "b", "c", "d", "e"}
    assert task.vocab_size == len(task.vocab) == len(set(task.vocab)) == 5 + 3


def test_sort_answer_is_invariant_to_permuting_the_prompt() -> None:
    task = build_task("sort")
    rng = np.random.default_rng(0)
    prompts, answers = task.generate(rng, 12, 64)
    for _ in range(5):
        permuted = np.stack([rng.permutation(p) for p in prompts])
        assert not np.array_equal(permuted, prompts)
        np.testing.assert_array_equal(task.answer(permuted), answers)


@pytest.mark.parametrize("name", ["copy", "reverse"])
def test_copy_and_reverse_answers_change_when_the_prompt_is_permuted(name: str) -> None:
    """The contrast to sort: these answers depend on order."""
    task = build_task(name, {"n_symbols": 3})
    prompts = ids(task, "a b c")
    permuted = ids(task, "b a c")
    assert not np.array_equal(task.answer(prompts), task.answer(permuted))


# ---------------------------------------------------------------------------------------------
# SVO: parse the decoded text and check who did what to whom
# ---------------------------------------------------------------------------------------------


def parse_svo(words: list[str]) -> tuple[tuple[str, str, str], str]:
    """The fact ``(first noun, verb form, last noun)`` and the question's verb form.

    The first noun comes right before the verb form and the last one right before ``.``;
    everything else in the fact must be an adjective; the question is ``agent? <verb form>``.
    """
    assert words.count(STOP) == 1
    fact, question = " ".join(words).split(f" {STOP}")
    fact, question = fact.split(), question.split()
    assert question[0] == AGENT and len(question) == 2, question
    verbs = [i for i, w in enumerate(fact) if w in ACTIVE | PASSIVE]
    assert len(verbs) == 1, fact
    v = verbs[0]
    nouns = [i for i, w in enumerate(fact) if w in NOUNS]
    assert nouns == [v - 1, len(fact) - 1], fact  # noun verb ... noun
    assert all(w in ADJECTIVES for i, w in enumerate(fact) if i not in (v, *nouns)), fact
    return (fact[v - 1], fact[v], fact[-1]), question[1]


def svo_truth(words: list[str]) -> str:
    """The agent, from the prompt's text alone: the first noun of an active fact, the last
    noun of a passive one ("man is-bitten-by dog": the dog did it)."""
    (first, verb, last), asked = parse_svo(words)
    assert asked == verb
    return last if verb in PASSIVE else first


def test_svo_hand_checked_prompts() -> None:
    """The parser itself, on prompts read by hand."""
    words = tokens_of("big dog bites old man . agent? bites")
    assert parse_svo(words) == (("dog", "bites", "man"), "bites")
    assert svo_truth(words) == "dog"
    assert svo_truth(tokens_of("big man bites old dog . agent? bites")) == "man"
    assert svo_truth(tokens_of("old man is-bitten-by big dog . agent? is-bitten-by")) == "dog"
    assert svo_truth(tokens_of("fox is-fed-by red lazy king . agent? is-fed-by")) == "king"


@pytest.mark.parametrize("length", [3, 8, 20, 48])
def test_svo_answers_are_the_agent_in_either_voice(length: int) -> None:
    task = build_task("svo")
    batch = task.sample(np.random.default_rng(length), length, 200)
    assert batch.length == length
    # <bos> + length content words + "." + agent? + verb + <sep> + answer + <eos>
    assert batch.tokens.shape == (200, 1 + length + 3 + 3)
    voices, places, answers = set(), set(), set()
    for row in batch.tokens:
        prompt, answer = split_text(task, row)
        (first, verb, last), _ = parse_svo(prompt)
        assert len(prompt) - 3 == length  # content words
        assert first != last
        assert answer == [svo_truth(prompt)]
        voices.add(verb in PASSIVE)
        places.add("first" if answer == [first] else "last")
        answers.add(answer[0])
    assert voices == {False, True} and places == {"first", "last"}
    assert len(answers) >= 10


def test_svo_adjectives_go_in_front_of_both_nouns() -> None:
    task = build_task("svo")
    batch = task.sample(np.random.default_rng(0), 8, 100)
    before_first = before_last = 0
    for row in batch.tokens:
        prompt, _ = split_text(task, row)
        verb_at = next(i for i, w in enumerate(prompt) if w in ACTIVE | PASSIVE)
        before_first += verb_at - 1
        before_last += prompt.index(STOP) - verb_at - 2
        assert verb_at - 1 + prompt.index(STOP) - verb_at - 2 == 5  # 8 = 3 + 5 adjectives
    assert before_first > 100 and before_last > 100


@pytest.mark.parametrize("length", [3, 10, 30])
def test_svo_minimal_pairs_swap_the_two_nouns(length: int) -> None:
    task = build_task("svo")
    original, swapped = task.minimal_pairs(np.random.default_rng(length), length, 100)
    assert original.tokens.shape == swapped.tokens.shape
    assert original.answer_start == swapped.answer_start
    assert original.length == swapped.length == length
    prompt_a = original.tokens[:, : original.answer_start]
    prompt_b = swapped.tokens[:, : swapped.answer_start]
    for row in range(100):
        a, b = prompt_a[row], prompt_b[row]
        differ = (a != b).nonzero().flatten().tolist()
        assert len(differ) == 2
        i, j = differ
        assert (a[i], a[j]) == (b[j], b[i])  # a swap
        # Same bag of tokens, so a model blind to order cannot tell them apart.
        assert torch.equal(a.sort().values, b.sort().values)
        words_a, answer_a = split_text(task, original.tokens[row])
        words_b, answer_b = split_text(task, swapped.tokens[row])
        (first, verb, last), _ = parse_svo(words_a)
        assert parse_svo(words_b)[0] == (last, verb, first)
        # Both answers are right for their own prompt, and they differ.
        assert answer_a == [svo_truth(words_a)] and answer_b == [svo_truth(words_b)]
        assert answer_a != answer_b


# ---------------------------------------------------------------------------------------------
# Shortcut baselines: position rules that do not read order score at chance on svo
# ---------------------------------------------------------------------------------------------


def test_shortcut_rules_hand_checked() -> None:
    task = build_task("svo")
    active = ids(task, "big dog bites old man . agent? bites")
    passive = ids(task, "old man is-bitten-by big dog . agent? is-bitten-by")
    dog, man = task.token_id("dog"), task.token_id("man")
    assert first_noun(task, active)[0] == dog and first_noun(task, passive)[0] == man
    assert fixed_offset(task, active)[0] == man and fixed_offset(task, passive)[0] == dog
    assert order_blind(task, active)[0] == order_blind(task, passive)[0] == min(dog, man)


@pytest.mark.parametrize("length", [3, 7, 12, 48])
def test_shortcut_baselines_stay_near_chance_on_generated_svo(length: int) -> None:
    """Each rule is right on 50% of the rows in expectation; 4000 rows put 3.2 standard errors
    between 0.5 and 0.55, and the issue's bar is 60%."""
    task = build_task("svo")
    batch = task.sample(np.random.default_rng(1000 + length), length, 4000)
    accuracy = shortcut_accuracy(task, batch)
    assert set(accuracy) == set(SHORTCUTS)
    for name, value in accuracy.items():
        assert 0.45 <= value <= 0.55, (name, value)


def test_shortcut_baselines_would_solve_an_active_only_svo() -> None:
    """The contrast: restricted to active facts, ``first_noun`` is always right, the
    ``fixed_offset`` rule never, so the rules measure what they claim to."""
    task = build_task("svo")
    batch = task.sample(np.random.default_rng(3), 9, 400)
    verb_column = batch.answer_start - 2  # the question's verb form, right before <sep>
    passive = {task.token_id(w) for w in PASSIVE}
    active_rows = [r for r in range(400) if int(batch.tokens[r, verb_column]) not in passive]
    assert 150 < len(active_rows) < 250
    only_active = Batch(batch.tokens[active_rows], batch.answer_start, 9)
    accuracy = shortcut_accuracy(task, only_active)
    assert accuracy["first_noun"] == 1.0 and accuracy["fixed_offset"] == 0.0


# ---------------------------------------------------------------------------------------------
# Minimal pairs of copy and reverse: a swap of two different symbols
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["copy", "reverse"])
@pytest.mark.parametrize("length", [2, 5, 40])
def test_symbol_minimal_pairs_swap_two_different_symbols(name: str, length: int) -> None:
    task = build_task(name, {"n_symbols": 4})
    assert task.supports_minimal_pairs
    original, swapped = task.minimal_pairs(np.random.default_rng(length), length, 200)
    for a, b in zip(original.tokens, swapped.tokens, strict=True):
        prompt_a, answer_a = split_text(task, a)
        prompt_b, answer_b = split_text(task, b)
        differ = [i for i in range(length) if prompt_a[i] != prompt_b[i]]
        assert len(differ) == 2
        i, j = differ
        assert (prompt_a[i], prompt_a[j]) == (prompt_b[j], prompt_b[i])
        assert sorted(prompt_a) == sorted(prompt_b)  # the same bag of symbols
        expected = prompt_a if name == "copy" else prompt_a[::-1]
        assert answer_a == expected and answer_a != answer_b


PAIRED_TASKS = tuple(name for name in TASKS if task_class(name).supports_minimal_pairs)


def test_the_order_sensitive_tasks_have_minimal_pairs() -> None:
    assert {"copy", "reverse", "svo"} <= set(PAIRED_TASKS)


@pytest.mark.parametrize("name", PAIRED_TASKS)
def test_every_tasks_minimal_pairs_swap_two_tokens_and_change_the_answer(name: str) -> None:
    """A pair has the same bag of prompt tokens, two of them swapped, and two different
    answers, each the one the task's solver gives for its own prompt."""
    task = build_task(name)
    length = length_of(task, 6)
    original, swapped = task.minimal_pairs(np.random.default_rng(length), length, 100)
    assert original.tokens.shape == swapped.tokens.shape
    assert (original.answer_start, original.length) == (swapped.answer_start, length)
    for a, b in zip(original.tokens, swapped.tokens, strict=True):
        prompt_a, answer_a = split_text(task, a)
        prompt_b, answer_b = split_text(task, b)
        differ = [i for i in range(len(prompt_a)) if prompt_a[i] != prompt_b[i]]
        assert len(differ) == 2
        i, j = differ
        assert (prompt_a[i], prompt_a[j]) == (prompt_b[j], prompt_b[i])
        assert answer_a == task.solve(prompt_a) and answer_b == task.solve(prompt_b)
        assert answer_a != answer_b


def test_sort_has_no_minimal_pairs_and_length_one_has_none() -> None:
    assert not build_task("sort").supports_minimal_pairs
    with pytest.raises(ValueError, match=r"length >= 2 for swapped pairs, got 1"):
        build_task("copy").minimal_pairs(np.random.default_rng(0), 1, 4)


# ---------------------------------------------------------------------------------------------
# Batch: inputs, answer slice and targets agree
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [0, 5])
@pytest.mark.parametrize("name", PROMPT_TASKS)
def test_batch_views_are_consistent(name: str, offset: int) -> None:
    task = build_task(name)
    length = task.min_length + offset
    batch = task.sample(np.random.default_rng(0), length, 8)
    n, s = batch.tokens.shape
    answer_len = s - batch.answer_start
    assert n == 8
    assert torch.equal(batch.inputs, batch.tokens[:, :-1])
    assert batch.inputs.shape == (8, s - 1)
    assert batch.answer_slice == slice(batch.answer_start - 1, s - 1)
    assert batch.answer_targets.shape == (8, answer_len)
    assert torch.equal(batch.answer_targets, batch.tokens[:, batch.answer_start :])
    # The logit at position p predicts token p + 1: the answer slice of the inputs ends right
    # before the targets, starting at <sep>.
    positions = torch.arange(s - 1)[batch.answer_slice]
    assert positions.tolist() == list(range(batch.answer_start - 1, s - 1))
    assert torch.equal(batch.tokens[:, positions + 1], batch.answer_targets)
    assert (batch.inputs[:, batch.answer_slice.start] == task.token_id(SEP)).all()
    # Each row's last real target is <eos> (the last column, or the one before its pads).
    mask = batch.answer_mask
    ends = mask.sum(dim=1) - 1  # (B,)
    assert torch.equal(mask, torch.arange(answer_len) <= ends[:, None])  # pads only trail
    assert (batch.answer_targets[torch.arange(8), ends] == task.token_id(EOS)).all()
    if task.pad_id is None:
        assert (batch.answer_targets[:, -1] == task.token_id(EOS)).all()
    assert (batch.tokens[:, 0] == task.token_id(BOS)).all()
    # The answer (without <eos>) is the decoded answer text.
    for row in range(8):
        answer = [task.vocab[i] for i in batch.answer_targets[row, : ends[row]].tolist()]
        assert split_text(task, batch.tokens[row])[1] == answer
    moved = batch.to("cpu")
    assert isinstance(moved, Batch)
    assert torch.equal(moved.tokens, batch.tokens)
    assert (moved.answer_start, moved.length) == (batch.answer_start, batch.length)


def test_perfect_logits_score_every_answer_right() -> None:
    """One-hot logits of the next token, read through answer_slice, reproduce the targets."""
    task = build_task("reverse")
    batch = task.sample(np.random.default_rng(3), 6, 4)
    logits = torch.nn.functional.one_hot(batch.tokens[:, 1:], task.vocab_size).float()
    assert torch.equal(logits[:, batch.answer_slice].argmax(-1), batch.answer_targets)


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("below", [1, 2])
@pytest.mark.parametrize("name", TASKS)
def test_length_below_minimum_raises_naming_it(name: str, below: int) -> None:
    task = build_task(name)
    minimum = task.min_length
    assert minimum >= 1 and minimum == KNOWN_MINIMUMS.get(name, minimum)
    length = minimum - below
    with pytest.raises(ValueError, match=rf"length >= {minimum}, got length={length}\b") as error:
        task.sample(np.random.default_rng(0), length, 4)
    assert repr(name) in str(error.value)
    task.sample(np.random.default_rng(0), minimum, 4)  # the minimum itself works


def test_svo_minimal_pairs_check_the_length() -> None:
    with pytest.raises(ValueError, match=r"length >= 3, got length=2"):
        build_task("svo").minimal_pairs(np.random.default_rng(0), 2, 4)


def test_batch_size_below_one_raises() -> None:
    with pytest.raises(ValueError, match=r"batch size must be >= 1, got 0"):
        build_task("copy").sample(np.random.default_rng(0), 3, 0)


def test_unknown_task_lists_the_available_ones() -> None:
    with pytest.raises(ValueError, match=r"data.task='nope' is not a known task") as error:
        build_task("nope")
    message = str(error.value)
    for name in available_tasks():
        assert name in message
    assert "\n" not in message


def test_the_symbol_tasks_have_an_alphabet_option() -> None:
    assert {*SYMBOL_TASKS, "count", "selective_copy"} <= set(N_SYMBOL_TASKS)


@pytest.mark.parametrize("n_symbols", [-1, 0, 1, 63, 100])
@pytest.mark.parametrize("name", N_SYMBOL_TASKS)
def test_n_symbols_out_of_range_raises(name: str, n_symbols: int) -> None:
    message = rf"data.options.{name}.n_symbols={n_symbols} is invalid.*2\.\.62"
    with pytest.raises(ValueError, match=message):
        build_task(name, {"n_symbols": n_symbols})


@pytest.mark.parametrize("n_symbols", [2, 62])
def test_n_symbols_at_the_bounds_works(n_symbols: int) -> None:
    task = build_task("copy", {"n_symbols": n_symbols})
    assert task.vocab_size == n_symbols + 3
    batch = task.sample(np.random.default_rng(0), 200, 4)
    assert len(batch.tokens[:, 1:201].unique()) == n_symbols


@pytest.mark.parametrize("n_symbols", [2, 62])
@pytest.mark.parametrize("name", N_SYMBOL_TASKS)
def test_every_alphabet_option_works_at_its_bounds(name: str, n_symbols: int) -> None:
    task = build_task(name, {"n_symbols": n_symbols})
    assert task.options.n_symbols == n_symbols
    length = length_of(task, 12)
    batch = task.sample(np.random.default_rng(0), length, 8)
    for row in batch.tokens:
        prompt, answer = split_text(task, row)
        assert answer == task.solve(prompt)


def test_registering_a_name_twice_raises() -> None:
    class Duplicate(Task):
        pass

    with pytest.raises(ValueError, match=r"task 'copy' is registered twice"):
        register("copy")(Duplicate)
    assert build_task("copy").name == "copy"
