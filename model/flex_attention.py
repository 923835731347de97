"""Attention through PyTorch's FlexAttention: a block mask for the masking rule and a
``score_mod`` that adds the scheme's biases, so no float ``(T, T)`` mask is ever built.

``model.attention_kernel`` chooses the kernel of every forward pass (:func:`chooses_flex`):
``sdpa`` (the default) keeps SDPA with its masks (and the blocked path of long sequences,
:mod:`model.blocked_attention`); ``flex`` takes FlexAttention whenever the scheme fits it;
``auto`` takes FlexAttention on a CUDA device only, and only where SDPA would need a mask
tensor (a shared score bias, a prefix LM, a sliding window), so every CPU forward pass runs the
same operations as ``sdpa``. ``auto`` becomes the default once a GPU has measured it against
SDPA (speed, and logits and gradients in bf16); the CPU checks only its numerics.

The masking rule (causal, prefix LM, sliding window: the rule of :func:`model.mask.blocked`)
is a ``mask_mod`` turned into a :class:`BlockMask`, whose fully masked blocks FlexAttention
skips. The biases are read in the ``score_mod``, per (batch row, head, query, key):

- a relative shared bias at default positions (``relative``: a function of ``i - j``, as
  :func:`model.blocked_attention.toeplitz_mask` relies on) as one row of ``2T - 1`` values per
  head, ``O(T)`` memory;
- any other shared bias (FIRE, explicit positions) and a layer's own bias (T5 with
  ``per_layer``) as the scheme's ``(1 or B, H, T, T)`` tensor.

Gradients reach every parameter the biases come from. PyTorch's FlexAttention has no backward
pass on the CPU (PyTorch 2.13): there ``flex`` evaluates (under ``torch.no_grad``) and refuses
to train, in one line. Not supported: a per-layer bias built from q and k window by window
(``windowed_layer_bias``: CoPE, FoX's gates), a scheme's own weights in place of softmax
(stick-breaking) and dropout on the attention weights in training; ``auto`` takes SDPA for
them, ``flex`` refuses them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from model.blocked_attention import block_mask
from model.position.base import ALL, PositionScheme, Scores

ATTENTION_KERNELS = ("auto", "sdpa", "flex")
"""Values of ``model.attention_kernel``."""

ScoreMod = Callable[..., Tensor]
"""``score_mod(score, b, h, q_idx, kv_idx, *buffers)``: FlexAttention's score modification
with the tensors it reads passed explicitly (``buffers``), so that a test can hand them to the
operator itself."""

_compiled_flex: Callable[..., Tensor] | None = None
"""FlexAttention compiled once per process for CUDA (eager FlexAttention is an unfused
reference that builds the whole score matrix), with dynamo's automatic dynamic shapes: a new
``score_mod`` closure at a length seen before reuses its graph, and lengths become dynamic at the
second one (``tests/test_flex_attention.py``)."""


def unsupported(scheme: PositionScheme, training: bool, dropout: float) -> str | None:
    """Why FlexAttention cannot run this scheme's forward pass, or None when it can."""
    if scheme.windowed_layer_bias:
        return f"position={scheme.name!r} (a per-layer bias built from q and k window by window)"
    if training and dropout > 0:
        return f"training with model.dropout={dropout} (FlexAttention has no attention dropout)"
    return None


def check_kernel(kernel: str, position: str, scheme: PositionScheme) -> None:
    """Refuse, in one line, ``model.attention_kernel=flex`` for a scheme FlexAttention cannot
    run in any mode (:func:`unsupported`; stick-breaking, whose weights replace softmax).

    Raises:
        ValueError: naming the scheme and the kernels that run it.
    """
    if kernel != "flex":
        return
    reason = "its weights replace softmax" if position == "stickbreaking" else None
    reason = reason or unsupported(scheme, False, 0.0)
    if reason is not None:
        raise ValueError(
            f"model.attention_kernel='flex' does not support {reason}; use "
            "model.attention_kernel=auto or sdpa"
        )


