"""The one place that builds attention masks for SDPA: causal, prefix-LM, and score biases.

Schemes return pure (finite) biases; this module adds ``-inf`` where a query may not see a key.
Without any bias, the causal case keeps SDPA's fused ``is_causal=True`` path (no mask tensor).

Sequences longer than ``BLOCK_ROWS`` whose mask would be a ``(T, T)`` tensor (a score bias, a
per-layer bias that a scheme builds per window, as CoPE, or a prefix LM) are attended block by
block (:func:`query_blocks`): SDPA treats query rows independently, so the result is the same,
and causal blocks skip the keys after their last query (SDPA with a mask would compute them).
Each block's mask is either a window of :func:`toeplitz_mask`, a view of ``O(T)`` memory for a
relative bias at default positions, or built for that window alone (:func:`block_mask`),
``O(BLOCK_PAIRS)`` memory (on the CPU also for a per-layer bias from q and k, whose blocks are
smaller for larger batches), masked only on the block's diagonal square (the only keys after a
query). On a CUDA device a mask built per window and shared by the batch takes larger blocks
(``CUDA_BLOCK_PAIRS``): there a block's cost is its kernel launches.

Padding needs no mask of its own: tasks pad only after a row's ``<eos>`` (right padding, prompts
of one length per batch, see :mod:`data.base`), and both the causal mask and the prefix-LM mask
(with the prefix ending at ``<sep>``, as training and evaluation call it) block every key after
a query, so no real token attends to a pad; ``tests/test_tasks.py`` compares padded batches
with their rows run one by one for every scheme.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from model.position.base import ALL, outside_autograd

if TYPE_CHECKING:
    from model.position.base import PositionScheme

BLOCK_ROWS = 256
"""Queries per block of the blocked path; longer sequences with a mask take that path."""

BLOCK_PAIRS = 2**19
"""Entries per head of a block whose mask is built for its window: (query, key) pairs (fewer
rows than ``BLOCK_ROWS`` past ``T = 2048``), and on the CPU (batch row, query, key) triples for
a per-layer bias built per window (CoPE). Measured with FIRE at 4096 tokens (one thread, CPU,
when this was chosen): from ``2**17`` (32 rows) to ``2**19`` (128 rows) eval throughput rose
15%, as SDPA with a mask is slower on short blocks, and peak memory 238 -> 253..286 MiB (fresh
processes; NoPE's 298 then): FIRE's piecewise bias (:mod:`model.position.piecewise`) needs
about 128 bytes per pair. CoPE's many elementwise passes over a block run faster while the
block fits the caches: counting its batch rows took it from 0.20x to 0.34x NoPE at 1024 tokens
with 8 rows (README, the CoPE sweep under "Benchmark", ``python -m lab.bench.block_sweep``)."""

CUDA_BLOCK_PAIRS = 2**23
"""(query, key) pairs of a block whose mask is built for its window and shared by the batch
(FIRE, explicit positions, a prefix LM) on a CUDA device: a whole sequence of up to 2048 tokens
in one block, two blocks at 4096. There a block costs its kernel launches (a few dozen small
ones for each block's bias and mask), not its pairs. Measured on an H200 with
``python -m lab.bench.block_sweep`` (FIRE at 4096 tokens, 16 rows, bf16): 0.02x NoPE's throughput
with ``BLOCK_PAIRS``, 0.15x / 0.24x / 0.26x with 2**22 / 2**23 / 2**24 pairs, peak memory growth
428 / 712 / 1216 MiB against NoPE's 224 (README, "On a GPU")."""


def blocked(
    seq_len: int,
    causal: bool,
    prefix_len: int | None,
    device: torch.device,
    queries: slice = ALL,
    keys: slice = ALL,
) -> Tensor:
    """Bool ``(Tq, Tk)``: True where query ``i`` may not attend to key ``j``.

    Causal: ``j > i``. Bidirectional with ``prefix_len`` (a prefix LM, Raffel et al. 2020, T5,
    §3.2.1): ``j > i`` unless both lie in the first ``prefix_len`` tokens. Bidirectional without
    a prefix: nothing is blocked. ``queries`` and ``keys`` select a window of ``range(T)``.
    """
    i = torch.arange(seq_len, device=device)[queries].unsqueeze(-1)  # (Tq, 1)
    j = torch.arange(seq_len, device=device)[keys]  # (Tk,)
    future = j > i  # (Tq, Tk)
    if causal:
        return future
    if prefix_len is None:
        return torch.zeros_like(future)
    return future & ((i >= prefix_len) | (j >= prefix_len))


def query_blocks(
    seq_len: int, causal: bool, prefix_len: int | None, rows: int
) -> list[tuple[slice, slice]]:
    """Windows of the blocked path: ``rows`` queries each (the last block fewer), with the keys
    they may see (causal: up to the block's last query; prefix LM: also the prefix).

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
        blocks.append((slice(start, stop), slice(0, keys)))
    return blocks


def attention_mask(
    seq_len: int,
    causal: bool,
    prefix_len: int | None,
    bias: Tensor | None,
    device: torch.device,
    dtype: torch.dtype,
    reuse_bias: bool = False,
) -> Tensor | None:
    """Additive SDPA mask: ``bias`` (or zeros) with ``-inf`` where attention is blocked.

    Args:
        seq_len: ``T``.
        causal: causal attention; ``prefix_len`` is then ignored.
        prefix_len: bidirectional only: tokens in the bidirectional prefix, or None.
        bias: float ``(1 or B, H, T, T)`` finite score bias, or None.
        device, dtype: of the mask.
        reuse_bias: ``bias`` is a temporary the caller gives away: mask it in place (saves a
            copy of a ``(1, H, T, T)`` tensor, 256 MiB for 4 heads at T = 4096).

    Returns:
        ``dtype`` ``(T, T)`` or ``(1 or B, H, T, T)``; None when no mask is needed: no bias and
        either causal (SDPA's ``is_causal``) or bidirectional without a prefix.
    """
    if bias is None and (causal or prefix_len is None):
        return None
    return window_mask(seq_len, causal, prefix_len, bias, device, dtype, reuse_bias=reuse_bias)


def window_mask(
    seq_len: int,
    causal: bool,
    prefix_len: int | None,
    bias: Tensor | None,
    device: torch.device,
    dtype: torch.dtype,
    queries: slice = ALL,
    keys: slice = ALL,
    reuse_bias: bool = False,
) -> Tensor:
    """The additive mask of a window of queries and keys, as :func:`attention_mask` but always
    a tensor: ``bias`` ``(1 or B, H, Tq, Tk)`` or zeros ``(Tq, Tk)``, ``-inf`` where blocked.

    Only keys after a query are ever blocked (causal and prefix LM alike), so only the columns
    from the window's first query on are masked: for a block of the blocked path, its
    ``(Tq, Tq)`` diagonal square rather than all ``(Tq, Tk)`` entries.
    """
    if bias is None:
        rows, cols = range(seq_len)[queries], range(seq_len)[keys]
        base = torch.zeros(len(rows), len(cols), device=device, dtype=dtype)
    else:
        base = bias.to(dtype)
    if not causal and prefix_len is None:
        return base
    if not reuse_bias and base is bias:  # the caller's tensor: mask a copy
        base = base.clone()
    start = keys.start or 0  # windows start at a given index or at 0 (ALL)
    first = max((queries.start or 0) - start, 0)  # window column of the first key after a query
    right = slice(start + first, keys.stop)
    block = blocked(seq_len, causal, prefix_len, base.device, queries, right)  # (Tq, Tk - first)
    base[..., first:].masked_fill_(block, -math.inf)
    return base


def reverse(keys: slice, seq_len: int) -> slice:
    """The window ``keys`` of ``range(T)`` in a sequence read backwards (position ``T - 1 - j``
    for ``j``), as :func:`toeplitz_mask` orders keys."""
    return slice(seq_len - keys.stop, seq_len - keys.start)


def toeplitz_mask(scheme: PositionScheme, seq_len: int, causal: bool, dtype: torch.dtype) -> Tensor:
    """The additive mask of a relative scheme's bias at default positions, keys in reverse
    order: ``(1, H, T, T)``, entry ``[i, m]`` for query ``i`` and key ``T - 1 - m``.

    A relative bias is a function of ``i - j`` alone (a Toeplitz matrix), so every entry is one
    of ``2T - 1`` values: with keys reversed, ``[i, m]`` depends on ``i + m`` only and the mask
    is a strided view (both strides 1) of one row per head; reversed keys are needed because a
    view cannot step backwards. The values come from the scheme's last and first query rows.

    Returns:
        ``dtype`` view of ``(1, H, 2T - 1)`` memory; ``-inf`` where the key is after the query
        (causal).
    """
    t = seq_len
    last = scheme.score_bias(None, t, slice(t - 1, t))  # (1, H, 1, T): i - j = T-1 .. 0
    first = scheme.score_bias(None, t, slice(0, 1), slice(1, t))  # i - j = -1 .. -(T-1)
    descending = torch.cat([last, first], dim=-1).to(dtype)  # (1, H, 1, 2T - 1)
    if causal:
        descending = descending.masked_fill(
            torch.arange(2 * t - 1, device=last.device) >= t, -math.inf
        )
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
) -> Tensor:
    """One layer's mask on one window of the blocked path (:func:`query_blocks`): the scheme's
    shared bias of that window plus the layer's own bias on it, ``-inf`` where blocked.

    Args:
        scheme, positions: the forward pass's scheme and positions (for its ``score_bias``).
        layer_window: the layer's own bias on the window, float ``(1 or B, H, Tq, Tk)``, or None.
        queries, keys: the window.

    Returns:
        ``dtype`` ``(Tq, Tk)`` or ``(1 or B, H, Tq, Tk)``.
    """
    bias = scheme.score_bias(positions, seq_len, queries, keys)  # (1 or B, H, Tq, Tk) or None
    ours = layer_window is None or bias is not None  # score_bias and a sum return new tensors
    if layer_window is not None:
        bias = layer_window if bias is None else bias + layer_window
    return window_mask(
        seq_len, causal, prefix_len, bias, device, dtype, queries, keys, reuse_bias=ours
    )


def add_layer_bias(
    mask: Tensor | None,
    layer_bias: Tensor | None,
    causal: bool,
    prefix_len: int | None,
    dtype: torch.dtype,
) -> Tensor | None:
    """The mask of one layer: the forward's ``mask`` plus that layer's own finite bias.

    Args:
        mask: the forward pass's mask from :func:`attention_mask` (None: is_causal or no mask).
        layer_bias: float ``(1 or B, H, T, T)`` or None.
    """
    if layer_bias is None:
        return mask
    if mask is None:
        t = layer_bias.shape[-1]
        return attention_mask(t, causal, prefix_len, layer_bias, layer_bias.device, dtype)
    return mask + layer_bias.to(dtype)


class MaskCache:
    """Masks of fixed biases at default positions (ALiBi), cached per (causal, dtype, device).

    Kept at the longest length seen (exactly that length: masks are quadratic) and sliced for
    shorter ones, which is valid because a fixed bias and the causal mask depend on ``i - j``.
    """

    def __init__(self) -> None:
        self._masks: dict[tuple[bool, torch.dtype, torch.device], Tensor] = {}

    def get(
        self,
        seq_len: int,
        causal: bool,
        dtype: torch.dtype,
        device: torch.device,
        bias: Callable[[int], Tensor],
    ) -> Tensor:
        """``(1, H, T, T)`` mask, a view of the cache; ``bias(n)`` builds the ``n``-token bias."""
        key = (causal, dtype, device)
        cache = self._masks.get(key)
        if cache is None or cache.shape[-1] < seq_len:
            with outside_autograd():
                built = bias(seq_len)
                cache = attention_mask(seq_len, causal, None, built, device, dtype, reuse_bias=True)
            self._masks[key] = cache
        return cache[..., :seq_len, :seq_len]
