"""The model's hyperparameters, validated when the config is built."""

from dataclasses import dataclass, field, replace
from typing import Any

RENAMED_KEYS = {
    "max_positions": "options.learned.max_positions",
    "rope_theta": "options.rope.theta",
    "sinusoidal_base": "options.sinusoidal.base",
    "sinusoidal_scale": "options.sinusoidal.scale",
}
"""Keys of ``model.*`` that moved into a scheme's options (old name -> new name under model)."""


@dataclass
class ModelConfig:
    """Hyperparameters of :class:`model.Transformer`.

    Attributes:
        vocab_size: number of token ids.
        d_model: residual stream width ``D``.
        n_layers: number of transformer blocks.
        n_heads: attention heads ``H``; ``head_dim = d_model // n_heads``.
        d_ff: hidden width of the MLP.
        dropout: dropout probability on embeddings, attention weights and residual branches.
        position: position scheme, a name registered in :mod:`model.position`
            (:func:`model.position.available_schemes` lists them).
        options: per-scheme options, ``{scheme name: {option: value}}``; each scheme's section is
            checked against its ``Options`` dataclass, and the active scheme's section is filled
            with every default, so a saved config holds every value the run used. Sections of
            other schemes may be given (a sweep's shared base) and are validated too.
        randomized_positions: 0 (off) or ``L``: train on a sorted random subset of ``[0, L)`` as
            positions, evaluate on ``arange(T)`` (Ruoss et al. 2023), around any scheme.
        causal: causal (decoder) attention; ``False`` gives bidirectional attention.
        tie_embeddings: share the token embedding matrix with the output projection.

    Raises:
        ValueError: at construction, naming the bad field, its value and what is allowed.
    """

    vocab_size: int = 64
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 512
    dropout: float = 0.0
    position: str = "rope"
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    randomized_positions: int = 0
    causal: bool = True
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        from model.position import scheme_class
        from model.position.options import build_options, options_dict

        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"model.{name}={value!r} is invalid; it must be an integer >= 1")
        cls = scheme_class(self.position)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model={self.d_model} is not divisible by model.n_heads={self.n_heads}; "
                "choose d_model as a multiple of n_heads"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout={self.dropout!r} is invalid; it must be in [0, 1)")
        if self.randomized_positions < 0:
            raise ValueError(
                f"model.randomized_positions={self.randomized_positions} is invalid; "
                "it must be 0 (off) or the range L > 0 to sample positions from"
            )
        if not self.causal and not cls.bidirectional:
            raise ValueError(
                f"model.position={self.position!r} is causal only; set model.causal=true"
            )
        options = {}
        for name in {**dict(self.options), self.position: {}}:
            given = dict(self.options.get(name) or {})
            options[name] = build_options(name, scheme_class(name).Options, given)
        cls.check(self, options[self.position])
        self._scheme_options = options[self.position]
        self.options = {name: options_dict(value) for name, value in options.items()}

    def at_evaluation(self, overrides: dict[str, Any]) -> "ModelConfig":
        """This config with the active scheme's options changed by ``overrides`` (no retraining:
        only options the scheme declares ``evaluable``, which change no parameter's shape).

        Raises:
            ValueError: an option the scheme does not mark evaluable, or a bad value (one line).
        """
        from model.position import scheme_class

        evaluable = scheme_class(self.position).evaluable
        for key in overrides:
            if key not in evaluable:
                allowed = ", ".join(sorted(evaluable)) or "none"
                raise ValueError(
                    f"eval.position_options.{key} cannot change at evaluation for "
                    f"{self.position!r}; its evaluable options: {allowed}"
                )
        section = {**self.options[self.position], **overrides}
        return replace(self, options={**self.options, self.position: section})

    def with_training_context(self, tokens: int) -> "ModelConfig":
        """This config with the active scheme's options that default to the training context
        filled in (:meth:`model.position.base.PositionScheme.with_training_context`), given the
        longest training sequence in ``tokens``; itself when nothing changes."""
        from model.position import scheme_class

        section = self.options[self.position]
        filled = scheme_class(self.position).with_training_context(section, tokens)
        if filled == section:
            return self
        return replace(self, options={**self.options, self.position: filled})

    @property
    def head_dim(self) -> int:
        """Width ``Dh`` of one attention head."""
        return self.d_model // self.n_heads

    @property
    def scheme_options(self) -> Any:
        """The active scheme's typed options (its ``Options`` dataclass)."""
        return self._scheme_options


def migrate_keys(model_values: dict[str, Any]) -> dict[str, Any]:
    """Saved ``model`` section of an older run with :data:`RENAMED_KEYS` moved to their new
    place (a copy); lets runs trained before the options existed be loaded and evaluated."""
    values = dict(model_values)
    options = {k: dict(v) for k, v in (values.get("options") or {}).items()}
    for old, new in RENAMED_KEYS.items():
        if old in values:
            _, scheme, key = new.split(".")
            options.setdefault(scheme, {})[key] = values.pop(old)
    if options:
        values["options"] = options
    return values
