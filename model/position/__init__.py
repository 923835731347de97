"""Position schemes, one file each, behind the interface of :mod:`model.position.base`.

Importing this package registers the built-in schemes. A new scheme is one file holding a
subclass of :class:`PositionScheme` decorated with ``@register("name")``, plus its module in
the import line below.
"""

# isort: off
# registration order is the order of every listing: from no position information to relative
from model.position import none, learned, sinusoidal, rope, alibi  # noqa: F401
from model.position import t5, kerple, fire, xpos, cope  # noqa: F401
from model.position import fox, dynamic_bias, pope  # noqa: F401
from model.position import stickbreaking  # noqa: F401

# isort: on
from model.position.alibi import alibi_bias, alibi_slopes
from model.position.base import (
    PositionScheme,
    SchemeConfig,
    Scores,
    available_schemes,
    register,
    scheme_class,
)
from model.position.layout import LayeredPositions
from model.position.randomized import RandomizedPositions
from model.position.rope import apply_rope, rope_frequencies
from model.position.sinusoidal import sinusoidal_table


def build_position(config: SchemeConfig) -> PositionScheme:
    """Instantiate the scheme named by ``config.position`` with its options (a hybrid's
    :class:`LayeredPositions` when ``config.layers`` is set), wrapped in randomized positions
    when ``config.randomized_positions`` is set (at evaluation too with
    ``config.randomized_eval``).

    Raises:
        ValueError: the name is not registered; the message lists the registered names.
    """
    layers = getattr(config, "layers", None)  # a hybrid layout (model.config.ModelConfig)
    if layers is not None:
        scheme = LayeredPositions(config, layers, config.member_options)
    else:
        scheme = scheme_class(config.position)(config, config.scheme_options)
    if config.randomized_positions:
        scheme = RandomizedPositions(scheme, config.randomized_positions, config.randomized_eval)
    return scheme


__all__ = [
    "PositionScheme",
    "Scores",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "available_schemes",
    "build_position",
    "register",
    "rope_frequencies",
    "scheme_class",
    "sinusoidal_table",
]
