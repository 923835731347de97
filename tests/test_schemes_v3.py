"""Reference values of the schemes added in version 3: FoX, ALiBi with learned slopes, dynamic
position bias, PoPE, and randomized positions at evaluation.

Expected values come from each paper's formula written out here (explicit loops over gates,
distances and components), never from the code under test. The registry-wide properties
(causality, shift invariance, blocked path, compile, every parameter trained) are checked for
these schemes by the tests that iterate the registry.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import model.attention as attention_module
from model.attention import AttentionContext
from model.position import alibi_slopes
from model.position.dynamic_bias import log_distance
from model.position.fox import forget_bias
from model.position.pope import pope_frequencies

V = 16


def idx(batch=2, length=11, seed=0):
    return torch.randint(0, V, (batch, length), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------
# FoX
# ---------------------------------------------------------------------------------------------


def test_forget_bias_equals_an_explicit_loop_over_gates():
    gates = torch.rand(2, 3, 7, generator=torch.Generator().manual_seed(0)) * 0.9 + 0.05
    bias = forget_bias(gates.log())  # (B, H, T, T)
    for b in range(2):
        for h in range(3):
            for i in range(7):
                for j in range(i + 1):  # keys at or before the query
                    expected = sum(math.log(gates[b, h, ell].item()) for ell in range(j + 1, i + 1))
                    assert bias[b, h, i, j].item() == pytest.approx(expected, abs=1e-5)
    assert torch.equal(bias[..., 2:5, 0:5], forget_bias(gates.log(), slice(2, 5), slice(0, 5)))


def fox_model(make_model, mode, **overrides):
    return make_model("fox", strong=True, options={"fox": {"mode": mode}}, **overrides)


def test_fox_data_gates_come_from_the_layers_keys(make_model):
    """The layer's bias is ``sum log sigmoid(w_h . k_l + b_h)`` over the keys after ``j`` up to
    ``i``, with ``k_l`` every head's key of token ``l`` (width D)."""
    scheme = fox_model(make_model, "data").position
    with torch.no_grad():
        scheme.gate_bias.normal_(generator=torch.Generator().manual_seed(1))
    q, k = torch.randn(2, 2, 4, 6, 8, generator=torch.Generator().manual_seed(2)).unbind(0)
    bias = scheme.layer(1, q, k, None).bias_window()  # (B, H, T, T)
    w, b = scheme.gate_weight[1], scheme.gate_bias[1]  # (H, D), (H,)
    for batch, h, i, j in ((0, 0, 5, 0), (1, 3, 4, 2), (0, 2, 3, 3)):
        expected = 0.0
        for ell in range(j + 1, i + 1):
            key = k[batch, :, ell].reshape(-1)  # (H * Dh,) heads in order
            expected += math.log(torch.sigmoid(w[h] @ key + b[h]).item())
        assert bias[batch, h, i, j].item() == pytest.approx(expected, abs=1e-5)


def test_fox_bias_mode_is_a_learned_constant_decay_per_layer(make_model):
    scheme = fox_model(make_model, "bias").position
    with torch.no_grad():
        scheme.gate_bias.copy_(torch.tensor([[0.0, 1.0, -1.0, 3.0], [2.0, 2.0, 2.0, 2.0]]))
    q = k = torch.zeros(1, 4, 5, 8)
    for layer in range(2):
        bias = scheme.layer(layer, q, k, None).bias_window()  # (1, H, T, T)
        for h in range(4):
            decay = math.log(1 / (1 + math.exp(-scheme.gate_bias[layer, h].item())))
            assert bias[0, h, 4, 1].item() == pytest.approx(3 * decay, abs=1e-6)
    positions = torch.tensor([0, 5, 6, 20, 21])  # decays per unit of position
    bias = scheme.layer(0, q, k, positions).bias_window()
    assert bias[0, 1, 3, 1].item() == pytest.approx(
        15 * math.log(torch.sigmoid(torch.tensor(1.0)).item()), abs=1e-5
    )


def test_fox_fixed_mode_is_alibi_on_the_causal_side(make_model):
    fox = fox_model(make_model, "fixed")
    alibi = make_model("alibi", strong=True)
    assert fox.position.fixed_bias and not list(fox.position.parameters())
    fixed = fox.position.score_bias(None, 9)  # (1, H, T, T)
    slopes = alibi_slopes(4)
    for i, j in ((8, 0), (5, 3), (2, 2)):
        torch.testing.assert_close(fixed[0, :, i, j], -slopes * (i - j))  # log f = -m_h
    alibi.load_state_dict(fox.state_dict())  # the same weights (neither has parameters of its own)
    with torch.no_grad():
        torch.testing.assert_close(fox(idx()), alibi(idx()), rtol=0, atol=1e-6)


