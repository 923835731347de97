"""The order-sensitive subject-verb-object task: who did it, in either voice.

A prompt states one fact, in the active or the passive voice, with adjectives before its nouns,
then asks for its agent (who did it)::

    <bos> big dog bites old man . agent? bites <sep> dog <eos>
    <bos> big man bites old dog . agent? bites <sep> man <eos>                  (minimal pair)
    <bos> old man is-bitten-by big dog . agent? is-bitten-by <sep> dog <eos>    (passive)

``length`` is the number of content words (two nouns, the verb, the adjectives); lengths above 3
add adjectives at random places, so the same rule must hold at any length. The voice is uniform,
so the agent is the first noun or the last one with probability 1/2 each whatever the length:
the position rules that scored 100% on the active-only task this one replaced (agent = first
noun, patient = last noun, the noun at a fixed offset before ``<sep>``) score 50% here
(:mod:`data.shortcuts` holds them). The model has to read the voice, then find the right noun by
its order. Swapping the two nouns (the minimal pair) keeps the bag of tokens and flips the
answer, so a model blind to order is at chance (50%) and never answers both members.

Why only the agent is asked: asking either role as well makes the answer's place the XOR of
voice and role, and in measured runs (lengths 3..12, lr 1e-3) NoPE and learned models stayed at
50% for 1000 steps, past this project's training budget.
"""

from collections.abc import Sequence

import numpy as np

from data.base import BOS, EOS, SEP, Batch, Task, register

NOUNS = ("dog", "man", "cat", "woman", "bird", "child", "horse", "girl")
NOUNS += ("boy", "fox", "king", "queen", "wolf", "bear", "mouse", "lion")
VERBS = (  # (active form, passive form)
    ("bites", "is-bitten-by"),
    ("chases", "is-chased-by"),
    ("sees", "is-seen-by"),
    ("helps", "is-helped-by"),
    ("follows", "is-followed-by"),
    ("calls", "is-called-by"),
    ("pushes", "is-pushed-by"),
    ("feeds", "is-fed-by"),
)
ADJECTIVES = ("big", "small", "old", "young", "red", "brown", "happy", "angry")
ADJECTIVES += ("tall", "quiet", "fast", "lazy")
AGENT, STOP = "agent?", "."


@register("svo")
class SVOTask(Task):
    """Answer the agent of one active or passive fact with modifiers.

    Prompt layout (``length + 3`` tokens): the fact's words (adjectives, a noun, the verb form,
    adjectives, a noun), ``.``, ``agent?``, the verb form again.
    """

    min_length = 3
    train_lengths = (3, 12)
    supports_minimal_pairs = True

    def __init__(self, options: object = None) -> None:
        super().__init__(options)
        forms = [form for pair in VERBS for form in pair]
        self.vocab = [BOS, SEP, EOS, STOP, AGENT, *NOUNS, *forms, *ADJECTIVES]

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        prompts, answers, _, _ = self._generate(rng, length, n)
        return prompts, answers

    def solve(self, prompt: Sequence[str]) -> list[str]:
        """The agent: the first noun in the active voice, the last one in the passive."""
        nouns = [word for word in prompt if word in NOUNS]
        return [nouns[-1] if prompt[-1].startswith("is-") else nouns[0]]

    def read_positions(self, prompt: Sequence[str]) -> list[list[int]]:
        """The agent noun's place: the first noun in the active voice, the last in the passive
        (the voice read from the verb form that ends the prompt, as :meth:`solve` does)."""
        nouns = [i for i, word in enumerate(prompt) if word in NOUNS]
        return [[nouns[-1] if prompt[-1].startswith("is-") else nouns[0]]]

    def minimal_pairs(self, rng: np.random.Generator, length: int, n: int) -> tuple[Batch, Batch]:
        """``n`` prompts and the same prompts with the fact's two nouns swapped.

        Row ``r`` of the two batches differ only in those two noun tokens, and their answers
        differ (the two nouns are distinct).
        """
        self.check_length(length)
        prompts, answers, first_at, second_at = self._generate(rng, length, n)
        rows = np.arange(n)
        swapped = prompts.copy()
        swapped[rows, first_at] = prompts[rows, second_at]
        swapped[rows, second_at] = prompts[rows, first_at]
        first, second = prompts[rows, first_at], prompts[rows, second_at]
        other = np.where(answers[:, 0] == first, second, first)[:, None]  # (n, 1)
        return self.assemble(prompts, answers, length), self.assemble(swapped, other, length)

    def _generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        """Prompts ``(n, length + 3)``, answers ``(n, 1)``, and the columns of the first and
        the second noun ``(n,)`` each."""
        ids = {token: i for i, token in enumerate(self.vocab)}
        prompts, answers, first_at, second_at = [], [], [], []
        for _ in range(n):
            nouns = rng.choice(NOUNS, size=2, replace=False)
            form = VERBS[rng.integers(len(VERBS))][rng.integers(2)]
            passive = form.startswith("is-")
            before_first = rng.binomial(length - 3, 0.5)
            words = list(rng.choice(ADJECTIVES, size=before_first))
            first_at.append(len(words))
            words += [nouns[0], form, *rng.choice(ADJECTIVES, size=length - 3 - before_first)]
            second_at.append(len(words))
            words += [nouns[1], STOP, AGENT, form]
            prompts.append([ids[w] for w in words])
            answers.append([ids[nouns[int(passive)]]])
        return np.array(prompts), np.array(answers), np.array(first_at), np.array(second_at)
