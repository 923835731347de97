"""RoPE context extension (``model.position.rope_scaling``): the rules equal Hugging Face's
``ROPE_INIT_FUNCTIONS`` (hard-coded reference values always, the library where installed), and
they act on a trained model's logits as their papers say."""

import itertools
import math

import pytest
import torch

from lab.common.config import load_config, sequence_tokens
from model.position.rope import rope_frequencies, rope_inv_freq, rotate_half_split  # noqa: F401
from model.position.rope_scaling import proportional

ORIGINAL = 64
"""``original_max_position_embeddings`` of the references (HF: max_position_embeddings)."""

# Computed once with transformers 5.24.0, ``ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len)``
# for a LlamaConfig with head_dim 16, rope_theta 10000, max_position_embeddings 64 and
# rope_parameters {rope_type, factor, original_max_position_embeddings: 64, **extra}.
REFERENCE = [
    (
        "linear",
        4,
        None,
        {},
        [0.25, 0.07905694097, 0.02500000037, 0.007905694656, 0.002499999944, 0.0007905694656]
        + [0.0002500000119, 7.905694656e-05],
        1.0,
    ),
    (
        "dynamic",
        2,
        256,
        {},
        [1.0, 0.2394813746, 0.05735132098, 0.01373457164, 0.003289173823, 0.0007876958698]
        + [0.0001886384707, 4.517539492e-05],
        1.0,
    ),
    (
        "yarn",
        4,
        None,
        {},
        [1.0, 0.2371708155, 0.04999999702, 0.007905694656, 0.002499999944, 0.0007905694656]
        + [0.0002500000119, 7.905694656e-05],
        1.138629436111989,
    ),
    (
        "yarn",
        8,
        None,
        {"beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.5},
        [1.0, 0.1778781116, 0.01250000019, 0.003952847328, 0.001249999972, 0.0003952847328]
        + [0.0001250000059, 3.952847328e-05],
        1.5,
    ),
    (
        "llama3",
        8,
        None,
        {"low_freq_factor": 1.0, "high_freq_factor": 4.0},
        [1.0, 0.2443845868, 0.01304225624, 0.003952847328, 0.001249999972, 0.0003952847328]
        + [0.0001250000059, 3.952847328e-05],
        1.0,
    ),
]


def params(kind: str, factor: float, **extra) -> dict:
    return {
        "rope_type": kind,
        "factor": float(factor),
        "original_max_position_embeddings": ORIGINAL,
        **extra,
    }


@pytest.mark.parametrize(("kind", "factor", "seq_len", "extra", "values", "attention"), REFERENCE)
def test_rules_equal_hugging_face_reference_values(kind, factor, seq_len, extra, values, attention):
    inv_freq, factor_out = rope_inv_freq(16, 10000.0, params(kind, factor, **extra), seq_len)
    assert inv_freq.dtype == torch.float32 and inv_freq.shape == (8,)
    torch.testing.assert_close(inv_freq, torch.tensor(values), rtol=0, atol=1e-6)
    assert factor_out == pytest.approx(attention, abs=1e-12)


def test_static_ntk_is_the_base_change_and_no_scaling_is_plain_rope():
    for dim, factor in itertools.product((16, 32, 128), (2, 4, 8)):
        base = 10000.0 * factor ** (dim / (dim - 2))
        ntk, attention = rope_inv_freq(dim, 10000.0, params("ntk", factor))
        assert torch.equal(ntk, rope_frequencies(dim, base)) and attention == 1.0
        assert torch.equal(rope_inv_freq(dim, 500.0)[0], rope_frequencies(dim, 500.0))


@pytest.mark.parametrize("seq_len", [None, 1, 32, ORIGINAL])
def test_dynamic_changes_nothing_up_to_the_original_length(seq_len):
    dynamic = rope_inv_freq(32, 10000.0, params("dynamic", 4), seq_len)[0]
    assert torch.equal(dynamic, rope_frequencies(32, 10000.0))


def test_hugging_face_rules_where_installed():
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for dim, factor, kind in itertools.product(
        (16, 32, 128), (2, 4, 8), ("linear", "dynamic", "yarn", "llama3")
    ):
        extra = {"low_freq_factor": 1.0, "high_freq_factor": 4.0} if kind == "llama3" else {}
        scaling = params(kind, factor, **extra)
        config = LlamaConfig(
            hidden_size=4 * dim,
            num_attention_heads=4,
            head_dim=dim,
            max_position_embeddings=ORIGINAL,
            rope_parameters={**scaling, "rope_theta": 10000.0},
        )
        for seq_len in (None, 10, 64, 65, 100, 1000) if kind == "dynamic" else (None,):
            expected, attention = ROPE_INIT_FUNCTIONS[kind](config, "cpu", seq_len)
            ours, our_attention = rope_inv_freq(dim, 10000.0, scaling, seq_len)
            torch.testing.assert_close(ours, expected.float(), rtol=0, atol=1e-6)
            assert our_attention == pytest.approx(attention, abs=1e-12), (kind, dim, factor)


@pytest.mark.parametrize(
    ("scaling", "message"),
    [
        ({"rope_type": "su", "factor": 2.0}, "'su' is not a known rule; choose one of"),
        (
            {**{"rope_type": "longrope", "factor": 2.0}, "original_max_position_embeddings": 8},
            r"longrope needs short_factor with 8 positive numbers",
        ),
        ({"rope_type": "linear", "factor": 0.5}, "factor=0.5 is invalid; it must be >= 1"),
        ({"rope_type": "yarn", "factor": 2.0}, "'yarn' needs original_max_position_embeddings"),
    ],
)
def test_bad_scaling_is_one_line(scaling, message):
    with pytest.raises(ValueError, match=message):
        rope_inv_freq(16, 10000.0, scaling)


def rope_options(**values) -> dict:
    return {"rope": {"original_max_position": 8, **values}}


def test_dynamic_model_keeps_in_distribution_logits_and_extends_past_them(make_model):
    plain = make_model("rope", strong=True, options=rope_options())
    dynamic = plain.at_evaluation({"scaling": "dynamic", "scaling_factor": 4.0})
    idx = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for length in (3, 8):  # within the original 8 tokens: the very same logits
            assert torch.equal(dynamic(idx[:, :length]), plain(idx[:, :length]))
        assert (dynamic(idx) - plain(idx)).abs().max() > 1e-3
        # past it, a static base change for this length: theta * (4 * 12 / 8 - 3) ** (d / (d - 2))
        head_dim = plain.config.head_dim
        theta = 10000.0 * (4 * 12 / 8 - 3) ** (head_dim / (head_dim - 2))
        static = plain.at_evaluation({"theta": theta})
        torch.testing.assert_close(dynamic(idx), static(idx), rtol=0, atol=1e-5)


def test_yarn_scales_every_layers_scores_by_the_attention_factor_squared(make_model):
    model = make_model(
        "rope", strong=True, options=rope_options(scaling="yarn", scaling_factor=4.0)
    )
    q = k = torch.ones(1, 4, 3, 8)
    scores = model.position.layer(0, q, k, model.position.prepare(None, 3))
    assert scores.scale == pytest.approx((0.1 * math.log(4) + 1) ** 2)
    linear = rope_options(scaling="linear", scaling_factor=2.0)
    assert make_model("rope", options=linear).position.score_scale is None


def test_linear_scaling_is_position_interpolation(make_model):
    plain = make_model("rope", strong=True, options=rope_options())
    linear = plain.at_evaluation({"scaling": "linear", "scaling_factor": 2.0})
    idx = torch.randint(0, 16, (1, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # omega / 2 at positions 0, 2, 4, ... equals omega at 0, 1, 2, ...
        halved = linear(idx, positions=torch.arange(0, 12, 2))
        torch.testing.assert_close(halved, plain(idx), rtol=0, atol=1e-5)


def test_run_config_fills_the_original_length_from_the_training_data():
    config = load_config(None, ["data.task=copy", "data.train_max_length=5"])
    tokens = sequence_tokens(config.data.build_task(), 5)
    assert config.model.options["rope"]["original_max_position"] == tokens
    given = load_config(None, ["model.options.rope.original_max_position=100"])
    assert given.model.options["rope"]["original_max_position"] == 100


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"scaling": "pi"}, r"scaling='pi' is invalid; choose one of none, linear, ntk"),
        ({"scaling_factor": 0.5}, r"scaling_factor=0.5 is invalid; it must be in \[1, 1024\]"),
        ({"high_freq_factor": 1.0}, r"high_freq_factor=1.0 is invalid; it must be > low_freq"),
    ],
)
def test_bad_scaling_options_are_one_line(values, message, make_model):
    with pytest.raises(ValueError, match=r"model\.options\.rope\." + message):
        make_model("rope", options={"rope": values})