def chooses_flex(
    kernel: str,
    scheme: PositionScheme,
    device: torch.device,
    prefix_len: int | None,
    window: int | None,
    training: bool,
    dropout: float,
) -> bool:
    """Whether a forward pass takes FlexAttention: never for ``sdpa``; for ``auto`` on a CUDA
    device where SDPA would need a mask tensor (a shared bias, a prefix LM, a sliding
    ``window``) and FlexAttention runs the pass; always for ``flex``. ``sdpa``, and ``auto``
    off CUDA, answer at once, reading no tensor.

    Raises:
        ValueError: ``kernel`` ``flex`` with a forward pass it cannot run (:func:`unsupported`).
    """
    if kernel == "sdpa" or (kernel == "auto" and device.type != "cuda"):
        return False
    reason = unsupported(scheme, training, dropout)
    if kernel == "auto":
        masked = scheme.shared_bias or prefix_len is not None or window is not None
        return masked and reason is None
    if reason is not None:
        raise ValueError(
            f"model.attention_kernel='flex' does not support {reason}; use "
            "model.attention_kernel=auto or sdpa"
        )
    return True


def plan(
    scheme: PositionScheme,
    positions: Tensor | None,
    seq_len: int,
    causal: bool,
    prefix_len: int | None,
    device: torch.device,
    dtype: torch.dtype,
    window: int | None = None,
) -> FlexPath:
    """The FlexAttention path of one forward pass and sliding ``window`` (where
    :func:`chooses_flex` says so): its block mask and the scheme's shared bias; call it after
    ``scheme.prepare``."""
    shared = None
    relative = scheme.relative and positions is None
    if scheme.shared_bias and relative:
        shared = relative_row(scheme, seq_len)  # (H, 2T - 1)
    elif scheme.shared_bias:
        shared = scheme.score_bias(positions, seq_len)  # (1 or B, H, T, T)
    mask = rule_mask(seq_len, causal, prefix_len, window, device)
    return FlexPath(mask, shared, relative, scheme, positions, causal, prefix_len, dtype, window)


def relative_row(scheme: PositionScheme, seq_len: int) -> Tensor:
    """A relative shared bias at default positions as one row per head, float32
    ``(H, 2T - 1)``: entry ``n`` holds the bias at ``i - j = T - 1 - n`` (query ``i``, key
    ``j``), read from the scheme's last query row and first one, as
    :func:`model.blocked_attention.toeplitz_mask` does."""
    t = seq_len
    last = scheme.score_bias(None, t, slice(t - 1, t))  # (1, H, 1, T): i - j = T-1 .. 0
    first = scheme.score_bias(None, t, slice(0, 1), slice(1, t))  # i - j = -1 .. -(T-1)
    return torch.cat([last, first], dim=-1)[0, :, 0]  # (H, 2T - 1)


def rule_mask(
    seq_len: int, causal: bool, prefix_len: int | None, window: int | None, device: torch.device
) -> BlockMask | None:
    """The masking rule of :func:`model.mask.blocked` as a :class:`BlockMask` (FlexAttention
    skips its fully masked blocks), or None when every query sees every key (bidirectional,
    no prefix, no window)."""
    if not causal and prefix_len is None and window is None:
        return None

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        allowed = kv_idx <= q_idx
        if not causal:
            prefix = seq_len if prefix_len is None else prefix_len
            allowed = allowed | ((q_idx < prefix) & (kv_idx < prefix))
        if window is not None:
            allowed = allowed & ((q_idx - kv_idx).abs() < window)
        return allowed

    return create_block_mask(mask_mod, None, None, seq_len, seq_len, device=device)


