"""Learned absolute positions (GPT-2, BERT): one trainable vector per position index."""

from torch import Tensor, nn

from model.config import ModelConfig
from model.position.base import PositionScheme, check_positions, register


@register("learned")
class LearnedPosition(PositionScheme):
    """A trainable table of ``max_positions`` rows of width ``d_model``, added to the tokens.

    The table length caps the usable length: a position ``>= max_positions`` has no row.

    Raises:
        ValueError: (in ``embedding``) a position at or past ``max_positions``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.table = nn.Embedding(config.max_positions, config.d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def max_length(self) -> int:
        """``max_positions``: the table has no row for later positions."""
        return self.config.max_positions

    def embedding(self, positions: Tensor | None, seq_len: int) -> Tensor:
        """Rows of the table: float32 ``(1, T, D)`` (default positions) or ``(B, T, D)``."""
        limit = self.config.max_positions
        if positions is None:
            last = seq_len - 1
        else:
            check_positions(positions, seq_len)
            last = int(positions.max())
        if last >= limit:
            raise ValueError(
                f"sequence needs position {last} (length {last + 1}) but the learned table has "
                f"max_positions={limit} rows; train with a larger model.max_positions"
            )
        if positions is None:
            return self.table.weight[:seq_len].unsqueeze(0)  # (1, T, D)
        return self.table(positions if positions.dim() == 2 else positions.unsqueeze(0))
