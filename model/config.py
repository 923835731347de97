"""The model's hyperparameters, validated when the config is built."""

from dataclasses import dataclass, field, replace
from typing import Any

from model.flex_attention import ATTENTION_KERNELS
from model.layout import check_layout, is_plain, layout_position, resolve_layout, scheme_names
from model.position import scheme_class
from model.position.layout import LayerLayout, member_configs
from model.softmax_scale import SOFTMAX_SCALES
from registry import build_options, options_dict

RENAMED_KEYS = {
    "max_positions": "options.learned.max_positions",
    "rope_theta": "options.rope.theta",
    "sinusoidal_base": "options.sinusoidal.base",
    "sinusoidal_scale": "options.sinusoidal.scale",
}
"""Keys of ``model.*`` that moved into a scheme's options (old name -> new name under model)."""

MAX_WIDTH = 2**14
"""Largest ``d_model`` and ``d_ff`` (16,384: 256 times the default ablation's ``d_model``)."""

MAX_LAYERS = 256
"""Most ``n_layers``."""

MAX_VOCAB = 2**16
"""Most token ids (``vocab_size``, set by the task; tasks bound their own options below it)."""

MAX_RANDOMIZED_POSITIONS = 2**16
"""Largest ``randomized_positions`` ``L``: a training step draws a ``(B, L)`` random tensor, and
Ruoss et al. 2023 use ``L`` = 2048 for sequences up to 500 tokens (65,536: 32 times that)."""

MAX_PARAMETERS = 2**28
"""Most parameters (about 268 million, counted by :meth:`ModelConfig.approx_parameters`):
AdamW training holds 16 bytes per parameter in float32 (weights, gradients, two moments), so
4 GiB at the bound, within a 24 GiB laptop with room for activations."""


