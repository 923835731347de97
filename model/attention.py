"""Multi-head self-attention on PyTorch's fused ``scaled_dot_product_attention`` (SDPA)."""

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig
from model.mask import add_layer_bias
from model.position.base import PositionScheme


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
    """

    position: PositionScheme
    state: Any
    attn_mask: Tensor | None
    is_causal: bool
    causal: bool
    prefix_len: int | None
    dtype: torch.dtype


class SelfAttention(nn.Module):
    """Multi-head self-attention, ``softmax(s * q k^T / sqrt(Dh) + bias) v`` (Vaswani et al.
    2017), with q, k, bias and ``s`` (default 1) from the position scheme's ``layer`` hook.

    Input and output are ``(B, T, D)``.
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
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # each (B, H, T, Dh)
        scores = context.position.layer(self.index, q, k, context.state)
        mask = add_layer_bias(
            context.attn_mask, scores.bias, context.causal, context.prefix_len, context.dtype
        )
        y = F.scaled_dot_product_attention(
            scores.q,
            scores.k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=context.is_causal and mask is None,
            scale=None if scores.scale is None else scores.scale * q.shape[-1] ** -0.5,
        )  # (B, H, T, Dh)
        return self.out(y.transpose(1, 2).reshape(b, t, d))  # (B, T, D)
