"""On a CUDA device, every scheme computes what it computes on the CPU: fp32 logits agree to
float rounding, bf16 autocast stays close, and the blocked long-sequence attention path agrees
too. Skipped where no CUDA device is present (CI); run on a GPU machine with
``pytest tests/test_cuda.py``."""

import pytest
import torch

from model.position import available_schemes

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")


@pytest.mark.parametrize("scheme", available_schemes())
@pytest.mark.parametrize("length", [40, 300])  # 300 > 256: bias schemes attend in query blocks
def test_cuda_logits_equal_cpu_logits(scheme, length, make_model, monkeypatch):
    # CUDA's blocks hold 128 queries here (CoPE's 256), the CPU's 256: other windows, same logits
    monkeypatch.setattr("model.blocked_attention.CUDA_BLOCK_PAIRS", 128 * length)
    model = make_model(scheme, strong=True, max_positions=length)
    idx = torch.randint(0, 16, (2, length), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(idx)  # (B, T, V) float32 on the CPU
        on_gpu = model.to(CUDA)
        got = on_gpu(idx.to(CUDA)).cpu()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            low = on_gpu(idx.to(CUDA)).float().cpu()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    # bf16 keeps 8 bits of mantissa: logits of unit scale move by a few hundredths
    assert (low - expected).abs().max().item() < 0.25


@pytest.mark.parametrize("scheme", ["none", "rope", "alibi", "fire", "cope"])
def test_cuda_gradients_equal_cpu_gradients(scheme, make_model):
    """The loss and every weight's gradient of one training batch agree across devices."""
    idx = torch.randint(0, 16, (4, 33), generator=torch.Generator().manual_seed(2))
    grads = []
    for device in ("cpu", "cuda"):
        model = make_model(scheme, strong=True).to(device).train()
        batch = idx.to(device)
        logits = model(batch[:, :-1])  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        loss.backward()
        grads.append({name: p.grad.cpu() for name, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name, expected in grads[0].items():
        torch.testing.assert_close(grads[1][name], expected, rtol=1e-3, atol=1e-5, msg=name)
