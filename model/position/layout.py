"""Hybrid layouts: a scheme per layer and per head, as one composite scheme.

Current models place positions per layer and per head rather than once per model: Llama 4 drops
RoPE in every fourth layer (``no_rope_layers``, Meta 2025), Cohere's Command A interleaves NoPE
layers with RoPE ones (Yang et al. 2025, "Rope to Nope and Back Again: A New Hybrid Attention
Strategy"), and x-transformers rotates only some heads and puts ALiBi on some
(``rotate_num_heads``, ``alibi_num_heads``). :class:`LayeredPositions` holds one member scheme
per (scheme, head count) of a layout and implements the hooks of
:class:`model.position.base.PositionScheme` from theirs, so the transformer, the blocked
long-sequence path and every tool of ``lab/`` use it as any other scheme:

- ``embedding``: the members' embeddings (a scheme with one acts on every layer and head, so a
  layout gives it all of them or none, see :mod:`model.layout`);
- ``score_bias``: the members' shared biases side by side on their heads (zeros on the other
  heads) when they sit on the same heads in every layer; otherwise each layer adds its own
  members' shared biases to its heads, built window by window (``Scores.window``);
- ``layer``: each member acts on its heads' slice of the layer's queries and keys, with its own
  layer index counting only the layers it appears in.

The layout itself is parsed and checked from the ``model.*`` keys in :mod:`model.layout`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from model.position.base import ALL, PositionScheme, SchemeConfig, Scores, scheme_class


@dataclass(frozen=True)
class Group:
    """``heads`` consecutive heads of a layer that use ``scheme`` (a registered name)."""

    scheme: str
    heads: int


@dataclass(frozen=True)
class LayerLayout:
    """One layer's schemes, its heads in order (their counts sum to ``n_heads``), and its
    sliding window in tokens (None: global attention)."""

    groups: tuple[Group, ...]
    window: int | None = None


@dataclass(frozen=True)
class MemberConfig:
    """What a member scheme reads of the model (:class:`SchemeConfig`): the model's widths and
    masking, its own heads ``n_heads`` and the layers it appears in ``n_layers``."""

    position: str
    scheme_options: Any
    d_model: int
    n_layers: int
    n_heads: int
    causal: bool
    randomized_positions: int
    head_dim: int


def member_key(group: Group) -> str:
    """The member module's name of ``group``, e.g. ``rope_2`` (a scheme on 2 heads)."""
    return f"{group.scheme}_{group.heads}"


def member_configs(
    config: SchemeConfig, layers: tuple[LayerLayout, ...], options: dict[str, Any]
) -> dict[str, MemberConfig]:
    """The config of every member of ``layers`` by :func:`member_key`, in order of first
    appearance; ``options`` maps scheme names to their typed options."""
    counts: dict[str, tuple[Group, int]] = {}
    for layer in layers:
        for group in layer.groups:
            key = member_key(group)
            counts[key] = (group, counts.get(key, (group, 0))[1] + 1)
    return {
        key: MemberConfig(
            group.scheme,
            options[group.scheme],
            config.d_model,
            n_layers,
            group.heads,
            config.causal,
            0,  # randomized positions wrap the whole layout, never a member
            config.head_dim,
        )
        for key, (group, n_layers) in counts.items()
    }


@dataclass
class LayoutState:
    """Per-forward state of :class:`LayeredPositions`: its positions and length (for the
    shared biases a layer adds) and every member's own :meth:`PositionScheme.prepare` state."""

    positions: Tensor | None
    seq_len: int
    members: dict[str, Any]


