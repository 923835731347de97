"""A minimal decoder-only transformer whose position scheme is one swappable module."""

import math
import re
from typing import Any

import torch
from torch import Tensor, nn

from model import blocked_attention, flex_attention
from model.attention import AttentionContext, SelfAttention
from model.config import ModelConfig
from model.mask import MaskCache, attention_mask
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
    see :mod:`model.position.base`. A hybrid layout (``config.layers``: a scheme per layer and
    per head) is one such module too, :class:`model.position.layout.LayeredPositions`; each
    layer may attend within a sliding window (``config.windows``).

    Raises:
        ValueError: (in ``__init__``) an invalid config is rejected by :class:`ModelConfig`.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position = build_position(config)
        flex_attention.check_kernel(config.attention_kernel, config.position, self.position)
        self._masks = MaskCache()
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
        self._register_load_state_dict_pre_hook(_composite_keys_to_plain, with_module=True)

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
        contexts = self._contexts(positions, b, t, prefix, x.device, attention_dtype(x))
        x = self.drop(x)
        for block, context in zip(self.blocks, contexts, strict=True):
            x = block(x, context)
        return self.lm_head(self.final_norm(x))  # (B, T, V)

    def _contexts(
        self,
        positions: Tensor | None,
        b: int,
        t: int,
        prefix: int | None,
        device: torch.device,
        dtype: torch.dtype,
    ) -> list[AttentionContext]:
        """Every layer's attention context of one forward pass: one per sliding window
        (``config.windows``; a window of ``T`` tokens or more is global attention), shared by
        the layers with that window."""
        state = self.position.prepare(positions, t)
        built: dict[int | None, AttentionContext] = {}
        contexts = []
        for window in self.config.windows:
            window = window if window is not None and window < t else None
            if window not in built:
                built[window] = self._context(state, positions, b, t, prefix, device, dtype, window)
            contexts.append(built[window])
        return contexts

    def _context(
        self,
        state: Any,
        positions: Tensor | None,
        b: int,
        t: int,
        prefix: int | None,
        device: torch.device,
        dtype: torch.dtype,
        window: int | None,
    ) -> AttentionContext:
        """The attention context of one forward pass and sliding window (None: global), and with
        it the path: FlexAttention where ``model.attention_kernel`` asks for it
        (:func:`model.flex_attention.chooses_flex`), else a long sequence with a mask is
        attended block by block (:func:`model.blocked_attention.plan`), any other one at once,
        with its whole mask (None: SDPA's causal path or no mask); ``state`` is the scheme's
        ``prepare``."""
        scheme, causal, config = self.position, self.config.causal, self.config
        kernel, training = config.attention_kernel, self.training
        if flex_attention.chooses_flex(
            kernel, scheme, device, prefix, window, training, config.dropout
        ):
            flex = flex_attention.plan(scheme, positions, t, causal, prefix, device, dtype, window)
            return AttentionContext(scheme, state, None, False, causal, prefix, dtype, flex=flex)
        path = blocked_attention.plan(
            scheme, positions, b, t, causal, prefix, device, dtype, window
        )
        if path is not None:
            return AttentionContext(scheme, state, None, False, causal, prefix, dtype, path)
        mask = self._mask(positions, t, prefix, device, dtype, window)
        return AttentionContext(scheme, state, mask, causal and mask is None, causal, prefix, dtype)

    def _mask(
        self,
        positions: Tensor | None,
        t: int,
        prefix: int | None,
        device: torch.device,
        dtype: torch.dtype,
        window: int | None = None,
    ) -> Tensor | None:
        """The forward pass's attention mask with the scheme's shared bias merged in, and a
        sliding ``window`` (None: global attention)."""
        scheme, causal = self.position, self.config.causal
        if scheme.fixed_bias and positions is None and prefix is None:
            return self._masks.get(
                t, causal, dtype, device, lambda n: scheme.score_bias(None, n), window
            )
        bias = scheme.score_bias(positions, t)
        return attention_mask(t, causal, prefix, bias, device, dtype, window=window)

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
        build masks block by block), to ``n_positions`` outside any forward pass. Optional: a
        fresh model compiles without it (a graph builds what a cache lacks, see
        :func:`model.position.base.cached_rows`); after it a compiled graph reads the cached
        tables instead and new lengths within them do not recompile."""
        self.position.reserve(n_positions)
        weight = self.token_embedding.weight
        unblocked = min(n_positions, blocked_attention.BLOCK_ROWS)
        for window in dict.fromkeys(self.config.windows):  # each once, in layer order
            if window is None or window < unblocked:
                self._mask(None, unblocked, None, weight.device, weight.dtype, window)

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


COMPOSITE_KEY = re.compile(r"position\.((?:inner\.)?)members\.[A-Za-z0-9_]+_\d+\.")
"""The prefix of a one-member composite's weights (``position.members.t5_4.``), kept by runs
saved when a layout of one scheme everywhere under another ``model.position`` was built as
:class:`model.position.layout.LayeredPositions`; that layout is now the scheme alone."""


def _composite_keys_to_plain(module: nn.Module, state_dict: dict, prefix: str, *_: Any) -> None:
    """Rename a one-member composite's keys (:data:`COMPOSITE_KEY`) to the scheme's own,
    ``position.members.t5_4.bias`` -> ``position.bias``, when ``module`` (a Transformer) has no
    composite: the same weights in the same order (``tests/test_hybrid.py``), so old runs
    still load."""
    if any(name.endswith("members") for name, _ in module.position.named_modules()):
        return  # a composite: its keys are its own
    found = {k: COMPOSITE_KEY.match(k, len(prefix)) for k in state_dict if k.startswith(prefix)}
    if len({m.group(0) for m in found.values() if m}) != 1:
        return  # no composite keys, or several members: not a layout of one scheme
    for key, match in found.items():
        if match:
            state_dict[f"{prefix}position.{match.group(1)}{key[match.end() :]}"] = state_dict.pop(
                key
            )


def attention_dtype(x: Tensor) -> torch.dtype:
    """Dtype of queries and keys inside attention: the autocast dtype when autocast is on."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return x.dtype
