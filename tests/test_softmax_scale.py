"""Length-aware softmax (``model.softmax_scale``, :mod:`model.softmax_scale`): the factor is the
log of the keys a query sees, it equals an explicit per-row scaling of the logits, Scalable-Softmax
reduces to plain softmax where ``s log n = 1``, and the blocked path sees the same logits."""

import math

import pytest
import torch
import torch.nn.functional as F

from lab.evaluation.attention_maps import attention_maps
from model import ModelConfig, Transformer
from model.mask import blocked
from model.softmax_scale import SoftmaxScale, visible_keys

SIZES = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64, "vocab_size": 16}


def model_of(position="none", softmax_scale="none", seed=0, **values):
    torch.manual_seed(seed)
    return Transformer(
        ModelConfig(**{**SIZES, "position": position, **values}, softmax_scale=softmax_scale)
    )


def tokens(t, batch=2, seed=1):
    return torch.randint(0, 16, (batch, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("causal", "prefix"), [(True, None), (False, None), (False, 0), (False, 4), (False, 9)]
)
def test_visible_keys_count_the_keys_the_mask_leaves(causal, prefix):
    expected = (~blocked(9, causal, prefix, torch.device("cpu"))).sum(-1).float()
    assert torch.equal(visible_keys(9, causal, prefix, torch.device("cpu")), expected)


def test_logn_factor_is_log_of_i_plus_one_and_zero_for_the_first_query():
    factor = SoftmaxScale("logn", 4).factor(5, True, None, torch.device("cpu")).flatten()
    assert factor[0] == 0.0  # n = 1: log 1, a single key takes weight 1 whatever the logit
    torch.testing.assert_close(factor, torch.tensor([math.log(n) for n in range(1, 6)]))
    prefix = SoftmaxScale("logn", 4).factor(5, False, 3, torch.device("cpu")).flatten()
    torch.testing.assert_close(prefix, torch.tensor([math.log(n) for n in (3, 3, 3, 4, 5)]))


def test_ssmax_starts_as_logn_with_one_learned_scale_per_layer_and_head():
    logn, ssmax = model_of(softmax_scale="logn"), model_of(softmax_scale="ssmax")
    extra = {n: p for n, p in ssmax.named_parameters() if "ssmax" in n}
    assert sorted(extra) == [f"blocks.{i}.attn.softmax_scale.ssmax_scale" for i in range(2)]
    assert all(torch.equal(p, torch.ones(4)) for p in extra.values())
    assert sum(p.numel() for p in logn.parameters()) == sum(
        p.numel() for p in model_of().parameters()
    )
    torch.testing.assert_close(ssmax(tokens(11)), logn(tokens(11)), rtol=0, atol=0)


@pytest.mark.parametrize("position", ["none", "rope", "alibi"])
@pytest.mark.parametrize("kind", ["logn", "ssmax"])
def test_each_query_row_is_scaled_by_its_factor(position, kind):
    """A layer's output equals ``softmax(f_i * q_i k^T / sqrt(Dh) + bias + mask) v`` built by
    hand, ``f_i = s_h log(i + 1)``: the bias (ALiBi's) is not scaled."""
    model = model_of(position, kind).eval()
    if kind == "ssmax":
        with torch.no_grad():
            model.blocks[0].attn.softmax_scale.ssmax_scale.copy_(torch.tensor([0.3, 1, 2, -0.5]))
    t, attn = 10, model.blocks[0].attn
    x = torch.randn(1, t, 32, generator=torch.Generator().manual_seed(2))
    context = model._contexts(None, 1, t, None, x.device, x.dtype)[0]
    q, k, v = attn.qkv(x).view(1, t, 3, 4, 8).permute(2, 0, 3, 1, 4)
    scores = model.position.layer(0, q, k, context.state)  # unscaled q, rotated
    s = torch.ones(4) if kind == "logn" else attn.softmax_scale.ssmax_scale
    factor = s.view(1, 4, 1, 1) * torch.arange(1.0, t + 1).log().view(1, 1, t, 1)
    logits = factor * (scores.q @ scores.k.transpose(-1, -2)) / math.sqrt(8)
    bias = model.position.score_bias(None, t)
    logits = logits + (0 if bias is None else bias)
    weights = logits.masked_fill(blocked(t, True, None, x.device), -math.inf).softmax(-1)
    expected = attn.out((weights @ v).transpose(1, 2).reshape(1, t, 32))
    torch.testing.assert_close(attn(x, context), expected, atol=1e-6, rtol=1e-5)
    maps = attention_maps(model, tokens(t, batch=1))  # the analysis recomputes the same way
    assert torch.allclose(maps[0].sum(-1), torch.ones(4, t), atol=1e-6)


def test_ssmax_with_s_one_over_log_n_is_plain_softmax_where_every_query_sees_n_keys():
    """Bidirectional without a prefix every query sees ``T`` keys: with ``s = 1/log T`` the
    factor is 1 and the model equals the plain-softmax model with the same weights."""
    t = 12
    plain = model_of("rope", causal=False)
    ssmax = model_of("rope", "ssmax", causal=False)
    with torch.no_grad():
        for block in ssmax.blocks:
            block.attn.softmax_scale.ssmax_scale.fill_(1 / math.log(t))
        for model in (plain, ssmax):  # sharp attention, so that a factor shows
            for block in model.blocks:
                block.attn.qkv.weight.mul_(30)
    torch.testing.assert_close(ssmax(tokens(t)), plain(tokens(t)), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ssmax(tokens(t + 8)), plain(tokens(t + 8)), atol=1e-3)


def test_scalable_softmax_keeps_the_largest_weight_as_the_input_grows():
    """Nakanishi 2025, Fig. 1: every input -2 but the last, +3; softmax's largest output fades
    to 0 with the size ``n``, SSMax's (``s = 0.43``) grows towards 1."""
    scale = SoftmaxScale("ssmax", 1)
    with torch.no_grad():
        scale.ssmax_scale.fill_(0.43)
    tops, plain = [], []
    for n in (10, 100, 1000, 10000):
        z = torch.full((n,), -2.0)
        z[-1] = 3.0
        factor = scale.factor(n, False, None, z.device).flatten()[-1]  # n keys for every query
        tops.append(float((factor * z).softmax(-1)[-1].detach()))
        plain.append(float(z.softmax(-1)[-1]))
        expected = 1 / (1 + (n - 1) * n ** (-0.43 * 5))  # n^(s z) / sum_j n^(s z_j)
        assert tops[-1] == pytest.approx(expected, rel=1e-5)
    assert plain[-1] < 0.02 and tops == sorted(tops) and tops[-1] > 0.99


@pytest.mark.parametrize("kind", ["logn", "ssmax"])
@pytest.mark.parametrize("t", [300, 700])
def test_blocked_path_sees_the_same_scaled_logits(kind, t, monkeypatch):
    """ALiBi's bias sends sequences past 256 tokens block by block; forcing the whole sequence
    at once gives the same logits and the same gradient of ``s``."""
    model = model_of("alibi", kind, n_layers=1)
    if kind == "ssmax":
        with torch.no_grad():
            model.blocks[0].attn.softmax_scale.ssmax_scale.copy_(torch.tensor([0.5, 1, 1.5, 2]))
    idx = tokens(t, batch=1)
    results = []
    for rows in (256, 10**6):  # the default blocks, then no blocks
        monkeypatch.setattr("model.blocked_attention.BLOCK_ROWS", rows)
        model.zero_grad()
        assert (
            model._contexts(None, 1, t, None, idx.device, torch.float32)[0].blocked is None
        ) == (rows > t)
        logits = model(idx)
        logits.square().mean().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        results.append((logits.detach(), grads))
    (blocked_logits, blocked_grads), (whole, whole_grads) = results
    torch.testing.assert_close(blocked_logits, whole, atol=1e-5, rtol=0)
    for got, want in zip(blocked_grads, whole_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)


def test_ssmax_scales_learn_and_a_bad_value_is_one_line():
    model = model_of("rope", "ssmax")
    F.cross_entropy(model(tokens(9)).flatten(0, 1), tokens(9, seed=3).flatten()).backward()
    for block in model.blocks:
        grad = block.attn.softmax_scale.ssmax_scale.grad
        assert grad is not None and grad.abs().min() > 0
    with pytest.raises(
        ValueError,
        match=r"^model.softmax_scale='log' is invalid; it must be "
        r"one of none, logn, ssmax$",
    ):
        ModelConfig(softmax_scale="log")