class LayeredPositions(PositionScheme):
    """A scheme per layer and per head (:class:`LayerLayout` per layer), from member schemes.

    Args:
        config: the model's config (:class:`model.config.ModelConfig`).
        layers: one :class:`LayerLayout` per layer.
        options: typed options by scheme name, for every scheme the layout names.
    """

    def __init__(
        self, config: SchemeConfig, layers: tuple[LayerLayout, ...], options: dict[str, Any]
    ) -> None:
        super().__init__(config, config.scheme_options)
        configs = member_configs(config, layers, options)
        self.members = nn.ModuleDict(
            {key: scheme_class(c.position)(c, c.scheme_options) for key, c in configs.items()}
        )
        self.slots = layer_slots(layers)
        members = list(self.members.values())
        self.relative = all(m.relative for m in members)
        self.bidirectional = all(m.bidirectional for m in members)
        shared = {
            tuple(
                (key, heads.start, heads.stop)
                for key, _, heads in slots
                if self.members[key].shared_bias
            )
            for slots in self.slots
        }  # (member, first head, end) of the shared biases, per layer
        self.shared_slots = shared.pop() if len(shared) == 1 else None
        self.layer_shared = self.shared_slots is None  # shared biases differ between layers
        self.shared_bias = bool(self.shared_slots)
        self.fixed_bias = self.shared_bias and all(
            self.members[key].fixed_bias for key, *_ in self.shared_slots
        )
        self.windowed_layer_bias = any(m.windowed_layer_bias for m in members) or (
            self.layer_shared and any(m.shared_bias for m in members)
        )
        self.widens_heads = any(m.widens_heads for m in members)  # in the layers it has
        self.replaces_softmax = any(m.replaces_softmax for m in members)  # all or none (check)
        self.name = "+".join(dict.fromkeys(c.position for c in configs.values()))

    def reset_parameters(self) -> None:
        """Every member's initialisation."""
        for member in self.members.values():
            member.reset_parameters()

    def max_length(self) -> int | None:
        """The shortest limit of the members (None when none has one)."""
        limits = [m.max_length() for m in self.members.values()]
        return min((n for n in limits if n is not None), default=None)

    def reserve(self, n_positions: int) -> None:
        """Grow every member's tables."""
        for member in self.members.values():
            member.reserve(n_positions)

    def select_positions(self, seq_len: int, batch: int, device: torch.device) -> Tensor | None:
        """The first member's positions that are not ``arange(T)`` (None: all use it)."""
        for member in self.members.values():
            chosen = member.select_positions(seq_len, batch, device)
            if chosen is not None:
                return chosen
        return None

    def embedding(self, positions: Tensor | None, seq_len: int) -> Tensor | None:
        """The sum of the members' embeddings, float32 ``(1 or B, T, D)``, or None."""
        total = None
        for member in self.members.values():
            added = member.embedding(positions, seq_len)
            if added is not None:
                total = added if total is None else total + added
        return total

    def score_bias(
        self, positions: Tensor | None, seq_len: int, queries: slice = ALL, keys: slice = ALL
    ) -> Tensor | None:
        """The members' shared biases on their heads, zeros on the others:
        ``(1 or B, H, Tq, Tk)``, when they sit on the same heads in every layer; else None
        (each layer adds its own, :meth:`layer`)."""
        if not self.shared_bias:
            return None
        if len(self.shared_slots) == 1 and self.shared_slots[0][1:] == (0, self.heads):
            key = self.shared_slots[0][0]
            return self.members[key].score_bias(positions, seq_len, queries, keys)
        parts = {
            start: self.members[key].score_bias(positions, seq_len, queries, keys)
            for key, start, _ in self.shared_slots
        }
        return side_by_side(parts, self.heads)

    @property
    def heads(self) -> int:
        """The model's ``n_heads``."""
        return self.config.n_heads

    def prepare(self, positions: Tensor | None, seq_len: int) -> LayoutState:
        """Every member's per-forward state, with the positions and length."""
        members = {key: m.prepare(positions, seq_len) for key, m in self.members.items()}
        return LayoutState(positions, seq_len, members)

    def layer(self, index: int, q: Tensor, k: Tensor, state: LayoutState) -> Scores:
        """Each member of layer ``index`` on its heads' slice of q and k ``(B, H, T, Dh)``.

        One member on every head acts on q and k as they are (the same operations as that
        scheme alone). Otherwise the slices' queries and keys are put back side by side; a
        score scale that differs between them multiplies their queries instead; their biases
        (and the shared biases of this layer's members, when layers differ in them) form one
        bias built window by window (``Scores.window``, zeros on heads without one).
        """
        slots = self.slots[index]
        if len(slots) == 1 and not (self.layer_shared and self.members[slots[0][0]].shared_bias):
            key, local, _ = slots[0]
            return self.members[key].layer(local, q, k, state.members[key])
        parts = [
            self.members[key].layer(local, q[:, heads], k[:, heads], state.members[key])
            for key, local, heads in slots
        ]
        scales = {p.scale for p in parts}
        scale = scales.pop() if len(scales) == 1 else None
        queries = [p.q if scale is not None or p.scale is None else p.q * p.scale for p in parts]
        q, k = torch.cat(queries, dim=1), torch.cat([p.k for p in parts], dim=1)
        window = partial(self.layer_bias, slots, parts, state)
        if all(p.bias is None and p.window is None for p in parts) and not self.adds_shared(slots):
            window = None
        return Scores(q, k, None, scale, window)

    def adds_shared(self, slots: list[tuple[str, int, slice]]) -> bool:
        """A layer of ``slots`` adds its members' shared biases itself (layers differ in them)."""
        return self.layer_shared and any(self.members[key].shared_bias for key, *_ in slots)

    def layer_bias(
        self,
        slots: list[tuple[str, int, slice]],
        parts: list[Scores],
        state: LayoutState,
        queries: slice,
        keys: slice,
    ) -> tuple[Tensor, None]:
        """One layer's bias on a window, ``(1 or B, H, Tq, Tk)`` float32: per member, its own
        per-layer bias plus (when layers differ in them) its shared bias; and no logits."""
        biases = {}
        for (key, _, heads), part in zip(slots, parts, strict=True):
            member, bias = self.members[key], part.bias_window(queries, keys)
            if self.layer_shared and member.shared_bias:
                shared = member.score_bias(state.positions, state.seq_len, queries, keys)
                bias = shared if bias is None else shared + bias
            if bias is not None:
                biases[heads.start] = bias
        return side_by_side(biases, self.heads), None


def layer_slots(layers: tuple[LayerLayout, ...]) -> list[list[tuple[str, int, slice]]]:
    """Per layer, its ``(member key, the member's own layer index, heads)`` in head order; a
    member's layer index counts the layers it appears in before this one."""
    seen: dict[str, int] = {}
    slots = []
    for layer in layers:
        start, row = 0, []
        for group in layer.groups:
            key = member_key(group)
            row.append((key, seen.get(key, 0), slice(start, start + group.heads)))
            seen[key] = seen.get(key, 0) + 1
            start += group.heads
        slots.append(row)
    return slots


def side_by_side(parts: dict[int, Tensor], n_heads: int) -> Tensor:
    """Biases of some heads as one ``(1 or B, H, Tq, Tk)`` float32 tensor, zeros elsewhere.

    Args:
        parts: first head -> that member's bias ``(1 or B, Hm, Tq, Tk)``; at least one.
        n_heads: ``H``.
    """
    some = next(iter(parts.values()))
    batch = max(p.shape[0] for p in parts.values())
    out = some.new_zeros(batch, n_heads, *some.shape[-2:], dtype=torch.float32)
    for start, bias in parts.items():
        out[:, start : start + bias.shape[1]] = bias
    return out
