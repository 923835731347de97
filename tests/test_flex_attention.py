"""The FlexAttention path (:mod:`model.flex_attention`) equals SDPA's, and the default path is
untouched on the CPU.

Logits: FlexAttention's public function, eager on the CPU (forward only there), against
``model.attention_kernel=sdpa`` for every scheme it supports, at 37 tokens (SDPA attends at
once) and 300 (SDPA's blocked path), at default positions (a relative bias read from one row
per head) and explicit ones (the scheme's whole bias tensor). Gradients: PyTorch 2.13 has no
FlexAttention backward on the CPU, so the operator itself (``torch._higher_order_ops``, whose
dense reference implementation differentiates on any device) is called with the same
``score_mod``, buffers and block mask that :func:`model.flex_attention.flex_call` hands the
public function; every parameter's gradient matches SDPA's.
"""

import pytest
import torch
from torch._higher_order_ops.flex_attention import flex_attention as flex_operator
from torch.nn.attention.flex_attention import _apply_kernel_options

import model.flex_attention as flex
from model import ModelConfig
from model.position import available_schemes

ATOL, RTOL = 1e-5, 1e-5
"""Float32 logits of the two kernels (measured: at most 3.5e-6 apart, at 300 tokens)."""
GRAD_ATOL, GRAD_RTOL = 2e-6, 1e-4
"""Float32 gradients: ``GRAD_ATOL`` is relative to the model's largest gradient entry (up to
200 here). Measured: at most 1.7e-6 of it; the largest differences relative to a parameter's
own gradient are the last bias of FIRE's and dynamic_bias's MLPs, whose gradient is zero in
exact arithmetic (a constant on a whole row of scores cancels in the softmax) and float noise
on both kernels (8.5e-5 against SDPA's 1.9e-5 at 300 tokens)."""

BIASED = ["alibi", "t5", "kerple", "fire", "dynamic_bias"]
"""Schemes with a shared score bias (``shared_bias``)."""
VARIANTS = [(name, {}) for name in BIASED] + [
    ("t5", {"t5": {"per_layer": True}}),  # each layer's own bias, from the ``layer`` hook
    ("alibi", {"alibi": {"learned_slopes": True}}),
]


def pair(make_model, scheme, **overrides):
    """The same weights with ``sdpa`` and ``flex`` kernels, in train mode (dropout is 0)."""
    sdpa = make_model(scheme, strong=True, attention_kernel="sdpa", **overrides)
    other = make_model(scheme, strong=True, attention_kernel="flex", **overrides)
    other.load_state_dict(sdpa.state_dict())
    return sdpa.train(), other.train()


def reference_flex(q, k, v, modifier, buffers, mask, scale):
    """:func:`model.flex_attention.flex_call` through FlexAttention's operator, which has a
    backward on the CPU; ``buffers`` are passed as the operator's score_mod buffers, as
    ``torch.compile`` passes the tensors a ``score_mod`` reads."""
    options = _apply_kernel_options(q, k, v, False, None)
    options["OUTPUT_LOGSUMEXP"] = True  # what the backward needs
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    modifier = modifier or (lambda score, b, h, q_idx, kv_idx: score)
    out, _, _ = flex_operator(q, k, v, modifier, mask.as_tuple(), scale, options, buffers, ())
    return out


def logits_and_grads(model, idx, positions=None, prefix=None):
    model.zero_grad(set_to_none=True)
    logits = model(idx, positions=positions, prefix_len=prefix)
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))
    (logits * weights).sum().backward()
    return logits.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def tokens(length, batch=2):
    return torch.randint(0, 16, (batch, length), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(("scheme", "options"), VARIANTS)
@pytest.mark.parametrize("length", [37, 300])
@pytest.mark.parametrize("explicit", [False, True])
def test_flex_logits_equal_sdpa(scheme, options, length, explicit, make_model):
    sdpa, other = pair(make_model, scheme, options=options)
    idx = tokens(length)
    positions = torch.arange(length) + 3 if explicit else None
    with torch.no_grad():
        expected = sdpa(idx, positions=positions)
        got = other(idx, positions=positions)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize(("scheme", "options"), VARIANTS)
@pytest.mark.parametrize("length", [37, 300])
def test_flex_gradients_equal_sdpa(scheme, options, length, make_model, monkeypatch):
    sdpa, other = pair(make_model, scheme, options=options)
    idx = tokens(length)
    expected, expected_grads = logits_and_grads(sdpa, idx)
    monkeypatch.setattr(flex, "flex_call", reference_flex)
    got, grads = logits_and_grads(other, idx)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=RTOL)
    assert grads.keys() == expected_grads.keys()
    atol = GRAD_ATOL * max(float(grad.abs().max()) for grad in expected_grads.values())
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], atol=atol, rtol=GRAD_RTOL)


@pytest.mark.parametrize("scheme", available_schemes())
def test_every_scheme_equals_sdpa_or_is_refused_in_one_line(scheme, make_model):
    """A scheme FlexAttention cannot run (its weights replace softmax, or it builds a
    per-layer bias from q and k window by window) is refused when the model is built."""
    sdpa = make_model(scheme)
    if scheme == "stickbreaking" or sdpa.position.windowed_layer_bias:
        with pytest.raises(ValueError, match=r"^model.attention_kernel='flex' does not support"):
            make_model(scheme, attention_kernel="flex")
        return
    sdpa, other = pair(make_model, scheme)
    idx = tokens(37)
    with torch.no_grad():
        torch.testing.assert_close(other(idx), sdpa(idx), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize(
    ("causal", "prefix", "window"), [(False, None, None), (False, 9, None), (True, None, 7)]
)
def test_masking_rules_equal_sdpa(causal, prefix, window, make_model):
    """Bidirectional, a prefix LM and a sliding window: the block mask is
    :func:`model.mask.blocked`'s rule."""
    sdpa, other = pair(make_model, "alibi", causal=causal, window=window)
    idx = tokens(300)
    with torch.no_grad():
        expected = sdpa(idx, prefix_len=prefix)
        got = other(idx, prefix_len=prefix)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=RTOL)


