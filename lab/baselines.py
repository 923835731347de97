"""Hugging Face reference models of the same size, for ``bench.py --baselines``.

Optional: needs ``pip install transformers``. Each model maps token ids ``(B, T)`` to logits
``(B, T, V)`` with PyTorch SDPA attention, so the benchmark times them exactly like ours.
"""

import torch
from torch import Tensor, nn

from model import ModelConfig
from model.position.rope import RopeOptions


class LogitsOnly(nn.Module):
    """Wraps a Hugging Face causal LM so ``forward(idx)`` returns its logits tensor."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx: Tensor) -> Tensor:
        return self.model(input_ids=idx, use_cache=False).logits


def hf_baselines(config: ModelConfig, max_positions: int) -> dict[str, nn.Module]:
    """GPT-2 (learned positions) and Llama (RoPE) with ``config``'s width, depth and heads.

    GPT-2: ``n_embd = d_model``, ``n_inner = d_ff`` (GELU MLP, biases), learned table of
    ``max_positions``. Llama: ``hidden_size = d_model``, ``intermediate_size = d_ff`` (a SwiGLU
    MLP has three matrices, so 1.5x our MLP's weights), RoPE base ``model.options.rope.theta``.

    Raises:
        ImportError: ``transformers`` is not installed (one line saying how to install it).
    """
    try:
        from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    except ImportError:
        raise ImportError(
            "baselines need Hugging Face transformers: pip install transformers"
        ) from None
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=config.vocab_size,
            n_positions=max_positions,
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
    )
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.d_model,
            intermediate_size=config.d_ff,
            num_hidden_layers=config.n_layers,
            num_attention_heads=config.n_heads,
            num_key_value_heads=config.n_heads,
            max_position_embeddings=max_positions,
            rope_theta=RopeOptions(**config.options.get("rope", {})).theta,
            tie_word_embeddings=config.tie_embeddings,
            attn_implementation="sdpa",
        )
    )
    return {"hf-gpt2 (learned)": LogitsOnly(gpt2), "hf-llama (rope)": LogitsOnly(llama)}
