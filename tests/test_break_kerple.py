"""Break tests of KERPLE's reset to its bound: the in-place reset of ``r1``
and ``r2`` must not bump their autograd version, or a second forward pass before ``backward``
fails although no value changed."""

import pytest
import torch

EPS = 1e-2
R1 = [1.0, -0.5, 0.005, 1.0]  # entries 1 and 2 below eps
R2 = [0.5, 0.5, 0.5, -0.2]  # entry 3 below eps


def kerple_at(make_model, r1: list[float], r2: list[float]):
    model = make_model("kerple").train()
    with torch.no_grad():
        model.position.r1.copy_(torch.tensor(r1))
        model.position.r2.copy_(torch.tensor(r2))
    return model


def test_two_forward_passes_then_one_backward(make_model):
    """Two losses from two forward passes, summed: the gradient is the sum of each pass's (it
    failed with "modified by an inplace operation", the reset bumping the version counter)."""
    x = torch.randint(0, 16, (2, 9), generator=torch.Generator().manual_seed(0))
    model = kerple_at(make_model, R1, R2)
    (model(x).square().mean() + model(x).square().mean()).backward()
    summed = [model.position.r1.grad.clone(), model.position.r2.grad.clone()]
    assert model.position.r1.min().item() == pytest.approx(EPS)
    model.zero_grad()
    model(x).square().mean().backward()
    once = [model.position.r1.grad, model.position.r2.grad]
    for two, one in zip(summed, once, strict=True):
        torch.testing.assert_close(two, 2 * one, rtol=1e-6, atol=0)
    assert (once[0][1:3] != 0).all() and once[1][3] != 0  # the reset entries still train


def test_a_no_grad_forward_between_forward_and_backward(make_model):
    """An evaluation under ``no_grad`` (or ``inference_mode``) between a training forward pass
    and its ``backward`` leaves that ``backward`` working."""
    x = torch.randint(0, 16, (2, 9), generator=torch.Generator().manual_seed(1))
    model = kerple_at(make_model, R1, R2)
    loss = model(x).square().mean()
    with torch.no_grad():
        model(x)
    with torch.inference_mode():
        model(x)
    loss.backward()
    assert (model.position.r1.grad[1:3] != 0).all() and model.position.r2.grad[3] != 0


def test_an_optimizer_step_between_forward_and_backward_is_still_refused(make_model):
    """The reset hides no real in-place change: weights changed by an optimizer step after a
    forward pass still make its ``backward`` fail, as for any module."""
    x = torch.randint(0, 16, (2, 9), generator=torch.Generator().manual_seed(2))
    model = kerple_at(make_model, R1, R2)
    loss = model(x).square().mean()
    with torch.no_grad():
        model.position.r1.add_(1.0)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()
