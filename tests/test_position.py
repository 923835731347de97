"""Unit tests of the position schemes: sinusoidal table, RoPE, ALiBi, learned table, caches.

Every expected value is either written out by hand or derived from the defining formula of the
scheme (Vaswani et al. 2017; Su et al. 2021; Press et al. 2022), never from the code under test.
"""

import math

import pytest
import torch

from model.mask import MaskCache, attention_mask
from model.position import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_frequencies,
    sinusoidal_table,
)

# ---------------------------------------------------------------------------------------------
# Sinusoidal
# ---------------------------------------------------------------------------------------------


def test_sinusoidal_shape_and_dtype():
    table = sinusoidal_table(7, 10)
    assert table.shape == (7, 10)
    assert table.dtype == torch.float32
    assert sinusoidal_table(0, 4).shape == (0, 4)


def test_sinusoidal_hand_checked_values():
    # dim=4: frequencies 1/10000**(0/4) = 1 and 1/10000**(2/4) = 1/100, sin and cos interleaved.
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [math.sin(1), math.cos(1), math.sin(1 / 100), math.cos(1 / 100)],
            [math.sin(2), math.cos(2), math.sin(2 / 100), math.cos(2 / 100)],
        ]
    )
    torch.testing.assert_close(sinusoidal_table(3, 4), expected, rtol=0, atol=1e-7)


def test_sinusoidal_base_sets_wavelengths():
    # base=100, dim=4: frequencies 1 and 100**(-1/2) = 0.1.
    expected = torch.tensor([math.sin(5), math.cos(5), math.sin(0.5), math.cos(0.5)])
    torch.testing.assert_close(sinusoidal_table(6, 4, base=100.0)[5], expected, rtol=0, atol=1e-7)


