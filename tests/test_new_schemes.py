"""Reference values of the schemes added with the v2 interface: T5 buckets and bias, KERPLE,
xPos, FIRE, CoPE, partial rotary and randomized positions.

Expected values come from the papers' formulas or reference code, written out here one entry
at a time, or by hand; never from the code under test.
"""

import math

import pytest
import torch
from torch import nn

from model import ModelConfig, Transformer
from model.attention import AttentionContext
from model.position import available_schemes
from model.position.cope import cope_bias, cope_positions
from model.position.kerple import kerple_log_bias
from model.position.piecewise import relu_mlp, relu_pieces
from model.position.randomized import random_sorted_positions
from model.position.rope import apply_rope, rotate_half_split
from model.position.t5 import relative_position_bucket
from model.position.xpos import xpos_zeta

# ---------------------------------------------------------------------------------------------
# T5
# ---------------------------------------------------------------------------------------------


def mesh_tf_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """mesh_tensorflow ``_relative_position_bucket`` for one Python int (the T5 reference)."""
    ret = 0
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0) * num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    large = max_exact + int(
        math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    )
    return ret + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 20), (64, 256)])
def test_t5_buckets_equal_the_reference_rule(bidirectional, num_buckets, max_distance):
    offsets = torch.arange(-600, 601)
    got = relative_position_bucket(offsets, bidirectional, num_buckets, max_distance)
    expected = [
        mesh_tf_bucket(r, bidirectional, num_buckets, max_distance) for r in range(-600, 601)
    ]
    assert got.dtype == torch.int64
    assert got.tolist() == expected


def test_t5_buckets_hand_checked():
    # causal, 32 buckets, max_distance 128: 16 exact buckets, then 16 + floor(log(n/16)/log(8)*16)
    causal = relative_position_bucket(torch.tensor([0, -1, -15, -16, -20, -200, 5]), False, 32, 128)
    assert causal.tolist() == [0, 1, 15, 16, 17, 31, 0]
    # bidirectional: 16 buckets a side, keys after the query (offset > 0) in 16..31
    both = relative_position_bucket(torch.tensor([3, -3, -8, -20, 200, 0]), True, 32, 128)
    assert both.tolist() == [19, 3, 8, 10, 31, 0]


@pytest.mark.parametrize("per_layer", [False, True])
def test_t5_bias_is_the_table_at_each_bucket(per_layer):
    torch.manual_seed(0)
    options = {"t5": {"num_buckets": 8, "max_distance": 20, "per_layer": per_layer}}
    config = ModelConfig(
        vocab_size=16, d_model=32, n_layers=2, n_heads=4, d_ff=64, position="t5", options=options
    )
    scheme = Transformer(config).position
    t = 30
    state = scheme.prepare(None, t)
    shared = scheme.score_bias(None, t)
    for layer in range(2):
        bias = scheme.layer(layer, torch.zeros(1, 4, t, 8), torch.zeros(1, 4, t, 8), state).bias
        bias = shared if not per_layer else bias
        table = scheme.tables[layer if per_layer else 0].weight  # (buckets, H)
        for i, j in ((0, 0), (5, 2), (29, 0), (17, 9)):
            bucket = mesh_tf_bucket(j - i, False, 8, 20)
            torch.testing.assert_close(bias[0, :, i, j], table[bucket], rtol=0, atol=0)
    if per_layer:
        assert shared is None
        assert not torch.equal(scheme.tables[0].weight, scheme.tables[1].weight)


# ---------------------------------------------------------------------------------------------
# KERPLE
# ---------------------------------------------------------------------------------------------


def test_kerple_log_bias_hand_checked():
    r1, r2 = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 1.0])
    distance = torch.tensor(
        [
            [[0.0, -1.0], [1.0, 0.0]],
        ]
    )  # (1, T, T)
    bias = kerple_log_bias(r1, r2, distance)
    expected = torch.tensor(
        [
            [[0.0, -math.log(1.5)], [-math.log(1.5), 0.0]],
            [[0.0, -2 * math.log(2.0)], [-2 * math.log(2.0), 0.0]],
        ]
    ).unsqueeze(0)
    torch.testing.assert_close(bias, expected, rtol=0, atol=1e-6)


