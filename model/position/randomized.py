"""Randomized positional encodings (Ruoss et al. 2023, "Randomized Positional Encodings Boost
Length Generalization of Transformers", ACL, §3), as a wrapper around any scheme.

In training, the positions of a length-``T`` sequence are a sorted random subset of
``[0, L)`` with ``L`` much larger than the training lengths, drawn per row (a ``(B, T)``
tensor); in evaluation they are ``arange(T)``. The model thereby sees every position up to
``L`` during training, and only their order carries information. With ``at_evaluation`` the
positions are drawn in evaluation too, as Ruoss et al.'s code does (its ``randomize_positions``
acts at test time as well), from a generator of this module reseeded with
:data:`EVAL_SEED` whenever the model enters evaluation mode, so an evaluation is reproducible
and never draws from (or moves) the global random stream that training uses.
"""

from __future__ import annotations

import torch
from torch import Tensor

from model.position.base import ALL, PositionScheme, Scores

EVAL_SEED = 0
"""Seed of the evaluation-time generator (``at_evaluation``), reset at every ``model.eval()``."""


def random_sorted_positions(
    batch: int,
    seq_len: int,
    max_position: int,
    device: torch.device,
    generator: torch.Generator | None = None,
) -> Tensor:
    """A sorted sample without replacement of ``seq_len`` values from ``[0, max_position)``,
    independently per row: int64 ``(B, T)``, strictly increasing along ``T``; drawn from
    ``generator`` (None: the global one).

    Raises:
        ValueError: ``seq_len > max_position`` (not enough distinct positions).
    """
    if seq_len > max_position:
        raise ValueError(
            f"sequence of {seq_len} tokens needs {seq_len} distinct positions but "
            f"model.randomized_positions={max_position}; raise it above the longest length"
        )
    if generator is None:
        keys = torch.rand(batch, max_position, device=device)  # (B, L)
    else:
        keys = torch.rand(batch, max_position, device=device, generator=generator)
    return keys.argsort(dim=-1)[:, :seq_len].sort(dim=-1).values  # (B, T)


class RandomizedPositions(PositionScheme):
    """``inner`` with positions drawn by :func:`random_sorted_positions` while training (and
    in evaluation too with ``at_evaluation``).

    Every other hook is the inner scheme's, so its parameters, caches and properties are used
    as they are; the inner module is ``self.inner``.
    """

    def __init__(
        self, inner: PositionScheme, max_position: int, at_evaluation: bool = False
    ) -> None:
        super().__init__(inner.config, inner.options)
        self.inner = inner
        self.max_position = max_position
        self.at_evaluation = at_evaluation
        self._generators: dict[torch.device, torch.Generator] = {}
        self.name = f"randomized({inner.name})"
        for name in (
            "relative",
            "bidirectional",
            "shared_bias",
            "fixed_bias",
            "windowed_layer_bias",
            "widens_heads",
            "replaces_softmax",
        ):
            setattr(self, name, getattr(inner, name))

    def reset_parameters(self) -> None:
        """The inner scheme's initialisation."""
        self.inner.reset_parameters()

    def max_length(self) -> int | None:
        """The inner scheme's limit."""
        return self.inner.max_length()

    def reserve(self, n_positions: int) -> None:
        """Grow the inner scheme's tables."""
        self.inner.reserve(n_positions)

    def train(self, mode: bool = True) -> RandomizedPositions:
        """Set the mode; entering evaluation restarts the evaluation generators at
        :data:`EVAL_SEED`."""
        if not mode:
            self._generators = {}
        return super().train(mode)

    def select_positions(self, seq_len: int, batch: int, device: torch.device) -> Tensor | None:
        """Training (and evaluation with ``at_evaluation``): sorted random ``(B, T)`` positions
        in ``[0, L)``; else the inner rule."""
        if self.training:
            return random_sorted_positions(batch, seq_len, self.max_position, device)
        if self.at_evaluation:
            device = torch.device(device)
            if device not in self._generators:
                self._generators[device] = torch.Generator(device).manual_seed(EVAL_SEED)
            generator = self._generators[device]
            return random_sorted_positions(batch, seq_len, self.max_position, device, generator)
        return self.inner.select_positions(seq_len, batch, device)

    def embedding(self, positions: Tensor | None, seq_len: int) -> Tensor | None:
        """The inner scheme's embedding."""
        return self.inner.embedding(positions, seq_len)

    def score_bias(
        self, positions: Tensor | None, seq_len: int, queries: slice = ALL, keys: slice = ALL
    ) -> Tensor | None:
        """The inner scheme's shared bias."""
        return self.inner.score_bias(positions, seq_len, queries, keys)

    def prepare(self, positions: Tensor | None, seq_len: int) -> object:
        """The inner scheme's per-forward state."""
        return self.inner.prepare(positions, seq_len)

    def layer(self, index: int, q: Tensor, k: Tensor, state: object) -> Scores:
        """The inner scheme's per-layer contribution."""
        return self.inner.layer(index, q, k, state)
