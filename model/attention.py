"""Multi-head self-attention on PyTorch's fused ``scaled_dot_product_attention`` (SDPA)."""

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig
from model.position.base import QKRotation


@dataclass
class AttentionContext:
    """What the position scheme contributes to every layer, built once per forward pass.

    Attributes:
        qk_rotation: applied to queries and keys ``(B, H, T, Dh)``, or None.
        attn_mask: additive float mask ``(1 or B, H, T, T)`` (causal mask already merged), or None.
        is_causal: let SDPA apply the causal mask itself (only when ``attn_mask`` is None).
    """

    qk_rotation: QKRotation | None
    attn_mask: Tensor | None
    is_causal: bool


class SelfAttention(nn.Module):
    """Multi-head self-attention, ``softmax(q k^T / sqrt(Dh) + bias) v`` (Vaswani et al. 2017).

    Input and output are ``(B, T, D)``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.out = nn.Linear(config.d_model, config.d_model, bias=False)
        self.dropout = config.dropout

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        # qkv: (3, B, H, T, Dh)
        qk, v = qkv[:2], qkv[2]
        if context.qk_rotation is not None:
            qk = context.qk_rotation(qk)  # queries and keys rotated in one call
        q, k = qk[0], qk[1]  # each (B, H, T, Dh)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=context.attn_mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=context.is_causal,
        )  # (B, H, T, Dh)
        return self.out(y.transpose(1, 2).reshape(b, t, d))  # (B, T, D)