def test_kerple_module_follows_the_formula(make_model):
    scheme = make_model("kerple").position
    bias = scheme.score_bias(torch.arange(6) + 40, 6)  # (1, H, T, T)
    for h in range(4):
        r1, r2 = scheme.r1[h].item(), scheme.r2[h].item()
        for i, j in ((5, 0), (3, 3), (1, 4)):
            assert bias[0, h, i, j].item() == pytest.approx(
                -r1 * math.log(1 + r2 * abs(i - j)), abs=1e-5
            )


# ---------------------------------------------------------------------------------------------
# xPos
# ---------------------------------------------------------------------------------------------


def test_xpos_zeta_matches_torchscale():
    # torchscale XPOS: (arange(0, Dh, 2) + 0.4 Dh) / (1.4 Dh); Dh = 8: (0, 2, 4, 6) + 3.2, / 11.2
    expected = torch.tensor([3.2, 5.2, 7.2, 9.2]) / 11.2
    torch.testing.assert_close(xpos_zeta(8), expected, rtol=0, atol=1e-7)


def test_xpos_score_is_rope_score_times_decay(make_model):
    """<xpos(q, n), xpos(k, m)> = sum over pairs of RoPE's pair score * zeta_i^((n - m)/512)."""
    scheme = make_model("xpos").position
    torch.manual_seed(0)
    t = 40
    q, k = torch.randn(1, 1, t, 8), torch.randn(1, 1, t, 8)
    out = scheme.layer(0, q, k, scheme.prepare(None, t))
    zeta = xpos_zeta(8).tolist()
    rq, rk = apply_rope(q, torch.arange(t)), apply_rope(k, torch.arange(t))
    for n, m in ((39, 0), (20, 19), (7, 7)):
        score = (out.q[0, 0, n] * out.k[0, 0, m]).sum().item()
        pair = rq[0, 0, n] * rk[0, 0, m]  # (8,): pair i is dims i and i + 4
        expected = sum(
            (pair[i] + pair[i + 4]).item() * zeta[i] ** ((n - m) / 512) for i in range(4)
        )
        assert score == pytest.approx(expected, rel=1e-4, abs=1e-5)


# ---------------------------------------------------------------------------------------------
# FIRE
# ---------------------------------------------------------------------------------------------


def test_fire_bias_follows_the_paper_code(make_model):
    scheme = make_model("fire").position
    t = 7
    positions = torch.arange(t) + 700  # queries past L = 512: the normaliser is per query
    bias = scheme.score_bias(positions, t)  # (1, H, T, T)
    c = scheme.c.item()
    threshold = abs(scheme.L_multiplier.item() * 512.0)
    for i, j in ((6, 0), (3, 3), (5, 2)):
        p_i = 700 + i
        x = math.log(abs(c * (i - j)) + 1) / (math.log(abs(c * max(p_i, threshold)) + 1) + 1e-6)
        expected = scheme.mlp(torch.tensor([[x]]))[0]  # (H,)
        torch.testing.assert_close(bias[0, :, i, j], expected, rtol=1e-5, atol=1e-6)


def test_fire_mlp_keeps_pytorch_default_init(make_model):
    """Not GPT-2's std 0.02: ``Linear(1, 32)`` by default draws from U(-1, 1) (bound
    1/sqrt(fan_in)), ``Linear(32, H)`` from U(-1/sqrt(32), 1/sqrt(32)), biases likewise."""
    mlp = make_model("fire").position.mlp
    first, last = mlp[0], mlp[2]
    assert 0.3 < first.weight.std() < 0.9 and first.weight.abs().max() <= 1.0
    assert first.bias.abs().max() > 0.1
    assert last.weight.abs().max() <= 32**-0.5 and last.weight.std() > 0.05


def test_fire_is_relative_below_its_threshold(make_model):
    scheme = make_model("fire", strong=True).position
    default = scheme.score_bias(None, 9)
    below = scheme.score_bias(torch.arange(9) + 100, 9)  # every query below L = 512
    above = scheme.score_bias(torch.arange(9) + 900, 9)
    torch.testing.assert_close(below, default, rtol=0, atol=1e-6)
    assert (above - default).abs().max() > 1e-2 * default.abs().max()


