"""torch.compile path: a freshly built model of every scheme compiles to one graph (no
``reserve`` first) with the logits and gradients of eager mode; lengths are dynamic, so a new
length within the cached tables does not recompile after a short warm-up (a cache grows only
in eager mode, O(log n) times since tables double, and the graph then recompiles), and compiled
logits equal eager ones. Uses dynamo's
``eager`` and ``aot_eager`` backends: the graphs and guards are inductor's, without minutes of
code generation."""

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
        model(torch.randint(0, 16, (2, 40)))  # caches grow in eager mode only, here to 40 rows
        # warm-up: a first length equal to the cache size gets specialised ("duck sizing"),
        # which a second length undoes
        for length in (40, 40, 23):
            compiled(torch.randint(0, 16, (2, length)))
        with torch._dynamo.config.patch(error_on_recompile=True):
            for length in (7, 19, 33):
                idx = torch.randint(0, 16, (2, length))
                torch.testing.assert_close(compiled(idx), model(idx), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", available_schemes())
def test_a_fresh_model_compiles_to_one_graph(scheme, make_model):
    """No ``reserve``: a cache that is empty or short is built inside the graph (never grown
    there), so ``fullgraph=True`` holds; forward and backward equal eager mode."""
    torch._dynamo.reset()
    model = make_model(scheme, strong=True).train()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    idx = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(0))
    runs = []
    for forward in (compiled, model):
        model.zero_grad(set_to_none=True)
        logits = forward(idx)
        logits.square().mean().backward()
        runs.append((logits.detach(), [p.grad for p in model.parameters()]))
    (got, got_grads), (expected, grads) = runs
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for got_grad, grad in zip(got_grads, grads, strict=True):
        torch.testing.assert_close(got_grad, grad, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["rope", "sinusoidal", "alibi", "t5"])
def test_training_with_compile_has_no_graph_break(scheme, tmp_path, monkeypatch):
    """``compile=true`` in the trainer: with ``fullgraph=True`` forced on its torch.compile call,
    a graph break would raise; a fresh model (no ``reserve``) trains, evaluates periodically and
    ends with the loss of eager training."""
    from conftest import SHORT, tiny_config

    import lab.training.trainer as trainer

    real = torch.compile

    def strict(model, **kwargs):
        return real(model, **kwargs, fullgraph=True, backend="aot_eager")

    losses = []
    for compile_ in ("true", "false"):
        torch._dynamo.reset()
        monkeypatch.setattr(trainer.torch, "compile", strict)
        run = tmp_path / compile_
        config = tiny_config(run, *SHORT, f"model.position={scheme}", f"compile={compile_}")
        losses.append(trainer.train(config).final_loss)
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-4, atol=1e-5)
