"""Shared fixtures: a seeded factory for tiny float32 transformers."""

from collections.abc import Callable, Iterator

import pytest
import torch

from model import ModelConfig, Transformer

TINY = dict(vocab_size=16, d_model=32, n_layers=2, n_heads=4, d_ff=64)
"""Hyperparameters of the tiny test model; override any field per test."""


def strengthen(model: Transformer) -> Transformer:
    """Re-initialise every matrix with std ``1/sqrt(fan_in)`` (in place).

    GPT-2's std 0.02 makes queries and keys so small that attention is almost uniform, so
    position effects that act inside attention (RoPE) barely reach the logits. With unit-scale
    weights the scores are O(1) and every scheme's effect on the logits is O(1), which makes
    "changes the output" assertions robust. LayerNorm gains and biases are left alone.
    """
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, p.shape[-1] ** -0.5)
    return model


@pytest.fixture
def make_model() -> Iterator[Callable[..., Transformer]]:
    """``make_model(position, causal=True, strong=False, seed=0, max_positions=64, **overrides)``.

    Returns a float32 model in eval mode, built after ``torch.manual_seed(seed)``;
    ``max_positions`` sets a learned table's rows (``model.options.learned.max_positions``), and
    ``options`` in ``overrides`` other schemes' options.

    Tests that use it run on one intra-op thread (restored afterwards): the tiny matmuls gain
    nothing from threads, and on a busy 2-core machine OpenMP's thread barriers made the suite
    over 20x slower (measured 10 s vs 250 s with two threads at load average 7).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def build(
        position: str,
        causal: bool = True,
        strong: bool = False,
        seed: int = 0,
        max_positions: int = 64,
        **overrides,
    ) -> Transformer:
        torch.manual_seed(seed)
        options = {"learned": {"max_positions": max_positions}, **overrides.pop("options", {})}
        values = {**TINY, "position": position, "causal": causal, "options": options}
        config = ModelConfig(**{**values, **overrides})
        model = Transformer(config).eval()
        return strengthen(model) if strong else model

    try:
        yield build
    finally:
        torch.set_num_threads(threads)
