"""Which rotary frequencies a trained RoPE model uses, and what it scores without its lowest
ones (``eval.diagnostics=full``).

Barbero et al. 2025 ("Round and Round We Go! What makes Rotary Positional Encodings useful?")
found that trained models put most of their query-key mass on RoPE's lowest frequencies, which
act as semantic channels that rotate little within the context, and proposed p-RoPE: rotating
only the highest fraction ``p`` of the frequencies (the rest set to zero). Here, per layer, the
share of the mean absolute score ``|q_f . k_f|`` that each rotated pair ``f`` carries (pair
``f`` is dimensions ``(f, f + R/2)``, its frequency ``theta^(-2f/R)``, highest first), over the
answer queries and the keys they see; and the exact-match at each length when the lowest
frequencies are set to zero at evaluation, without retraining (the RoPE option ``p``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from data import Batch, Task
from data.streams import evaluation_set
from lab.diagnostics.measure import chunk_rows
from lab.evaluation.attention_maps import captured_attention
from lab.evaluation.extrapolation import evaluate_batch
from model import Transformer

P_VALUES = (0.75, 0.5)
"""Fractions of the frequencies p-RoPE keeps at evaluation (the lowest ``1 - p`` set to zero)."""


def uses_rope(model: Transformer) -> bool:
    """``model`` is a RoPE model with RoPE in every layer and head (no layout, head split or
    NoPE layers)."""
    config = model.config
    plain = config.layout is None and config.heads is None and not config.nope_every
    return config.position == "rope" and plain


@torch.no_grad()
def pair_shares(
    model: Transformer, batch: Batch, batch_tokens: int | None = None
) -> list[list[float]]:
    """Per layer, the share of the mean ``|q_f . k_f|`` carried by each rotated pair ``f``
    (highest frequency first), means over heads, answer queries and the keys each sees
    (causal): ``[[share per pair] per layer]``, each list summing to 1.

    The rows go through the model in chunks of at most ``batch_tokens`` tokens (None: no
    token bound) and of :func:`lab.diagnostics.measure.chunk_rows` (the attention-weight
    budget), at least one row; the per-pair sums add up over chunks, so the shares are those
    of one pass over every row (to float rounding), at a memory bounded by the chunk."""
    model.eval()
    n, t = batch.inputs.shape
    rows = chunk_rows(model.config.n_heads, t - batch.answer_slice.start, t)
    if batch_tokens is not None:
        rows = min(rows, max(1, batch_tokens // t))
    sums: list[Tensor] = []  # per layer: float64 (R/2,) sums of |q_f . k_f| over every entry
    for start in range(0, n, rows):
        _add_pair_sums(model, batch.rows(slice(start, start + rows)), sums)
    return [[round(float(v), 6) for v in total / total.sum()] for total in sums]


def _add_pair_sums(model: Transformer, chunk: Batch, sums: list[Tensor]) -> None:
    """Add one chunk's per-layer, per-pair sums of ``|q_f . k_f|`` (answer queries, the keys
    each sees, every head) into ``sums`` (one float64 tensor per layer, made on first use)."""
    answer = chunk.answer_slice

    def on_layer(index: int, module: torch.nn.Module, x: Tensor, context: Any) -> None:
        b, t, d = x.shape
        qkv = module.qkv(x).view(b, t, 3, module.n_heads, d // module.n_heads)
        q, k, _ = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, T, Dh)
        scores = context.position.layer(index, q, k, context.state)
        half = context.state[0].shape[-1]  # R / 2 rotated pairs
        q_rot, k_rot = scores.q[:, :, answer].float(), scores.k.float()
        seen = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()[answer]  # (Q, T)
        mass = []
        for f in range(half):
            dims = [f, f + half]
            dot = q_rot[..., dims] @ k_rot[..., dims].transpose(-1, -2)  # (B, H, Q, T)
            mass.append(dot.abs()[..., seen].double().sum())
        total = torch.stack(mass).cpu()
        if index == len(sums):
            sums.append(total)
        else:
            sums[index] += total

    with captured_attention(model, on_layer):
        model(chunk.inputs.to(next(model.parameters()).device), prefix_len=chunk.answer_start)


def p_rope_exact_match(
    model: Transformer, task: Task, lengths: list[int], seed: int, e: Any, precision: str
) -> dict[str, list[float | None]]:
    """``{str(p): [exact-match per length]}`` for each of :data:`P_VALUES`, the model's other
    RoPE options as evaluated, on the same test sequences (``e.samples``) and in the same
    ``precision`` as its evaluation."""
    found = {}
    for p in P_VALUES:
        variant = model.at_evaluation({"p": p})
        found[str(p)] = []
        for n in lengths:
            batch = evaluation_set(task, seed, n, e.samples)
            result = evaluate_batch(variant, batch, e.batch_tokens, precision=precision)
            found[str(p)].append(result.exact_match)
    return found


def rope_record(
    model: Transformer,
    task: Task,
    train_max: int,
    lengths: list[int],
    seed: int,
    e: Any,
    precision: str,
) -> dict[str, Any] | None:
    """The ``rope`` entry of ``eval.json``'s ``diagnostics`` (None for another scheme):
    ``pair_shares`` at the longest training length (in chunks of ``e.batch_tokens``),
    ``low_frequency_share`` (the lowest quarter
    of the pairs, mean over layers), and ``p_rope`` (:func:`p_rope_exact_match` at ``lengths``)."""
    if not uses_rope(model):
        return None
    batch = evaluation_set(task, seed, train_max, e.diagnostic_samples)
    shares = pair_shares(model, batch, e.batch_tokens)
    quarter = max(1, len(shares[0]) // 4)
    low = sum(sum(layer[-quarter:]) for layer in shares) / len(shares)
    exact = p_rope_exact_match(model, task, lengths, seed, e, precision)
    return {
        "pair_shares": shares,
        "low_frequency_share": round(low, 6),
        "lengths": lengths,
        "p_rope": exact,
    }
