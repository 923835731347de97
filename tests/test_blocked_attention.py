"""The blocked path (long sequences with a mask, :mod:`model.blocked_attention`) equals
attending at once.

Block sizes are patched small so that a 37-token sequence takes several blocks of uneven
length; every registered scheme runs causal, bidirectional and as a prefix LM, at default
positions (a relative bias then takes the Toeplitz view) and at explicit ones (masks built
per window), and the logits and every parameter's gradient match the unblocked path.
"""

import math

import pytest
import torch

from model.attention import SelfAttention
from model.blocked_attention import (
    BLOCK_PAIRS,
    BLOCK_ROWS,
    CUDA_BLOCK_PAIRS,
    block_rows,
    query_blocks,
    toeplitz_mask,
)
from model.mask import blocked
from model.position import available_schemes, scheme_class

# blocks of 5 queries (Toeplitz view), 80 // 37 = 2 (per window) or 80 // (2 * 37) = 1 (CoPE's
# per-layer windows of a batch of 2)
T, ROWS, PAIRS = 37, 5, 80

CASES = [
    (scheme, causal, prefix)
    for scheme in available_schemes()
    for causal in (True, False)
    if causal or scheme_class(scheme).bidirectional
    for prefix in ((None,) if causal else (None, 6))
]


def logits_and_grads(model, idx, positions, prefix):
    """Logits of one forward pass and the gradient of a fixed weighted sum of them."""
    model.zero_grad(set_to_none=True)
    logits = model(idx, positions=positions, prefix_len=prefix)
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))
    (logits * weights).sum().backward()
    return logits.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(("scheme", "causal", "prefix"), CASES)
@pytest.mark.parametrize("explicit", [False, True])
def test_blocked_path_equals_attending_at_once(
    scheme, causal, prefix, explicit, make_model, monkeypatch
):
    model = make_model(scheme, causal=causal, strong=True)
    idx = torch.randint(0, 16, (2, T), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(T) + 3 if explicit else None
    whole, whole_grads = logits_and_grads(model, idx, positions, prefix)

    calls = []

    def counted(self, q, *args):  # q: (B, H, Tq, Dh)
        calls.append(q.shape[-2])
        return attend(self, q, *args)

    def counted_weights(self, scores, *args):  # a scheme's own weights (stick-breaking)
        calls.append(scores.q.shape[-2])
        return attend_weights(self, scores, *args)

    attend, attend_weights = SelfAttention.attend, SelfAttention.attend_weights
    monkeypatch.setattr("model.blocked_attention.BLOCK_ROWS", ROWS)
    monkeypatch.setattr("model.blocked_attention.BLOCK_PAIRS", PAIRS)
    monkeypatch.setattr(SelfAttention, "attend", counted)
    monkeypatch.setattr(SelfAttention, "attend_weights", counted_weights)
    got, grads = logits_and_grads(model, idx, positions, prefix)

    shared = model.position.score_bias(None, T) is not None
    masked = prefix is not None or shared or model.position.windowed_layer_bias
    toeplitz = shared and model.position.relative and not explicit and prefix is None
    rows = ROWS if toeplitz else 1 if model.position.windowed_layer_bias else 2
    last = [T % rows] if T % rows else []  # a shorter last block, if any
    expected = [rows] * (T // rows) + last if masked else [T]
    assert calls == expected * model.config.n_layers
    torch.testing.assert_close(got, whole, rtol=0, atol=1e-5)
    assert grads.keys() == whole_grads.keys()
    for name, grad in grads.items():  # float32 sums in another order: relative to the scale
        scale = max(whole_grads[name].abs().max().item(), 1.0)  # some are 0 but for rounding
        assert (grad - whole_grads[name]).abs().max() <= 1e-5 * scale, (name, scale)


@pytest.mark.parametrize(("scheme", "causal"), [("t5", False), ("t5", True), ("alibi", True)])
def test_toeplitz_mask_is_the_masked_bias_with_keys_reversed(scheme, causal, make_model):
    position = make_model(scheme, causal=causal, strong=True).position
    with torch.no_grad():
        bias = position.score_bias(None, 9)  # (1, H, 9, 9); T5 bidirectional is not symmetric
        mask = toeplitz_mask(position, 9, causal, torch.float32)
    if causal:
        bias = bias.masked_fill(blocked(9, True, None, torch.device("cpu")), -math.inf)
    assert mask.shape == (1, 4, 9, 9) and mask.untyped_storage().nbytes() == 4 * 4 * 17
    assert torch.equal(mask, bias.flip(-1))


def test_query_blocks_give_each_block_the_keys_it_may_see():
    def spans(blocks):
        return [((q.start, q.stop), (k.start, k.stop)) for q, k in blocks]

    assert spans(query_blocks(7, True, None, 3)) == [
        ((0, 3), (0, 3)),
        ((3, 6), (0, 6)),
        ((6, 7), (0, 7)),
    ]
    assert spans(query_blocks(7, False, 5, 3)) == [
        ((0, 3), (0, 5)),
        ((3, 6), (0, 6)),
        ((6, 7), (0, 7)),
    ]
    assert spans(query_blocks(7, False, None, 4)) == [((0, 4), (0, 7)), ((4, 7), (0, 7))]


def test_block_rows_bound_memory_on_the_cpu_and_launches_on_cuda():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")  # a device name needs no GPU
    assert (BLOCK_ROWS, BLOCK_PAIRS, CUDA_BLOCK_PAIRS) == (256, 2**19, 2**23)
    for device in (cpu, cuda):  # a Toeplitz view is O(T) memory whatever its rows
        assert block_rows(4096, device, toeplitz=True) == 256
    assert block_rows(4096, cpu, False) == 128  # a mask shared by the batch: BLOCK_PAIRS
    assert block_rows(2**20, cpu, False) == 1  # never 0 rows
    # CoPE's per-layer windows on the CPU: BLOCK_PAIRS (row, query, key) triples
    assert [block_rows(4096, cpu, False, layer_rows=b) for b in (1, 2, 8, 512)] == [128, 64, 16, 1]
    # powers of two, so a compiled model shares one graph between batch sizes of a bucket
    assert [block_rows(1024, cpu, False, b) for b in range(1, 9)] == [256] * 2 + [128] * 2 + [
        64
    ] * 4
    assert block_rows(4096, cuda, False, layer_rows=16) == 128  # on CUDA: BLOCK_PAIRS pairs
    assert block_rows(300, cuda, False) == 300  # the whole sequence in one block
    assert block_rows(2048, cuda, False) == 2048
    assert block_rows(4096, cuda, False) == 2048
    assert block_rows(2**24, cuda, False) == 1
    assert block_rows(4096, cpu, True, layer_rows=8, pairs=2**14) == 4  # a fixed budget wins


def test_window_of_the_blocked_mask_is_that_part_of_the_whole():
    whole = blocked(8, False, 3, torch.device("cpu"))  # prefix LM: first 3 tokens see each other
    window = blocked(8, False, 3, torch.device("cpu"), slice(1, 5), slice(0, 6))
    assert torch.equal(window, whole[1:5, :6])
    assert not whole[0, 2] and whole[3, 4] and not whole[4, 3]