@dataclass
class ModelConfig:
    """Hyperparameters of :class:`model.Transformer`; the defaults are the default ablation's
    model (``python train.py`` and every run config start from them).

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
        randomized_eval: with ``randomized_positions``, evaluate on sorted random positions
            from ``[0, L)`` too (the protocol of Ruoss et al.'s code) instead of ``arange(T)``;
            may be changed at evaluation (``eval.position_options.randomized_eval=true``).
        causal: causal (decoder) attention; ``False`` gives bidirectional attention.
        tie_embeddings: share the token embedding matrix with the output projection.
        softmax_scale: length-aware softmax, for any scheme (:mod:`model.softmax_scale`):
            ``none`` (plain softmax), ``logn`` (logits times ``log n``, ``n`` the keys a query
            sees) or ``ssmax`` (Scalable-Softmax: times ``s log n``, ``s`` learned per head).
        layout: a scheme (or a split of the heads between schemes) per layer, e.g.
            ``rope,rope,rope,none`` or ``rope:2+none:2,...``, optionally ``@W`` (a window);
            None: ``position`` everywhere (:mod:`model.layout`).
        heads: one split of the heads for every layer, e.g. ``rope:2+none:2``; or None.
        nope_every: ``k`` > 0: every ``k``-th layer without positions, globally attending
            (Llama 4); 0: off.
        window: sliding-window attention of ``W`` tokens in every layer (a layout entry's
            ``@W`` wins; ``nope_every``'s layers stay global); None: global attention.
        attention_kernel: ``sdpa`` (the default), ``flex``, or ``auto`` (FlexAttention on CUDA
            where SDPA would need a mask tensor, else SDPA; not yet the default, since no GPU has
            measured it) (:mod:`model.flex_attention`); results agree within float tolerance.

    Raises:
        ValueError: at construction, naming the bad field, its value and what is allowed.
    """

    vocab_size: int = 64
    d_model: int = 64
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 256
    dropout: float = 0.0
    position: str = "rope"
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    randomized_positions: int = 0
    randomized_eval: bool = False
    causal: bool = True
    tie_embeddings: bool = True
    softmax_scale: str = "none"
    layout: str | None = None
    heads: str | None = None
    nope_every: int = 0
    window: int | None = None
    attention_kernel: str = "sdpa"

    def __post_init__(self) -> None:
        highest = {"vocab_size": MAX_VOCAB, "d_model": MAX_WIDTH, "n_layers": MAX_LAYERS}
        highest |= {"n_heads": MAX_WIDTH, "d_ff": MAX_WIDTH}
        for name, high in highest.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high:
                raise ValueError(
                    f"model.{name}={value!r} is invalid; it must be an integer in [1, {high}]"
                )
        if self.approx_parameters() > MAX_PARAMETERS:
            raise ValueError(
                f"model.d_model={self.d_model}, n_layers={self.n_layers}, d_ff={self.d_ff} and "
                f"vocab_size={self.vocab_size} make about {self.approx_parameters():,} "
                f"parameters; the maximum is {MAX_PARAMETERS:,} (2**28)"
            )
        scheme_class(self.position)  # a known name, before any other check reads it
        self._drop_layout_spaces()
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model={self.d_model} is not divisible by model.n_heads={self.n_heads}; "
                "choose d_model as a multiple of n_heads"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout={self.dropout!r} is invalid; it must be in [0, 1)")
        if not 0 <= self.randomized_positions <= MAX_RANDOMIZED_POSITIONS:
            raise ValueError(
                f"model.randomized_positions={self.randomized_positions} is invalid; it must be "
                f"0 (off) or the range L to sample positions from, in [1, "
                f"{MAX_RANDOMIZED_POSITIONS}]"
            )
        self._check_attention_keys()
        layers = resolve_layout(
            self.position, self.n_layers, self.n_heads, self.layout, self.heads,
            self.nope_every, self.window,
        )  # fmt: skip
        default = ModelConfig.position
        self.position = layout_position(self.position, layers, default, self.layout, self.heads)
        cls = scheme_class(self.position)
        if not self.causal and not cls.bidirectional and self.layout is None and self.heads is None:
            raise ValueError(  # a layout's schemes: check_layout names the key
                f"model.position={self.position!r} is causal only; set model.causal=true"
            )
        check_layout(layers, self.n_heads, self.causal, self._layout_key())
        plain = self._drop_plain_layout(layers)
        members = [] if plain else scheme_names(layers)
        options = {}
        for name in {**dict(self.options), self.position: {}, **dict.fromkeys(members)}:
            given = dict(self.options.get(name) or {})
            options[name] = build_options(name, scheme_class(name).Options, given)
        cls.check(self, options[self.position])
        self._scheme_options = options[self.position]
        self._layers = None if not members else layers
        self._windows = tuple(layer.window for layer in layers)
        self._member_options = {name: options[name] for name in members}
        window_key = "model.window" if self.window is not None else self._layout_key()
        check_attention_combination(self.position, self.softmax_scale, self._windows, window_key)
        for member in member_configs(self, layers, options).values() if members else ():
            scheme_class(member.position).check(member, member.scheme_options)
        self.options = {name: options_dict(value) for name, value in options.items()}

    def _drop_layout_spaces(self) -> None:
        """``'rope, none'`` is ``'rope,none'``: one model, one run and one label."""
        for key in ("layout", "heads"):
            if isinstance(getattr(self, key), str):
                setattr(self, key, "".join(getattr(self, key).split()))

    def _drop_plain_layout(self, layers: tuple) -> bool:
        """Whether ``layers`` run ``position`` alone on every head; with no window either, the
        layout keys say nothing more and are cleared: one model, one run and one label however
        the layout spelled it (``rope,rope``, ``none`` with ``nope_every=2``)."""
        plain = is_plain(layers, self.position, self.n_heads)
        if plain and all(layer.window is None for layer in layers):
            self.layout, self.heads, self.nope_every = None, None, 0
        return plain

    def _layout_key(self) -> str:
        """The key that sets the layout, with its value, for messages: ``model.layout='...'``,
        ``model.heads='...'``, ``model.nope_every=k``, else ``model.position='...'``."""
        name = next((k for k in ("layout", "heads", "nope_every") if getattr(self, k)), "position")
        return f"model.{name}={getattr(self, name)!r}"

    def _check_attention_keys(self) -> None:
        """Raise ValueError (one line) for a bad ``randomized_eval``, ``attention_kernel`` or
        ``softmax_scale``."""
        if self.randomized_eval and not self.randomized_positions:
            raise ValueError(
                "model.randomized_eval=true needs model.randomized_positions > 0 (the range L "
                "to sample positions from)"
            )
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise ValueError(
                f"model.attention_kernel={self.attention_kernel!r} is invalid; it must be one of "
                f"{', '.join(ATTENTION_KERNELS)}"
            )
        if self.softmax_scale not in SOFTMAX_SCALES:
            raise ValueError(
                f"model.softmax_scale={self.softmax_scale!r} is invalid; it must be one of "
                f"{', '.join(SOFTMAX_SCALES)}"
            )

    def at_evaluation(self, overrides: dict[str, Any]) -> "ModelConfig":
        """This config with the active scheme's options changed by ``overrides`` (no retraining:
        only options the scheme declares ``evaluable``, which change no parameter's shape, and,
        for a model trained with ``randomized_positions``, ``randomized_eval``).

        Raises:
            ValueError: an option the scheme does not mark evaluable, or a bad value (one line).
        """
        evaluable = scheme_class(self.position).evaluable
        overrides = dict(overrides)
        if "randomized_eval" in overrides and self.randomized_positions:  # a model key
            randomized = overrides.pop("randomized_eval")
            if not isinstance(randomized, bool):
                raise ValueError(
                    f"eval.position_options.randomized_eval={randomized!r} is invalid; it must "
                    "be true or false"
                )
            return replace(self, randomized_eval=randomized).at_evaluation(overrides)
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
        options = dict(self.options)
        for name in [self.position, *self._member_options]:
            options[name] = scheme_class(name).with_training_context(options[name], tokens)
        if options == self.options:
            return self
        return replace(self, options=options)

    def approx_parameters(self) -> int:
        """Parameters of the blocks and embeddings, without the scheme's own and the norms:
        ``n_layers * (4 D^2 + 2 D d_ff) + V D`` (``2 V D`` untied); within 2% of the real count
        at the default sizes (checked against :class:`model.Transformer` in the tests)."""
        block = 4 * self.d_model**2 + 2 * self.d_model * self.d_ff
        embeddings = (1 if self.tie_embeddings else 2) * self.vocab_size * self.d_model
        return self.n_layers * block + embeddings

    @property
    def head_dim(self) -> int:
        """Width ``Dh`` of one attention head."""
        return self.d_model // self.n_heads

    @property
    def scheme_options(self) -> Any:
        """The active scheme's typed options (its ``Options`` dataclass)."""
        return self._scheme_options

    @property
    def layers(self) -> tuple[LayerLayout, ...] | None:
        """Every layer's schemes and window (:mod:`model.layout`) when the model is a hybrid,
        None when every layer uses ``position`` on every head (windows aside)."""
        return self._layers

    @property
    def member_options(self) -> dict[str, Any]:
        """A hybrid's schemes -> their typed options (empty for a single scheme)."""
        return self._member_options

    @property
    def windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window in tokens (None: global attention)."""
        return self._windows


def check_attention_combination(
    position: str, softmax_scale: str, windows: tuple[int | None, ...], window_key: str
) -> None:
    """Refuse, in one line, the combinations whose attention would silently be wrong: a
    length-aware softmax counts every key a query sees under the causal mask, not a sliding
    window's, and a scheme that replaces softmax (stick-breaking) ignores the window's mask.
    ``window_key`` names the key that set a window (``model.window``, or the layout of ``@W``
    entries). A scheme that replaces softmax in a hybrid layout is refused before, by
    :func:`model.layout.check_layout`.

    Raises:
        ValueError: ``softmax_scale`` other than ``none``, or a ``position`` that replaces
            softmax, with a window.
    """
    windowed = any(w is not None for w in windows)
    if scheme_class(position).replaces_softmax and windowed:
        raise ValueError(
            f"model.position={position!r} with a sliding window ({window_key}) is not supported "
            "(its weights ignore the sliding-window mask); use global attention: "
            "model.window=null and no @W in model.layout"
        )
    if softmax_scale != "none" and windowed:
        raise ValueError(
            f"model.softmax_scale={softmax_scale!r} with a sliding window is not supported (its "
            "log n counts every key of the causal mask); use softmax_scale=none or no window"
        )


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