def textbook_fox_attention(attention, w, b, x):
    """One forgetting-attention layer written out: gates from every head's keys, the
    product of gates as a log-space bias, causal softmax."""
    bsz, t, _ = x.shape
    q, k, v = attention.qkv(x).view(bsz, t, 3, 4, 8).permute(2, 0, 3, 1, 4)
    gates = torch.sigmoid(k.transpose(1, 2).reshape(bsz, t, 32) @ w.t() + b)  # (B, T, H)
    log_f = gates.log().transpose(1, 2)  # (B, H, T)
    bias = torch.zeros(bsz, 4, t, t)
    for i in range(t):
        for j in range(i + 1):
            bias[:, :, i, j] = log_f[:, :, j + 1 : i + 1].sum(-1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8) + bias
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf)
    y = scores.softmax(-1) @ v
    return attention.out(y.transpose(1, 2).reshape(bsz, t, 32))


def test_fox_attention_and_gradients_equal_the_textbook_layer(make_model):
    model = fox_model(make_model, "data").train()
    with torch.no_grad():
        model.position.gate_weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(3))
    attention = model.blocks[1].attn
    w, b = model.position.gate_weight[1], model.position.gate_bias[1]
    context = AttentionContext(model.position, None, None, True, True, None, torch.float32)
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(4), requires_grad=True)
    weights = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(5))
    outputs, grads = [], []
    for layer in (
        lambda: attention(x, context),
        lambda: textbook_fox_attention(attention, w, b, x),
    ):
        model.zero_grad()
        x.grad = None
        out = layer()
        (out * weights).sum().backward()
        outputs.append(out.detach())
        grads.append(
            (
                model.position.gate_weight.grad.clone(),
                model.position.gate_bias.grad.clone(),
                x.grad.clone(),
            )
        )
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)
    assert grads[0][0].abs().max() > 0 and grads[0][1].abs().max() > 0
    for got, expected in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_fox_data_mode_ignores_positions_and_rejects_bidirectional(make_model):
    model = fox_model(make_model, "data")
    with torch.no_grad():
        assert torch.equal(model(idx(), positions=torch.arange(11) * 7 + 3), model(idx()))
    with pytest.raises(ValueError, match="'fox' is causal only"):
        fox_model(make_model, "data", causal=False)
    with pytest.raises(
        ValueError,
        match=r"model\.options\.fox\.mode='full' is invalid; choose one of data, bias, fixed",
    ):
        make_model("fox", options={"fox": {"mode": "full"}})


# ---------------------------------------------------------------------------------------------
# ALiBi with learned slopes
# ---------------------------------------------------------------------------------------------


def test_learned_slopes_start_at_the_geometric_slopes_and_train(make_model):
    learned = make_model("alibi", strong=True, options={"alibi": {"learned_slopes": True}}).train()
    fixed = make_model("alibi", strong=True)
    torch.testing.assert_close(
        learned.position.log_slopes.exp(), alibi_slopes(4), rtol=1e-6, atol=0
    )
    assert not learned.position.fixed_bias and fixed.position.fixed_bias
    fixed.load_state_dict(
        {k: v for k, v in learned.state_dict().items() if k != "position.log_slopes"}
    )
    with torch.no_grad():  # at initialisation: ALiBi's logits
        torch.testing.assert_close(learned(idx()), fixed(idx()), rtol=0, atol=1e-6)
    loss = F.cross_entropy(learned(idx())[:, :-1].reshape(-1, V), idx()[:, 1:].reshape(-1))
    loss.backward()
    assert learned.position.log_slopes.grad.abs().min() > 0  # every head's slope gets a gradient
    with torch.no_grad():
        learned.position.log_slopes.fill_(-30.0)  # any log-slope: a positive slope, a penalty
    assert (learned.position.score_bias(None, 5)[0].tril() <= 0).all()


# ---------------------------------------------------------------------------------------------
# Dynamic position bias
# ---------------------------------------------------------------------------------------------


def test_log_distance_is_sign_aware():
    d = torch.tensor([-7.0, -1.0, 0.0, 1.0, 3.0])
    expected = torch.tensor([-math.log(8), -math.log(2), 0.0, math.log(2), math.log(4)])
    torch.testing.assert_close(log_distance(d), expected, rtol=0, atol=1e-7)


