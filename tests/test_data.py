"""Tests of the synthetic tasks: determinism, correct answers, lengths, batches and errors.

Expected answers are checked on the decoded text (what a person would read), parsed
independently of the generators, so a generator bug cannot hide behind its own bookkeeping.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from data import BOS, EOS, SEP, Batch, Task, available_tasks, build_task, register
from data.svo import ADJECTIVES, AGENT, NOUNS, PATIENT, STOP, VERBS

TASKS = ("svo", "copy", "reverse", "sort")
SYMBOL_TASKS = ("copy", "reverse", "sort")


def split_text(task: Task, row: torch.Tensor) -> tuple[list[str], list[str]]:
    """``(prompt words, answer words)`` of one decoded sequence ``<bos> prompt <sep> answer <eos>``.

    Asserts the framing: exactly one ``<bos>`` (first), one ``<sep>``, one ``<eos>`` (last).
    """
    words = task.decode(row).split(" ")
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


def test_registry_holds_the_four_tasks() -> None:
    assert set(TASKS) <= set(available_tasks())
    for name in TASKS:
        assert build_task(name).name == name


@pytest.mark.parametrize("name", TASKS)
def test_same_seed_gives_identical_tokens(name: str) -> None:
    a = build_task(name).sample(np.random.default_rng(123), 7, 32)
    b = build_task(name).sample(np.random.default_rng(123), 7, 32)  # a fresh task instance
    assert a.tokens.dtype == torch.int64
    assert torch.equal(a.tokens, b.tokens)
    assert (a.answer_start, a.length) == (b.answer_start, b.length)


@pytest.mark.parametrize("name", TASKS)
def test_different_seeds_give_different_tokens(name: str) -> None:
    a = build_task(name).sample(np.random.default_rng(1), 7, 32)
    b = build_task(name).sample(np.random.default_rng(2), 7, 32)
    assert a.tokens.shape == b.tokens.shape
    assert not torch.equal(a.tokens, b.tokens)
    # Not just one row: most of the 32 rows differ.
    assert (a.tokens != b.tokens).any(dim=1).sum() >= 30


def test_svo_minimal_pairs_are_deterministic() -> None:
    task = build_task("svo", svo_facts=2)
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
    task = build_task(name, n_symbols=3)
    assert task.vocab[-3:] == ["a", "b", "c"]
    prompts = ids(task, prompt)
    batch = task.assemble(prompts, task.answer(prompts), len(prompt.split()))
    assert task.decode(batch.tokens[0]) == f"{BOS} {prompt} {SEP} {answer} {EOS}"
    assert task.decode(batch.answer_targets[0]) == f"{answer} {EOS}"


def test_sort_orders_by_alphabet_position_not_by_character_code() -> None:
    """Symbols run a..z, A..Z, 0..9; sort follows that order (``'A' < 'a'`` in ASCII)."""
    task = build_task("sort", n_symbols=62)
    prompts = ids(task, "9 A z a Z 0")
    batch = task.assemble(prompts, task.answer(prompts), 6)
    assert split_text(task, batch.tokens[0])[1] == tokens_of("a z A Z 0 9")


@pytest.mark.parametrize("name", SYMBOL_TASKS)
@pytest.mark.parametrize("length", [1, 2, 5, 13, 40])
def test_symbol_task_samples_are_right_and_have_the_requested_length(
    name: str, length: int
) -> None:
    task = build_task(name, n_symbols=10)
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
    task = build_task(name, n_symbols=5)
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
    task = build_task(name, n_symbols=3)
    prompts = ids(task, "a b c")
    permuted = ids(task, "b a c")
    assert not np.array_equal(task.answer(prompts), task.answer(permuted))


# ---------------------------------------------------------------------------------------------
# SVO: parse the decoded text and check who did what to whom
# ---------------------------------------------------------------------------------------------


def parse_svo(words: list[str]) -> tuple[list[tuple[str, str, str]], str, str]:
    """Facts ``[(agent, verb, patient)]``, the asked role and the asked verb of a prompt.

    The agent is the noun right before the verb, the patient the noun after it; everything
    else in a fact must be an adjective.
    """
    assert words.count(STOP) >= 1
    *fact_parts, question = " ".join(words).split(f" {STOP}")
    question_words = question.split()
    assert len(question_words) == 2, question
    role, asked_verb = question_words
    facts = []
    for part in fact_parts:
        fact = part.split()
        verbs = [i for i, w in enumerate(fact) if w in VERBS]
        assert len(verbs) == 1, part
        v = verbs[0]
        nouns = [i for i, w in enumerate(fact) if w in NOUNS]
        assert nouns == [v - 1, len(fact) - 1], part  # noun verb ... noun
        assert all(w in ADJECTIVES for i, w in enumerate(fact) if i not in (v, *nouns)), part
        facts.append((fact[v - 1], fact[v], fact[-1]))
    return facts, role, asked_verb


def svo_truth(words: list[str]) -> str:
    """The right answer of an svo prompt, from its text alone."""
    facts, role, asked_verb = parse_svo(words)
    matching = [f for f in facts if f[1] == asked_verb]
    assert len(matching) == 1
    agent, _, patient = matching[0]
    assert role in (AGENT, PATIENT)
    return agent if role == AGENT else patient


def content_words(words: list[str]) -> int:
    """Nouns, verbs and adjectives of the facts (the question's verb is not content)."""
    facts_text = words[: len(words) - 2]
    return sum(w in NOUNS or w in VERBS or w in ADJECTIVES for w in facts_text)


def test_svo_hand_checked_prompt() -> None:
    """The parser itself, on prompts read by hand."""
    words = tokens_of("big dog bites old man . agent? bites")
    assert parse_svo(words) == ([("dog", "bites", "man")], AGENT, "bites")
    assert svo_truth(words) == "dog"
    assert svo_truth(tokens_of("big dog bites old man . patient? bites")) == "man"
    words = tokens_of("dog sees cat . small fox feeds red lazy king . agent? feeds")
    assert parse_svo(words)[0] == [("dog", "sees", "cat"), ("fox", "feeds", "king")]
    assert svo_truth(words) == "fox"
    assert content_words(words) == 9
    words = tokens_of("dog sees cat . small fox feeds red lazy king . patient? sees")
    assert svo_truth(words) == "cat"


@pytest.mark.parametrize(("facts", "length"), [(1, 3), (1, 8), (1, 20), (3, 9), (3, 14)])
def test_svo_answers_are_the_asked_role_of_the_asked_verb(facts: int, length: int) -> None:
    task = build_task("svo", svo_facts=facts)
    batch = task.sample(np.random.default_rng(length + 100 * facts), length, 200)
    assert batch.length == length
    # <bos> + length content words + one "." per fact + role + verb + <sep> + answer + <eos>
    assert batch.tokens.shape == (200, 1 + length + facts + 2 + 3)
    roles, asked_facts, answers = set(), set(), set()
    for row in batch.tokens:
        prompt, answer = split_text(task, row)
        fact_list, role, verb = parse_svo(prompt)
        assert len(fact_list) == facts
        assert content_words(prompt) == length
        nouns = [n for f in fact_list for n in (f[0], f[2])]
        assert len(set(nouns)) == 2 * facts  # distinct nouns, so the answer is unambiguous
        assert len({f[1] for f in fact_list}) == facts  # distinct verbs
        assert answer == [svo_truth(prompt)]
        roles.add(role)
        asked_facts.add([f[1] for f in fact_list].index(verb))
        answers.add(answer[0])
    assert roles == {AGENT, PATIENT}
    assert asked_facts == set(range(facts))  # every fact position gets asked
    assert len(answers) >= 10


def test_svo_adjectives_go_in_front_of_both_nouns() -> None:
    task = build_task("svo")
    batch = task.sample(np.random.default_rng(0), 8, 100)
    before_agent = before_patient = 0
    for row in batch.tokens:
        prompt, _ = split_text(task, row)
        verb_at = next(i for i, w in enumerate(prompt) if w in VERBS)
        before_agent += verb_at - 1
        before_patient += prompt.index(STOP) - verb_at - 2
        assert verb_at - 1 + prompt.index(STOP) - verb_at - 2 == 5  # 8 = 3 + 5 adjectives
    assert before_agent > 100 and before_patient > 100


def test_svo_three_facts_hand_checked_sample() -> None:
    """Print-and-read check of one 3-fact sample: its asked verb's fact decides the answer."""
    task = build_task("svo", svo_facts=3)
    batch = task.sample(np.random.default_rng(7), 11, 1)
    prompt, answer = split_text(task, batch.tokens[0])
    facts, role, verb = parse_svo(prompt)
    ((agent, _, patient),) = [f for f in facts if f[1] == verb]
    assert answer == [agent if role == AGENT else patient]
    other_nouns = {n for f in facts if f[1] != verb for n in (f[0], f[2])}
    assert answer[0] not in other_nouns


@pytest.mark.parametrize(("facts", "length"), [(1, 3), (1, 10), (3, 9), (3, 15)])
def test_svo_minimal_pairs_swap_the_asked_facts_nouns(facts: int, length: int) -> None:
    task = build_task("svo", svo_facts=facts)
    original, swapped = task.minimal_pairs(np.random.default_rng(facts * length), length, 100)
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
        facts_a, role, verb = parse_svo(words_a)
        facts_b, role_b, verb_b = parse_svo(words_b)
        assert (role, verb) == (role_b, verb_b)
        asked_a = next(f for f in facts_a if f[1] == verb)
        asked_b = next(f for f in facts_b if f[1] == verb)
        assert {words_a[i - 1], words_a[j - 1]} == {asked_a[0], asked_a[2]}  # the asked nouns
        assert asked_b == (asked_a[2], verb, asked_a[0])
        assert [f for f in facts_a if f[1] != verb] == [f for f in facts_b if f[1] != verb]
        # Both answers are right for their own prompt, and they differ.
        assert answer_a == [svo_truth(words_a)] and answer_b == [svo_truth(words_b)]
        assert answer_a != answer_b


# ---------------------------------------------------------------------------------------------
# Batch: inputs, answer slice and targets agree
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "length"), [("copy", 5), ("reverse", 1), ("sort", 9), ("svo", 6)])
def test_batch_views_are_consistent(name: str, length: int) -> None:
    task = build_task(name)
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
    assert (batch.answer_targets[:, -1] == task.token_id(EOS)).all()
    assert (batch.tokens[:, 0] == task.token_id(BOS)).all()
    # The answer (without <eos>) is the decoded answer text.
    for row in range(8):
        assert split_text(task, batch.tokens[row])[1] == task.decode(
            batch.answer_targets[row, :-1]
        ).split(" ")
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


