"""torch.compile path: a freshly built model of every scheme compiles to one graph (no
``reserve`` first) with the logits and gradients of eager mode; lengths are dynamic, so a new
length within the cached tables does not recompile after a short warm-up (a cache grows only
in eager mode, O(log n) times since tables double, and the graph then recompiles), and compiled
logits equal eager ones; a training step (forward, loss, backward) compiles to one graph that
steps on other batches of its shape reuse. Uses dynamo's
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


@pytest.mark.parametrize("scheme", ["none", "rope", "alibi"])
def test_a_training_step_compiles_to_one_graph_that_every_step_reuses(scheme, make_model):
    """The forward pass and the answer loss of a training step, compiled with
    ``fullgraph=True`` (a graph break would raise), backward through the compiled graph
    (``aot_eager``: autograd's graphs, inductor's guards): six AdamW steps on two batches of
    one shape and different tokens compile once (a recompile would raise) and give the losses
    and weights of eager training."""
    from torch._dynamo.testing import CompileCounterWithBackend

    from data import Batch
    from lab.training.step import answer_loss

    def loss_of(model, batch):
        return answer_loss(model(batch.inputs, prefix_len=batch.answer_start), batch)

    torch._dynamo.reset()
    generator = torch.Generator().manual_seed(0)
    batches = [Batch(torch.randint(0, 16, (4, 14), generator=generator), 8, 6) for _ in "ab"]
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(loss_of, fullgraph=True, backend=counter)
    runs = []
    for step_loss in (compiled, loss_of):
        model = make_model(scheme, strong=True).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for step in range(6):
            with torch._dynamo.config.patch(error_on_recompile=step > 0):
                loss = step_loss(model, batches[step % 2])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        runs.append((losses, [p.detach().clone() for p in model.parameters()]))
    assert counter.frame_count == 1
    (losses, weights), (eager_losses, eager_weights) = runs
    assert losses[0] > losses[-1]  # it trains
    torch.testing.assert_close(losses, eager_losses, rtol=1e-5, atol=1e-5)
    for got, expected in zip(weights, eager_weights, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
