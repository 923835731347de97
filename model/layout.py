"""The ``model.*`` keys of a hybrid layout, parsed and checked: which scheme each layer and
head uses, and each layer's sliding window.

Four keys, all text or numbers so that each can be a sweep grid axis:

- ``model.layout``: one entry per layer, separated by ``,``: ``rope,rope,rope,none``. An
  entry is a scheme, or a split of the layer's heads, ``rope:2+none:2`` (``NAME:COUNT``
  joined by ``+``, counts summing to ``n_heads``; one group may leave its count out and take
  the heads left), optionally followed by ``@W``, the layer's sliding window in tokens.
- ``model.heads``: one such head split for every layer, ``rope:2+none:2``.
- ``model.nope_every``: ``k`` > 0 makes every ``k``-th layer (the ``k``-th, ``2k``-th, ...) a
  NoPE layer with global attention, the others keeping their schemes and windows: Llama 4's
  ``no_rope_layers`` from ``nope_layer_interval`` (Meta 2025), where the RoPE layers attend
  locally and the NoPE layers globally.
- ``model.window``: a sliding window of ``W`` tokens for every layer (a layer's own ``@W``
  wins): query ``i`` sees keys ``j`` with ``|i - j| < W``, itself and the ``W - 1`` before it
  when causal (Mistral's ``sliding_window``; Beltagy et al. 2020, Longformer).

Without any of them every layer uses ``model.position`` on every head with global attention:
the model is exactly the one of that scheme alone (:func:`is_plain`).
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from model.position import PositionScheme, available_schemes, scheme_class
from model.position.layout import Group, LayerLayout

MAX_WINDOW = 2**16
"""Largest ``window`` (65,536 tokens: 16 times the lab's longest sequence)."""

SYNTAX = "e.g. rope, rope:2+none:2 or rope@64"
"""One layout entry's forms, for messages."""


def parse_layer(text: str, n_heads: int, key: str) -> LayerLayout:
    """One entry of a layout (or ``model.heads``): ``NAME[:COUNT]`` groups joined by ``+``,
    optionally ``@W``.

    Raises:
        ValueError: an unknown scheme, a bad count or window, a scheme named twice, or counts
            that do not sum to ``n_heads`` (one line naming ``key`` and the entry).
    """
    body, at, window_text = text.strip().partition("@")
    window = parse_window(window_text, f"{key} entry {text!r}") if at else None
    groups: list[tuple[str, int | None]] = []
    for part in body.split("+"):
        name, colon, count = (s.strip() for s in part.partition(":"))
        if name not in available_schemes():  # the registry's message names model.position
            raise ValueError(
                f"{key} entry {text!r}: {name!r} is not a known scheme; choose one of "
                f"{', '.join(available_schemes())}"
            )
        if colon and not (count.isdigit() and int(count) >= 1):
            raise ValueError(
                f"{key} entry {text!r}: head count {count!r} of {name} is not an integer >= 1; "
                f"{SYNTAX}"
            )
        if name in (g[0] for g in groups):
            raise ValueError(f"{key} entry {text!r} names {name} twice; give it once per layer")
        groups.append((name, int(count) if colon else None))
    return LayerLayout(count_heads(groups, n_heads, f"{key} entry {text!r}"), window)


def count_heads(groups: list[tuple[str, int | None]], n_heads: int, where: str) -> tuple:
    """``groups`` as :class:`Group` s whose counts sum to ``n_heads``: at most one group without
    a count takes the heads left (a lone group: all of them).

    Raises:
        ValueError: two groups without a count, or counts that do not sum to ``n_heads``.
    """
    given = sum(count for _, count in groups if count is not None)
    open_groups = [name for name, count in groups if count is None]
    if len(open_groups) > 1:
        raise ValueError(f"{where}: give the head count of every scheme but one, {SYNTAX}")
    left = n_heads - given
    if (open_groups and left < 1) or (not open_groups and left != 0):
        raise ValueError(
            f"{where}: head counts sum to {given} but model.n_heads={n_heads}; they must sum "
            f"to {n_heads}"
        )
    return tuple(Group(name, left if count is None else count) for name, count in groups)


def parse_window(text: Any, key: str) -> int:
    """A window in tokens, an integer in ``[1, MAX_WINDOW]``.

    Raises:
        ValueError: anything else (one line naming ``key``).
    """
    value = int(text) if isinstance(text, str) and text.strip().isdigit() else text
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_WINDOW:
        raise ValueError(
            f"{key}: window={text!r} is invalid; it must be an integer in [1, {MAX_WINDOW}] "
            "(tokens each query sees, itself included), or null for global attention"
        )
    return value


def resolve_layout(
    position: str,
    n_layers: int,
    n_heads: int,
    layout: str | None = None,
    heads: str | None = None,
    nope_every: int = 0,
    window: int | None = None,
) -> tuple[LayerLayout, ...]:
    """Every layer's :class:`LayerLayout` from the ``model.*`` keys (see the module docstring).

    Raises:
        ValueError: a bad entry (:func:`parse_layer`), a layout without one entry per layer,
            ``layout`` with ``heads`` or ``nope_every``, ``nope_every`` outside
            ``[0, n_layers]``, or a bad ``window`` (one line).
    """
    if window is not None:
        window = parse_window(window, "model.window")
    if layout is not None and (heads is not None or nope_every):
        given = "model.heads" if heads is not None else "model.nope_every"
        raise ValueError(
            f"model.layout and {given} are both given; give one (a layout entry can split "
            "heads, rope:2+none:2, and name none layers itself)"
        )
    if not isinstance(nope_every, int) or nope_every == 1 or not 0 <= nope_every <= n_layers:
        raise ValueError(
            f"model.nope_every={nope_every!r} is invalid; it must be 0 (off) or k in "
            f"[2, model.n_layers={n_layers}] (every k-th layer without positions; every layer "
            "without them is model.position=none)"
        )
    if layout is not None:
        entries = str(layout).split(",")
        blank = [i for i, entry in enumerate(entries) if not entry.strip()]
        if blank:
            raise ValueError(
                f"model.layout={layout!r} has an empty entry (entry {blank[0]} of "
                f"{len(entries)}); give one scheme (or head split) per layer, e.g. "
                f"{','.join(['rope'] * n_layers)}, or null for model.position in every layer"
            )
        if len(entries) != n_layers:
            raise ValueError(
                f"model.layout={layout!r} has {len(entries)} entries but model.n_layers="
                f"{n_layers}; give one scheme (or head split) per layer, separated by commas"
            )
        layers = [parse_layer(entry, n_heads, "model.layout") for entry in entries]
    elif heads is not None:
        layers = [parse_layer(str(heads), n_heads, "model.heads")] * n_layers
    else:
        layers = [LayerLayout((Group(position, n_heads),))] * n_layers
    if window is not None and all(x.window is not None for x in layers):
        key = f"model.layout={layout!r}" if layout is not None else f"model.heads={heads!r}"
        raise ValueError(
            f"model.window={window} is set by no layer: every entry of {key} gives its own "
            "@W; leave model.window out (it sets the layers without @W)"
        )
    layers = [LayerLayout(x.groups, window if x.window is None else x.window) for x in layers]
    nope = LayerLayout((Group("none", n_heads),))
    return tuple(
        nope if nope_every and (i + 1) % nope_every == 0 else x for i, x in enumerate(layers)
    )


def check_layout(layers: tuple[LayerLayout, ...], n_heads: int, causal: bool, key: str) -> None:
    """Check what a layout asks of its schemes: a scheme that adds to the token embeddings, or
    that replaces softmax (stick-breaking), acts on every layer and head, so it must have all of
    them; a causal-only scheme needs ``model.causal=true``; a scheme that widens the heads
    (PoPE) takes whole layers. ``key`` names the key (and value) that set the layout.

    Raises:
        ValueError: one line naming ``key`` and the scheme.
    """
    shared = {g.scheme for layer in layers if len(layer.groups) > 1 for g in layer.groups}
    for name in scheme_names(layers):
        cls = scheme_class(name)
        everywhere = all(layer.groups == (Group(name, n_heads),) for layer in layers)
        why = "adds its positions to the token embeddings, before any layer"
        if cls.replaces_softmax:
            why = "replaces the softmax of every layer and head by its own weights"
        whole = cls.replaces_softmax or cls.embedding is not PositionScheme.embedding
        if whole and not everywhere:
            raise ValueError(
                f"{key}: {name} {why}, so it cannot be given to some layers or heads only; use "
                f"model.position={name} without model.layout, model.heads or model.nope_every"
            )
        if not causal and not cls.bidirectional:
            raise ValueError(f"{key}: {name} is causal only; set model.causal=true")
        if cls.widens_heads and name in shared:  # a layer's heads split with another scheme
            raise ValueError(
                f"{key}: {name} makes its queries and keys wider than the head, so it cannot "
                "share a layer's heads with another scheme (model.heads); give it whole layers"
            )


def layout_position(
    position: str,
    layers: tuple[LayerLayout, ...],
    default: str,
    layout: str | None = None,
    heads: str | None = None,
) -> str:
    """The ``model.position`` of a model whose ``layout`` or ``heads`` sets every layer's
    schemes: ``position`` itself when the layout runs it (it names the member whose options
    ``eval.position_options`` changes), the layout's first scheme when ``position`` is the
    ``default`` (left out: ``rope`` under ``none,none`` is ``none``), and ``position``
    unchanged without either key. So a run's label says what the model runs.

    Raises:
        ValueError: a ``position`` other than the default that the layout does not run: it
            would be ignored, and the run labelled with a scheme it does not have (one line).
    """
    if layout is None and heads is None:
        return position
    names = scheme_names(layers)
    if position in names:
        return position
    if position == default:
        return names[0]
    key, value = ("model.layout", layout) if layout is not None else ("model.heads", heads)
    raise ValueError(
        f"model.position={position!r} is not run by {key}={value!r} (its schemes: "
        f"{', '.join(names)}), which sets every layer's scheme; give model.position one of "
        f"{', '.join(names)} (the one eval.position_options changes) or leave it out"
    )


def scheme_names(layers: tuple[LayerLayout, ...]) -> list[str]:
    """The schemes a layout names, in order of first appearance."""
    return list(dict.fromkeys(g.scheme for layer in layers for g in layer.groups))


def named_schemes(text: str) -> list[str]:
    """The scheme names that a ``model.layout`` or ``model.heads`` value mentions, unchecked
    (for a sweep, before its configs are built)."""
    parts = str(text).replace("+", ",").split(",")
    return [part.partition("@")[0].partition(":")[0].strip() for part in parts]


def is_plain(layers: tuple[LayerLayout, ...], position: str, n_heads: int) -> bool:
    """Every layer uses ``position`` on every head (windows aside): the scheme alone."""
    return all(layer.groups == (Group(position, n_heads),) for layer in layers)


def describe(layers: tuple[LayerLayout, ...]) -> str:
    """A layout in the syntax of ``model.layout``, runs of equal layers written ``ENTRY*N``,
    one entry when all layers are equal: ``rope@64*3,none``, ``rope:2+none:2``."""
    runs = [(entry, len(list(same))) for entry, same in groupby(map(layer_text, layers))]
    if len(runs) == 1:
        return runs[0][0]
    return ",".join(entry if n == 1 else f"{entry}*{n}" for entry, n in runs)


def layer_text(layer: LayerLayout) -> str:
    """One layer as a ``model.layout`` entry (counts left out for a lone scheme)."""
    if len(layer.groups) == 1:
        body = layer.groups[0].scheme
    else:
        body = "+".join(f"{g.scheme}:{g.heads}" for g in layer.groups)
    return body if layer.window is None else f"{body}@{layer.window}"


LAYOUT_KEYS = ("layout", "heads", "nope_every", "window")
"""The ``model.*`` keys of a layout (each off by default: null or 0)."""


def layout_label(model: dict[str, Any]) -> str | None:
    """A saved ``model`` section's layout as :func:`describe` writes it, or None when it sets
    none of :data:`LAYOUT_KEYS` (the scheme alone; runs saved before they existed too)."""
    if not any(model.get(key) for key in LAYOUT_KEYS):
        return None
    layers = resolve_layout(
        model["position"],
        model["n_layers"],
        model["n_heads"],
        *(model.get(key) for key in ("layout", "heads")),
        model.get("nope_every") or 0,
        model.get("window"),
    )
    return describe(layers)
