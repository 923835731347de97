"""The interface every position scheme implements, and the registry that names them.

A scheme is an ``nn.Module`` with up to four hooks, called by :class:`model.Transformer`:

0. ``select_positions``: the positions of one forward pass, a rule per mode (training or
   evaluation); ``None`` means ``arange(T)``, the fast cached path;
2. ``embedding``: a vector added to the token embeddings before the first block
   (learned absolute, sinusoidal);
3. ``score_bias``: an additive bias on the attention scores shared by every layer (ALiBi, T5,
   Kerple, FIRE), for every (query, key) pair or for a window of queries against a window of
   keys (long sequences build it block by block, see :func:`model.mask.query_blocks`); pure:
   the causal or prefix-LM mask is added by :mod:`model.mask`, never by a scheme;
4. ``layer``: per layer, with that layer's queries and keys: rotated q/k (RoPE, xPos), a
   per-layer bias (T5 per layer, CoPE) and optionally a score scale (:class:`Scores`).

A scheme overrides the hooks it needs; the others return ``None`` (or q/k untouched). Its
options are a frozen dataclass, ``Options``, validated when the config is built and saved with
every run (``model.options.NAME``); ``evaluable`` names the options that may change at
evaluation time without retraining. Class attributes state the properties the registry-wide
tests check: ``relative`` (logits invariant to shifting every position; a relative score bias
is then a function of ``i - j`` alone, which :func:`model.mask.toeplitz_mask` relies on),
``learnable`` (has parameters that training must change), ``bidirectional`` (supports
``causal=False``).

Shape notation: ``B`` batch, ``T`` sequence length, ``D`` model width, ``H`` heads,
``Dh`` head width. ``positions`` is ``None`` (meaning ``arange(T)``) or a LongTensor of shape
``(T,)`` or ``(B, T)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from model.config import ModelConfig

_SCHEMES: dict[str, type[PositionScheme]] = {}

ALL = slice(None)
"""Every position: the default window of :meth:`PositionScheme.score_bias`."""


@dataclass(frozen=True)
class NoOptions:
    """Options of a scheme that has none."""


@dataclass
class Scores:
    """What a scheme contributes to one attention layer.

    Attributes:
        q, k: queries and keys ``(B, H, T, Dh)``, rotated or left as they came.
        bias: per-layer additive score bias, float ``(1 or B, H, T, T)``, finite (no mask), or None.
        scale: multiplier of the usual ``1/sqrt(Dh)`` score scale (a Python float), or None.
        window: the per-layer bias built on demand, instead of ``bias``, for one as large as
            the scores and computed from q and k (CoPE): ``window(queries, keys)`` returns
            ``(bias, logits)`` for a window of query rows and the keys they see (as
            :meth:`PositionScheme.score_bias`): the float ``(1 or B, H, Tq, Tk)`` bias, and the
            window's scores ``q k^T / sqrt(Dh)`` where the scheme computed them anyway (CoPE's
            gates) or None. Attending at once, attention reuses those logits
            (``softmax(logits + bias + mask) v``); the blocked path asks for one window per
            block, never for the whole bias, and ignores them, so they must equal that product.
    """

    q: Tensor
    k: Tensor
    bias: Tensor | None = None
    scale: float | None = None
    window: Callable[[slice, slice], tuple[Tensor, Tensor | None]] | None = None

    def bias_window(self, queries: slice = ALL, keys: slice = ALL) -> Tensor | None:
        """This layer's own bias on a window, ``(1 or B, H, Tq, Tk)``, or None."""
        if self.window is not None:
            return self.window(queries, keys)[0]
        return None if self.bias is None else self.bias[..., queries, keys]


