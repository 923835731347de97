"""Peer implementations of the same size, for ``bench.py --baselines``: Hugging Face GPT-2 and
Llama, and lucidrains' x-transformers with each of its position options that matches one of ours.

Optional: needs ``pip install transformers`` and/or ``pip install x-transformers``. Each model
maps token ids ``(B, T)`` to logits ``(B, T, V)``, so the benchmark times them exactly like ours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version

import torch
from torch import Tensor, nn

from model import ModelConfig
from model.position.rope import RopeOptions

DISTRIBUTIONS = {"hf": "transformers", "x-transformers": "x-transformers"}
"""Names accepted by :func:`baselines`, and the package each one needs."""

LIBRARIES = tuple(DISTRIBUTIONS)
"""Names accepted by :func:`baselines`."""


def library_versions(libraries: list[str]) -> dict[str, str]:
    """Installed version of the package behind each name in ``libraries``, by package name
    (``{"transformers": "5.24.0"}``), for the benchmark's JSON.

    Raises:
        importlib.metadata.PackageNotFoundError: a package is not installed.
    """
    return {DISTRIBUTIONS[name]: version(DISTRIBUTIONS[name]) for name in libraries}


@dataclass(frozen=True)
class Baseline:
    """A peer model of ``config``'s size.

    Attributes:
        name: label in the benchmark's tables, e.g. ``"x-transformers alibi"``.
        position: the registered scheme of ours it matches, or None.
        build: ``build(max_length)`` returns a freshly seeded model that accepts sequences up
            to ``max_length`` tokens (a learned table is made that long).
    """

    name: str
    position: str | None
    build: Callable[[int], nn.Module]


class LogitsOnly(nn.Module):
    """Wraps a Hugging Face causal LM so ``forward(idx)`` returns its logits tensor."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx: Tensor) -> Tensor:
        return self.model(input_ids=idx, use_cache=False).logits


def baselines(config: ModelConfig, libraries: list[str]) -> list[Baseline]:
    """The baselines of every library named in ``libraries`` (see :data:`LIBRARIES`).

    Raises:
        ValueError: an unknown library name (one line listing the known ones).
        ImportError: a library is not installed (one line saying how to install it).
    """
    builders = {"hf": hf_baselines, "x-transformers": xtransformers_baselines}
    unknown = [name for name in libraries if name not in builders]
    if unknown:
        raise ValueError(f"--baselines {unknown[0]!r} is unknown; use {', '.join(LIBRARIES)}")
    return [baseline for name in libraries for baseline in builders[name](config)]


def hf_baselines(config: ModelConfig) -> list[Baseline]:
    """GPT-2 (learned positions) and Llama (RoPE) with ``config``'s width, depth and heads.

    GPT-2: ``n_embd = d_model``, ``n_inner = d_ff`` (GELU MLP, biases), learned table of the
    benchmarked length. Llama: ``hidden_size = d_model``, ``intermediate_size = d_ff`` (a
    SwiGLU MLP has three matrices, so 1.5x our MLP's weights), RoPE base
    ``model.options.rope.theta``. Both use PyTorch SDPA attention.

    Raises:
        ImportError: ``transformers`` is not installed.
    """
    try:
        from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    except ImportError:
        raise ImportError("--baselines hf needs transformers: pip install transformers") from None

    def gpt2(max_length: int) -> nn.Module:
        torch.manual_seed(0)
        hf = GPT2Config(
            vocab_size=config.vocab_size,
            n_positions=max_length,
            n_embd=config.d_model,
            n_layer=config.n_layers,
            n_head=config.n_heads,
            n_inner=config.d_ff,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            attn_implementation="sdpa",
            bos_token_id=0,
            eos_token_id=0,
        )
        return LogitsOnly(GPT2LMHeadModel(hf))

    def llama(max_length: int) -> nn.Module:
        torch.manual_seed(0)
        hf = LlamaConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.d_model,
            intermediate_size=config.d_ff,
            num_hidden_layers=config.n_layers,
            num_attention_heads=config.n_heads,
            num_key_value_heads=config.n_heads,
            max_position_embeddings=max_length,
            rope_theta=RopeOptions(**config.options.get("rope", {})).theta,
            tie_word_embeddings=config.tie_embeddings,
            attn_implementation="sdpa",
        )
        return LogitsOnly(LlamaForCausalLM(hf))

    return [Baseline("hf-gpt2", "learned", gpt2), Baseline("hf-llama", "rope", llama)]


XTRANSFORMERS_OPTIONS: dict[str, tuple[dict, dict]] = {
    # our scheme -> (TransformerWrapper keywords, Decoder keywords)
    "none": ({"use_abs_pos_emb": False}, {}),
    "learned": ({"use_abs_pos_emb": True}, {}),
    "sinusoidal": ({"scaled_sinu_pos_emb": True}, {}),  # with a learned scale (theirs)
    "rope": ({}, {"rotary_pos_emb": True}),  # full head width, as our default rotary_fraction 1
    "xpos": ({}, {"rotary_xpos": True}),
    "alibi": ({"use_abs_pos_emb": False}, {"alibi_pos_bias": True}),
    "t5": ({}, {"rel_pos_bias": True, "attn_flash": False}),  # theirs refuses flash with T5
}
"""x-transformers' position options that match one of our schemes (its README's names).
Rotary and T5 biases switch its absolute embedding off by themselves; ALiBi does not."""


def xtransformers_baselines(config: ModelConfig) -> list[Baseline]:
    """x-transformers (lucidrains) decoders of ``config``'s size, one per matching scheme.

    ``Decoder(dim=d_model, depth=n_layers, heads=n_heads, attn_dim_head=head_dim,
    ff_mult=d_ff / d_model, attn_flash=True)`` (pre-norm, GELU MLP, PyTorch SDPA attention; its
    T5 bias refuses ``attn_flash`` and uses its own attention) in a ``TransformerWrapper`` with
    ``tie_embedding = tie_embeddings``; rotary over the whole head (``rotary_emb_dim =
    head_dim``) and its T5 defaults (32 buckets, distance 128) equal ours.

    Raises:
        ImportError: ``x-transformers`` is not installed.
    """
    try:
        from x_transformers import Decoder, TransformerWrapper
    except ImportError:
        raise ImportError(
            "--baselines x-transformers needs x-transformers: pip install x-transformers"
        ) from None

    def builder(wrapper: dict, decoder: dict) -> Callable[[int], nn.Module]:
        def build(max_length: int) -> nn.Module:
            torch.manual_seed(0)
            size = {
                "dim": config.d_model,
                "depth": config.n_layers,
                "heads": config.n_heads,
                "attn_dim_head": config.head_dim,
                "ff_mult": config.d_ff / config.d_model,
                "attn_flash": True,
                "rotary_emb_dim": config.head_dim,
            }
            layers = Decoder(**{**size, **decoder})
            return TransformerWrapper(
                num_tokens=config.vocab_size,
                max_seq_len=max_length,
                attn_layers=layers,
                tie_embedding=config.tie_embeddings,
                **wrapper,
            )

        return build

    return [
        Baseline(f"x-transformers {position}", position, builder(wrapper, decoder))
        for position, (wrapper, decoder) in XTRANSFORMERS_OPTIONS.items()
    ]
