"""A minimal decoder-only transformer whose position scheme is one swappable module."""

import math
from typing import Any

import torch
from torch import Tensor, nn

from model.attention import AttentionContext, SelfAttention
from model.config import ModelConfig
from model.mask import (
    BLOCK_PAIRS,
    BLOCK_ROWS,
    CUDA_BLOCK_PAIRS,
    MaskCache,
    attention_mask,
    query_blocks,
    toeplitz_mask,
)
from model.position import build_position
from model.position.base import check_positions


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

    def __init__(self, config: ModelConfig, index: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.d_model)
        self.attn = SelfAttention(config, index)
        self.mlp_norm = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, context: AttentionContext) -> Tensor:
        x = x + self.drop(self.attn(self.attn_norm(x), context))
        return x + self.drop(self.mlp(self.mlp_norm(x)))


class Transformer(nn.Module):
    """Decoder-only transformer: token embedding, position scheme, pre-norm blocks, LM head.

    The token embedding is a table lookup, equal to ``one_hot(idx) @ W_E``. The position scheme
    (``config.position``) is one module, ``self.position``, that may choose the positions, add
    to the embeddings, bias attention scores, and act in every layer on its queries and keys;
    see :mod:`model.position.base`.

    Raises:
        ValueError: (in ``__init__``) an invalid config is rejected by :class:`ModelConfig`.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position = build_position(config)
        self._masks = MaskCache()
        self.block_pairs: int | None = None
        """(query, key) pairs per block of the blocked path for every mask, overriding the
        device's rule (:func:`block_rows`) when set: for timing block sizes
        (``python -m lab.bench.block_sweep``)."""
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        self.position.reset_parameters()
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

        Only shapes are checked here (no value is read, so no host synchronisation); values
        are checked at the edge by :meth:`check_inputs`.

        Args:
            idx: token ids, int64 ``(B, T)``, values in ``[0, vocab_size)``.
            positions: int64 ``(T,)`` or ``(B, T)``; ``None`` lets the scheme choose
                (``arange(T)``, the cached path, except where a training rule differs).
            prefix_len: bidirectional models only (``causal=False``): attend bidirectionally
                within the first ``prefix_len`` tokens and causally after them (a prefix LM),
                so teacher forcing never shows a token its own target. ``None`` attends to
                everything. Causal models ignore it.

        Returns:
            Logits ``(B, T, vocab_size)``, float32 (or the autocast dtype).

        Raises:
            ValueError: ``idx`` not 2-D; ``positions`` of the wrong shape, dtype or batch size;
                ``prefix_len`` outside ``[0, T]``.
        """
        if idx.dim() != 2:
            raise ValueError(f"idx must have shape (B, T), got {tuple(idx.shape)}")
        b, t = idx.shape
        if positions is None:
            positions = self.position.select_positions(t, b, idx.device)
        else:
            check_positions(positions, t)
            if positions.dim() == 2 and positions.shape[0] not in (1, b):
                raise ValueError(f"positions has batch size {positions.shape[0]} but idx has {b}")
        causal = self.config.causal
        prefix = None if causal else prefix_len
        if prefix is not None and not 0 <= prefix <= t:
            raise ValueError(f"prefix_len={prefix} is outside [0, {t}]")
        x = self.token_embedding(idx)  # (B, T, D)
        added = self.position.embedding(positions, t)
        if added is not None:
            x = x + added.to(x.dtype)  # (1 or B, T, D) broadcast
        context = self._context(positions, b, t, prefix, x.device, attention_dtype(x))
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, context)
        return self.lm_head(self.final_norm(x))  # (B, T, V)

    def _context(
        self,
        positions: Tensor | None,
        b: int,
        t: int,
        prefix: int | None,
        device: torch.device,
        dtype: torch.dtype,
    ) -> AttentionContext:
        """The attention context of one forward pass, and with it the path (see
        :mod:`model.mask`): a sequence longer than ``BLOCK_ROWS`` whose mask would be a tensor
        (a shared bias, a per-layer bias built per window, or a prefix LM) is attended block by
        block, with a Toeplitz view for a relative shared bias at default positions; any other
        one at once, with its whole mask."""
        scheme, causal = self.position, self.config.causal
        common = dict(
            position=scheme,
            state=scheme.prepare(positions, t),
            causal=causal,
            prefix_len=prefix,
            dtype=dtype,
            positions=positions,
        )
        empty = slice(0, 0)  # asks whether the scheme has a shared bias, at no cost
        shared = scheme.score_bias(positions, t, empty, empty) is not None
        masked = shared or prefix is not None or scheme.windowed_layer_bias
        if t <= BLOCK_ROWS or not masked:
            mask = self._mask(positions, t, prefix, device, dtype)
            return AttentionContext(attn_mask=mask, is_causal=causal and mask is None, **common)
        toeplitz = shared and scheme.relative and positions is None and prefix is None
        layer_rows = b if scheme.windowed_layer_bias else 0
        rows = block_rows(t, device, toeplitz, layer_rows, self.block_pairs)
        blocks = query_blocks(t, causal, prefix, rows)
        if toeplitz:
            mask = toeplitz_mask(scheme, t, causal, dtype)
            return AttentionContext(
                attn_mask=mask, is_causal=False, blocks=blocks, keys_reversed=True, **common
            )
        return AttentionContext(attn_mask=None, is_causal=False, blocks=blocks, **common)

    def _mask(
        self,
        positions: Tensor | None,
        t: int,
        prefix: int | None,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Tensor | None:
        """The forward pass's attention mask with the scheme's shared bias merged in."""
        scheme, causal = self.position, self.config.causal
        if scheme.fixed_bias and positions is None and prefix is None:
            return self._masks.get(t, causal, dtype, device, lambda n: scheme.score_bias(None, n))
        bias = scheme.score_bias(positions, t)
        return attention_mask(t, causal, prefix, bias, device, dtype)

    def at_evaluation(self, overrides: dict[str, Any]) -> "Transformer":
        """This model (itself when ``overrides`` is empty) or a copy with the same weights whose
        position options are changed by ``overrides`` (see :meth:`ModelConfig.at_evaluation`),
        on the same device and in the same train/eval mode.

        Raises:
            ValueError: an option that is not evaluable for this scheme, or a bad value.
        """
        if not overrides:
            return self
        other = Transformer(self.config.at_evaluation(dict(overrides)))
        other.load_state_dict(self.state_dict())
        return other.to(self.token_embedding.weight.device).train(self.training)

    def reserve(self, n_positions: int) -> None:
        """Grow the position scheme's cached tables, and a fixed bias's cached mask (for this
        model's dtype and device; only up to the longest length without blocks, as longer ones
        build masks block by block), to ``n_positions`` outside any forward pass: call it before
        ``torch.compile`` so the compiled graph never rebuilds a table."""
        self.position.reserve(n_positions)
        weight = self.token_embedding.weight
        unblocked = min(n_positions, BLOCK_ROWS)
        self._mask(None, unblocked, None, weight.device, weight.dtype)

    def check_inputs(self, idx: Tensor, positions: Tensor | None = None) -> None:
        """Check values that ``forward`` does not read: call where inputs are made.

        Raises:
            ValueError: a token id outside ``[0, vocab_size)``; a negative position; a position
                past the scheme's :meth:`max_length` (a learned table's ``max_positions``).
        """
        if idx.numel() and not 0 <= int(idx.min()) <= int(idx.max()) < self.config.vocab_size:
            raise ValueError(
                f"token ids must lie in [0, {self.config.vocab_size}), got values from "
                f"{int(idx.min())} to {int(idx.max())}"
            )
        t = idx.shape[-1]
        if positions is not None:
            check_positions(positions, t)
            if positions.numel() and int(positions.min()) < 0:
                raise ValueError(f"positions must be >= 0, got minimum {int(positions.min())}")
        last = t - 1 if positions is None or not positions.numel() else int(positions.max())
        limit = self.position.max_length()
        if limit is not None and last >= limit:
            raise ValueError(
                f"sequence needs position {last} (length {last + 1}) but {self.config.position} "
                f"encodes {limit} positions; train with a larger "
                f"model.options.{self.config.position}.max_positions"
            )


def block_rows(
    seq_len: int,
    device: torch.device,
    toeplitz: bool,
    layer_rows: int = 0,
    pairs: int | None = None,
) -> int:
    """Queries per block of the blocked path (see :mod:`model.mask`) at ``seq_len`` tokens.

    ``BLOCK_ROWS`` for a Toeplitz view (a window of ``O(T)`` memory). A mask built per window
    holds at most ``BLOCK_PAIRS`` entries per head: (query, key) pairs, or, on the CPU, (batch
    row, query, key) triples for a per-layer bias built per window (CoPE: one bias per batch
    row; ``layer_rows`` is then the batch size, else 0; the largest power of two that fits). On
    a CUDA device a mask shared by the batch holds up to ``CUDA_BLOCK_PAIRS`` pairs instead (the
    whole sequence up to 2048 tokens). Every rule but that gives at most ``BLOCK_ROWS`` rows,
    and all at least one.
    ``pairs``, when given, is the budget of every block instead (``Transformer.block_pairs``).
    """
    if pairs is not None:
        return max(1, min(seq_len, pairs // seq_len))
    if toeplitz:
        return BLOCK_ROWS
    if device.type == "cuda" and not layer_rows:
        return max(1, min(seq_len, CUDA_BLOCK_PAIRS // seq_len))
    if layer_rows and device.type == "cpu":
        # halved from BLOCK_ROWS: a power of two, so that torch.compile guards on these tests
        # and one graph serves every batch size of a power-of-two bucket
        rows = BLOCK_ROWS
        while rows > 1 and rows * layer_rows * seq_len > BLOCK_PAIRS:
            rows //= 2
        return rows
    return max(1, min(BLOCK_ROWS, BLOCK_PAIRS // seq_len))


def attention_dtype(x: Tensor) -> torch.dtype:
    """Dtype of queries and keys inside attention: the autocast dtype when autocast is on."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return x.dtype
