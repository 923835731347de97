"""The order-sensitive subject-verb-object task: who did what to whom.

A prompt states ``n_facts`` facts of the form *subject verb object*, each noun preceded by
random adjectives, then asks for the agent (subject) or the patient (object) of one verb::

    <bos> big dog bites old man . agent? bites <sep> dog <eos>
    <bos> big man bites old dog . agent? bites <sep> man <eos>     (its minimal pair)

``length`` is the number of content words (nouns, verbs, adjectives); lengths above
``3 * n_facts`` add adjectives at random places, so the same rule must hold at any length. Both
nouns of the asked fact are in the prompt, and swapping them (the minimal pair) keeps the bag of
tokens, so a model blind to order is at chance (50%) and never answers both members of a pair.
"""

import numpy as np

from data.base import BOS, EOS, SEP, Batch, Task, register

NOUNS = ("dog", "man", "cat", "woman", "bird", "child", "horse", "girl")
NOUNS += ("boy", "fox", "king", "queen", "wolf", "bear", "mouse", "lion")
VERBS = ("bites", "chases", "sees", "helps", "follows", "calls", "pushes", "feeds")
ADJECTIVES = ("big", "small", "old", "young", "red", "brown", "happy", "angry")
ADJECTIVES += ("tall", "quiet", "fast", "lazy")
AGENT, PATIENT, STOP = "agent?", "patient?", "."


@register("svo")
class SVOTask(Task):
    """Answer the agent or patient of a verb, given ``n_facts`` facts with modifiers.

    Raises:
        ValueError: ``n_facts`` outside ``1 .. 8`` (facts use distinct verbs and nouns).
    """

    supports_minimal_pairs = True

    def __init__(self, n_facts: int = 1) -> None:
        if not 1 <= n_facts <= len(VERBS):
            raise ValueError(f"data.svo_facts={n_facts} is invalid; it must be in 1..{len(VERBS)}")
        self.n_facts = n_facts
        self.vocab = [BOS, SEP, EOS, STOP, AGENT, PATIENT, *NOUNS, *VERBS, *ADJECTIVES]
        self.min_length = 3 * n_facts

    def generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        prompts, answers, _, _ = self._generate(rng, length, n)
        return prompts, answers

    def minimal_pairs(self, rng: np.random.Generator, length: int, n: int) -> tuple[Batch, Batch]:
        """``n`` prompts and the same prompts with the asked fact's subject and object swapped.

        Row ``r`` of the two batches differ only in those two noun tokens, and their answers
        differ (the nouns of a fact are distinct).
        """
        self.check_length(length)
        prompts, answers, subject_at, object_at = self._generate(rng, length, n)
        swapped = prompts.copy()
        rows = np.arange(n)
        swapped[rows, subject_at] = prompts[rows, object_at]
        swapped[rows, object_at] = prompts[rows, subject_at]
        other = np.where(
            answers[:, 0] == prompts[rows, subject_at],
            prompts[rows, object_at],
            prompts[rows, subject_at],
        )[:, None]  # (n, 1): the other noun
        return self.assemble(prompts, answers, length), self.assemble(swapped, other, length)

    def _generate(self, rng: np.random.Generator, length: int, n: int) -> tuple[np.ndarray, ...]:
        """Prompts ``(n, P)``, answers ``(n, 1)``, and the columns of the asked fact's nouns."""
        ids = {token: i for i, token in enumerate(self.vocab)}
        facts = self.n_facts
        n_modifiers = length - 3 * facts
        prompts, answers, subject_at, object_at = [], [], [], []
        for _ in range(n):
            nouns = rng.choice(NOUNS, size=2 * facts, replace=False)
            verbs = rng.choice(VERBS, size=facts, replace=False)
            per_phrase = rng.multinomial(n_modifiers, np.full(2 * facts, 1.0 / (2 * facts)))
            asked = rng.integers(facts)
            role = AGENT if rng.integers(2) == 0 else PATIENT
            words: list[str] = []
            for f in range(facts):
                for slot, noun in ((2 * f, nouns[2 * f]), (2 * f + 1, nouns[2 * f + 1])):
                    words += list(rng.choice(ADJECTIVES, size=per_phrase[slot]))
                    if f == asked:
                        (subject_at if slot % 2 == 0 else object_at).append(len(words))
                    words.append(noun)
                    if slot % 2 == 0:
                        words.append(verbs[f])
                words.append(STOP)
            words += [role, verbs[asked]]
            prompts.append([ids[w] for w in words])
            answers.append([ids[nouns[2 * asked + (role == PATIENT)]]])
        return np.array(prompts), np.array(answers), np.array(subject_at), np.array(object_at)
