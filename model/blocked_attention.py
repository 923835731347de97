"""The long-sequence path of attention: queries in blocks, each block with its window's mask.

A sequence longer than ``BLOCK_ROWS`` whose mask would be a ``(T, T)`` tensor (a shared score
bias, a per-layer bias that a scheme builds per window, as CoPE, or a prefix LM) is attended
block by block: SDPA treats query rows independently, so the result is the same; causal blocks
skip the keys after their last query (SDPA with a mask would compute them); and no ``(T, T)``
mask is ever held. Each block's mask is either a window of :func:`toeplitz_mask`, a view of
``O(T)`` memory for a relative shared bias at default positions, or built for that window alone
(:func:`block_mask`), masked only on the block's diagonal square (the only keys after a query).
How many queries a block holds is :func:`block_rows`'s rule: a memory budget on the CPU, a
budget of kernel launches on a CUDA device (``docs/long-sequences.md`` says how each was
chosen).

The model asks :func:`plan` once per forward pass; attention calls :meth:`BlockedPath.attend`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from model.mask import window_mask
from model.position.base import PositionScheme, Scores

BLOCK_ROWS = 256
"""Queries per block, and the length past which a sequence with a mask takes this path."""

BLOCK_PAIRS = 2**19
"""Entries per head of a block whose mask is built for its window: (query, key) pairs (fewer
rows than ``BLOCK_ROWS`` past ``T = 2048``), and on the CPU (batch row, query, key) triples for
a per-layer bias built per window (CoPE). It bounds the memory of a block's bias and mask (FIRE's
piecewise bias, :mod:`model.position.piecewise`, takes about 128 bytes per pair) while keeping
blocks long enough for SDPA with a mask to run near its full speed."""

CUDA_BLOCK_PAIRS = 2**23
"""(query, key) pairs of a block whose mask is built for its window and shared by the batch
(FIRE, explicit positions, a prefix LM) on a CUDA device: a whole sequence of up to 2048 tokens
in one block, two blocks at 4096. There a block costs its kernel launches (a few dozen small
ones for each block's bias and mask), not its pairs, so fewer, larger blocks run faster."""

block_pairs: int | None = None
"""When set, the (query, key) pairs of every block, on any device and for every mask, instead
of :func:`block_rows`'s rule: a setting for timing block sizes (``lab.bench.block_sweep``, through
:func:`fixed_block_pairs`), never set by a model."""


@contextlib.contextmanager
def fixed_block_pairs(pairs: int | None) -> Iterator[None]:
    """Within the context, :data:`block_pairs` is ``pairs`` (None: the device's rule); the old
    setting comes back on exit."""
    global block_pairs
    saved, block_pairs = block_pairs, pairs
    try:
        yield
    finally:
        block_pairs = saved


def block_rows(
    seq_len: int,
    device: torch.device,
    toeplitz: bool,
    layer_rows: int = 0,
    pairs: int | None = None,
) -> int:
    """Queries per block at ``seq_len`` tokens.

    ``BLOCK_ROWS`` for a Toeplitz view (a window of ``O(T)`` memory). A mask built per window
    holds at most ``BLOCK_PAIRS`` entries per head: (query, key) pairs, or, on the CPU, (batch
    row, query, key) triples for a per-layer bias built per window (CoPE: one bias per batch
    row; ``layer_rows`` is then the batch size, else 0; the largest power of two that fits, so
    that ``torch.compile``'s guards on it hold for every batch size of a power-of-two bucket and
    one graph serves them all). On a CUDA device a mask shared by the batch holds up to
    ``CUDA_BLOCK_PAIRS`` pairs instead (the whole sequence up to 2048 tokens). Every rule but
    that gives at most ``BLOCK_ROWS`` rows, and all at least one. ``pairs``, when given, is the
    budget of every block instead (:data:`block_pairs`).
    """
    if pairs is not None:
        return max(1, min(seq_len, pairs // seq_len))
    if toeplitz:
        return BLOCK_ROWS
    if device.type == "cuda" and not layer_rows:
        return max(1, min(seq_len, CUDA_BLOCK_PAIRS // seq_len))
    if layer_rows and device.type == "cpu":
        rows = BLOCK_ROWS  # halved while too large: a power of two
        while rows > 1 and rows * layer_rows * seq_len > BLOCK_PAIRS:
            rows //= 2
        return rows
    return max(1, min(BLOCK_ROWS, BLOCK_PAIRS // seq_len))


def query_blocks(
    seq_len: int, causal: bool, prefix_len: int | None, rows: int, window: int | None = None
) -> list[tuple[slice, slice]]:
    """Windows of the blocked path: ``rows`` queries each (the last block fewer), with the keys
    they may see (causal: up to the block's last query; prefix LM: also the prefix; with a
    sliding ``window`` of ``W`` tokens, only keys less than ``W`` from one of its queries, so
    keys wholly outside the window are skipped).

    Returns:
        ``(queries, keys)`` slices of ``range(T)``, covering every query once.
    """
    blocks = []
    for start in range(0, seq_len, rows):
        stop = min(start + rows, seq_len)
        if causal:
            keys = stop
        elif prefix_len is None:
            keys = seq_len
        else:
            keys = max(stop, prefix_len)
        first = 0
        if window is not None:
            first, keys = max(0, start - window + 1), min(keys, stop + window - 1)
        blocks.append((slice(start, stop), slice(first, keys)))
    return blocks


def reverse(keys: slice, seq_len: int) -> slice:
    """The window ``keys`` of ``range(T)`` in a sequence read backwards (position ``T - 1 - j``
    for ``j``), as :func:`toeplitz_mask` orders keys."""
    return slice(seq_len - keys.stop, seq_len - keys.start)


def toeplitz_mask(
    scheme: PositionScheme,
    seq_len: int,
    causal: bool,
    dtype: torch.dtype,
    window: int | None = None,
) -> Tensor:
    """The additive mask of a relative scheme's bias at default positions, keys in reverse
    order: ``(1, H, T, T)``, entry ``[i, m]`` for query ``i`` and key ``T - 1 - m``.

    A relative bias is a function of ``i - j`` alone (a Toeplitz matrix), so every entry is one
    of ``2T - 1`` values: with keys reversed, ``[i, m]`` depends on ``i + m`` only and the mask
    is a strided view (both strides 1) of one row per head; reversed keys are needed because a
    view cannot step backwards. The values come from the scheme's last and first query rows.

    Returns:
        ``dtype`` view of ``(1, H, 2T - 1)`` memory; ``-inf`` where the key is after the query
        (causal) and, with a sliding ``window`` of ``W`` tokens, where ``|i - j| >= W``.
    """
    t = seq_len
    last = scheme.score_bias(None, t, slice(t - 1, t))  # (1, H, 1, T): i - j = T-1 .. 0
    first = scheme.score_bias(None, t, slice(0, 1), slice(1, t))  # i - j = -1 .. -(T-1)
    descending = torch.cat([last, first], dim=-1).to(dtype)  # (1, H, 1, 2T - 1)
    if causal:
        descending = descending.masked_fill(
            torch.arange(2 * t - 1, device=last.device) >= t, -math.inf
        )
    if window is not None:  # entry m holds i - j = T - 1 - m
        distance = (t - 1 - torch.arange(2 * t - 1, device=last.device)).abs()
        descending = descending.masked_fill(distance >= window, -math.inf)
    row = descending.flip(-1)[:, :, 0].contiguous()  # (1, H, 2T - 1): i - j = -(T-1) .. T-1
    return row.as_strided((1, row.shape[1], t, t), (row.stride(0), row.stride(1), 1, 1))


def block_mask(
    scheme: PositionScheme,
    positions: Tensor | None,
    seq_len: int,
    layer_window: Tensor | None,
    causal: bool,
    prefix_len: int | None,
    device: torch.device,
    dtype: torch.dtype,
    queries: slice,
    keys: slice,
    window: int | None = None,
) -> Tensor:
    """One layer's mask on one window of the blocked path (:func:`query_blocks`): the scheme's
    shared bias of that window plus the layer's own bias on it, ``-inf`` where blocked.

    Args:
        scheme, positions: the forward pass's scheme and positions (for its ``score_bias``).
        layer_window: the layer's own bias on the window, float ``(1 or B, H, Tq, Tk)``, or None.
        queries, keys: the window.
        window: a sliding window in tokens (:func:`model.mask.blocked`), or None.

    Returns:
        ``dtype`` ``(Tq, Tk)`` or ``(1 or B, H, Tq, Tk)``.
    """
    bias = scheme.score_bias(positions, seq_len, queries, keys)  # (1 or B, H, Tq, Tk) or None
    ours = layer_window is None or bias is not None  # score_bias and a sum return new tensors
    if layer_window is not None:
        bias = layer_window if bias is None else bias + layer_window
    return window_mask(
        seq_len, causal, prefix_len, bias, device, dtype, queries, keys, ours, window
    )


@dataclass
class BlockedPath:
    """How one forward pass attends block by block (from :func:`plan`).

    Attributes:
        scheme, positions: the forward pass's scheme and positions (None: ``arange(T)``), for
            the shared bias of each window.
        causal, prefix_len: the masking rule.
        dtype: dtype of the masks (the autocast dtype under autocast).
        blocks: ``(queries, keys)`` windows from :func:`query_blocks`.
        reversed_mask: the Toeplitz view of the masked shared bias (:func:`toeplitz_mask`,
            keys backwards), whose windows every block takes; None: each block builds its own.
        window: the layers' sliding window in tokens, or None (global attention).
    """

    scheme: PositionScheme
    positions: Tensor | None
    causal: bool
    prefix_len: int | None
    dtype: torch.dtype
    blocks: list[tuple[slice, slice]]
    reversed_mask: Tensor | None = None
    window: int | None = None

    def attend(
        self,
        attend: Callable[..., Tensor],
        scores: Scores,
        v: Tensor,
        scale: float | None,
    ) -> Tensor:
        """One layer's attention, block by block: ``(B, T, H, Dh)``.

        Args:
            attend: SDPA of one block, ``attend(q, k, v, mask, is_causal, scale)`` with
                queries ``(B, H, Tq, Dh)`` and keys and values ``(B, H, Tk, Dh)``.
            scores: the layer's queries and keys ``(B, H, T, Dh)`` and its own bias.
            v: values ``(B, H, T, Dh)``.
            scale: the score scale for SDPA (None: ``1/sqrt(Dh)``).
        """
        b, h, t, dh = v.shape
        k = scores.k
        if self.reversed_mask is not None:
            k, v = k.flip(-2), v.flip(-2)  # key m is key T - 1 - m, as in the mask
        y = v.new_empty(b, t, h, dh)  # (B, T, H, Dh)
        for queries, keys in self.blocks:
            mask = self.window_mask(scores, t, v.device, queries, keys)
            window = keys if self.reversed_mask is None else reverse(keys, t)
            part = attend(
                scores.q[:, :, queries], k[:, :, window], v[:, :, window], mask, False, scale
            )  # (B, H, Tq, Dh)
            y[:, queries] = part.transpose(1, 2)  # (B, Tq, H, Dh)
        return y

    def window_mask(
        self, scores: Scores, seq_len: int, device: torch.device, queries: slice, keys: slice
    ) -> Tensor:
        """One layer's additive mask on a window, ``(..., Tq, Tk)``, with the window of its own
        bias (of ``scores``) added. ``keys`` counts from the sequence's start; with a
        ``reversed_mask`` the mask runs backwards along them, as the keys SDPA gets."""
        layer_window = scores.bias_window(queries, keys)  # (1 or B, H, Tq, Tk) or None
        if self.reversed_mask is None:
            return self.mask(layer_window, seq_len, device, queries, keys)
        mask = self.reversed_mask[..., queries, reverse(keys, seq_len)]
        if layer_window is None:
            return mask
        return mask + layer_window.flip(-1).to(self.dtype)

    def whole_mask(self, q: Tensor, layer_bias: Tensor | None) -> Tensor:
        """One layer's mask for the whole sequence, keys in order, built whole (for analysis,
        as :mod:`lab.evaluation.attention_maps`): ``(..., T, T)``; ``q``, the layer's
        ``(B, H, T, Dh)`` queries, gives ``T`` and the device; ``layer_bias`` is the layer's own
        ``(1 or B, H, T, T)`` bias or None."""
        every = slice(0, q.shape[-2])
        return self.mask(layer_bias, q.shape[-2], q.device, every, every)

    def mask(
        self,
        layer_window: Tensor | None,
        seq_len: int,
        device: torch.device,
        queries: slice,
        keys: slice,
    ) -> Tensor:
        """:func:`block_mask` of this forward pass."""
        return block_mask(
            self.scheme,
            self.positions,
            seq_len,
            layer_window,
            self.causal,
            self.prefix_len,
            device,
            self.dtype,
            queries,
            keys,
            self.window,
        )


def plan(
    scheme: PositionScheme,
    positions: Tensor | None,
    batch: int,
    seq_len: int,
    causal: bool,
    prefix_len: int | None,
    device: torch.device,
    dtype: torch.dtype,
    window: int | None = None,
) -> BlockedPath | None:
    """The blocked path of one forward pass, or None to attend to the whole sequence at once.

    A sequence of more than ``BLOCK_ROWS`` tokens takes it when its mask would be a tensor: a
    shared bias (``scheme.shared_bias``), a per-layer bias built per window
    (``scheme.windowed_layer_bias``), a prefix LM or a sliding ``window`` (in tokens; its
    blocks skip the keys outside it). A relative shared bias at default positions without a
    prefix takes the Toeplitz view; call it after ``scheme.prepare``.
    """
    masked = scheme.shared_bias or prefix_len is not None or scheme.windowed_layer_bias
    masked = masked or window is not None
    if seq_len <= BLOCK_ROWS or not masked:
        return None
    toeplitz = scheme.shared_bias and scheme.relative and positions is None and prefix_len is None
    layer_rows = batch if scheme.windowed_layer_bias else 0
    rows = block_rows(seq_len, device, toeplitz, layer_rows, block_pairs)
    blocks = query_blocks(seq_len, causal, prefix_len, rows, window)
    reversed_mask = toeplitz_mask(scheme, seq_len, causal, dtype, window) if toeplitz else None
    return BlockedPath(scheme, positions, causal, prefix_len, dtype, blocks, reversed_mask, window)
