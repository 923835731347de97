"""Issue 24, items 4-6: KERPLE stays trainable at its bound, and results that must hold on any
CPU (values compared with tolerances from the math, never one machine's rounding).

KERPLE's expected gradients are written out from the formula ``-r1 log(1 + r2 |i - j|)`` at the
reference code's reset values (chijames/KERPLE ``ParallelKerpleLog.forward`` sets the
parameters' data to ``max(value, eps)`` before use), one sum at a time in Python floats.
"""

import math

import pytest
import torch
from torch import nn

from model.position.kerple import kerple_log_bias

EPS = 1e-2
R1 = [1.0, -0.5, 0.005, 1.0]  # entries 1 and 2 below eps
R2 = [0.5, 0.5, 0.5, -0.2]  # entry 3 below eps
T = 6


def window(t: int) -> list[int]:
    """``|i - j|`` over a ``t x t`` window."""
    return [abs(i - j) for i in range(t) for j in range(t)]


def reference_gradients(r1: list[float], r2: list[float], distances: list[int]) -> tuple:
    """Gradients of ``sum_d -r1[h] log(1 + r2[h] d)`` over ``distances`` after the reference's
    reset ``r <- max(r, eps)``: ``d/dr1 = -sum log(1 + r2 d)``, ``d/dr2 = -r1 sum d / (1 + r2 d)``.
    """
    g1, g2 = [], []
    for a, b in zip(r1, r2, strict=True):
        a, b = max(a, EPS), max(b, EPS)
        g1.append(-sum(math.log1p(b * d) for d in distances))
        g2.append(-a * sum(d / (1 + b * d) for d in distances))
    return g1, g2


def kerple_at(make_model, r1: list[float], r2: list[float]):
    """A tiny kerple model whose ``r1, r2`` are set to the given values."""
    model = make_model("kerple")
    with torch.no_grad():
        model.position.r1.copy_(torch.tensor(r1))
        model.position.r2.copy_(torch.tensor(r2))
    return model


def test_reference_gradients_are_the_issue_figures():
    g1, g2 = reference_gradients(R1, R2, window(T))
    assert g1[1] == pytest.approx(-22.0, abs=5e-3)  # -21.9975
    assert g1[2] == pytest.approx(-22.0, abs=5e-3)
    assert g2[3] == pytest.approx(-68.0, abs=5e-2)  # -67.9714


def test_kerple_gradient_at_a_clamped_entry_is_the_references(make_model):
    scheme = kerple_at(make_model, R1, R2).position
    scheme.prepare(None, T)  # what every forward pass does first
    scheme.score_bias(None, T).sum().backward()
    g1, g2 = reference_gradients(R1, R2, window(T))
    # float32 sums of 36 terms of magnitude <= 3: relative error well under 1e-5
    torch.testing.assert_close(scheme.r1.grad, torch.tensor(g1), rtol=1e-5, atol=0)
    torch.testing.assert_close(scheme.r2.grad, torch.tensor(g2), rtol=1e-5, atol=0)
    assert (scheme.r1.grad[1:3] != 0).all() and scheme.r2.grad[3] != 0
    assert scheme.r1.tolist() == pytest.approx([1.0, EPS, EPS, 1.0])  # data reset in place
    assert scheme.r2.tolist() == pytest.approx([0.5, 0.5, 0.5, EPS])


def test_a_forward_pass_resets_and_trains_the_clamped_entries(make_model):
    model = kerple_at(make_model, R1, R2)
    before = model.position.r2.detach().clone()
    model(torch.randint(0, 16, (2, 9))).square().mean().backward()
    assert model.position.r1.min().item() == pytest.approx(EPS)  # reset, not left at -0.5
    assert model.position.r2[3].item() == pytest.approx(EPS)
    assert (model.position.r1.grad[1:3] != 0).all() and model.position.r2.grad[3] != 0
    torch.optim.SGD(model.position.parameters(), lr=1e-3).step()
    assert model.position.r2[3].item() != before[3].item()  # it moves (from eps)


def test_entries_above_eps_give_the_plain_formula_bit_for_bit(make_model):
    """Where no entry is below eps the reset and clamp change nothing, in values and
    gradients: the same float ops as the unclamped formula, so equal on any CPU."""
    r1, r2 = [1.3, 0.2, 1.9, EPS], [0.7, EPS, 0.05, 0.9]
    scheme = kerple_at(make_model, r1, r2).position
    scheme.prepare(None, 7)
    ours = scheme.score_bias(None, 7)
    ours.sum().backward()
    plain_r1 = torch.tensor(r1, requires_grad=True)
    plain_r2 = torch.tensor(r2, requires_grad=True)
    distance = (torch.arange(7.0)[:, None] - torch.arange(7.0)[None]).unsqueeze(0)
    plain = kerple_log_bias(plain_r1, plain_r2, distance)
    plain.sum().backward()
    assert torch.equal(ours, plain)
    assert torch.equal(scheme.r1.grad, plain_r1.grad)
    assert torch.equal(scheme.r2.grad, plain_r2.grad)


class KerpleForward(nn.Module):
    """The scheme's per-forward calls (prepare, then score_bias twice as the Toeplitz path
    does), as one module to compile."""

    def __init__(self, scheme: nn.Module) -> None:
        super().__init__()
        self.scheme = scheme

    def forward(self, t: int) -> torch.Tensor:
        self.scheme.prepare(None, t)
        last = self.scheme.score_bias(None, t, slice(t - 1, t))
        return self.scheme.score_bias(None, t).sum() + last.sum()


def test_the_reset_compiles_to_one_graph_and_trains(make_model):
    torch._dynamo.reset()
    scheme = kerple_at(make_model, R1, R2).position
    compiled = torch.compile(KerpleForward(scheme), fullgraph=True, backend="aot_eager")
    compiled(T).backward()
    # the full window plus the last query's row (distances T-1 .. 0)
    g1, g2 = reference_gradients(R1, R2, window(T) + list(range(T)))
    torch.testing.assert_close(scheme.r1.grad, torch.tensor(g1), rtol=1e-5, atol=0)
    torch.testing.assert_close(scheme.r2.grad, torch.tensor(g2), rtol=1e-5, atol=0)
    assert scheme.r1.min().item() == pytest.approx(EPS)  # the mutation reached the parameter