@pytest.mark.parametrize("log", [True, False])
def test_dynamic_bias_is_the_mlp_of_the_distance(make_model, log):
    options = {"dynamic_bias": {"depth": 3, "width": 8, "log_distance": log}}
    scheme = make_model("dynamic_bias", causal=False, options=options).position
    mlp = scheme.mlp
    assert [m.out_features for m in mlp if hasattr(m, "out_features")] == [8, 8, 8, 4]
    bias = scheme.score_bias(None, 6)  # (1, H, T, T)
    assert bias.shape == (1, 4, 6, 6)
    for i, j in ((5, 0), (0, 5), (3, 3), (2, 4)):
        d = i - j
        x = math.copysign(math.log1p(abs(d)), d) if log else float(d)
        h = torch.tensor([[x]])
        for layer in mlp:
            h = layer(h)
        torch.testing.assert_close(bias[0, :, i, j], h[0], rtol=1e-6, atol=1e-6)
    # a function of i - j alone, at default and explicit positions alike
    torch.testing.assert_close(bias[0, :, 4, 2], bias[0, :, 3, 1])
    explicit = scheme.score_bias(torch.arange(6) + 100, 6)
    torch.testing.assert_close(explicit, bias, rtol=0, atol=1e-6)


def test_dynamic_bias_windows_equal_the_slices_of_the_whole(make_model):
    scheme = make_model("dynamic_bias", causal=False).position
    whole = scheme.score_bias(None, 37)
    positions = torch.arange(74).view(2, 37) * 3
    explicit = scheme.score_bias(positions, 37)
    for queries, keys in (
        (slice(5, 10), slice(0, 10)),
        (slice(30, 37), slice(0, 37)),
        (slice(0, 3), slice(2, 30)),
    ):
        torch.testing.assert_close(
            scheme.score_bias(None, 37, queries, keys), whole[..., queries, keys], rtol=0, atol=1e-6
        )
        torch.testing.assert_close(
            scheme.score_bias(positions, 37, queries, keys),
            explicit[..., queries, keys],
            rtol=0,
            atol=1e-6,
        )


# ---------------------------------------------------------------------------------------------
# PoPE
# ---------------------------------------------------------------------------------------------


def test_pope_frequencies_one_per_component():
    expected = torch.tensor([10000.0 ** (-c / 8) for c in range(8)])
    torch.testing.assert_close(pope_frequencies(8), expected, rtol=1e-6, atol=0)


def test_pope_score_equals_the_polar_formula(make_model):
    """``q'_i . k'_j = sum_c softplus(q_c) softplus(k_c) cos((i - j) theta_c - delta_c)``."""
    scheme = make_model("pope").position
    with torch.no_grad():
        scheme.phase_bias.uniform_(-2 * math.pi, 0, generator=torch.Generator().manual_seed(0))
    q, k = torch.randn(2, 1, 4, 7, 8, generator=torch.Generator().manual_seed(1)).unbind(0)
    out = scheme.layer(0, q, k, scheme.prepare(None, 7))
    assert out.q.shape == (1, 4, 7, 16) and out.scale == 1.0
    theta = [10000.0 ** (-c / 8) for c in range(8)]
    for h, i, j in ((0, 6, 0), (3, 2, 5), (1, 4, 4)):
        delta = scheme.phase_bias[h, 0]
        expected = sum(
            F.softplus(q[0, h, i, c]).item()
            * F.softplus(k[0, h, j, c]).item()
            * math.cos((i - j) * theta[c] - delta[c].item())
            for c in range(8)
        )
        assert (out.q[0, h, i] @ out.k[0, h, j]).item() == pytest.approx(expected, abs=1e-5)


def test_pope_phase_bias_is_clamped_and_scores_scaled_by_the_head_width(make_model):
    model = make_model("pope", strong=True)
    with torch.no_grad():
        model.position.phase_bias.fill_(-10.0)  # clamped to -2 pi: the same as -2 pi, i.e. 0
        clamped = model(idx())
        model.position.phase_bias.zero_()
        torch.testing.assert_close(model(idx()), clamped, rtol=0, atol=1e-5)
    uniform = make_model("pope", options={"pope": {"bias_uniform_init": True}}).position.phase_bias
    assert uniform.min() >= -2 * math.pi and uniform.max() <= 0 and uniform.std() > 1