@pytest.mark.parametrize(
    ("name", "options", "length", "minimum"),
    [
        ("copy", {}, 0, 1),
        ("reverse", {}, -1, 1),
        ("sort", {}, 0, 1),
        ("svo", {}, 2, 3),
        ("svo", {"svo_facts": 3}, 8, 9),
    ],
)
def test_length_below_minimum_raises_naming_it(
    name: str, options: dict, length: int, minimum: int
) -> None:
    task = build_task(name, **options)
    assert task.min_length == minimum
    with pytest.raises(ValueError, match=rf"length >= {minimum}, got length={length}\b") as error:
        task.sample(np.random.default_rng(0), length, 4)
    assert repr(name) in str(error.value)
    task.sample(np.random.default_rng(0), minimum, 4)  # the minimum itself works


def test_svo_minimal_pairs_check_the_length() -> None:
    with pytest.raises(ValueError, match=r"length >= 6, got length=5"):
        build_task("svo", svo_facts=2).minimal_pairs(np.random.default_rng(0), 5, 4)


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


@pytest.mark.parametrize("n_symbols", [-1, 0, 1, 63, 100])
@pytest.mark.parametrize("name", SYMBOL_TASKS)
def test_n_symbols_out_of_range_raises(name: str, n_symbols: int) -> None:
    with pytest.raises(ValueError, match=rf"data.n_symbols={n_symbols} is invalid.*2\.\.62"):
        build_task(name, n_symbols=n_symbols)