def relu_units_with_every_case() -> tuple[nn.Linear, nn.Linear]:
    """``Linear(1, 12)`` and ``Linear(12, 3)``, random, with units of ``W1 < 0``, of ``W1 = 0``
    (constant positive, negative and zero) and tied breakpoints (a repeated unit, and a rising
    and a falling unit that switch at one point)."""
    torch.manual_seed(0)
    first, last = nn.Linear(1, 12), nn.Linear(12, 3)
    with torch.no_grad():
        first.weight[:, 0] = torch.tensor([1.5, -2.0, 0.7, -0.3, 0, 0, 0, 1.5, 2.0, -1.0, 3, -4])
        first.bias.copy_(torch.tensor([0.3, 0.5, -0.2, 0.1, 0.4, -0.6, 0, 0.3, -1.0, 0.5, 1, 2]))
        last.weight.normal_()
    return first, last


def test_relu_mlp_equals_the_mlp_at_every_piece_and_breakpoint():
    first, last = relu_units_with_every_case()
    mlp = nn.Sequential(first, nn.ReLU(), last)
    w1, b1 = first.weight[:, 0].detach(), first.bias.detach()
    breakpoints = -b1[w1 != 0] / w1[w1 != 0]  # 9 units, 6 distinct points in (-1, 1)
    assert len(breakpoints.unique()) == 6
    between = torch.linspace(-1.3, 1.3, 531)  # every piece, ends beyond every breakpoint
    x = torch.cat([between, breakpoints]).view(4, -1)  # any shape
    expected = mlp(x.unsqueeze(-1)).movedim(-1, 0)  # (H, 4, N)
    torch.testing.assert_close(relu_mlp(first, last, x), expected, rtol=0, atol=1e-6)

    weights = torch.randn(3, 531, generator=torch.Generator().manual_seed(1))
    grads = []
    for f in (lambda x: mlp(x.unsqueeze(-1)).movedim(-1, 0), lambda x: relu_mlp(first, last, x)):
        x = between.clone().requires_grad_()  # off the breakpoints: ReLU is differentiable
        (f(x) * weights).sum().backward()
        params = (first.weight, first.bias, last.weight, last.bias)
        grads.append([x.grad] + [p.grad.clone() for p in params])
        first.zero_grad(), last.zero_grad()
    for got, want in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_relu_pieces_are_the_active_units_of_each_interval():
    first, last = relu_units_with_every_case()
    breakpoints, slopes, intercepts = relu_pieces(first, last)
    assert breakpoints[-3:].isinf().all() and breakpoints.diff()[:-3].ge(0).all()  # W1 = 0 last
    # below every breakpoint: the falling units (W1 < 0) and the constant 0.4 are active
    active = torch.tensor([0, 1, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1.0])
    w1, b1 = first.weight[:, 0].detach(), first.bias.detach()
    torch.testing.assert_close(slopes[:, 0], last.weight.detach() @ (active * w1))
    torch.testing.assert_close(intercepts[:, 0], last.weight.detach() @ (active * b1) + last.bias)