@pytest.mark.parametrize("keys", [255, 256, 300])
def test_narrow_values_are_padded_from_256_keys_and_give_the_textbook_attention(keys, make_model):
    """PoPE's values are half as wide as its queries and keys; from ``PAD_VALUES_FROM_KEYS``
    keys they are zero-padded so SDPA takes its fused kernel. Either call gives
    ``softmax(q k^T / sqrt(Dq) + causal) v``, and the path taken is the padded call exactly from
    256 keys on, the unpadded one below."""
    attention = make_model("pope").blocks[0].attn
    g = torch.Generator().manual_seed(keys)
    q, k = torch.randn(2, 1, 4, keys, 16, generator=g).unbind(0)
    v = torch.randn(1, 4, keys, 8, generator=g)
    y = attention.attend(q, k, v, None, True)
    future = torch.ones(keys, keys, dtype=torch.bool).triu(1)
    logits = (q @ k.transpose(-1, -2) / 4.0).masked_fill(future, float("-inf"))
    torch.testing.assert_close(y, logits.softmax(-1) @ v, rtol=0, atol=1e-5)
    padded = F.scaled_dot_product_attention(q, k, F.pad(v, (0, 8)), is_causal=True)[..., :8]
    unpadded = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert attention_module.PAD_VALUES_FROM_KEYS == 256
    assert torch.equal(y, padded if keys >= 256 else unpadded)


def test_a_long_pope_forward_and_backward_equal_the_unpadded_path(make_model, monkeypatch):
    """A PoPE model at 300 tokens (padded values) against the same model with the padding
    turned off: logits and every gradient within float32 rounding."""
    tokens = idx(batch=2, length=300)

    def logits_and_grads(model):
        logits = model(tokens)
        logits.square().mean().backward()
        return logits.detach(), {n: p.grad for n, p in model.named_parameters()}

    padded = logits_and_grads(make_model("pope", strong=True))
    monkeypatch.setattr(attention_module, "PAD_VALUES_FROM_KEYS", 10**9)
    unpadded = logits_and_grads(make_model("pope", strong=True))
    torch.testing.assert_close(padded[0], unpadded[0], rtol=0, atol=1e-5)
    for name, grad in unpadded[1].items():
        torch.testing.assert_close(padded[1][name], grad, rtol=1e-4, atol=1e-6, msg=name)


# ---------------------------------------------------------------------------------------------
# Gradients into every parameter of every new form
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "options"),
    [
        ("fox", {"mode": "data"}),
        ("fox", {"mode": "bias"}),
        ("alibi", {"learned_slopes": True}),
        ("dynamic_bias", {"log_distance": False}),
        ("pope", {"bias_uniform_init": True}),
    ],
)
def test_every_parameter_gets_a_gradient(make_model, scheme, options):
    model = make_model(scheme, options={scheme: options}).train()
    tokens = idx(4, 10)
    F.cross_entropy(model(tokens)[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1)).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().max() > 0, name


# ---------------------------------------------------------------------------------------------
# Randomized positions at evaluation
# ---------------------------------------------------------------------------------------------


def test_randomized_eval_draws_sorted_positions_reproducibly(make_model):
    model = make_model("rope", strong=True, randomized_positions=64)
    assert model.position.select_positions(9, 3, torch.device("cpu")) is None  # arange(T)
    randomized = model.at_evaluation({"randomized_eval": True})
    assert randomized.config.randomized_eval and not model.config.randomized_eval
    state = torch.get_rng_state()
    first = randomized.position.select_positions(9, 3, torch.device("cpu"))
    second = randomized.position.select_positions(9, 3, torch.device("cpu"))
    assert torch.equal(torch.get_rng_state(), state)  # training's random stream is untouched
    assert first.shape == (3, 9) and (first.diff(dim=-1) > 0).all() and first.max() < 64
    assert not torch.equal(first, second)
    randomized.eval()  # a new evaluation starts the same stream again
    assert torch.equal(randomized.position.select_positions(9, 3, torch.device("cpu")), first)
    with torch.no_grad():
        assert (randomized(idx()) - model(idx())).abs().max() > 1e-3


def test_randomized_eval_needs_randomized_positions(make_model):
    with pytest.raises(
        ValueError, match=r"model\.randomized_eval=true needs model\.randomized_positions > 0"
    ):
        make_model("rope", randomized_eval=True)
    with pytest.raises(ValueError, match=r"randomized_eval cannot change at evaluation for 'rope'"):
        make_model("rope").at_evaluation({"randomized_eval": True})


def test_randomized_eval_is_in_the_scheme_label():
    from lab.evaluation.labels import scheme_label

    result = {
        "position": "rope",
        "task": "none",
        "config": {"model": {"randomized_eval": True}, "eval": {}},
    }
    assert scheme_label(result) == "rope (randomized eval)"
    overridden = {
        **result,
        "config": {"model": {}, "eval": {"position_options": {"randomized_eval": True}}},
    }
    assert scheme_label(overridden) == "rope [randomized_eval=True]"