def test_a_rule_without_its_original_length_fails_when_built(make_model):
    with pytest.raises(ValueError, match="model.options.rope: .*'dynamic' needs original_max"):
        make_model("rope", options={"rope": {"scaling": "dynamic", "scaling_factor": 2.0}})


# ---------------------------------------------------------------------------------------------
# YaRN's mscale and truncate, LongRoPE, p-RoPE: against Hugging Face
# ---------------------------------------------------------------------------------------------

SHORT = [1.0, 1.1, 1.3, 1.7, 2.2, 2.9, 3.5, 4.0]
LONG = [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 12.0, 16.0]
"""LongRoPE factors of a 16-wide head (8 pairs), rising with the wavelength as the searched
factors of Phi-3 do."""


def hugging_face(kind: str, dim: int, scaling: dict, seq_len=None, rotary: float = 1.0):
    """``ROPE_INIT_FUNCTIONS[kind]`` for a LlamaConfig of head width ``dim``, theta 10000:
    ``(inv_freq float32, attention factor)``."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(
        hidden_size=4 * dim,
        num_attention_heads=4,
        head_dim=dim,
        max_position_embeddings=ORIGINAL,
        rope_parameters={**scaling, "rope_theta": 10000.0, "partial_rotary_factor": rotary},
    )
    inv_freq, attention = ROPE_INIT_FUNCTIONS[kind](config, "cpu", seq_len)
    return inv_freq.float(), attention


@pytest.mark.parametrize("dim", [16, 32, 128])
@pytest.mark.parametrize("factor", [2, 4, 40])
@pytest.mark.parametrize(
    "extra",
    [
        {"mscale": 1.0, "mscale_all_dim": 1.0},  # DeepSeek-V3: a = 1
        {"mscale": 0.707, "mscale_all_dim": 0.707},
        {"mscale": 1.0, "mscale_all_dim": 0.5},
        {"mscale": 1.0},  # one of the two alone: the paper's 0.1 ln s + 1
        {"truncate": False},  # gpt-oss: fractional ramp ends
        {"truncate": False, "beta_fast": 16.0, "beta_slow": 2.0},
        {"truncate": True, "mscale": 2.0, "mscale_all_dim": 1.0},
    ],
)
def test_yarn_mscale_and_truncate_equal_hugging_face(dim, factor, extra):
    scaling = params("yarn", factor, **extra)
    expected, attention = hugging_face("yarn", dim, scaling)
    ours, our_attention = rope_inv_freq(dim, 10000.0, scaling)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)
    assert our_attention == pytest.approx(attention, abs=1e-12)


def test_yarn_mscale_hand_checked():
    # s = 4: (0.1 * 2 ln 4 + 1) / (0.1 * 1 ln 4 + 1)
    expected = (0.2 * math.log(4) + 1) / (0.1 * math.log(4) + 1)
    scaling = params("yarn", 4, mscale=2.0, mscale_all_dim=1.0)
    assert rope_inv_freq(16, 10000.0, scaling)[1] == pytest.approx(expected, abs=1e-12)
    # truncate=False moves the ramp's ends off whole dimensions: pair 1 (of 8) changes
    # (the ramp starts at d = 16 ln(64 / (32 * 2 pi)) / (2 ln 10000) < 0, so at 0 either way,
    # and ends at 16 ln(64 / (2 pi)) / (2 ln 10000) = 2.018..., ceil 3)
    whole = rope_inv_freq(16, 10000.0, params("yarn", 4))[0]
    fractional = rope_inv_freq(16, 10000.0, params("yarn", 4, truncate=False))[0]
    high = 16 * math.log(64 / (2 * math.pi)) / (2 * math.log(10000.0))
    omega = 10000.0 ** (-2 / 16)
    keep = 1 - 1 / high  # pair 1: ramp (1 - 0) / (high - 0)
    assert fractional[1].item() == pytest.approx(omega / 4 * (1 - keep) + omega * keep, rel=1e-6)
    assert whole[1].item() == pytest.approx(omega / 4 * (1 / 3) + omega * (2 / 3), rel=1e-6)


@pytest.mark.parametrize("factor", [1, 2, 4, 16])
@pytest.mark.parametrize("seq_len", [None, 10, 64, 65, 1000])
def test_longrope_equals_hugging_face(factor, seq_len):
    scaling = params("longrope", factor, short_factor=SHORT, long_factor=LONG)
    expected, attention = hugging_face("longrope", 16, scaling, seq_len)
    ours, our_attention = rope_inv_freq(16, 10000.0, scaling, seq_len)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)
    assert our_attention == pytest.approx(attention, abs=1e-12)
    given = {**scaling, "attention_factor": 1.25}
    assert (
        rope_inv_freq(16, 10000.0, given, seq_len)[1]
        == hugging_face("longrope", 16, given, seq_len)[1]
    )


def test_longrope_hand_checked():
    scaling = params("longrope", 4, short_factor=SHORT, long_factor=LONG)
    omega = [10000.0 ** (-2 * i / 16) for i in range(8)]
    short, attention = rope_inv_freq(16, 10000.0, scaling, 64)  # up to L: the short factors
    long = rope_inv_freq(16, 10000.0, scaling, 65)[0]
    torch.testing.assert_close(
        short, torch.tensor([w / r for w, r in zip(omega, SHORT, strict=True)])
    )
    torch.testing.assert_close(
        long, torch.tensor([w / r for w, r in zip(omega, LONG, strict=True)])
    )
    assert attention == pytest.approx(math.sqrt(1 + math.log(4) / math.log(64)))


@pytest.mark.parametrize("dim", [16, 32, 128])
@pytest.mark.parametrize("p", [0.0, 0.25, 0.3, 0.5, 0.75, 1.0])
@pytest.mark.parametrize("factor", [1.0, 4.0])
def test_p_rope_equals_hugging_face_proportional(dim, p, factor):
    """HF ``proportional`` divides by ``factor`` too: with ``linear`` scaling, ours is the same."""
    expected = hugging_face(
        "proportional", dim, {"rope_type": "proportional", "factor": factor}, rotary=p
    )[0]
    scaling = None if factor == 1 else params("linear", factor)
    ours = proportional(rope_inv_freq(dim, 10000.0, scaling)[0], p)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-7)


def test_p_rope_keeps_the_highest_frequencies(make_model):
    # p = 0.5 of 4 pairs (Dh = 8): omega = 1, 0.1 kept, 0.01 and 0.001 set to 0
    torch.testing.assert_close(
        proportional(rope_frequencies(8), 0.5), torch.tensor([1.0, 0.1, 0.0, 0.0])
    )
    scheme = make_model("rope", options={"rope": {"p": 0.5}}).position
    q = torch.randn(1, 4, 9, 8, generator=torch.Generator().manual_seed(0))
    out = scheme.layer(0, q, q, scheme.prepare(None, 9)).q
    rotated = rotate_pairs(q, [1.0, 0.1, 0.0, 0.0])
    torch.testing.assert_close(out, rotated, rtol=0, atol=1e-6)
    for pair in (2, 3):  # pairs (2, 6) and (3, 7) pass through
        assert torch.equal(out[..., pair], q[..., pair]) and torch.equal(
            out[..., pair + 4], q[..., pair + 4]
        )


def rotate_pairs(x, omegas):
    """Half-split RoPE written out: pair ``(i, i + Dh/2)`` at position ``t`` by ``t * omega_i``."""
    out = x.clone()
    half = len(omegas)
    for t in range(x.shape[-2]):
        for i, w in enumerate(omegas):
            c, s = math.cos(t * w), math.sin(t * w)
            a, b = x[..., t, i], x[..., t, i + half]
            out[..., t, i], out[..., t, i + half] = a * c - b * s, b * c + a * s
    return out


def test_p_rope_at_one_is_rope_and_at_zero_is_nope(make_model):
    idx = torch.randint(0, 16, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        rope = make_model("rope", strong=True)(idx)
        one = make_model("rope", strong=True, options={"rope": {"p": 1.0}})(idx)
        zero = make_model("rope", strong=True, options={"rope": {"p": 0.0}})(idx)
        nope = make_model("none", strong=True)(idx)
    assert torch.equal(one, rope)
    torch.testing.assert_close(zero, nope, rtol=0, atol=1e-5)


def test_longrope_model_switches_factors_past_the_original_length(make_model):
    options = {
        "original_max_position": 8,
        "scaling": "longrope",
        "scaling_factor": 4.0,
        "short_factor": SHORT[:4],
        "long_factor": LONG[:4],
    }
    model = make_model("rope", strong=True, options={"rope": options})
    assert model.position.score_scale == pytest.approx(1 + math.log(4) / math.log(8))
    omega = rope_frequencies(8)
    short = model.position.prepare(None, 8)[0][5]  # cos at position 5
    torch.testing.assert_close(short, (5 * omega / torch.tensor(SHORT[:4])).cos())
    long = model.position.prepare(None, 12)[0][5]
    torch.testing.assert_close(long, (5 * omega / torch.tensor(LONG[:4])).cos())


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"p": 1.5}, r"p=1.5 is invalid; it must be in \[0, 1\]"),
        ({"mscale": -1.0}, r"mscale=-1.0 is invalid; it must be >= 0"),
        ({"short_factor": [1.0, -2.0]}, r"short_factor=\[1.0, -2.0\] is invalid"),
        (
            {"short_factor": [1.0] * 4},
            r"short_factor and long_factor are LongRoPE's: give both exactly",
        ),
    ],
)
def test_bad_extension_options_are_one_line(values, message, make_model):
    with pytest.raises(ValueError, match=r"model\.options\.rope\." + message):
        make_model("rope", options={"rope": values})


def test_longrope_factors_must_fit_the_rotated_width(make_model):
    options = {"scaling": "longrope", "scaling_factor": 2.0, "original_max_position": 8}
    with pytest.raises(ValueError, match="longrope needs short_factor with 4 positive numbers"):
        make_model(
            "rope",
            options={"rope": {**options, "short_factor": [1.0] * 3, "long_factor": [1.0] * 4}},
        )