def test_sinusoidal_matches_formula_wide():
    n, dim = 50, 16
    table = sinusoidal_table(n, dim)
    for p in (0, 1, 13, 49):
        for i in range(dim // 2):
            angle = p / 10000.0 ** (2 * i / dim)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("k", [1, 3, 17, 100])
def test_sinusoidal_distance_depends_on_offset_only(k):
    dim = 32
    table = sinusoidal_table(700, dim).double()
    starts = torch.arange(0, 600, 7)
    dist = (table[starts + k] - table[starts]).norm(dim=-1)  # (len(starts),)
    # ||PE[p+k] - PE[p]||^2 = sum_i (2 - 2 cos(k w_i)), whatever p is.
    freqs = [10000.0 ** (-2 * i / dim) for i in range(dim // 2)]
    closed_form = math.sqrt(sum(2 - 2 * math.cos(k * w) for w in freqs))
    assert (dist - closed_form).abs().max().item() < 1e-4


def test_sinusoidal_rejects_odd_dim():
    with pytest.raises(ValueError, match="even"):
        sinusoidal_table(4, 5)


# ---------------------------------------------------------------------------------------------
# RoPE
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head_dim", "base", "expected"),
    [
        (4, 10000.0, [1.0, 0.01]),
        (8, 10000.0, [1.0, 0.1, 0.01, 0.001]),
        (4, 100.0, [1.0, 0.1]),
        (2, 10000.0, [1.0]),
    ],
)
def test_rope_frequencies_known_values(head_dim, base, expected):
    freqs = rope_frequencies(head_dim, base)
    assert freqs.dtype == torch.float32
    assert freqs.shape == (head_dim // 2,)
    torch.testing.assert_close(freqs, torch.tensor(expected), rtol=1e-6, atol=0)


def test_rope_frequencies_reject_odd_head_dim():
    with pytest.raises(ValueError, match="even"):
        rope_frequencies(5)


def rope_score(q, k, m, n):
    """``<rope(q, m), rope(k, n)>`` for 1-D ``q``, ``k``."""
    rq = apply_rope(q.view(1, -1), torch.tensor([m]))
    rk = apply_rope(k.view(1, -1), torch.tensor([n]))
    return (rq * rk).sum().item()


@pytest.mark.parametrize("offset", [0, 3, -5, 40])
def test_rope_score_depends_on_relative_position_only(offset):
    torch.manual_seed(0)
    q, k = torch.randn(2, 16)
    q, k = q / q.norm(), k / k.norm()  # unit vectors: the score lies in [-1, 1]
    # Keys at n, queries at n + offset, for n up to 9000: past any training length.
    scores = [rope_score(q, k, n + offset, n) for n in (10, 123, 1000, 4096, 9000)]
    assert max(scores) - min(scores) < 1e-4
    # ...and the offset does matter: other offsets give other scores.
    others = [rope_score(q, k, 10 + offset + d, 10) for d in range(8)]
    assert max(others) - min(others) > 1e-2


def test_rope_at_position_zero_is_identity():
    torch.manual_seed(0)
    x = torch.randn(3, 1, 8)
    torch.testing.assert_close(apply_rope(x, torch.tensor([0])), x, rtol=0, atol=0)


def test_rope_preserves_norms():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 50, 16)
    out = apply_rope(x, torch.arange(50) * 37)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(out, x, atol=1e-2)  # it did rotate


@pytest.mark.parametrize("p", [0, 1, 2, 5, 100])
def test_rope_head_dim_2_rotates_unit_vector(p):
    out = apply_rope(torch.tensor([[1.0, 0.0]]), torch.tensor([p]))
    expected = torch.tensor([[math.cos(p), math.sin(p)]])
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


def test_rope_half_split_pairing_head_dim_4():
    # Dimension 0 pairs with 2 (angle p * 1), dimension 1 with 3 (angle p * 0.01).
    p = 3
    a, b = p * 1.0, p * 0.01
    basis = torch.eye(4)  # rows e0..e3, each at position p
    out = apply_rope(basis, torch.full((4,), p))
    c, s = math.cos, math.sin
    expected = torch.tensor(
        [
            [c(a), 0.0, s(a), 0.0],  # e0 -> cos a e0 + sin a e2
            [0.0, c(b), 0.0, s(b)],  # e1 -> cos b e1 + sin b e3
            [-s(a), 0.0, c(a), 0.0],  # e2 -> -sin a e0 + cos a e2
            [0.0, -s(b), 0.0, c(b)],  # e3 -> -sin b e1 + cos b e3
        ]
    )
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


def test_rope_bf16_in_bf16_out():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 20, 16)
    positions = torch.arange(20) * 11
    out = apply_rope(x.bfloat16(), positions)
    assert out.dtype == torch.bfloat16
    # Within bf16 rounding (input and output, ~2 * 2**-8 relative) of the float32 result...
    torch.testing.assert_close(out.float(), apply_rope(x, positions), rtol=2e-2, atol=2e-2)
    # ...and exactly the float32 rotation of the bf16 input, rounded once to bf16.
    expected = apply_rope(x.bfloat16().float(), positions).bfloat16()
    assert torch.equal(out, expected)


def test_rope_batched_positions_match_per_batch():
    torch.manual_seed(0)
    x = torch.randn(3, 2, 6, 8)  # (B, H, T, Dh)
    positions = torch.arange(6) + torch.tensor([[0], [7], [1000]])  # (B, T)
    out = apply_rope(x, positions)
    assert out.shape == x.shape
    for b in range(3):
        torch.testing.assert_close(out[b], apply_rope(x[b], positions[b]), rtol=0, atol=0)
    # (B, T, Dh) queries with (B, T) positions as well.
    out3 = apply_rope(x[:, 0], positions)
    torch.testing.assert_close(out3, out[:, 0], rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------------------------


def reference_slopes(n):
    """``get_slopes`` of ofirpress/attention_with_linear_biases (fairseq/models/transformer.py)."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (
        get_slopes_power_of_2(closest_power_of_2)
        + reference_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    )


def test_alibi_slopes_8_heads_exact():
    slopes = alibi_slopes(8)
    assert slopes.dtype == torch.float32
    expected = torch.tensor([1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256])
    assert torch.equal(slopes, expected)


def test_alibi_slopes_powers_of_two_small():
    assert torch.equal(alibi_slopes(1), torch.tensor([2.0**-8]))
    assert torch.equal(alibi_slopes(2), torch.tensor([2.0**-4, 2.0**-8]))
    assert torch.equal(alibi_slopes(4), torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]))


def test_alibi_slopes_6_heads():
    # slopes(4) = [2^-2, 2^-4, 2^-6, 2^-8]; slopes(8)[0::2] = [2^-1, 2^-3, 2^-5, 2^-7].
    expected = torch.tensor([0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125])
    assert torch.equal(alibi_slopes(6), expected)


def test_alibi_slopes_12_heads():
    # slopes(8) = 2^-1 .. 2^-8; slopes(16) = 2^-0.5, 2^-1, ..., so [0::2][:4] = 2^-0.5 .. 2^-3.5.
    expected = torch.tensor(
        [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
        + [0.7071067811865476, 0.35355339059327373, 0.17677669529663687, 0.08838834764831845]
    )
    torch.testing.assert_close(alibi_slopes(12), expected, rtol=1e-7, atol=0)


def test_alibi_slopes_match_reference_implementation():
    for n in range(1, 33):
        expected = torch.tensor(reference_slopes(n), dtype=torch.float32)
        torch.testing.assert_close(alibi_slopes(n), expected, rtol=1e-7, atol=0, msg=f"n={n}")


def test_alibi_slopes_reject_zero_heads():
    with pytest.raises(ValueError, match="n_heads"):
        alibi_slopes(0)


INF = float("inf")


def test_alibi_bias_hand_checked_causal():
    bias = alibi_bias(torch.tensor([0.5, 0.25]), torch.arange(3), 3)
    mask = attention_mask(3, True, None, bias, torch.device("cpu"), torch.float32)
    expected = torch.tensor(
        [
            [[0.0, -INF, -INF], [-0.5, 0.0, -INF], [-1.0, -0.5, 0.0]],
            [[0.0, -INF, -INF], [-0.25, 0.0, -INF], [-0.5, -0.25, 0.0]],
        ]
    ).unsqueeze(0)
    assert mask.dtype == torch.float32
    assert mask.shape == (1, 2, 3, 3)
    assert torch.equal(mask, expected)


def test_alibi_bias_hand_checked_bidirectional():
    bias = alibi_bias(torch.tensor([0.5, 0.25]), None, 3)
    expected = torch.tensor(
        [
            [[0.0, -0.5, -1.0], [-0.5, 0.0, -0.5], [-1.0, -0.5, 0.0]],
            [[0.0, -0.25, -0.5], [-0.25, 0.0, -0.25], [-0.5, -0.25, 0.0]],
        ]
    ).unsqueeze(0)
    assert torch.equal(bias, expected)
    mask = attention_mask(3, False, None, bias, torch.device("cpu"), torch.float32)
    assert torch.equal(mask, expected)  # bidirectional without a prefix: nothing blocked


def expected_alibi(slopes, t, causal):
    """``(1, H, T, T)`` from the definition, one entry at a time."""
    out = torch.empty(1, len(slopes), t, t)
    for h, m in enumerate(slopes):
        for i in range(t):
            for j in range(t):
                if causal and j > i:
                    out[0, h, i, j] = -INF
                else:
                    out[0, h, i, j] = -m * abs(i - j)
    return out


SLOPES_4 = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]


def test_alibi_module_score_bias_matches_definition(make_model):
    model = make_model("alibi")  # 4 heads: slopes 2^-2, 2^-4, 2^-6, 2^-8
    bias = model.position.score_bias(None, 7)
    assert bias.shape == (1, 4, 7, 7)
    assert torch.equal(bias, expected_alibi(SLOPES_4, 7, causal=False))


def test_alibi_default_equals_explicit_positions(make_model):
    position = make_model("alibi").position
    default = position.score_bias(None, 9)
    assert torch.equal(position.score_bias(torch.arange(9), 9), default)
    batched = position.score_bias(torch.arange(9).expand(2, 9), 9)
    assert batched.shape == (2, 4, 9, 9)
    assert torch.equal(batched, default.expand(2, -1, -1, -1))
    # A relative scheme: shifted positions give the same bias.
    assert torch.equal(position.score_bias(torch.arange(9) + 500, 9), default)


@pytest.mark.parametrize("causal", [True, False])
def test_mask_cache_reused_and_grown(make_model, causal):
    position = make_model("alibi").position
    cache = MaskCache()

    def get(t):
        cpu = torch.device("cpu")
        return cache.get(t, causal, torch.float32, cpu, lambda n: position.score_bias(None, n))

    first = get(12)
    again, shorter = get(12), get(5)
    assert again.data_ptr() == first.data_ptr()
    assert shorter.data_ptr() == first.data_ptr()
    assert torch.equal(shorter, expected_alibi(SLOPES_4, 5, causal))
    assert torch.equal(get(20), expected_alibi(SLOPES_4, 20, causal))


# ---------------------------------------------------------------------------------------------
# Learned absolute table
# ---------------------------------------------------------------------------------------------


def test_learned_lengths_up_to_max_positions_work(make_model):
    model = make_model("learned", max_positions=16)
    idx = torch.randint(0, 16, (2, 16))
    assert model(idx).shape == (2, 16, 16)
    assert model(idx[:, :1]).shape == (2, 1, 16)
    assert model(idx[:, :4], positions=torch.arange(4) + 12).shape == (2, 4, 16)


def test_learned_default_positions_past_table_raise(make_model):
    model = make_model("learned", max_positions=16)
    message = r"length 17\b.*encodes 16 positions.*model\.options\.learned\.max_positions"
    with pytest.raises(ValueError, match=message):
        model.check_inputs(torch.zeros(1, 17, dtype=torch.long))


def test_learned_explicit_positions_past_table_raise(make_model):
    model = make_model("learned", max_positions=16)
    idx = torch.zeros(2, 4, dtype=torch.long)
    model.check_inputs(idx, positions=torch.arange(4) + 12)  # last position 15: fits
    with pytest.raises(ValueError, match=r"length 17\b.*encodes 16 positions"):
        model.check_inputs(idx, positions=torch.arange(4) + 13)  # last position 16
    with pytest.raises(ValueError, match=r"length 31\b.*encodes 16 positions"):
        model.check_inputs(idx, positions=torch.tensor([[0, 1, 2, 3], [27, 28, 29, 30]]))


# ---------------------------------------------------------------------------------------------
# Length extrapolation and caches
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["sinusoidal", "rope", "alibi"])
def test_runs_far_past_max_positions(make_model, scheme):
    model = make_model(scheme, max_positions=16, strong=True)
    torch.manual_seed(1)
    idx = torch.randint(0, 16, (1, 300))
    with torch.no_grad():
        logits = model(idx)
        prefix = model(idx[:, :40])
    assert logits.shape == (1, 300, 16)
    assert torch.isfinite(logits).all()
    # Causal: the first 40 logits of the long sequence are those of the 40-token prefix.
    torch.testing.assert_close(logits[:, :40], prefix, rtol=0, atol=1e-5)


def test_sinusoidal_cache_reused_across_steps(make_model):
    model = make_model("sinusoidal", max_positions=16)
    idx = torch.randint(0, 16, (2, 300))
    with torch.no_grad():
        model(idx)
        table = model.position._table
        model(idx)
        model(idx[:, :100])
    assert model.position._table is table
    assert model.position._table.data_ptr() == table.data_ptr()
    assert table.shape[0] >= 300
    expected = model.config.scheme_options.scale * sinusoidal_table(300, 32)
    torch.testing.assert_close(table[:300], expected, rtol=0, atol=0)


def test_rope_cache_reused_across_steps(make_model):
    model = make_model("rope", max_positions=16)
    idx = torch.randint(0, 16, (2, 300))
    with torch.no_grad():
        model(idx)
        cos, sin = model.position._cos, model.position._sin
        model(idx)
        model(idx[:, :100])
    assert model.position._cos is cos and model.position._sin is sin
    assert model.position._cos.data_ptr() == cos.data_ptr()
    angles = torch.arange(300).float().unsqueeze(1) * rope_frequencies(8)
    torch.testing.assert_close(cos[:300], angles.cos(), rtol=0, atol=1e-6)
    torch.testing.assert_close(sin[:300], angles.sin(), rtol=0, atol=1e-6)
