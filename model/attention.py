"""Multi-head self-attention on PyTorch's fused ``scaled_dot_product_attention`` (SDPA)."""

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.blocked_attention import BlockedPath
from model.config import ModelConfig
from model.flex_attention import FlexPath
from model.mask import add_layer_bias, window_mask
from model.position.base import ALL, PositionScheme, Scores
from model.softmax_scale import SoftmaxScale

PAD_VALUES_FROM_KEYS = 256
"""On the CPU, values narrower than the queries and keys (PoPE's doubled width) are zero-padded
to their width from this many keys on, so that SDPA takes its fused kernel, which needs one
head width, instead of its math path; the output drops the padding again. Measured on a 2-core
AMD Zen 4 VM with torch 2.13 (q, k width 64, v width 32, 4 heads, 4,096 tokens a batch, causal,
alternating calls, medians of 21): from 256 keys the padded call ran 1.25-1.66x the speed in
training and 2.4-3.0x in evaluation at 1 and 2 threads; at 32-192 keys it ran 0.75-1.22x in
training, so shorter inputs keep the unpadded call (and every committed PoPE result its floats).
Not with dropout in training: SDPA then takes its general path either way, and padding only adds
work (measured 0.90x the speed at 256 keys)."""


@dataclass
class AttentionContext:
    """What every layer needs from one forward pass, built once by the transformer.

    Attributes:
        position: the position scheme; its ``layer`` hook runs in every layer.
        state: the scheme's per-forward state (:meth:`PositionScheme.prepare`).
        attn_mask: additive float mask ``(T, T)`` or ``(1 or B, H, T, T)`` from
            :func:`model.mask.attention_mask`, or None.
        is_causal: let SDPA apply the causal mask itself (only when ``attn_mask`` is None).
        causal, prefix_len: the masking rule, for biases a layer adds.
        dtype: dtype of the scores (the autocast dtype under autocast).
        blocked: the long-sequence path (:func:`model.blocked_attention.plan`), which then
            builds every mask itself; None: attend to the whole sequence at once.
        flex: the FlexAttention path (:func:`model.flex_attention.plan`), which then masks
            and biases the scores itself; None: SDPA.
    """

    position: PositionScheme
    state: Any
    attn_mask: Tensor | None
    is_causal: bool
    causal: bool
    prefix_len: int | None
    dtype: torch.dtype
    blocked: BlockedPath | None = None
    flex: FlexPath | None = None

    def layer_mask(self, q: Tensor, layer_bias: Tensor | None) -> Tensor | None:
        """One layer's additive mask for the whole sequence, keys in order: ``attn_mask`` plus
        the layer's own bias ``(1 or B, H, T, T)`` (or None); on the blocked path it is built
        whole (for analysis, as :mod:`lab.evaluation.attention_maps`). ``q``, the layer's
        ``(B, H, T, Dh)`` queries, gives ``T`` and the device."""
        if self.blocked is not None:
            return self.blocked.whole_mask(q, layer_bias)
        if self.flex is not None:
            return self.flex.whole_mask(q, layer_bias)
        return add_layer_bias(self.attn_mask, layer_bias, self.causal, self.prefix_len, self.dtype)


