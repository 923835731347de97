"""The interface every position scheme implements, and the registry that names them.

A position scheme can act at three places in a decoder-only transformer:

1. ``embedding``: add a vector to the token embeddings before the first block
   (learned absolute, sinusoidal);
2. ``qk_rotation``: transform queries and keys inside every attention layer (RoPE);
3. ``score_bias``: add a bias to the attention scores (ALiBi).

A scheme overrides the hooks it needs; the others return ``None`` and cost nothing. The
transformer calls each hook once per forward pass and hands the result to every layer.

Shape notation: ``B`` batch, ``T`` sequence length, ``D`` model width, ``H`` heads,
``Dh`` head width. ``positions`` is ``None`` (meaning ``arange(T)``, the fast cached path) or a
LongTensor of shape ``(T,)`` or ``(B, T)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from model.config import ModelConfig

QKRotation = Callable[[Tensor], Tensor]
"""Maps queries and/or keys ``(..., B, H, T, Dh)`` to the same shape and dtype."""

_SCHEMES: dict[str, type[PositionScheme]] = {}


class PositionScheme(nn.Module):
    """Base class of position schemes; every hook defaults to "does nothing".

    Subclasses set ``name`` and are registered with :func:`register`.
    """

    name: ClassVar[str]

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config

    def max_length(self) -> int | None:
        """Longest sequence (in tokens) the scheme can encode, or None when unlimited."""
        return None

    def embedding(self, positions: Tensor | None, seq_len: int) -> Tensor | None:
        """Vector added to the token embeddings: float32 ``(1, T, D)`` or ``(B, T, D)``, or None."""
        return None

    def qk_rotation(self, positions: Tensor | None, seq_len: int) -> QKRotation | None:
        """Function applied to queries and keys in every layer, or None."""
        return None

    def score_bias(
        self, positions: Tensor | None, seq_len: int, causal: bool, dtype: torch.dtype
    ) -> Tensor | None:
        """Additive attention mask of ``dtype``, shape ``(1 or B, H, T, T)``, or None.

        When ``causal`` is true the returned mask must already hold ``-inf`` above the diagonal
        (see :func:`causal_fill`): SDPA takes a mask or ``is_causal``, not both.
        """
        return None


def register(name: str) -> Callable[[type[PositionScheme]], type[PositionScheme]]:
    """Class decorator that makes a scheme selectable as ``ModelConfig.position = name``."""

    def add(cls: type[PositionScheme]) -> type[PositionScheme]:
        if name in _SCHEMES:
            raise ValueError(f"position scheme {name!r} is registered twice")
        cls.name = name
        _SCHEMES[name] = cls
        return cls

    return add


def available_schemes() -> tuple[str, ...]:
    """Names of the registered position schemes, in registration order."""
    return tuple(_SCHEMES)


def build_position(config: ModelConfig) -> PositionScheme:
    """Instantiate the scheme named by ``config.position``.

    Raises:
        ValueError: the name is not registered; the message lists the registered names.
    """
    if config.position not in _SCHEMES:
        raise ValueError(
            f"position={config.position!r} is not a known scheme; "
            f"choose one of {', '.join(available_schemes())}"
        )
    return _SCHEMES[config.position](config)


def grown_cache(cache: Tensor, needed: int, build: Callable[[int], Tensor]) -> Tensor:
    """Return ``cache`` if it has at least ``needed`` rows, else a rebuild on the same device.

    Tables grow to twice the old size (at least ``needed``), so a loop over increasing lengths
    rebuilds only O(log n) times, and a steady training loop never rebuilds. Caches are kept as
    non-persistent buffers, so ``model.to(device)`` moves them and checkpoints omit them.
    """
    if cache.shape[0] >= needed:
        return cache
    with outside_autograd():
        return build(max(needed, 2 * cache.shape[0])).to(cache.device)


def outside_autograd() -> contextlib.ExitStack:
    """Context for building caches: no autograd graph, and never inference tensors.

    A cache first built under ``torch.inference_mode`` (say during evaluation) must still be
    usable in a later training step, so inference mode is switched off while building it.
    """
    stack = contextlib.ExitStack()
    stack.enter_context(torch.inference_mode(False))
    stack.enter_context(torch.no_grad())
    return stack


def causal_fill(bias: Tensor, value: float = float("-inf")) -> Tensor:
    """Mask keys after their query: ``bias[..., i, j] = value`` (default ``-inf``) for ``j > i``.

    Args:
        bias: float ``(..., T, T)`` additive score bias.
        value: what to put above the diagonal.

    Returns:
        A new tensor of the same shape and dtype.
    """
    t = bias.shape[-1]
    future = torch.ones(t, t, dtype=torch.bool, device=bias.device).triu(1)  # (T, T)
    return bias.masked_fill(future, value)


def prefix_lm_fill(bias: Tensor, prefix_len: int) -> Tensor:
    """Prefix-LM mask (Raffel et al. 2020, T5, §3.2.1): the first ``prefix_len`` tokens attend
    to each other in both directions; every later token attends causally.

    Args:
        bias: float ``(..., T, T)`` additive score bias (zeros for a plain mask).
        prefix_len: tokens in the bidirectional prefix, ``0 <= prefix_len <= T``.

    Returns:
        A new tensor with ``-inf`` where key ``j > i`` and not both ``i, j < prefix_len``.
    """
    t = bias.shape[-1]
    future = torch.ones(t, t, dtype=torch.bool, device=bias.device).triu(1)  # (T, T)
    future[:prefix_len, :prefix_len] = False
    return bias.masked_fill(future, float("-inf"))


def check_positions(positions: Tensor, seq_len: int) -> None:
    """Raise ValueError unless ``positions`` is an integer ``(T,)`` or ``(B, T)`` tensor >= 0."""
    if positions.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"positions must be an integer tensor, got dtype {positions.dtype}")
    if positions.dim() not in (1, 2) or positions.shape[-1] != seq_len:
        raise ValueError(
            f"positions must have shape (T,) or (B, T) with T={seq_len}, "
            f"got {tuple(positions.shape)}"
        )
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got minimum {int(positions.min())}")
