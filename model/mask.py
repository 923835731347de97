"""The one place that builds attention masks for SDPA: causal, prefix-LM, and score biases.

Schemes return pure (finite) biases; this module adds ``-inf`` where a query may not see a key.
Without any bias, the causal case keeps SDPA's fused ``is_causal=True`` path (no mask tensor).

Long sequences with a mask are attended block by block (:mod:`model.blocked_attention`), each
block with the mask of its window, built by the same functions for a window of queries and keys.

Padding needs no mask of its own: tasks pad only after a row's ``<eos>`` (right padding, prompts
of one length per batch, see :mod:`data.base`), and both the causal mask and the prefix-LM mask
(with the prefix ending at ``<sep>``, as training and evaluation call it) block every key after
a query, so no real token attends to a pad; ``tests/test_tasks.py`` compares padded batches
with their rows run one by one for every scheme.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from model.position.base import ALL, outside_autograd


def blocked(
    seq_len: int,
    causal: bool,
    prefix_len: int | None,
    device: torch.device,
    queries: slice = ALL,
    keys: slice = ALL,
    window: int | None = None,
) -> Tensor:
    """Bool ``(Tq, Tk)``: True where query ``i`` may not attend to key ``j``.

    Causal: ``j > i``. Bidirectional with ``prefix_len`` (a prefix LM, Raffel et al. 2020, T5,
    §3.2.1): ``j > i`` unless both lie in the first ``prefix_len`` tokens. Bidirectional without
    a prefix: nothing is blocked. ``queries`` and ``keys`` select a window of ``range(T)``.
    With a sliding ``window`` of ``W`` tokens, also every key with ``|i - j| >= W`` (Mistral's
    ``sliding_window``: a causal query sees itself and the ``W - 1`` keys before it).
    """
    i = torch.arange(seq_len, device=device)[queries].unsqueeze(-1)  # (Tq, 1)
    j = torch.arange(seq_len, device=device)[keys]  # (Tk,)
    future = j > i  # (Tq, Tk)
    if causal:
        rule = future
    elif prefix_len is None:
        rule = torch.zeros_like(future)
    else:
        rule = future & ((i >= prefix_len) | (j >= prefix_len))
    if window is None:
        return rule
    return rule | ((i - j).abs() >= window)


def attention_mask(
    seq_len: int,
    causal: bool,
    prefix_len: int | None,
    bias: Tensor | None,
    device: torch.device,
    dtype: torch.dtype,
    reuse_bias: bool = False,
    window: int | None = None,
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
        window: a sliding window in tokens (:func:`blocked`), or None.

    Returns:
        ``dtype`` ``(T, T)`` or ``(1 or B, H, T, T)``; None when no mask is needed: no bias, no
        window, and either causal (SDPA's ``is_causal``) or bidirectional without a prefix.
    """
    if bias is None and (causal or prefix_len is None) and window is None:
        return None
    return window_mask(
        seq_len, causal, prefix_len, bias, device, dtype, reuse_bias=reuse_bias, window=window
    )


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
    window: int | None = None,
) -> Tensor:
    """The additive mask of a window of queries and keys, as :func:`attention_mask` but always
    a tensor: ``bias`` ``(1 or B, H, Tq, Tk)`` or zeros ``(Tq, Tk)``, ``-inf`` where blocked.

    Without a sliding ``window`` only keys after a query are ever blocked (causal and prefix LM
    alike), so only the columns from the window's first query on are masked: for a block of the
    blocked path, its ``(Tq, Tq)`` diagonal square rather than all ``(Tq, Tk)`` entries. With
    one, every column is.
    """
    if bias is None:
        rows, cols = range(seq_len)[queries], range(seq_len)[keys]
        base = torch.zeros(len(rows), len(cols), device=device, dtype=dtype)
    else:
        base = bias.to(dtype)
    if not causal and prefix_len is None and window is None:
        return base
    if not reuse_bias and base is bias:  # the caller's tensor: mask a copy
        base = base.clone()
    if window is not None:
        block = blocked(seq_len, causal, prefix_len, base.device, queries, keys, window)
        return base.masked_fill_(block, -math.inf)
    start = keys.start or 0  # windows start at a given index or at 0 (ALL)
    first = max((queries.start or 0) - start, 0)  # window column of the first key after a query
    right = slice(start + first, keys.stop)
    block = blocked(seq_len, causal, prefix_len, base.device, queries, right)  # (Tq, Tk - first)
    base[..., first:].masked_fill_(block, -math.inf)
    return base


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
    """Masks of fixed biases at default positions (ALiBi), cached per (causal, dtype, device,
    sliding window).

    Kept at the longest length seen (exactly that length: masks are quadratic) and sliced for
    shorter ones, which is valid because a fixed bias and the causal mask depend on ``i - j``.
    Inside a graph that ``torch.compile`` traces the cache never grows: a missing or shorter
    mask is built in the graph instead, as in :func:`model.position.base.cached_rows`.
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
        window: int | None = None,
    ) -> Tensor:
        """``(1, H, T, T)`` mask, a view of the cache; ``bias(n)`` builds the ``n``-token bias;
        ``window``: a sliding window in tokens (:func:`blocked`), or None."""
        key = (causal, dtype, device) if window is None else (causal, dtype, device, window)
        cache = self._masks.get(key)
        if cache is None or cache.shape[-1] < seq_len:
            build = partial(attention_mask, seq_len, causal, None, device=device, dtype=dtype)
            if torch.compiler.is_compiling():
                return build(bias=bias(seq_len), reuse_bias=True, window=window)
            with outside_autograd():
                cache = build(bias=bias(seq_len), reuse_bias=True, window=window)
            self._masks[key] = cache
        return cache[..., :seq_len, :seq_len]
