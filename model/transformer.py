"""A minimal decoder-only transformer whose position scheme is one swappable module."""

import math

import torch
from torch import Tensor, nn

from model.attention import AttentionContext, SelfAttention
from model.config import ModelConfig
from model.position import build_position
from model.position.base import check_positions, prefix_lm_fill


class MLP(nn.Module):
    """Position-wise feed-forward ``W2 GELU(W1 x)``; ``(B, T, D) -> (B, T, D)``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.d_model, config.d_ff)
        self.down = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(nn.functional.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))`` (GPT-2 layout)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.d_model)
        self.attn = SelfAttention(config)
        self.mlp_norm = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        x = x + self.drop(self.attn(self.attn_norm(x), context))
        return x + self.drop(self.mlp(self.mlp_norm(x)))


class Transformer(nn.Module):
    """Decoder-only transformer: token embedding, position scheme, pre-norm blocks, LM head.

    The token embedding is a table lookup, equal to ``one_hot(idx) @ W_E``. The position scheme
    (``config.position``) is one module, ``self.position``, that may add to the embeddings,
    rotate queries and keys, or bias attention scores; see :mod:`model.position.base`.

    Raises:
        ValueError: (in ``__init__``) an invalid config is rejected by :class:`ModelConfig`.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position = build_position(config)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        for block in self.blocks:  # GPT-2: scale residual projections by 1/sqrt(2 * n_layers)
            for proj in (block.attn.out, block.mlp.down):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * config.n_layers))
        if config.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self, idx: Tensor, positions: Tensor | None = None, prefix_len: int | None = None
    ) -> Tensor:
        """Next-token logits.

        Args:
            idx: token ids, int64 ``(B, T)``, values in ``[0, vocab_size)``.
            positions: int64 ``(T,)`` or ``(B, T)``; ``None`` means ``arange(T)`` (cached path).
            prefix_len: bidirectional models only (``causal=False``): attend bidirectionally
                within the first ``prefix_len`` tokens and causally after them (a prefix LM),
                so teacher forcing never shows a token its own target. ``None`` attends to
                everything. Causal models ignore it.

        Returns:
            Logits ``(B, T, vocab_size)``, float32 (or the autocast dtype).

        Raises:
            ValueError: ``idx`` not 2-D or out of the vocabulary; ``positions`` of the wrong
                shape or negative; a position past a learned table's ``max_positions``;
                ``prefix_len`` outside ``[0, T]``.
        """
        if idx.dim() != 2:
            raise ValueError(f"idx must have shape (B, T), got {tuple(idx.shape)}")
        if idx.numel() and not 0 <= int(idx.min()) <= int(idx.max()) < self.config.vocab_size:
            raise ValueError(
                f"token ids must lie in [0, {self.config.vocab_size}), got values from "
                f"{int(idx.min())} to {int(idx.max())}"
            )
        t = idx.shape[1]
        if positions is not None:
            check_positions(positions, t)
            if positions.dim() == 2 and positions.shape[0] not in (1, idx.shape[0]):
                raise ValueError(
                    f"positions has batch size {positions.shape[0]} but idx has {idx.shape[0]}"
                )
        x = self.token_embedding(idx)  # (B, T, D)
        added = self.position.embedding(positions, t)
        if added is not None:
            x = x + added.to(x.dtype)  # (1 or B, T, D) broadcast
        dtype = attention_dtype(x)
        bias = self.position.score_bias(positions, t, self.config.causal, dtype)
        if not self.config.causal and prefix_len is not None:
            if not 0 <= prefix_len <= t:
                raise ValueError(f"prefix_len={prefix_len} is outside [0, {t}]")
            plain = torch.zeros(t, t, device=x.device, dtype=dtype) if bias is None else bias
            bias = prefix_lm_fill(plain, prefix_len)  # (T, T) or (1 or B, H, T, T)
        context = AttentionContext(
            qk_rotation=self.position.qk_rotation(positions, t),
            attn_mask=bias,
            is_causal=self.config.causal and bias is None,
        )
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, context)
        return self.lm_head(self.final_norm(x))  # (B, T, V)


def attention_dtype(x: Tensor) -> torch.dtype:
    """Dtype of queries and keys inside attention: the autocast dtype when autocast is on."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return x.dtype