def test_fire_model_equals_fire_with_the_plain_mlp(make_model, monkeypatch):
    """Logits and every gradient, on the blocked path at positions past ``L`` (a per-query
    normaliser), against ``f`` run as the ``nn.Sequential`` it is stored as."""
    model = make_model("fire", strong=True)
    idx = torch.randint(0, 16, (2, 37), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(37) + 600
    weights = torch.randn(2, 37, 16, generator=torch.Generator().manual_seed(1))
    monkeypatch.setattr("model.blocked_attention.BLOCK_ROWS", 5)

    def logits_and_grads() -> list[torch.Tensor]:
        model.zero_grad()
        logits = model(idx, positions=positions)
        (logits * weights).sum().backward()
        return [logits.detach()] + [p.grad.clone() for p in model.parameters()]

    runs = [logits_and_grads()]
    mlp = model.position.mlp
    monkeypatch.setattr(
        "model.position.fire.relu_mlp", lambda first, last, x: mlp(x.unsqueeze(-1)).movedim(-1, 0)
    )
    runs.append(logits_and_grads())
    for got, want in zip(*runs, strict=True):  # float32 sums in another order: relative to scale
        assert (got - want).abs().max() <= 1e-5 * max(want.abs().max().item(), 1.0)


# ---------------------------------------------------------------------------------------------
# CoPE
# ---------------------------------------------------------------------------------------------


def test_cope_positions_count_gates_from_each_key_to_the_query():
    logits = torch.tensor([[0.0, 9.0, 9.0], [0.0, 0.0, 9.0], [math.log(3.0), 0.0, -math.log(3.0)]])
    p = cope_positions(logits.view(1, 1, 3, 3))[0, 0].tril()  # keys after the query: masked
    # sigmoid(0) = 1/2, sigmoid(log 3) = 3/4, sigmoid(-log 3) = 1/4; future gates (9) unused
    expected = torch.tensor([[0.5, 0.0, 0.0], [1.0, 0.5, 0.0], [1.5, 0.75, 0.25]])
    torch.testing.assert_close(p, expected, rtol=0, atol=1e-6)


def test_cope_bias_interpolates_between_integer_positions():
    q = torch.tensor([1.0, 2.0]).view(1, 1, 1, 2)
    e = torch.tensor([[1.0, 3.0, 5.0], [0.0, 1.0, -1.0]])  # columns e[0], e[1], e[2]
    # q . e[p] = 1, 5, 3 at p = 0, 1, 2
    p = torch.tensor([0.0, 0.25, 1.5, 2.0]).view(1, 1, 1, 4)
    got = cope_bias(q, e, p)[0, 0, 0]
    torch.testing.assert_close(got, torch.tensor([1.0, 2.0, 4.0, 3.0]), rtol=0, atol=1e-6)


def cope_layer(make_model, index, shape):
    """A CoPE layer's ``Scores`` for random q and k of ``shape`` ``(B, H, T, Dh)``, with that
    layer's position vectors drawn (seed 0): ``(scheme, q, k, scores)``."""
    scheme = make_model("cope").position
    torch.manual_seed(0)
    with torch.no_grad():
        scheme.embeddings[index].normal_()
    q, k = torch.randn(shape), torch.randn(shape)
    return scheme, q, k, scheme.layer(index, q, k, scheme.prepare(None, shape[2]))


def test_cope_bias_of_a_window_is_that_part_of_the_whole(make_model):
    """The blocked path asks for windows of queries over the keys up to their last one."""
    scores = cope_layer(make_model, 0, (2, 4, 9, 8))[-1]
    whole = scores.bias_window()  # (2, H, 9, 9)
    for queries, keys in [
        (slice(3, 6), slice(0, 6)),
        (slice(6, 9), slice(0, 9)),
        (slice(0, 2), slice(0, 5)),
    ]:
        torch.testing.assert_close(
            scores.bias_window(queries, keys), whole[..., queries, keys], rtol=0, atol=1e-5
        )


def test_cope_layer_bias_equals_the_formula(make_model):
    scheme, q, k, scores = cope_layer(make_model, 1, (1, 4, 5, 8))
    bias = scores.bias_window()  # (1, H, 5, 5)
    h, i, j = 2, 4, 1
    gates = [torch.sigmoid(q[0, h, i] @ k[0, h, s] / math.sqrt(8)).item() for s in range(j, i + 1)]
    p = sum(gates)
    lo, hi = math.floor(p), math.ceil(p)
    e = scheme.embeddings[1]
    expected = (q[0, h, i] @ e[:, hi]) * (p - lo) + (q[0, h, i] @ e[:, lo]) * (1 - (p - lo))
    assert bias[0, h, i, j].item() == pytest.approx(expected.item(), abs=1e-5)


def textbook_cope_attention(attention, e, x):
    """One CoPE attention layer written out (the paper's listing): gates, positions counted
    back from each query, capped at ``P - 1``, ``q . e`` interpolated, causal softmax."""
    b, t, _ = x.shape
    q, k, v = attention.qkv(x).view(b, t, 3, 4, 8).permute(2, 0, 3, 1, 4)  # each (B, H, T, Dh)
    logits = q @ k.transpose(-1, -2) / math.sqrt(8)  # (B, H, T, T)
    gates = torch.sigmoid(logits).tril()  # keys after the query count nothing
    p = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=e.shape[-1] - 1)  # sum_{t=j..i} g_it
    low = p.floor().long()
    high = (low + 1).clamp(max=e.shape[-1] - 1)
    at = q @ e  # (B, H, T, P)
    w = p - low
    bias = (1 - w) * at.gather(-1, low) + w * at.gather(-1, high)
    scores = (logits + bias).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf)
    y = scores.softmax(-1) @ v  # (B, H, T, Dh)
    return attention.out(y.transpose(1, 2).reshape(b, t, 32))


