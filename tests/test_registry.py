"""Properties every registered scheme must have, checked by iterating the registry: a scheme
added to :mod:`model.position` gets these tests without anyone editing a list.

Causality, permutation equivariance, shift invariance and fast path vs textbook attention live
in ``test_model.py`` and ``test_fast_paths.py`` and iterate the registry the same way.
"""

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from lab.common.config import (
    ConfigError,
    config_from_dict,
    config_to_dict,
    load_config,
    sequence_tokens,
)
from model import ModelConfig, Transformer
from model.position import available_schemes, scheme_class
from registry import options_dict

SCHEMES = available_schemes()
V = 16


def test_v1_schemes_give_the_logits_recorded_before_the_interface_changed():
    """Same weights, same inputs: the logits of ``tests/v1_logits.pt``, recorded from commit
    8107973 (the three-hook interface) with one thread, causal, bidirectional with a prefix-LM
    mask, and with explicit (B, T) positions."""
    recorded = torch.load("tests/v1_logits.pt")
    idx, shifted = recorded["idx"], recorded["shifted_positions"]
    values = dict(recorded["config"])
    rows = values.pop("max_positions")
    assert len(recorded["runs"]) == 10
    for key, expected in recorded["runs"].items():
        scheme, mode = key.split("/")
        config = ModelConfig(
            **values,
            position=scheme,
            causal=mode == "causal",
            options={"learned": {"max_positions": rows}},
        )
        model = Transformer(config).eval()
        flat, state, start = recorded["weights"][scheme], {}, 0
        for name, shape in recorded["names"][scheme]:
            size = torch.Size(shape).numel()
            state[name] = flat[start : start + size].view(shape)
            start += size
        model.load_state_dict(state)
        with torch.no_grad():
            torch.testing.assert_close(model(idx), expected["default"], rtol=0, atol=1e-5)
            got = model(idx, positions=shifted)
            torch.testing.assert_close(got, expected["shifted"], rtol=0, atol=1e-5)
            if "prefix" in expected:
                got = model(idx, prefix_len=4)
                torch.testing.assert_close(got, expected["prefix"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("randomized", [0, 64])
def test_path_attributes_say_what_the_hooks_return(scheme, randomized, make_model):
    """``shared_bias``, ``fixed_bias``, ``windowed_layer_bias``, ``widens_heads`` and
    ``replaces_softmax`` choose the attention path or check a layout without calling a hook:
    they must say what the hooks return, at default and explicit positions, causal and (where
    supported) bidirectional, with T5's ``per_layer`` (an option that decides it), and around
    randomized positions."""
    t = 9
    variants = [{"causal": True}]
    if scheme_class(scheme).bidirectional:
        variants.append({"causal": False})
    if scheme == "t5":
        variants.append({"options": {"t5": {"per_layer": True}}})
    for overrides in variants:
        position = make_model(scheme, randomized_positions=randomized, **overrides).position
        q, k = torch.randn(2, 2, 4, t, 8).unbind(0)  # (B, H, T, Dh) each
        for positions in (None, torch.arange(t) + 2, torch.arange(2 * t).view(2, t)):
            with torch.no_grad():
                bias = position.score_bias(positions, t)
                scores = position.layer(0, q, k, position.prepare(positions, t))
            assert position.shared_bias == (bias is not None), (overrides, positions)
            assert position.windowed_layer_bias == (scores.window is not None), overrides
            assert position.widens_heads == (scores.q.shape[-1] > q.shape[-1]), overrides
            assert position.replaces_softmax == (scores.weights is not None), overrides
        if position.fixed_bias:  # a fixed function of T: a shared bias without parameters
            assert position.shared_bias and not list(position.parameters())


@pytest.mark.parametrize("scheme", SCHEMES)
def test_training_step_changes_every_learnable_parameter(scheme, make_model):
    model = make_model(scheme).train()
    before = {n: p.detach().clone() for n, p in model.position.named_parameters()}
    idx = torch.randint(0, V, (4, 10), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)  # no weight decay: only gradients
    loss = F.cross_entropy(model(idx)[:, :-1].reshape(-1, V), idx[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    for name, param in model.position.named_parameters():
        assert param.grad is not None and param.grad.abs().max() > 0, f"{scheme}: {name} no grad"
        assert (param.detach() - before[name]).abs().max() > 0, f"{scheme}: {name} unchanged"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_checkpoint_round_trip(scheme, make_model, tmp_path):
    model = make_model(scheme, strong=True)
    idx = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(1))
    path = tmp_path / "model.pt"
    torch.save({"config": config_to_dict_model(model.config), "model": model.state_dict()}, path)
    saved = torch.load(path)
    again = Transformer(ModelConfig(**saved["config"])).eval()
    again.load_state_dict(saved["model"])
    with torch.no_grad():
        assert torch.equal(again(idx), model(idx))


def config_to_dict_model(config: ModelConfig) -> dict:
    """The model section as the run config saves it (every option of the scheme filled in)."""
    return {f: getattr(config, f) for f in config.__dataclass_fields__}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_saved_config_holds_every_option(scheme):
    config = load_config(None, [f"model.position={scheme}"])
    saved = config_to_dict(config)["model"]["options"][scheme]
    defaults = scheme_class(scheme).Options()
    tokens = sequence_tokens(config.data.build_task(), config.data.train_max_length)
    expected = options_dict(defaults)  # its fields, not class constants such as maxima
    assert saved == scheme_class(scheme).with_training_context(expected, tokens)
    assert config_from_dict(config_to_dict(config)).model == config.model


@pytest.mark.slow
@pytest.mark.parametrize("scheme", SCHEMES)
def test_compiles_to_one_graph(scheme, make_model):
    """``torch.compile(fullgraph=True)``: no graph break, so no host sync in forward; after
    ``reserve`` no cache grows inside the graph, and new lengths do not recompile."""
    torch._dynamo.reset()
    model = make_model(scheme, strong=True)
    model.reserve(64)
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend="eager")
    with torch.no_grad():
        for length in (40, 23):  # warm-up: a first length gets specialised, a second undoes it
            compiled(torch.randint(0, V, (2, length)))
        with torch._dynamo.config.patch(error_on_recompile=True):
            for length in (7, 19, 33):
                idx = torch.randint(0, V, (2, length))
                torch.testing.assert_close(compiled(idx), model(idx), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("model.rope_theta=5", "model.options.rope.theta"),
        ("model.max_positions=5", "model.options.learned.max_positions"),
        ("model.sinusoidal_base=5", "model.options.sinusoidal.base"),
        ("model.sinusoidal_scale=5", "model.options.sinusoidal.scale"),
    ],
)
def test_old_keys_name_their_new_place(old, new):
    with pytest.raises(
        ConfigError, match=rf"^config key '{old.split('=')[0]}' was renamed; use {new} instead$"
    ):
        load_config(None, [old])


def test_runs_saved_with_old_keys_still_load():
    saved = config_to_dict(load_config(None, []))
    model = {k: v for k, v in saved["model"].items() if k != "options"}
    saved["model"] = {**model, "max_positions": 77, "rope_theta": 500.0, "sinusoidal_scale": 1.0}
    config = config_from_dict(saved)
    assert config.model.options["rope"]["theta"] == 500.0
    assert config.model.options["learned"] == {"max_positions": 77}
    assert config.model.options["sinusoidal"]["scale"] == 1.0
