"""Fast paths equal the plain computation; long-length evaluation stays within a memory bound.

The fast path is what the model runs by default: PyTorch's fused SDPA (``is_causal`` without a
mask, or a cached additive mask) and position tables cached across steps. The plain path is
textbook attention, ``softmax(q k^T / sqrt(Dh) + mask) v`` with an explicit mask, and position
tables recomputed from explicit positions.
"""

import math

import pytest
import torch

from data import build_task
from lab.bench.benchmark import peak_memory, reset_peak_memory
from lab.evaluation.extrapolation import evaluate_length
from model import ModelConfig, Transformer
from model.attention import AttentionContext, SelfAttention
from model.position import Scores, available_schemes, scheme_class

CASES = [
    (scheme, causal)
    for scheme in available_schemes()
    for causal in (True, False)
    if causal or scheme_class(scheme).bidirectional
]


def plain_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """Textbook attention over (B, H, T, Dh), with the causal mask written out."""
    t = q.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale  # (B, H, T, T)
    if is_causal:
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    if attn_mask is not None:
        scores = scores + attn_mask
    return scores.softmax(dim=-1) @ v  # (B, H, T, Dh)


@pytest.mark.parametrize(("scheme", "causal"), CASES)
def test_fast_path_equals_plain_path(scheme, causal, monkeypatch, make_model):
    # unit-scale weights (strong=True), so attention is far from uniform
    model = make_model(scheme, causal=causal, strong=True, max_positions=160)
    for length in (1, 7, 33, 150):
        idx = torch.randint(0, 16, (2, length))
        fast = model(idx)
        with monkeypatch.context() as patch:
            patch.setattr("model.attention.F.scaled_dot_product_attention", plain_attention)
            plain = model(idx, positions=torch.arange(length))
        assert (fast - plain).abs().max() < 1e-4, (scheme, causal, length)


def test_long_evaluation_memory_is_bounded():
    """4096-token ALiBi evaluation stays under 160 MiB: no (T, T) tensor is formed.

    Expected: activations of 8 rows x 4096 tokens x 256 wide are 32 MiB each (NoPE measured
    100 MiB, ALiBi the same); the blocked path's mask is a view of 4 x 8191 floats, where a
    whole (1, H, T, T) float32 bias would add 4 * 4096^2 * 4 B = 256 MiB.
    """
    torch.manual_seed(0)
    task = build_task("copy")
    config = ModelConfig(
        vocab_size=task.vocab_size, d_model=64, n_layers=1, n_heads=4, d_ff=256, position="alibi"
    )
    model = Transformer(config).eval()
    length = 2047  # <bos> + 2047 + <sep> + 2047 = 4096 input tokens
    before = reset_peak_memory(torch.device("cpu"))
    result = evaluate_length(model, task, length, samples=8, seed=0, batch_tokens=32768)
    grown_mib = (peak_memory(torch.device("cpu")) - before) / 2**20
    assert result.tokens == 4096 and result.samples == 8
    assert grown_mib < 160, f"peak memory grew by {grown_mib:.0f} MiB"


class ScaledScores:
    """Stands in for a scheme whose ``layer`` asks for scores scaled by 2 (and a bias)."""

    def layer(self, index, q, k, state):
        bias = torch.linspace(-1, 1, 49).view(1, 1, 7, 7).expand(1, 4, 7, 7)
        return Scores(q, k, bias=bias, scale=2.0)


def test_layer_scale_and_bias_reach_the_scores():
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=16, d_model=32, n_heads=4, position="none")
    attention = SelfAttention(config, 0).eval()
    context = AttentionContext(ScaledScores(), None, None, True, True, None, torch.float32)
    x = torch.randn(2, 7, 32)
    q, k, v = attention.qkv(x).view(2, 7, 3, 4, 8).permute(2, 0, 3, 1, 4)  # each (B, H, T, Dh)
    scores = 2.0 * q @ k.transpose(-1, -2) / math.sqrt(8) + ScaledScores().layer(0, q, k, None).bias
    scores = scores.masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), float("-inf"))
    expected = attention.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 7, 32))
    torch.testing.assert_close(attention(x, context), expected, rtol=1e-5, atol=1e-6)