def test_cope_attention_and_gradients_equal_the_textbook_layer(make_model):
    """The attention takes CoPE's own logits (no second ``q k^T``): same output and gradients
    as the paper's layer, with contextual positions past the cap (``npos_max`` 4, 9 tokens)."""
    model = make_model("cope", strong=True, options={"cope": {"npos_max": 4}}).train()
    torch.manual_seed(0)
    with torch.no_grad():
        model.position.embeddings[1].normal_()
    attention, e = model.blocks[1].attn, model.position.embeddings[1]
    context = AttentionContext(model.position, None, None, True, True, None, torch.float32)
    x = torch.randn(2, 9, 32, requires_grad=True)
    weights = torch.randn(2, 9, 32)
    outputs, grads = [], []
    for layer in (lambda: attention(x, context), lambda: textbook_cope_attention(attention, e, x)):
        out = layer()
        e.grad, x.grad = None, None
        (out * weights).sum().backward()
        outputs.append(out.detach())
        grads.append((e.grad, x.grad))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)
    assert grads[0][0].abs().max() > 0
    for got, expected in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Partial rotary
# ---------------------------------------------------------------------------------------------


def test_partial_rotary_rotates_the_first_dims_only(make_model):
    scheme = make_model("rope", options={"rope": {"rotary_fraction": 0.5}}).position
    torch.manual_seed(0)
    q = torch.randn(2, 4, 9, 8)
    out = scheme.layer(0, q, q, scheme.prepare(None, 9)).q
    torch.testing.assert_close(
        out[..., :4], apply_rope(q[..., :4], torch.arange(9)), rtol=0, atol=1e-6
    )
    assert torch.equal(out[..., 4:], q[..., 4:])


@pytest.mark.parametrize(("fraction", "dims"), [(1.0, 8), (0.5, 4), (0.3, 2), (0.01, 2)])
def test_partial_rotary_dims(make_model, fraction, dims):
    scheme = make_model("rope", options={"rope": {"rotary_fraction": fraction}}).position
    cos, _ = scheme.prepare(None, 3)
    assert cos.shape == (3, dims // 2)


def test_rotate_half_split_full_width_is_unchanged_rope():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    angles = torch.arange(5).float().unsqueeze(1) * torch.tensor([1.0, 0.1, 0.01, 0.001])
    assert torch.equal(
        rotate_half_split(x, angles.cos(), angles.sin()), apply_rope(x, torch.arange(5))
    )


# ---------------------------------------------------------------------------------------------
# Randomized positions
# ---------------------------------------------------------------------------------------------


def test_randomized_range_must_fit_a_learned_table():
    with pytest.raises(ValueError, match=r"randomized_positions=128 .*max_positions=64"):
        ModelConfig(
            position="learned", randomized_positions=128, options={"learned": {"max_positions": 64}}
        )


def test_random_sorted_positions_are_increasing_subsets():
    torch.manual_seed(0)
    p = random_sorted_positions(500, 12, 64, torch.device("cpu"))
    assert p.shape == (500, 12) and p.dtype == torch.int64
    assert (p[:, 1:] > p[:, :-1]).all() and p.min() >= 0 and p.max() < 64
    # every position in [0, 64) is drawn: the model sees the whole range while training
    assert torch.unique(p).numel() == 64
    with pytest.raises(ValueError, match="randomized_positions=8"):
        random_sorted_positions(1, 9, 8, torch.device("cpu"))


@pytest.mark.parametrize("scheme", available_schemes())
def test_randomized_wrapper_trains_on_random_positions_and_evaluates_on_arange(make_model, scheme):
    plain = make_model(scheme, strong=True, max_positions=128)
    wrapped = make_model(scheme, strong=True, max_positions=128, randomized_positions=128)
    wrapped.load_state_dict(
        {
            k.replace("position.", "position.inner.", 1) if k.startswith("position.") else k: v
            for k, v in plain.state_dict().items()
        }
    )
    idx = torch.randint(0, 16, (3, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(wrapped.eval()(idx), plain(idx), rtol=0, atol=1e-6)
        torch.manual_seed(5)
        training = wrapped.train()(idx)
        torch.manual_seed(5)
        positions = random_sorted_positions(3, 10, 128, torch.device("cpu"))
        torch.testing.assert_close(training, plain(idx, positions=positions), rtol=0, atol=1e-6)
