"""Learned absolute positions (GPT-2, BERT): one trainable vector per position index."""

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn

from model.position.base import PositionScheme, SchemeConfig, register


@dataclass(frozen=True)
class LearnedOptions:
    """Options of ``learned``.

    Attributes:
        max_positions: rows of the table: the longest usable sequence, in tokens.
    """

    MAX_POSITIONS: ClassVar[int] = 2**16
    """Most rows (65,536, as ``model.randomized_positions`` may draw): a table of ``(rows,
    d_model)``; the lab's sequences have at most 4096 tokens (``lab.common.config.MAX_TOKENS``)."""

    max_positions: int = 1024

    def __post_init__(self) -> None:
        if not 1 <= self.max_positions <= self.MAX_POSITIONS:
            raise ValueError(
                f"max_positions={self.max_positions} is invalid; it must be in "
                f"[1, {self.MAX_POSITIONS}]"
            )


@register("learned")
class LearnedPosition(PositionScheme):
    """A trainable table of ``max_positions`` rows of width ``d_model``, added to the tokens.

    The table length caps the usable length: a position ``>= max_positions`` has no row. For
    default positions ``embedding`` says so (a comparison of Python ints, no host sync); for
    explicit ones :meth:`model.Transformer.check_inputs` does, since ``forward`` reads no values.

    Raises:
        ValueError: (in ``embedding``) a default-position sequence longer than the table.
    """

    Options = LearnedOptions

    def __init__(self, config: SchemeConfig, options: LearnedOptions) -> None:
        super().__init__(config, options)
        self.table = nn.Embedding(options.max_positions, config.d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    @classmethod
    def check(cls, config: SchemeConfig, options: LearnedOptions) -> None:
        """Randomized positions up to ``L`` need ``L`` rows."""
        if config.randomized_positions > options.max_positions:
            raise ValueError(
                f"model.randomized_positions={config.randomized_positions} draws positions the "
                f"learned table cannot hold (model.options.learned.max_positions="
                f"{options.max_positions}); raise max_positions to at least it"
            )

    def max_length(self) -> int:
        """``max_positions``: the table has no row for later positions."""
        return self.options.max_positions

    def embedding(self, positions: Tensor | None, seq_len: int) -> Tensor:
        """Rows of the table: float32 ``(1, T, D)`` (default positions) or ``(B, T, D)``."""
        if positions is None:
            if seq_len > self.options.max_positions:
                raise ValueError(
                    f"sequence needs position {seq_len - 1} (length {seq_len}) but the learned "
                    f"table has max_positions={self.options.max_positions} rows; train with a "
                    "larger model.options.learned.max_positions"
                )
            return self.table.weight[:seq_len].unsqueeze(0)  # (1, T, D)
        return self.table(positions if positions.dim() == 2 else positions.unsqueeze(0))
