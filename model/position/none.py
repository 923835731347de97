"""NoPE: no position information at all.

With a causal mask the model can still infer order, because the mask leaks it: token ``t`` sees
exactly ``t + 1`` tokens (Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length
Generalization in Transformers"). With bidirectional attention the model is
permutation-equivariant.
"""

from model.position.base import PositionScheme, register


@register("none")
class NoPosition(PositionScheme):
    """No embedding, no rotation, no bias: every hook keeps the base class's default."""

    relative = True