class PositionScheme(nn.Module):
    """Base class of position schemes; every hook defaults to "does nothing".

    Subclasses are registered with :func:`register`, which sets ``name``.
    """

    name: ClassVar[str]
    Options: ClassVar[type] = NoOptions
    evaluable: ClassVar[frozenset[str]] = frozenset()
    relative: ClassVar[bool] = False
    learnable: ClassVar[bool] = False
    bidirectional: ClassVar[bool] = True
    windowed_layer_bias: ClassVar[bool] = False
    """``layer`` returns a bias as large as the scores through ``Scores.window``, so a long
    sequence takes the blocked path (:mod:`model.mask`) even without a shared bias."""
    fixed_bias: ClassVar[bool] = False
    """``score_bias`` at default positions is a fixed function of ``T`` (no parameters), so the
    model may cache it with the mask merged in (:class:`model.mask.MaskCache`)."""

    def __init__(self, config: ModelConfig, options: Any) -> None:
        super().__init__()
        self.config = config
        self.options = options

    @classmethod
    def check(cls, config: ModelConfig, options: Any) -> None:
        """Raise ValueError (one line) when ``options`` do not fit the model ``config``."""

    @classmethod
    def with_training_context(cls, options: dict[str, Any], tokens: int) -> dict[str, Any]:
        """``options`` (a saved dict) with the values that default to the training context filled
        in, given the longest training sequence in ``tokens``; a run config calls it so that the
        saved config holds the value used. The default changes nothing."""
        return options

    def reset_parameters(self) -> None:
        """Initialise the scheme's own parameters. The transformer calls it after its GPT-2
        initialisation (std 0.02 for every ``Linear`` and ``Embedding``, its scheme's included);
        the default keeps that."""

    def max_length(self) -> int | None:
        """Longest sequence (in tokens) the scheme can encode, or None when unlimited."""
        return None

    def reserve(self, n_positions: int) -> None:
        """Grow cached tables to cover positions ``0 .. n_positions - 1`` (call outside forward)."""

    def select_positions(self, seq_len: int, batch: int, device: torch.device) -> Tensor | None:
        """Positions of one forward pass, ``(T,)`` or ``(B, T)``; ``self.training`` selects the
        rule. None (the default) means ``arange(T)``."""
        return None

    def embedding(self, positions: Tensor | None, seq_len: int) -> Tensor | None:
        """Vector added to the token embeddings: float32 ``(1, T, D)`` or ``(B, T, D)``, or None."""
        return None

    def score_bias(
        self, positions: Tensor | None, seq_len: int, queries: slice = ALL, keys: slice = ALL
    ) -> Tensor | None:
        """Additive score bias shared by every layer, float32 ``(1 or B, H, Tq, Tk)``, or None.

        ``queries`` and ``keys`` (slices of ``range(T)`` with step 1) select the window of query
        rows and key columns; the window's bias equals that part of the whole ``(T, T)`` bias.
        Whether the result is None must not depend on the window. Finite everywhere: masking
        is :mod:`model.mask`'s job. A new tensor, never a view of a cache: the mask is
        written into it.
        """
        return None

    def prepare(self, positions: Tensor | None, seq_len: int) -> Any:
        """Per-forward state handed to every :meth:`layer` call (tables shared by the layers).

        Defaults to ``positions`` itself.
        """
        return positions

    def layer(self, index: int, q: Tensor, k: Tensor, state: Any) -> Scores:
        """Layer ``index``'s contribution from its ``(B, H, T, Dh)`` queries and keys and the
        :meth:`prepare` state: rotated q/k, a per-layer bias, a score scale."""
        return Scores(q, k)


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


def scheme_class(name: str) -> type[PositionScheme]:
    """The class registered as ``name``.

    Raises:
        ValueError: the name is not registered; the message lists the registered names.
    """
    if name not in _SCHEMES:
        raise ValueError(
            f"model.position={name!r} is not a known scheme; "
            f"choose one of {', '.join(available_schemes())}"
        )
    return _SCHEMES[name]


def build_position(config: ModelConfig) -> PositionScheme:
    """Instantiate the scheme named by ``config.position`` with its options, wrapped in
    randomized positions when ``config.randomized_positions`` is set.

    Raises:
        ValueError: the name is not registered; the message lists the registered names.
    """
    scheme = scheme_class(config.position)(config, config.scheme_options)
    if config.randomized_positions:
        from model.position.randomized import RandomizedPositions

        scheme = RandomizedPositions(scheme, config.randomized_positions)
    return scheme


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


def relative_distance(
    positions: Tensor | None,
    seq_len: int,
    device: torch.device,
    queries: slice = ALL,
    keys: slice = ALL,
) -> Tensor:
    """Query minus key position ``i - j``: float32 ``(1, Tq, Tk)`` or ``(B, Tq, Tk)``.

    Args:
        positions: None (``arange(T)``), integer ``(T,)`` or ``(B, T)``.
        seq_len: ``T``.
        device: where to build it.
        queries, keys: the window, as in :meth:`PositionScheme.score_bias`.
    """
    pos = torch.arange(seq_len, device=device) if positions is None else positions.to(device)
    pos = pos.float()
    distance = pos[..., queries].unsqueeze(-1) - pos[..., keys].unsqueeze(-2)  # (..., Tq, Tk)
    return distance if distance.dim() == 3 else distance.unsqueeze(0)  # (1 or B, T, T)


def check_positions(positions: Tensor, seq_len: int) -> None:
    """Raise ValueError unless ``positions`` is an integer ``(T,)`` or ``(B, T)`` tensor.

    Shape and dtype only: no value is read, so this costs no host synchronisation.
    """
    if positions.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"positions must be an integer tensor, got dtype {positions.dtype}")
    if positions.dim() not in (1, 2) or positions.shape[-1] != seq_len:
        raise ValueError(
            f"positions must have shape (T,) or (B, T) with T={seq_len}, "
            f"got {tuple(positions.shape)}"
        )