def add_row(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor, row: Tensor):
    """``score`` plus a relative bias row ``(H, 2T - 1)`` (:func:`relative_row`)."""
    return score + row[h, row.shape[-1] // 2 - q_idx + kv_idx]


def add_full(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor, bias: Tensor):
    """``score`` plus a bias ``(1 or B, H, T, T)``, broadcast over the batch when it has one
    row."""
    return score + bias[b if bias.shape[0] > 1 else 0, h, q_idx, kv_idx]


def score_mod(terms: list[tuple[ScoreMod, Tensor]]) -> tuple[ScoreMod | None, tuple[Tensor, ...]]:
    """One :data:`ScoreMod` adding every term ``(add, buffer)`` in order, and its buffers;
    ``(None, ())`` without terms."""
    if not terms:
        return None, ()
    adds = [add for add, _ in terms]

    def modified(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor, *buffers):
        for add, buffer in zip(adds, buffers, strict=True):
            score = add(score, b, h, q_idx, kv_idx, buffer)
        return score

    return modified, tuple(buffer for _, buffer in terms)


def close(modifier: ScoreMod, buffers: tuple[Tensor, ...]) -> Callable[..., Tensor]:
    """FlexAttention's ``score_mod(score, b, h, q_idx, kv_idx)``: ``modifier`` reading the
    ``buffers`` it closes over (``torch.compile`` passes them to the kernel as inputs)."""

    def closed(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return modifier(score, b, h, q_idx, kv_idx, *buffers)

    return closed


def flex_call(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    modifier: ScoreMod | None,
    buffers: tuple[Tensor, ...],
    mask: BlockMask | None,
    scale: float | None,
) -> Tensor:
    """FlexAttention of queries ``(B, H, T, Dh)`` over keys and values ``(B, H, T, Dh)``:
    ``softmax(scale * q k^T + score_mod, masked by mask) v``, ``(B, H, T, Dh)``; compiled
    once per process on CUDA, traced into the graph under ``torch.compile``, eager elsewhere.

    Raises:
        ValueError: gradients asked for off CUDA (PyTorch's FlexAttention has no backward
            there).
    """
    tracked = any(x.requires_grad for x in (q, k, v, *buffers))
    if q.device.type != "cuda" and torch.is_grad_enabled() and tracked:
        raise ValueError(
            f"model.attention_kernel='flex' cannot train on {q.device.type} (PyTorch's "
            "FlexAttention has no backward pass there); use model.attention_kernel=auto or "
            "sdpa, or evaluate under torch.no_grad()"
        )
    closed = None if modifier is None else close(modifier, buffers)
    attend = flex_attention
    if q.device.type == "cuda" and not torch.compiler.is_compiling():
        global _compiled_flex
        _compiled_flex = _compiled_flex or torch.compile(flex_attention)
        attend = _compiled_flex
    return attend(q, k, v, score_mod=closed, block_mask=mask, scale=scale)


@dataclass
class FlexPath:
    """How one forward pass attends through FlexAttention (from :func:`plan`).

    Attributes:
        mask: the masking rule's block mask (:func:`rule_mask`), or None (no masking).
        shared: the scheme's shared bias: a row ``(H, 2T - 1)`` when ``relative``
            (:func:`relative_row`), else ``(1 or B, H, T, T)``; or None.
        relative: ``shared`` is a row of a relative bias.
        scheme, positions, causal, prefix_len, dtype, window: the forward pass's scheme,
            positions (None: ``arange(T)``), masking rule, mask dtype and sliding window, for
            the whole mask an analysis asks for (:meth:`whole_mask`).
    """

    mask: BlockMask | None
    shared: Tensor | None
    relative: bool
    scheme: PositionScheme
    positions: Tensor | None
    causal: bool
    prefix_len: int | None
    dtype: torch.dtype
    window: int | None = None

    def attend(self, scores: Scores, v: Tensor, scale: float | None) -> Tensor:
        """One layer's attention from its ``scores`` (queries and keys ``(B, H, T, Dh)``, its
        own bias) and values ``(B, H, T, Dh)``: ``(B, H, T, Dh)``; ``scale`` as SDPA's (None:
        ``1/sqrt(Dh)``)."""
        terms: list[tuple[ScoreMod, Tensor]] = []
        if self.shared is not None:
            terms.append((add_row if self.relative else add_full, self.shared))
        if scores.bias is not None:
            terms.append((add_full, scores.bias))
        modifier, buffers = score_mod(terms)
        return flex_call(scores.q, scores.k, v, modifier, buffers, self.mask, scale)

    def whole_mask(self, q: Tensor, layer_bias: Tensor | None) -> Tensor:
        """One layer's additive mask for the whole sequence, built whole as SDPA would use it
        (for analysis, as :mod:`lab.evaluation.attention_maps`): ``(..., T, T)``; ``q``, the
        layer's ``(B, H, T, Dh)`` queries, gives ``T`` and the device."""
        t = q.shape[-2]
        return block_mask(
            self.scheme, self.positions, t, layer_bias, self.causal, self.prefix_len,
            q.device, self.dtype, ALL, ALL, self.window,
        )  # fmt: skip
