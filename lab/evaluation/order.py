"""Order-sensitivity probes: an order-blindness check and swapped (minimal) pairs.

Permutation probe. Take real prompts, shuffle their content tokens (everything before
``<sep>`` except a leading ``<bos>``, which stays put like ``<sep>``), feed each prompt through
``<sep>`` (no answer tokens), and measure how far the next-token distribution at the first answer
position (the ``<sep>`` position, logit index ``answer_start - 1``) moves: the mean total
variation distance ``0.5 * sum_v |p_v - q_v|`` and the share of prompts whose argmax changes.

A bidirectional model without positions (``ModelConfig(causal=False, position="none")``) is
permutation-equivariant: permuting the tokens before ``<sep>`` permutes their outputs and leaves
the output *at* ``<sep>`` unchanged (attention there is a weighted sum over a set), so its
distance is float noise (< :data:`ORDER_BLIND_TVD`). A causal model without positions is not
order-blind: the causal mask gives every earlier token a different context, so the ``<sep>``
output sees different hidden states after a shuffle. Every positional scheme moves it too. Only
the yes/no verdict is reported: the size of the distance is largely fixed by the task (on
``copy`` it is about the share of prompts whose first symbol moves), not a per-scheme result.

Minimal pairs (every task with ``supports_minimal_pairs``: ``svo``, ``copy``, ``reverse``). Each
pair swaps two prompt items: the bag of tokens is unchanged and the answer changes, so a model
blind to order answers at most one member of every pair (pair accuracy 0%). Answers are scored
teacher-forced (equal to greedy decoding); a bidirectional model reads them as a prefix LM, so
it cannot see them in its input. ``eval.py`` probes pairs at every evaluated length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from data import BOS, Batch, Task
from data.streams import PROBE_STREAM, data_rng
from lab.evaluation.extrapolation import unsupported_reason
from lab.evaluation.metrics import score_answers

ORDER_BLIND_TVD = 1e-5
"""Mean total variation distance below which a model counts as blind to prompt order."""


@dataclass
class PermutationProbe:
    """Result of :func:`permutation_probe`.

    Attributes:
        length: task length of the probed prompts.
        samples: prompts probed (0 when the probe could not run).
        tvd: mean total variation distance between the two next-token distributions, in [0, 1].
        argmax_changed: share of prompts whose argmax at the ``<sep>`` position changed.
        reason: why the probe could not run (``tvd`` is then None).
    """

    length: int
    samples: int
    tvd: float | None
    argmax_changed: float | None
    reason: str | None = None

    @property
    def order_blind(self) -> bool | None:
        """``tvd < ORDER_BLIND_TVD``; None when the probe could not run."""
        return None if self.tvd is None else self.tvd < ORDER_BLIND_TVD


@dataclass
class MinimalPairs:
    """Result of :func:`minimal_pair_accuracy`.

    Attributes:
        length: task length of the pairs.
        pairs: number of pairs (each has two members).
        member_accuracy: exact-match over all ``2 * pairs`` members (None when unsupported).
        pair_accuracy: share of pairs with both members right (None when unsupported).
        reason: why the pairs could not be evaluated.
    """

    length: int
    pairs: int
    member_accuracy: float | None
    pair_accuracy: float | None
    reason: str | None = None


def content_slice(task: Task, batch: Batch) -> slice:
    """Columns of ``batch.tokens`` holding prompt content: before ``<sep>``, after any ``<bos>``."""
    first = 0
    if BOS in task.vocab:
        bos = task.token_id(BOS)
        first = int(bool((batch.tokens[:, 0] == bos).all()))
    return slice(first, batch.answer_start - 1)


def non_identity_permutations(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """``n`` uniformly random permutations of ``range(size)``, redrawn until none is the identity.

    Returns:
        int64 ``(n, size)``; row ``r`` lists which original column goes to each column.

    Raises:
        ValueError: ``size < 2`` (the identity is the only permutation).
    """
    if size < 2:
        raise ValueError(f"cannot permute {size} token(s) non-trivially; need at least 2")
    perms = np.argsort(rng.random((n, size)), axis=1)  # (n, size)
    identity = np.arange(size)
    while (same := (perms == identity).all(axis=1)).any():
        perms[same] = np.argsort(rng.random((int(same.sum()), size)), axis=1)
    return perms


def permute_content(batch: Batch, columns: slice, perms: np.ndarray) -> Batch:
    """``batch`` with the tokens in ``columns`` reordered row by row by ``perms`` ``(B, C)``."""
    tokens = batch.tokens.clone()  # (B, S)
    index = torch.from_numpy(perms).to(tokens.device)  # (B, C)
    tokens[:, columns] = torch.gather(batch.tokens[:, columns], 1, index)
    return replace(batch, tokens=tokens)


@torch.inference_mode()
def permutation_probe(
    model: torch.nn.Module,
    task: Task,
    length: int,
    samples: int,
    seed: int,
    batch_tokens: int = 32768,
) -> PermutationProbe:
    """How much shuffling the prompt moves the next-token distribution at ``<sep>``.

    Prompts come from ``data_rng(seed, PROBE_STREAM, length)``; the same generator then draws one
    non-identity permutation per row. The forward passes run in float32 (no autocast), so an
    order-blind model measures at float-noise level.

    Args:
        model: a :class:`model.Transformer` (or anything with ``.config``, ``.position`` and the
            same forward): int64 ``(B, T)`` -> logits ``(B, T, V)``.
        task: the task that makes the prompts.
        length: task length of the prompts (the longest training length in ``eval.py``).
        samples: number of prompts.
        seed: evaluation seed.
        batch_tokens: tokens per forward pass.

    Returns:
        A :class:`PermutationProbe`; ``tvd`` is None (with a reason) when the prompt has fewer
        than 2 content tokens or the position scheme cannot encode the sequence.
    """
    rng = data_rng(seed, PROBE_STREAM, length)
    batch = task.sample(rng, length, samples)
    columns = content_slice(task, batch)
    width = columns.stop - columns.start
    prompt_tokens = batch.answer_start  # <bos>, prompt and <sep>: the model sees no answer token
    reason = unsupported_reason(model, prompt_tokens)
    if width < 2:
        reason = f"a prompt at length {length} has {width} content token(s); nothing to permute"
    if reason is not None:
        return PermutationProbe(length, 0, None, None, reason)
    shuffled = permute_content(batch, columns, non_identity_permutations(rng, samples, width))
    device = next(model.parameters()).device
    at = batch.answer_start - 1  # logit index of the <sep> position
    rows = max(1, batch_tokens // prompt_tokens)
    was_training = model.training
    model.eval()
    tvd_sum = changed = 0.0
    for start in range(0, samples, rows):
        chunk = slice(start, start + rows)
        original = model(batch.tokens[chunk, :prompt_tokens].to(device))[:, at].float()  # (b, V)
        permuted = model(shuffled.tokens[chunk, :prompt_tokens].to(device))[:, at].float()
        p, q = original.softmax(dim=-1), permuted.softmax(dim=-1)  # (b, V)
        tvd_sum += float(0.5 * (p - q).abs().sum(dim=-1).double().sum())
        changed += float((original.argmax(dim=-1) != permuted.argmax(dim=-1)).sum())
    model.train(was_training)
    return PermutationProbe(length, samples, tvd_sum / samples, changed / samples)


@torch.inference_mode()
def minimal_pair_accuracy(
    model: torch.nn.Module,
    task: Task,
    length: int,
    pairs: int,
    seed: int,
    batch_tokens: int = 32768,
) -> MinimalPairs | None:
    """Exact-match on both members of ``task.minimal_pairs``.

    The pairs come from ``task.minimal_pairs(data_rng(seed, PROBE_STREAM, length), length,
    pairs)``. Scored teacher-forced (equal to greedy decoding, see :mod:`lab.evaluation.metrics`); a
    bidirectional model reads them as a prefix LM, so it never sees the answer.

    Returns:
        A :class:`MinimalPairs` (with a reason when ``length`` has no pairs or the scheme cannot
        encode it), or None when the task has no minimal pairs
        (``task.supports_minimal_pairs`` is false).
    """
    if not task.supports_minimal_pairs:
        return None
    try:
        first, second = task.minimal_pairs(data_rng(seed, PROBE_STREAM, length), length, pairs)
    except ValueError as error:
        return MinimalPairs(length, pairs, None, None, str(error))
    reason = unsupported_reason(model, first.inputs.shape[1])
    if reason is not None:
        return MinimalPairs(length, pairs, None, None, reason)
    device = next(model.parameters()).device
    rows = max(1, batch_tokens // first.inputs.shape[1])
    was_training = model.training
    model.eval()
    members = both = 0
    for start in range(0, pairs, rows):
        hits = []
        for batch in (first, second):
            rows_batch = batch.rows(slice(start, start + rows)).to(device)
            logits = model(rows_batch.inputs, prefix_len=rows_batch.answer_start)  # (b, S-1, V)
            hits.append(score_answers(logits, rows_batch).exact)  # (b,) bool
        members += int(hits[0].sum() + hits[1].sum())
        both += int((hits[0] & hits[1]).sum())
    model.train(was_training)
    return MinimalPairs(length, pairs, members / (2 * pairs), both / pairs)
