"""Attention probabilities of every layer and head, recomputed with the model's own modules.

The fused attention kernel returns no probabilities, so a forward hook on each attention
module takes its input ``x`` and the forward pass's :class:`model.attention.AttentionContext`,
and recomputes ``softmax(s * q k^T / sqrt(Dh) + mask + bias)`` from the module's ``qkv``
projection, its length-aware query scale, the scheme's ``layer`` hook and the context's
:meth:`model.attention.AttentionContext.layer_mask`, the same calls the module makes; a scheme
whose own weights replace softmax (``Scores.weights``, stick-breaking) gives those instead.
"""

from __future__ import annotations

import torch
from torch import Tensor

from model import Transformer


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

    def capture(module: torch.nn.Module, inputs: tuple) -> None:
        x, context = inputs
        b, t, d = x.shape
        qkv = module.qkv(x).view(b, t, 3, module.n_heads, d // module.n_heads)
        q, k, _ = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, T, Dh)
        scores = context.position.layer(
            module.index, module.scale_queries(q, context), k, context.state
        )
        mask = context.layer_mask(q, scores.bias_window())  # whole, also on the blocked path
        if mask is None and context.is_causal:
            mask = torch.full((t, t), float("-inf")).triu(1)  # (T, T)
        scale = (1.0 if scores.scale is None else scores.scale) * q.shape[-1] ** -0.5
        logits = scale * scores.q.float() @ scores.k.float().transpose(-1, -2)  # (B, H, T, T)
        if scores.weights is not None:  # weights v instead of softmax, keys masked by the scheme
            maps.append(scores.weights(logits)[0])
            return
        if mask is not None:
            logits = logits + mask.float()
        maps.append(logits.softmax(-1)[0])

    hooks = [block.attn.register_forward_pre_hook(capture) for block in model.blocks]
    try:
        model(idx, prefix_len=prefix_len)
    finally:
        for hook in hooks:
            hook.remove()
    return maps
