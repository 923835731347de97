"""Multi-head self-attention on PyTorch's fused ``scaled_dot_product_attention`` (SDPA)."""

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig
from model.mask import add_layer_bias, block_mask, reverse, window_mask
from model.position.base import ALL, PositionScheme, Scores


@dataclass
class AttentionContext:
    """What every layer needs from one forward pass, built once by the transformer.

    Attributes:
        position: the position scheme; its ``layer`` hook runs in every layer.
        state: the scheme's per-forward state (:meth:`PositionScheme.prepare`).
        attn_mask: additive float mask ``(T, T)`` or ``(1 or B, H, T, T)`` from
            :func:`model.mask.attention_mask` (on the blocked path, a view from
            :func:`model.mask.toeplitz_mask`), or None.
        is_causal: let SDPA apply the causal mask itself (only when ``attn_mask`` is None).
        causal, prefix_len: the masking rule, for biases a layer adds.
        dtype: dtype of the scores (the autocast dtype under autocast).
        positions: the forward pass's positions (None: ``arange(T)``), for block masks.
        blocks: ``(queries, keys)`` windows of the blocked path from
            :func:`model.mask.query_blocks`, or None: attend to the whole sequence at once.
        keys_reversed: blocked path with ``attn_mask`` from :func:`model.mask.toeplitz_mask`,
            whose key axis runs backwards; else each block builds its own mask.
    """

    position: PositionScheme
    state: Any
    attn_mask: Tensor | None
    is_causal: bool
    causal: bool
    prefix_len: int | None
    dtype: torch.dtype
    positions: Tensor | None = None
    blocks: list[tuple[slice, slice]] | None = None
    keys_reversed: bool = False

    def layer_mask(self, q: Tensor, layer_bias: Tensor | None) -> Tensor | None:
        """One layer's additive mask for the whole sequence, keys in order: ``attn_mask`` plus
        the layer's own bias ``(1 or B, H, T, T)`` (or None); on the blocked path it is built
        whole (for analysis, as :mod:`lab.evaluation.attention_maps`). ``q``, the layer's
        ``(B, H, T, Dh)`` queries, gives ``T`` and the device."""
        if self.blocks is None:
            return add_layer_bias(
                self.attn_mask, layer_bias, self.causal, self.prefix_len, self.dtype
            )
        every = slice(0, q.shape[-2])
        return self.block_mask(q, layer_bias, every, every)

    def window_mask(self, q: Tensor, scores: Scores, queries: slice, keys: slice) -> Tensor:
        """One layer's additive mask on a window of the blocked path, ``(..., Tq, Tk)``, with
        the window of its own bias (of ``scores``) added. ``keys`` counts from the sequence's
        start; with ``keys_reversed`` the mask runs backwards along them, as the keys SDPA
        gets."""
        layer_window = scores.bias_window(queries, keys)  # (1 or B, H, Tq, Tk) or None
        if not self.keys_reversed:
            return self.block_mask(q, layer_window, queries, keys)
        mask = self.attn_mask[..., queries, reverse(keys, q.shape[-2])]
        if layer_window is None:
            return mask
        return mask + layer_window.flip(-1).to(self.dtype)

    def block_mask(
        self, q: Tensor, layer_window: Tensor | None, queries: slice, keys: slice
    ) -> Tensor:
        """:func:`model.mask.block_mask` of this forward pass."""
        t = q.shape[-2]
        return block_mask(
            self.position,
            self.positions,
            t,
            layer_window,
            self.causal,
            self.prefix_len,
            q.device,
            self.dtype,
            queries,
            keys,
        )


class SelfAttention(nn.Module):
    """Multi-head self-attention, ``softmax(s * q k^T / sqrt(Dh) + bias) v`` (Vaswani et al.
    2017), with q, k, bias and ``s`` (default 1) from the position scheme's ``layer`` hook.

    Input and output are ``(B, T, D)``. On the blocked path (long sequences with a mask, see
    :mod:`model.mask`) each block of queries attends with its window's mask.
    """

    def __init__(self, config: ModelConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.out = nn.Linear(config.d_model, config.d_model, bias=False)
        self.dropout = config.dropout

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads)  # (B, T, 3, H, Dh)
        # each (B, H, T, Dh); the backward is one stack into qkv's layout: no zero-fills, no copy
        q, k, v = (part.transpose(1, 2) for part in qkv.unbind(2))
        scores = context.position.layer(self.index, q, k, context.state)
        scale = None if scores.scale is None else scores.scale * q.shape[-1] ** -0.5
        if context.blocks is None:
            bias, logits = (scores.bias, None) if scores.window is None else scores.window(ALL, ALL)
            mask = context.layer_mask(q, bias)
            is_causal = context.is_causal and mask is None
            if logits is not None:
                y = self.attend_logits(logits, v, mask, is_causal)
            else:
                y = self.attend(scores.q, scores.k, v, mask, is_causal, scale)  # (B, H, T, Dh)
            return self.out(y.transpose(1, 2).reshape(b, t, d))  # (B, T, D)
        k, v = scores.k, v
        if context.keys_reversed:
            k, v = k.flip(-2), v.flip(-2)  # key m is key T - 1 - m, as in the mask
        y = v.new_empty(b, t, self.n_heads, d // self.n_heads)  # (B, T, H, Dh)
        for queries, keys in context.blocks:
            mask = context.window_mask(q, scores, queries, keys)
            window = reverse(keys, t) if context.keys_reversed else keys
            part = self.attend(
                scores.q[:, :, queries], k[:, :, window], v[:, :, window], mask, False, scale
            )  # (B, H, Tq, Dh)
            y[:, queries] = part.transpose(1, 2)  # (B, Tq, H, Dh)
        return self.out(y.view(b, t, d))  # (B, T, D)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        is_causal: bool = False,
        scale: float | None = None,
    ) -> Tensor:
        """SDPA of queries ``(B, H, Tq, Dh)`` over keys and values ``(B, H, Tk, Dh)``."""
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal,
            scale=scale,
        )

    def attend_logits(
        self, logits: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool
    ) -> Tensor:
        """``softmax(logits + mask) v`` from a scheme's scores ``(B, H, T, T)`` (the causal mask
        built here when ``is_causal``), as SDPA's math path computes it less one matmul:
        ``(B, H, T, Dh)``."""
        if is_causal:
            t = logits.shape[-1]
            mask = window_mask(t, True, None, None, logits.device, logits.dtype)  # (T, T)
        scores = logits if mask is None else logits + mask
        weights = F.dropout(scores.softmax(dim=-1), self.dropout, self.training)
        return weights.to(v.dtype) @ v
