"""torch.compile path: lengths are dynamic, so a new length within the cached tables does not
recompile after a short warm-up (growing a cache does, O(log n) times, since tables double),
and compiled logits equal eager ones. Uses dynamo's ``eager`` backend: the guards
that decide recompilation are the same as with inductor, without minutes of code generation."""

import pytest
import torch
import torch._dynamo

from model.position import available_schemes


@pytest.mark.slow
@pytest.mark.parametrize("scheme", available_schemes())
def test_new_lengths_do_not_recompile(scheme, make_model):
    torch._dynamo.reset()
    model = make_model(scheme)
    compiled = torch.compile(model, dynamic=True, backend="eager")
    with torch.no_grad():
        # warm-up: the caches grow from empty (one recompile), and a first length equal to the
        # cache size gets specialised ("duck sizing"), which a second length undoes
        for length in (40, 40, 23):
            compiled(torch.randint(0, 16, (2, length)))
        with torch._dynamo.config.patch(error_on_recompile=True):
            for length in (7, 19, 33):
                idx = torch.randint(0, 16, (2, length))
                torch.testing.assert_close(compiled(idx), model(idx), rtol=1e-5, atol=1e-5)