class SelfAttention(nn.Module):
    """Multi-head self-attention, ``softmax(s * q k^T / sqrt(Dh) + bias) v`` (Vaswani et al.
    2017), with q, k, bias and ``s`` (default 1) from the position scheme's ``layer`` hook.

    Input and output are ``(B, T, D)``. On the blocked path (long sequences with a mask, see
    :mod:`model.blocked_attention`) each block of queries attends with its window's mask. With
    ``model.softmax_scale`` the queries are first scaled by the log of the keys they see
    (:mod:`model.softmax_scale`); a scheme that computes its own weights instead of softmax
    (``Scores.weights``: stick-breaking) replaces SDPA by ``weights v``.
    """

    def __init__(self, config: ModelConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.out = nn.Linear(config.d_model, config.d_model, bias=False)
        self.dropout = config.dropout
        kind = config.softmax_scale
        self.softmax_scale = None if kind == "none" else SoftmaxScale(kind, config.n_heads)

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads)  # (B, T, 3, H, Dh)
        # each (B, H, T, Dh); the backward is one stack into qkv's layout: no zero-fills, no copy
        q, k, v = (part.transpose(1, 2) for part in qkv.unbind(2))
        scores = context.position.layer(
            self.index, self.scale_queries(q, context), k, context.state
        )
        scale = None if scores.scale is None else scores.scale * q.shape[-1] ** -0.5
        if scores.weights is not None:  # the scheme's own weights instead of softmax
            y = self.attend_weights(scores, v, scale)  # (B, H, T, Dh)
            return self.out(y.transpose(1, 2).reshape(b, t, d))  # (B, T, D)
        if context.flex is not None:  # FlexAttention: no mask tensor
            y = context.flex.attend(scores, v, scale)  # (B, H, T, Dh)
            return self.out(y.transpose(1, 2).reshape(b, t, d))  # (B, T, D)
        if context.blocked is not None:  # a long sequence with a mask
            y = context.blocked.attend(self.attend, scores, v, scale)  # (B, T, H, Dh)
            return self.out(y.view(b, t, d))  # (B, T, D)
        bias, logits = (scores.bias, None) if scores.window is None else scores.window(ALL, ALL)
        mask = context.layer_mask(q, bias)
        is_causal = context.is_causal and mask is None
        if logits is not None:
            y = self.attend_logits(logits, v, mask, is_causal)
        else:
            y = self.attend(scores.q, scores.k, v, mask, is_causal, scale)  # (B, H, T, Dh)
        return self.out(y.transpose(1, 2).reshape(b, t, d))  # (B, T, D)

    def scale_queries(self, q: Tensor, context: AttentionContext) -> Tensor:
        """Queries ``(B, H, T, Dh)`` scaled for a length-aware softmax (``model.softmax_scale``),
        before the scheme's ``layer`` hook; ``q`` itself when it is ``none``."""
        if self.softmax_scale is None:
            return q
        return self.softmax_scale(q, context.causal, context.prefix_len)

    def attend_weights(self, scores: Scores, v: Tensor, scale: float | None) -> Tensor:
        """``weights(s * q k^T / sqrt(Dh)) v`` with the scheme's ``Scores.weights`` in place of
        softmax, over the whole sequence: ``(B, H, T, Dh)`` from values ``(B, H, T, Dh)``;
        ``scale`` is SDPA's (None: ``1/sqrt(Dh)``)."""
        q = scores.q * (scores.q.shape[-1] ** -0.5 if scale is None else scale)
        weights = scores.weights(q @ scores.k.transpose(-1, -2))  # (B, H, T, T)
        weights = F.dropout(weights, self.dropout, self.training)
        return weights.to(v.dtype) @ v

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        is_causal: bool = False,
        scale: float | None = None,
    ) -> Tensor:
        """SDPA of queries and keys ``(B, H, Tq or Tk, Dq)`` over values ``(B, H, Tk, Dv)``:
        ``(B, H, Tq, Dv)``. ``Dv < Dq`` on the CPU from :data:`PAD_VALUES_FROM_KEYS` keys on,
        without dropout: the values are zero-padded to ``Dq`` for the fused kernel and the
        output cut back."""
        width, dropout = v.shape[-1], self.dropout if self.training else 0.0
        long = k.shape[-2] >= PAD_VALUES_FROM_KEYS
        if q.device.type == "cpu" and q.shape[-1] > width and long and dropout == 0.0:
            v = F.pad(v, (0, q.shape[-1] - width))  # (B, H, Tk, Dq): zero columns, zero outputs
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=dropout,
            is_causal=is_causal,
            scale=scale,
        )
        return y if y.shape[-1] == width else y[..., :width]

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
