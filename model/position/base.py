"""The interface every position scheme implements, and the registry that names them.

A scheme is an ``nn.Module`` with up to four hooks, called by :class:`model.Transformer`:

0. ``select_positions``: the positions of one forward pass, a rule per mode (training or
   evaluation); ``None`` means ``arange(T)``, the fast cached path;
2. ``embedding``: a vector added to the token embeddings before the first block
   (learned absolute, sinusoidal);
3. ``score_bias``: an additive bias on the attention scores shared by every layer (ALiBi, T5,
   Kerple, FIRE), for every (query, key) pair or for a window of queries against a window of
   keys (long sequences build it block by block, see :mod:`model.blocked_attention`); pure:
   the causal or prefix-LM mask is added by :mod:`model.mask`, never by a scheme;
4. ``layer``: per layer, with that layer's queries and keys: rotated q/k (RoPE, xPos), a
   per-layer bias (T5 per layer, CoPE) and optionally a score scale (:class:`Scores`).

A scheme overrides the hooks it needs; the others return ``None`` (or q/k untouched). Its
options are a frozen dataclass, ``Options``, validated when the config is built and saved with
every run (``model.options.NAME``); ``evaluable`` names the options that may change at
evaluation time without retraining. Class attributes state properties that the registry-wide
tests check against the hooks: ``relative`` (logits invariant to shifting every position; a
relative score bias is then a function of ``i - j`` alone, which
:func:`model.blocked_attention.toeplitz_mask` relies on), ``bidirectional`` (supports
``causal=False``), and the three that choose the attention path: ``shared_bias``,
``fixed_bias`` and ``windowed_layer_bias``.

Shape notation: ``B`` batch, ``T`` sequence length, ``D`` model width, ``H`` heads,
``Dh`` head width. ``positions`` is ``None`` (meaning ``arange(T)``) or a LongTensor of shape
``(T,)`` or ``(B, T)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor, nn

from registry import Registry

ALL = slice(None)
"""Every position: the default window of :meth:`PositionScheme.score_bias`."""


class SchemeConfig(Protocol):
    """What a scheme reads of its model's config, :class:`model.config.ModelConfig` (which
    validates names and options against the schemes, so they do not import it);
    ``scheme_options`` is the active scheme's typed ``Options``."""

    position: str
    scheme_options: Any
    d_model: int
    n_layers: int
    n_heads: int
    causal: bool
    randomized_positions: int
    randomized_eval: bool

    @property
    def head_dim(self) -> int: ...


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
        weights: the attention weights computed by the scheme instead of softmax (stick-breaking):
            ``weights(logits)`` maps the whole layer's float32 scores ``s * q k^T / sqrt(Dh)``
            ``(B, H, T, T)`` to float32 weights of the same shape, zero where a query may not
            attend (the scheme applies its own causal rule; no mask is added). Attention then
            computes ``weights v`` in place of SDPA, at every length (never block by block).
    """

    q: Tensor
    k: Tensor
    bias: Tensor | None = None
    scale: float | None = None
    window: Callable[[slice, slice], tuple[Tensor, Tensor | None]] | None = None
    weights: Callable[[Tensor], Tensor] | None = None

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
    bidirectional: ClassVar[bool] = True
    shared_bias: bool = False
    """:meth:`score_bias` returns a bias (not None). Set for every subclass that overrides
    :meth:`score_bias` (:meth:`__init_subclass__`), so a new scheme needs not declare it; an
    instance may turn it off where its options decide (T5's ``per_layer``). The model reads it
    to choose the attention path instead of calling the hook."""
    fixed_bias: ClassVar[bool] = False
    """A shared bias that at default positions is a fixed function of ``T`` (no parameters), so
    the model may cache it with the mask merged in (:class:`model.mask.MaskCache`)."""
    windowed_layer_bias: ClassVar[bool] = False
    """``layer`` returns a bias as large as the scores through ``Scores.window``, so a long
    sequence takes the blocked path (:mod:`model.blocked_attention`) even without a shared
    bias."""
    widens_heads: ClassVar[bool] = False
    """``layer`` returns queries and keys wider than ``head_dim`` (PoPE: twice), so the scheme
    cannot share a layer's heads with another scheme (:func:`model.layout.check_layout`)."""
    replaces_softmax: ClassVar[bool] = False
    """``layer`` returns the attention weights themselves (``Scores.weights``: stick-breaking),
    which ignore the mask: the scheme takes every layer and head (no ``model.layout``,
    ``model.heads`` or ``model.nope_every``) and global attention (no sliding window)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that overrides :meth:`score_bias` has a shared bias (``shared_bias``)."""
        super().__init_subclass__(**kwargs)
        if "score_bias" in cls.__dict__ and "shared_bias" not in cls.__dict__:
            cls.shared_bias = True

    def __init__(self, config: SchemeConfig, options: Any) -> None:
        super().__init__()
        self.config = config
        self.options = options

    @classmethod
    def check(cls, config: SchemeConfig, options: Any) -> None:
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


SCHEMES: Registry[type[PositionScheme]] = Registry("position scheme", "model.position")
"""The registered schemes, in registration order (the order of every listing)."""

register = SCHEMES.register
"""Class decorator that makes a scheme selectable as ``ModelConfig.position = name``."""

available_schemes = SCHEMES.names
"""Names of the registered position schemes, in registration order."""

scheme_class = SCHEMES.lookup
"""The class registered as ``name``; an unknown name is a ValueError listing the schemes."""


def cached_rows(module: nn.Module, name: str, rows: int, build: Callable[[int], Tensor]) -> Tensor:
    """The first ``rows`` rows of the table cached in ``module``'s buffer ``name``, a view;
    ``build(n)`` makes the table's first ``n`` rows when the cache is shorter.

    Tables grow to twice the old size (at least ``rows``), so a loop over increasing lengths
    rebuilds only O(log n) times, and a steady training loop never rebuilds. Caches are kept as
    non-persistent buffers, so ``model.to(device)`` moves them and checkpoints omit them.
    Inside a graph that ``torch.compile`` traces a cache never grows (a graph does not write
    module state): a shorter one gives way to ``build(rows)`` in the graph, the same values, so
    a fresh model compiles with ``fullgraph=True``; :meth:`model.Transformer.reserve` before
    compiling keeps the tables out of the graph.
    """
    cache = getattr(module, name)
    if cache.shape[0] < rows:
        if torch.compiler.is_compiling():
            return build(rows).to(cache.device)
        with outside_autograd():
            cache = build(max(rows, 2 * cache.shape[0])).to(cache.device)
        setattr(module, name, cache)
    return cache[:rows]


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
