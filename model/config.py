"""The model's hyperparameters, validated when the config is built."""

from dataclasses import dataclass


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
            (built in: ``none | learned | sinusoidal | rope | alibi``).
        max_positions: rows of the learned position table (``learned`` only): the longest
            usable sequence.
        rope_theta: RoPE base ``theta`` (``rope`` only), Su et al. 2021, eq. 15.
        sinusoidal_base: wavelength base of the sinusoidal table (``sinusoidal`` only).
        sinusoidal_scale: multiplier of the sinusoidal table (``sinusoidal`` only). Its entries
            are O(1) while token embeddings start at std 0.02 (GPT-2 init); Vaswani et al.
            balance the two by scaling embeddings by ``sqrt(d_model)`` (§3.4). Here the table is
            scaled instead, by default to the embeddings' init std, so content is not drowned.
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
    max_positions: int = 1024
    rope_theta: float = 10000.0
    sinusoidal_base: float = 10000.0
    sinusoidal_scale: float = 0.02
    causal: bool = True
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        from model.position import available_schemes

        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"model.{name}={value!r} is invalid; it must be an integer >= 1")
        if self.position not in available_schemes():
            raise ValueError(
                f"model.position={self.position!r} is not a known scheme; "
                f"choose one of {', '.join(available_schemes())}"
            )
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model={self.d_model} is not divisible by model.n_heads={self.n_heads}; "
                "choose d_model as a multiple of n_heads"
            )
        if self.position == "rope" and self.head_dim % 2:
            raise ValueError(
                f"model.head_dim={self.head_dim} (d_model / n_heads) is odd; RoPE rotates pairs "
                "of dimensions, so it needs an even head_dim"
            )
        if self.position == "sinusoidal" and self.d_model % 2:
            raise ValueError(
                f"model.d_model={self.d_model} is odd; the sinusoidal table needs an even width"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout={self.dropout!r} is invalid; it must be in [0, 1)")
        for name in ("rope_theta", "sinusoidal_base", "sinusoidal_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"model.{name}={getattr(self, name)!r} is invalid; it must be > 0")

    @property
    def head_dim(self) -> int:
        """Width ``Dh`` of one attention head."""
        return self.d_model // self.n_heads
