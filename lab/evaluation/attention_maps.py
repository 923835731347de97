"""Attention probabilities of every layer and head, recomputed with the model's own modules.

The fused attention kernel returns no probabilities, so a forward hook on each attention
module takes its input ``x`` and the forward pass's :class:`model.attention.AttentionContext`,
and recomputes ``softmax(s * q k^T / sqrt(Dh) + mask + bias)`` from the module's ``qkv``
projection, its length-aware query scale, the scheme's ``layer`` hook and the context's
:meth:`model.attention.AttentionContext.layer_mask`, the same calls the module makes; a scheme
whose own weights replace softmax (``Scores.weights``, stick-breaking) gives those instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from model import Transformer

ALL_ROWS = slice(None)


def layer_weights(
    module: torch.nn.Module, x: Tensor, context: object, rows: slice = ALL_ROWS
) -> tuple[Tensor, Tensor]:
    """One layer's attention weights for the query rows ``rows``, and which keys they see.

    Args:
        module: a :class:`model.attention.SelfAttention`.
        x: its input, ``(B, T, D)``.
        context: the forward pass's :class:`model.attention.AttentionContext`.
        rows: the query positions wanted (all by default); only those rows of the scores are
            formed, except for a scheme's own weights (stick-breaking), which need all rows.

    Returns:
        ``(weights, visible)``: float32 ``(B, H, Q, T)``, row ``m`` query ``rows[m]``'s
        distribution over the keys (a sub-probability for stick-breaking), and bool
        ``(1 or B, 1 or H, Q, T)``: the keys that query may attend to (mask not ``-inf``).
    """
    b, t, d = x.shape
    qkv = module.qkv(x).view(b, t, 3, module.n_heads, d // module.n_heads)
    q, k, _ = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, T, Dh)
    scores = context.position.layer(
        module.index, module.scale_queries(q, context), k, context.state
    )
    scale = (1.0 if scores.scale is None else scores.scale) * q.shape[-1] ** -0.5
    if scores.weights is not None:  # weights v instead of softmax, keys masked by the scheme
        logits = scale * scores.q.float() @ scores.k.float().transpose(-1, -2)  # (B, H, T, T)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        return scores.weights(logits)[:, :, rows], causal[None, None, rows]
    mask = context.layer_mask(q, scores.bias_window())  # whole, also on the blocked path
    if mask is None and context.is_causal:
        mask = torch.full((t, t), float("-inf"), device=x.device).triu(1)  # (T, T)
    logits = scale * scores.q[:, :, rows].float() @ scores.k.float().transpose(-1, -2)
    if mask is None:
        return logits.softmax(-1), torch.ones_like(logits[:1, :1], dtype=torch.bool)
    mask = mask.float()
    mask = (mask if mask.dim() == 4 else mask[None, None])[:, :, rows]  # (1|B, 1|H, Q, T)
    return (logits + mask).softmax(-1), mask > float("-inf")


@contextmanager
def captured_attention(
    model: Transformer, on_layer: Callable[[int, torch.nn.Module, Tensor, object], None]
) -> Iterator[None]:
    """Within the block, every forward pass of ``model`` calls ``on_layer(index, module, x,
    context)`` before each attention layer runs (a forward pre-hook; the pass itself is
    unchanged). The hooks are removed on exit, also after an error."""
    hooks = [
        block.attn.register_forward_pre_hook(
            lambda module, inputs, i=i: on_layer(i, module, *inputs)
        )
        for i, block in enumerate(model.blocks)
    ]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


@torch.no_grad()
def attention_maps(model: Transformer, idx: Tensor, prefix_len: int | None = None) -> list[Tensor]:
    """Attention probabilities of one forward pass.

    Args:
        model: a transformer (put in eval mode here).
        idx: token ids, int64 ``(1, T)``.
        prefix_len: as in :meth:`Transformer.forward`.

    Returns:
        One float32 ``(H, T, T)`` per layer: row ``m`` is query ``m``'s distribution over keys.
    """
    model.eval()
    maps: list[Tensor] = []

    def capture(index: int, module: torch.nn.Module, x: Tensor, context: object) -> None:
        maps.append(layer_weights(module, x, context)[0][0])

    with captured_attention(model, capture):
        model(idx, prefix_len=prefix_len)
    return maps