def test_whole_mask_for_analysis_is_sdpas(make_model):
    """The mask an analysis asks a layer for is SDPA's whole mask, on either kernel."""
    masks = []
    for model in pair(make_model, "kerple", causal=False):
        contexts = model._contexts(None, 1, 20, 5, torch.device("cpu"), torch.float32)
        masks.append(contexts[0].layer_mask(torch.zeros(1, 4, 20, 8), None))
    assert masks[1].shape == (1, 4, 20, 20)
    assert torch.equal(masks[0], masks[1])


@pytest.mark.parametrize("scheme", ["none", "rope", "alibi", "fire"])
def test_auto_is_sdpa_on_the_cpu(scheme, make_model):
    """``auto`` takes no FlexAttention path on the CPU, so its logits are SDPA's (the default's)
    bit for bit, at once and block by block."""
    auto = make_model(scheme, strong=True, attention_kernel="auto")
    assert make_model(scheme).config.attention_kernel == "sdpa"
    sdpa = make_model(scheme, strong=True, attention_kernel="sdpa")
    for length in (37, 300):
        contexts = auto._contexts(None, 2, length, None, torch.device("cpu"), torch.float32)
        assert all(context.flex is None for context in contexts)
        with torch.no_grad():
            assert torch.equal(auto(tokens(length)), sdpa(tokens(length)))


def test_auto_takes_flex_on_cuda_only_where_sdpa_needs_a_mask(make_model):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    nope, alibi = make_model("none"), make_model("alibi")

    def chooses(model, device, prefix=None, window=None, training=False, dropout=0.0):
        scheme = model.position
        return flex.chooses_flex("auto", scheme, device, prefix, window, training, dropout)

    assert chooses(alibi, cuda) and chooses(nope, cuda, prefix=5) and chooses(nope, cuda, window=8)
    assert not chooses(alibi, cpu) and not chooses(nope, cuda)  # SDPA's fused causal path
    assert not chooses(alibi, cuda, training=True, dropout=0.1)  # no attention dropout
    assert not chooses(make_model("cope"), cuda)
    assert chooses(alibi, cuda, training=True)


def test_training_with_flex_on_the_cpu_is_one_line(make_model):
    model = make_model("alibi", attention_kernel="flex").train()
    with pytest.raises(ValueError, match=r"^model.attention_kernel='flex' cannot train on cpu"):
        model(tokens(12)).sum().backward()


def test_dropout_in_training_with_flex_is_one_line(make_model):
    model = make_model("alibi", attention_kernel="flex", dropout=0.1).train()
    with pytest.raises(ValueError, match=r"^model.attention_kernel='flex' does not support "):
        model(tokens(12))
    with torch.no_grad():
        assert model.eval()(tokens(12)).shape == (2, 12, 16)  # evaluation has no dropout


@pytest.mark.parametrize(
    ("scheme", "message"),
    [("cope", "a per-layer bias built from q and k"), ("stickbreaking", "weights replace")],
)
def test_unsupported_schemes_are_refused_in_one_line(scheme, message, make_model):
    refused = rf"^model.attention_kernel='flex' does not support .*{message}"
    with pytest.raises(ValueError, match=refused):
        make_model(scheme, attention_kernel="flex")


def test_bad_kernel_names_the_allowed_ones():
    allowed = r"attention_kernel='triton' is invalid; it must be one of auto, sdpa, flex$"
    with pytest.raises(ValueError, match=allowed):
        ModelConfig(attention_kernel="triton")


def test_relative_row_holds_the_bias_at_every_distance(make_model):
    model = make_model("t5", strong=True)
    t = 23
    row = flex.relative_row(model.position, t)  # (H, 2T - 1)
    whole = model.position.score_bias(None, t)[0]  # (H, T, T)
    i, j = torch.meshgrid(torch.arange(t), torch.arange(t), indexing="ij")
    assert torch.equal(row[:, t - 1 - i + j], whole)


def test_compiled_flex_reuses_its_graph_for_new_closures_and_lengths():
    """As the CUDA path compiles FlexAttention (dynamic shapes by default; dynamo's ``eager``
    backend here): each forward pass's new ``score_mod`` closure over new bias tensors reuses
    the graph of its length, and new lengths compile a few times, not once each (the default
    limit of 8 recompiles would otherwise fall back to the unfused reference)."""
    from torch._dynamo.testing import CompileCounter
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(flex_attention, backend=counter)
    generator, calls = torch.Generator().manual_seed(0), 0
    with torch.no_grad():
        for t in (40, 40, 40, 57, 57, 90, 130, 200, 260, 333, 40):
            q, k, v = torch.randn(3, 2, 4, t, 8, generator=generator)
            row, full = torch.randn(4, 2 * t - 1), torch.randn(1, 4, t, t)
            modifier, buffers = flex.score_mod([(flex.add_row, row), (flex.add_full, full)])
            mask = flex.rule_mask(t, True, None, None, torch.device("cpu"))
            got = compiled(q, k, v, score_mod=flex.close(modifier, buffers), block_mask=mask)
            expected = flex.flex_call(q, k, v, modifier, buffers, mask, None)
            torch.testing.assert_close(got, expected, atol=ATOL, rtol=RTOL)
            calls += 1
            assert counter.frame_count == 1 or calls > 3  # three closures at 40 tokens: one graph
    assert counter.frame_count <= 3  # measured: 40, then dynamic, then past 128 (two blocks)