@pytest.mark.parametrize("n_symbols", [2, 62])
def test_n_symbols_at_the_bounds_works(n_symbols: int) -> None:
    task = build_task("copy", n_symbols=n_symbols)
    assert task.vocab_size == n_symbols + 3
    batch = task.sample(np.random.default_rng(0), 200, 4)
    assert len(batch.tokens[:, 1:201].unique()) == n_symbols


@pytest.mark.parametrize("facts", [-1, 0, 9, 20])
def test_svo_facts_out_of_range_raises(facts: int) -> None:
    with pytest.raises(ValueError, match=rf"data.svo_facts={facts} is invalid.*1\.\.8"):
        build_task("svo", svo_facts=facts)


def test_svo_facts_at_the_maximum_uses_every_noun_and_verb() -> None:
    task = build_task("svo", svo_facts=8)
    assert task.min_length == 24
    prompt, answer = split_text(task, task.sample(np.random.default_rng(0), 24, 1).tokens[0])
    assert sorted(w for w in prompt if w in NOUNS) == sorted(NOUNS)
    assert answer == [svo_truth(prompt)]


def test_registering_a_name_twice_raises() -> None:
    class Duplicate(Task):
        pass

    with pytest.raises(ValueError, match=r"task 'copy' is registered twice"):
        register("copy")(Duplicate)
    assert build_task("copy").name == "copy"
