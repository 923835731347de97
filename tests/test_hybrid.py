"""Hybrid layouts (a scheme per layer and per head) and sliding-window attention: the uniform
layout equals the scheme alone, each layer and head gets its own scheme, the window hides what
it should on both attention paths, and bad layouts stop in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from lab.common.config import ConfigError, config_from_dict, config_to_dict, load_config
from lab.evaluation.attention_maps import attention_maps
from lab.evaluation.labels import scheme_label
from lab.reporting.tables import CSV_COLUMNS, csv_rows
from lab.sweeps.sweep import expand, load_sweep, run_identity
from model import ModelConfig, Transformer, blocked_attention
from model.layout import layout_label, resolve_layout
from model.position import (
    PositionScheme,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    available_schemes,
    scheme_class,
)
from model.position.layout import LayeredPositions

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def model_of(seed: int = 0, **values) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(ModelConfig(**values)).eval()


def tokens(t: int, seed: int = 1, b: int = 2) -> torch.Tensor:
    return torch.randint(0, 64, (b, t), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------
# No layout, or a layout of one scheme everywhere, is that scheme alone
# ---------------------------------------------------------------------------------------------


def composite_of(scheme: str) -> Transformer:
    """A one-member composite of ``scheme`` on every layer and head, as runs saved before a
    layout of one scheme everywhere became that scheme alone were built (seed 0)."""
    config = ModelConfig(position=scheme)
    config._layers = resolve_layout(scheme, config.n_layers, config.n_heads)
    config._member_options = {scheme: config.scheme_options}
    torch.manual_seed(0)
    return Transformer(config).eval()


@pytest.mark.parametrize("scheme", available_schemes())
def test_a_composite_of_one_scheme_everywhere_equals_the_scheme_alone_bit_for_bit(scheme):
    """The composite around one member X draws the same weights and gives the very same logits
    as ``position=X``; a plain model loads its saved weights (old runs of such a layout)."""
    plain = model_of(position=scheme)
    hybrid = composite_of(scheme)
    assert isinstance(hybrid.position, LayeredPositions)
    mine, theirs = hybrid.state_dict(), plain.state_dict()
    assert [v.shape for v in mine.values()] == [v.shape for v in theirs.values()]
    assert all(torch.equal(a, b) for a, b in zip(mine.values(), theirs.values(), strict=True))
    idx = tokens(12)
    assert torch.equal(hybrid(idx), plain(idx))
    idx = tokens(300, b=1)  # the blocked path where X has a bias
    assert torch.equal(hybrid(idx), plain(idx))
    other = model_of(seed=5, position=scheme)
    other.load_state_dict(mine)  # position.members.X_4.* read as position.*
    assert torch.equal(other(idx), plain(idx))


@pytest.mark.parametrize("scheme", ["none", "alibi", "t5"])
def test_a_layout_of_one_scheme_under_the_default_position_is_that_scheme_alone(scheme):
    """``model.layout=X,X,X`` (position left at rope) runs X alone and says so: the config's
    position, the model, its parameter names and its logits are X's."""
    config = ModelConfig(layout=",".join([scheme] * 3))
    assert config.position == scheme and config.layers is None
    hybrid, plain = model_of(layout=",".join([scheme] * 3)), model_of(position=scheme)
    assert list(hybrid.state_dict()) == list(plain.state_dict())
    assert torch.equal(hybrid(tokens(12)), plain(tokens(12)))


def test_no_layout_key_builds_the_scheme_itself_with_its_parameter_names():
    for values in ({}, {"layout": "rope,rope,rope"}, {"heads": "rope:4"}):
        model = model_of(**values)
        assert type(model.position).__name__ == "RotaryPosition"
        assert ModelConfig(**values).layers is None
    names = list(model_of(position="t5", layout="t5,t5,t5").state_dict())
    assert names == list(model_of(position="t5").state_dict())


# ---------------------------------------------------------------------------------------------
# Each layer and head gets its own scheme
# ---------------------------------------------------------------------------------------------


def layer_qk(model: Transformer, index: int, t: int = 10):
    q, k = torch.randn(2, 2, 4, t, 16, generator=torch.Generator().manual_seed(3))
    state = model.position.prepare(None, t)
    return q, k, model.position.layer(index, q, k, state)


def test_a_nope_layer_sees_its_queries_and_keys_as_they_came_and_a_rope_layer_rotates_them():
    model = model_of(layout="rope,none,rope")
    for index in (0, 2):
        q, k, scores = layer_qk(model, index)
        assert torch.equal(scores.q, apply_rope(q, torch.arange(10)))
        assert torch.equal(scores.k, apply_rope(k, torch.arange(10)))
    q, k, scores = layer_qk(model, 1)
    assert torch.equal(scores.q, q) and torch.equal(scores.k, k) and scores.bias is None


def test_nope_every_drops_rope_in_every_kth_layer_as_llama4():
    config = ModelConfig(n_layers=8, nope_every=4, window=16)
    names = [[g.scheme for g in layer.groups] for layer in config.layers]
    assert names == [["rope"], ["rope"], ["rope"], ["none"]] * 2
    assert config.windows == (16, 16, 16, None) * 2  # the NoPE layers attend globally


def test_rope_heads_rotate_and_nope_heads_do_not():
    model = model_of(heads="rope:2+none:2")
    q, k, scores = layer_qk(model, 1)
    assert torch.equal(scores.q[:, :2], apply_rope(q[:, :2], torch.arange(10)))
    assert torch.equal(scores.k[:, 2:], k[:, 2:])
    assert torch.equal(scores.q[:, 2:], q[:, 2:])
    assert not torch.allclose(scores.q[:, :2], q[:, :2])


def test_alibi_on_some_heads_biases_those_heads_with_their_own_slopes():
    """x-transformers' alibi_num_heads: the slopes of 2 heads (1/16, 1/256) on heads 0-1,
    nothing on heads 2-3; the same in every layer, so one shared (cached) bias."""
    model = model_of(heads="alibi:2+none:2")
    assert model.position.shared_bias and model.position.fixed_bias
    bias = model.position.score_bias(None, 9)
    assert torch.equal(bias[:, :2], alibi_bias(alibi_slopes(2), None, 9))
    assert alibi_slopes(2).tolist() == [1 / 16, 1 / 256]
    assert torch.equal(bias[:, 2:], torch.zeros(1, 2, 9, 9))


def test_a_bias_on_some_layers_only_is_each_layers_own():
    model = model_of(layout="alibi,none,alibi:1+rope:3")
    assert not model.position.shared_bias and model.position.windowed_layer_bias
    assert model.position.score_bias(None, 9) is None
    _, _, first = layer_qk(model, 0, 9)
    assert torch.equal(first.bias_window(), alibi_bias(alibi_slopes(4), None, 9))
    assert layer_qk(model, 1, 9)[2].window is None
    _, _, last = layer_qk(model, 2, 9)
    assert torch.equal(last.bias_window()[:, :1], alibi_bias(alibi_slopes(1), None, 9))
    assert torch.equal(last.bias_window()[:, 1:], torch.zeros(1, 3, 9, 9))


@pytest.mark.parametrize(
    "values",
    [
        {"layout": "rope,none,alibi"},
        {"heads": "rope:2+none:2"},
        {"layout": "cope:2+rope:2,t5,kerple:1+none"},
        {"nope_every": 3, "window": 3},
        {"layout": "alibi@2,fire@4,rope"},
    ],
)
def test_hybrids_are_causal_and_train(values):
    model = model_of(**values)
    idx = tokens(20)
    later = idx.clone()
    later[:, 12:] = (later[:, 12:] + 1) % 64
    assert torch.equal(model(idx)[:, :12], model(later)[:, :12])
    model.train()
    model(idx).logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in model.parameters())


# ---------------------------------------------------------------------------------------------
# Every registered scheme trains in a head split and in a layout, or is refused in one line
# ---------------------------------------------------------------------------------------------

TINY = ["model.d_model=16", "model.n_heads=4", "model.n_layers=2", "model.d_ff=32"]
"""A 2-layer model of 4 heads of width 4 (the task's vocabulary)."""


def hybrid_value(scheme: str, key: str) -> str:
    """``scheme`` beside another scheme (rope, or none for rope): on half the heads of every
    layer (``heads``), or on the first of two layers (``layout``)."""
    other = "none" if scheme == "rope" else "rope"
    return f"{scheme}:2+{other}:2" if key == "heads" else f"{scheme},{other}"


def refuses(scheme: str, key: str) -> bool:
    """Whether the scheme's class says a hybrid of ``key`` cannot run it: one that adds to the
    token embeddings or replaces softmax needs every layer and head, one that widens the heads
    whole layers."""
    cls = scheme_class(scheme)
    whole = cls.replaces_softmax or cls.embedding is not PositionScheme.embedding
    return whole or (key == "heads" and cls.widens_heads)


def loss_of(model: Transformer, idx: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy of ``idx`` ``(B, T)``."""
    logits = model(idx[:, :-1])
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())


@pytest.mark.parametrize("key", ["heads", "layout"])
@pytest.mark.parametrize("scheme", available_schemes())
def test_every_scheme_trains_in_a_head_split_and_a_layout_or_is_refused(scheme, key):
    """Built from the config a run would use: a causal model whose loss and every gradient are
    finite and whose train step keeps the loss finite; or, where the scheme's class says so,
    a ConfigError of one line naming the key, its value and the scheme (never a crash)."""
    value = hybrid_value(scheme, key)
    if refuses(scheme, key):
        with pytest.raises(ConfigError) as error:
            load_config(None, [*TINY, f"model.{key}={value}"])
        message = str(error.value)
        assert message.startswith(f"model.{key}={value!r}: {scheme} ") and "\n" not in message
        return
    config = load_config(None, [*TINY, f"model.{key}={value}"]).model
    torch.manual_seed(0)
    model = Transformer(config)
    assert isinstance(model.position, LayeredPositions)
    idx = torch.randint(0, config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    later = idx.clone()
    later[:, 8:] = (later[:, 8:] + 1) % config.vocab_size
    with torch.no_grad():
        assert torch.equal(model(idx)[:, :8], model(later)[:, :8])  # causal
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = loss_of(model, idx)
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
    optimizer.step()
    assert torch.isfinite(loss) and torch.isfinite(loss_of(model, idx))


@pytest.mark.parametrize("mode", ["data", "bias", "fixed"])
def test_fox_in_a_head_split_reads_the_keys_of_its_own_heads(mode):
    """FoX on 2 of 4 heads: its data gate is sized to the keys of its heads (2 * Dh wide, not
    D), so its bias does not change with the other heads' keys; every mode trains."""
    model = model_of(heads="fox:2+none:2", options={"fox": {"mode": mode}})
    fox = model.position.members["fox_2"]
    if mode == "data":
        assert fox.gate_weight.shape == (3, 2, 2 * 16)  # (layers, its heads, its keys' width)
    q, k = torch.randn(2, 2, 4, 10, 16, generator=torch.Generator().manual_seed(3))
    state = model.position.prepare(None, 10)

    def bias_of(keys: torch.Tensor) -> torch.Tensor:  # layer 1's bias (B or 1, H, T, T)
        if mode == "fixed":  # ALiBi's decay with the slopes of 2 heads, shared by the layers
            return model.position.score_bias(None, 10)
        return model.position.layer(1, q, keys, state).bias_window()

    other = k.clone()
    other[:, 2:] = torch.randn(2, 2, 10, 16)
    bias = bias_of(k)
    assert torch.equal(bias_of(other), bias)
    assert torch.equal(bias[:, 2:], torch.zeros(2 if mode == "data" else 1, 2, 10, 10))
    if mode == "fixed":
        distance = torch.arange(10).view(-1, 1) - torch.arange(10)
        expected = -alibi_slopes(2).view(2, 1, 1) * distance
        torch.testing.assert_close(bias[0, :2], expected, rtol=0, atol=0)
    model.train()
    loss_of(model, tokens(12)).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


# ---------------------------------------------------------------------------------------------
# Sliding windows
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("position", ["rope", "alibi", "cope"])
def test_a_token_never_attends_beyond_its_window(position):
    window = 5
    model = model_of(position=position, window=window)
    maps = attention_maps(model, tokens(16, b=1))
    i, j = torch.arange(16).unsqueeze(1), torch.arange(16)
    outside = (i - j >= window) | (j > i)
    for weights in maps:  # (H, T, T)
        assert torch.all(weights[:, outside] == 0)
        assert torch.all(weights[:, ~outside] > 0)


def test_a_window_bounds_what_one_layer_can_read():
    """One layer with a window of W: the last token's logits change with the token W - 1 back,
    never with the one W back."""
    model = model_of(position="none", n_layers=1, window=4)
    idx = tokens(12, b=1)
    for back, changes in ((4, False), (3, True)):
        other = idx.clone()
        other[0, 11 - back] = (other[0, 11 - back] + 1) % 64
        assert torch.equal(model(idx)[0, -1], model(other)[0, -1]) is not changes


def test_a_window_at_least_the_length_is_global_attention():
    idx = tokens(12)
    assert torch.equal(model_of(window=12)(idx), model_of()(idx))


@pytest.mark.parametrize("t", [300, 700])
@pytest.mark.parametrize(
    "values",
    [
        {"position": "rope", "window": 40},
        {"position": "alibi", "window": 100},
        {"layout": "rope@64,none,alibi:2+none@300"},
        {"position": "cope", "window": 70},
        {"position": "t5", "window": 33, "causal": False},
    ],
)
def test_the_blocked_path_with_a_window_equals_attending_at_once(t, values, monkeypatch):
    """Past BLOCK_ROWS a window takes the blocked path, whose blocks skip the keys outside it;
    logits and gradients equal the whole-sequence path's."""
    model = model_of(**values)
    idx = tokens(t, b=1)
    prefix = None if values.get("causal", True) else 100

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        logits = model(idx, prefix_len=prefix)
        logits.square().mean().backward()
        return logits.detach(), model.blocks[0].attn.qkv.weight.grad.clone()

    window = next(w for w in model.config.windows if w is not None)
    path = blocked_attention.plan(
        model.position, None, 1, t, model.config.causal, prefix, idx.device, torch.float32, window
    )
    assert path is not None and path.blocks[-1][1].start > 0  # keys outside the window skipped
    blocked = run()
    monkeypatch.setattr(blocked_attention, "BLOCK_ROWS", 10**6)
    whole = run()
    torch.testing.assert_close(blocked[0], whole[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(blocked[1], whole[1], rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Saved, labelled, swept, round-tripped
# ---------------------------------------------------------------------------------------------


def test_a_hybrid_run_config_round_trips_with_every_members_options(tmp_path):
    config = load_config(
        None, ["model.layout=rope@6,alibi:2+t5:2,none", "model.options.t5.num_buckets=8"]
    )
    values = config_to_dict(config)
    assert values["model"]["layout"] == "rope@6,alibi:2+t5:2,none"
    assert set(values["model"]["options"]) >= {"rope", "alibi", "t5", "none"}
    again = config_from_dict(values)
    assert again.model == config.model
    torch.manual_seed(0)
    model = Transformer(config.model).eval()
    torch.save(model.state_dict(), tmp_path / "w.pt")
    torch.manual_seed(1)
    loaded = Transformer(again.model).eval()
    idx = tokens(10) % config.model.vocab_size
    assert not torch.equal(loaded(idx), model(idx))
    loaded.load_state_dict(torch.load(tmp_path / "w.pt"))
    assert torch.equal(loaded(idx), model(idx))


def test_the_label_names_the_layout():
    def label(**model):
        base = config_to_dict(load_config(None, [f"model.{k}={v}" for k, v in model.items()]))
        result = {"position": base["model"]["position"], "task": "svo", "config": base}
        return scheme_label(result)

    assert label() == "rope"
    assert label(nope_every=3) == "rope*2,none"
    assert label(heads="rope:2+none") == "rope:2+none:2"
    assert label(window=8) == "rope@8"
    assert label(layout="rope@8,rope@8,none", causal="false") == "rope@8*2,none (bidirectional)"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model.position=alibi", "model.layout=rope,rope,rope"],
            "model.position='alibi' is not run by model.layout='rope,rope,rope' (its schemes: "
            "rope), which sets every layer's scheme; give model.position one of rope",
        ),
        (
            ["model.position=none", "model.heads=rope:2+alibi:2"],
            "model.position='none' is not run by model.heads='rope:2+alibi:2' (its schemes: "
            "rope, alibi)",
        ),
    ],
)
def test_a_position_the_layout_overrides_is_refused_in_one_line(overrides, message):
    """It would be ignored and the run labelled with a scheme it does not have."""
    with pytest.raises(ConfigError) as error:
        load_config(None, overrides)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_the_position_label_is_what_the_layout_runs():
    """Left at its default, ``model.position`` becomes the layout's first scheme (the label of
    the committed hybrids: rope for rope*3,none, none for none*4); a scheme the layout runs is
    kept (the member eval.position_options changes)."""
    position = {
        "rope,rope,rope": "rope",
        "none,none,none": "none",
        "alibi,none,alibi": "alibi",
        "none,rope,none": "rope",  # the default, and run by the layout
    }
    for layout, expected in position.items():
        assert load_config(None, [f"model.layout={layout}"]).model.position == expected
    kept = load_config(None, ["model.position=none", "model.layout=rope,none,rope"])
    assert kept.model.position == "none"
    assert ModelConfig(heads="t5:2+none:2").position == "t5"
    assert ModelConfig(position="alibi", nope_every=3).position == "alibi"  # not overridden


def test_a_sweep_over_position_under_a_layout_is_refused_or_one_run(tmp_path):
    """A position grid over a base layout trains no bit-identical models under other labels:
    a scheme the layout does not run stops the sweep in one line, the default spelled out
    included (it is not replaced by the layout's scheme)."""
    sweep = tmp_path / "sweep.yaml"
    base = {"model": {"layout": "rope,rope,rope"}}
    grid = {"model.position": ["rope", "alibi", "none"], "seed": [0]}
    OmegaConf.save({"out_dir": str(tmp_path / "out"), "base": base, "grid": grid}, sweep)
    with pytest.raises(ConfigError, match="model.position='alibi' is not run by model.layout"):
        expand(load_sweep(sweep))
    base = {"model": {"layout": "none,none,none"}}
    grid = {"model.position": ["rope", "none"], "seed": [0]}
    OmegaConf.save({"out_dir": str(tmp_path / "out"), "base": base, "grid": grid}, sweep)
    with pytest.raises(ConfigError, match="model.position='rope' is not run by model.layout"):
        expand(load_sweep(sweep))


def test_a_position_grid_over_a_head_split_of_both_schemes_is_one_run(tmp_path):
    """``model.position`` over ``model.heads=rope:2+alibi:2``: both schemes are run by the split,
    the model is the same either way, so the grid trains one run and names the other an alias;
    its CSV row names what the model runs (the split), not the position it was given."""
    sweep = tmp_path / "sweep.yaml"
    base = {"model": {"heads": "rope:2+alibi:2", "n_heads": 4}}
    grid = {"model.position": ["rope", "alibi"], "seed": [0]}
    OmegaConf.save({"out_dir": str(tmp_path / "out"), "base": base, "grid": grid}, sweep)
    specs = expand(load_sweep(sweep))
    assert [s.name for s in specs] == ["rope-seed0"]
    assert specs[0].aliases == ["alibi-seed0 = rope-seed0"]
    config = config_to_dict(load_config(None, specs[0].overrides))
    result = {"position": "rope", "task": "copy", "seed": 0, "config": config, "run_dir": "r"}
    result["summary"] = {"in_dist": 1.0}
    result["lengths"] = [dict.fromkeys(CSV_COLUMNS[4 : CSV_COLUMNS.index("learned")], 0.0)]
    result["lengths"][0]["length"] = 8
    rows = csv_rows([result])
    assert rows[0]["position"] == layout_label(config["model"]) != "rope"
    assert "alibi" in rows[0]["position"] and "rope" in rows[0]["position"]


def test_the_hybrids_sweep_keeps_its_committed_labels():
    """docs/results/hybrids.md: every layout's position as published (none for none*4, rope
    for the others); the two layouts that are a plain scheme (rope*4, none*4) are built as
    that scheme alone (no layout left in the config). Without its when block, the file's
    ``position: rope`` contradicts the none*4 layout and is refused, not overridden."""
    sweep = load_sweep(CONFIGS / "hybrids.yaml")
    positions = {}
    for spec in expand(sweep):
        config = load_config(None, spec.overrides)
        layout = spec.name.split("-")[0].removeprefix("layout")
        positions[layout] = (config.model.position, config.model.layout)
    assert positions == {
        "rope,rope,rope,rope": ("rope", None),
        "none,none,none,none": ("none", None),
        "rope,rope,rope,none": ("rope", "rope,rope,rope,none"),
        "rope:2+none:2,rope:2+none:2,rope:2+none:2,rope:2+none:2": (
            "rope",
            "rope:2+none:2,rope:2+none:2,rope:2+none:2,rope:2+none:2",
        ),
        "rope@8,rope@8,rope@8,none": ("rope", "rope@8,rope@8,rope@8,none"),
    }
    sweep.when = {}
    with pytest.raises(ConfigError, match=r"model.position='rope' is not run by model.layout="):
        expand(sweep)


def test_a_given_position_the_layout_does_not_run_is_refused():
    """An explicit model.position is never silently replaced by the layout's first scheme;
    left out (or one of the layout's schemes), the layout decides."""
    two = ["model.n_layers=2"]
    with pytest.raises(ConfigError, match=r"model.position='rope' is not run by model.layout="
                       r"'alibi,alibi'.*\(here 'alibi'\)"):  # fmt: skip
        load_config(None, [*two, "model.position=rope", "model.layout=alibi,alibi"])
    with pytest.raises(ConfigError, match=r"model.heads='alibi:2\+none:2'"):
        load_config(None, ["model.position=rope", "model.heads=alibi:2+none:2"])
    assert load_config(None, [*two, "model.layout=alibi,alibi"]).model.position == "alibi"
    mixed = load_config(None, [*two, "model.position=rope", "model.layout=alibi,rope"])
    assert (mixed.model.position, mixed.model.layout) == ("rope", "alibi,rope")


def test_layout_keys_are_grid_axes(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    grid = {"model.layout": ["rope,rope,none", "alibi:2+none:2,rope,rope"], "model.window": [4]}
    grid["model.options.alibi.x"] = [1]  # not an alibi option: only a run using alibi reads it
    OmegaConf.save({"out_dir": str(tmp_path / "out"), "grid": grid}, sweep)
    with pytest.raises(ConfigError, match="x"):
        expand(load_sweep(sweep))
    del grid["model.options.alibi.x"]
    OmegaConf.save({"out_dir": str(tmp_path / "out"), "grid": grid}, sweep)
    specs = expand(load_sweep(sweep))
    names = ["layoutrope,rope,none-window4", "layoutalibi:2+none:2,rope,rope-window4"]
    assert [s.name for s in specs] == names
    configs = [load_config(None, s.overrides) for s in specs]
    assert [c.model.windows for c in configs] == [(4, 4, 4)] * 2
    assert "alibi" in run_identity(configs[1]) and '"alibi"' not in run_identity(configs[0])


@pytest.mark.parametrize("name", ["hybrid_nope_every", "hybrid_half_heads", "hybrid_rnope_swa"])
def test_the_examples_build_their_hybrids(name):
    config = load_config(CONFIGS / f"{name}.yaml")
    assert config.model.layers is not None
    model = Transformer(config.model)
    assert isinstance(model.position, LayeredPositions)


# ---------------------------------------------------------------------------------------------
# Bad layouts stop in one line
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.layout=rope,rope,nope", r"'nope' is not a known scheme; choose one of none"),
        ("model.layout=rope,none", r"has 2 entries but model.n_layers=3"),
        ("model.layout=", r"model.layout='' has an empty entry \(entry 0 of 1\)"),
        ("model.layout=rope,,none", r"has an empty entry \(entry 1 of 3\).*or null"),
        ("model.heads=rope:2+none:1", r"head counts sum to 3 but model.n_heads=4"),
        ("model.heads=rope:x+none", r"head count 'x' of rope is not an integer"),
        ("model.heads=rope:1+rope:3", r"names rope twice"),
        ("model.window=0", r"model.window: window=0 is invalid; it must be an integer in"),
        ("model.layout=rope@0,rope,none", r"window='0' is invalid"),
        ("model.nope_every=4", r"model.nope_every=4 is invalid"),
        ("model.nope_every=1", r"model.nope_every=1 is invalid.*model.position=none"),
        ("model.layout=learned,none,none", r"learned adds its positions to the token embed"),
        ("model.heads=cope:2+none:2 model.causal=false", r"cope is causal only"),
        ("model.heads=pope:2+rope:2", r"pope makes its queries and keys wider than the head"),
        ("model.layout=rope,pope:3+none,rope", r"cannot share a layer's heads with another"),
        ("model.heads=learned:2+rope:2", r"^model.heads='learned:2\+rope:2': learned adds"),
        ("model.layout=rope,stickbreaking,rope", r"^model.layout='rope,stickbreaking,rope': "),
        (
            "model.position=stickbreaking model.nope_every=3 model.window=4",
            r"^model.nope_every=3: stickbreaking replaces the softmax of every layer and head",
        ),  # the layout is refused first: without the window it would still be refused
        (
            "model.layout=stickbreaking@4,stickbreaking,stickbreaking",
            r"^model.position='stickbreaking' with a sliding window \(model.layout='stick",
        ),  # a window from @W names model.layout, not a model.window the user did not give
        (
            "model.position=stickbreaking model.window=4",
            r"^model.position='stickbreaking' with a sliding window \(model.window\) is not",
        ),
    ],
)
def test_bad_layouts_stop_in_one_line(override, message):
    with pytest.raises(ConfigError, match=message) as error:
        load_config(None, override.split())
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("key", ["model.layout=ROPE,rope,rope", "model.heads=ROPE:2+none:2"])
def test_an_unknown_layout_scheme_names_its_own_key_not_model_position(key):
    """The registry's message names ``model.position``; a layout entry's must name its key."""
    with pytest.raises(ConfigError) as error:
        load_config(None, [key])
    message = str(error.value)
    name = key.partition("=")[0]
    assert message.startswith(f"{name} entry 'ROPE")
    assert "'ROPE' is not a known scheme; choose one of none, learned, sinusoidal, rope" in message
    assert "model.position" not in message and "\n" not in message


def test_layout_with_heads_or_nope_every_is_refused():
    with pytest.raises(ValueError, match="model.layout and model.heads are both given"):
        ModelConfig(layout="rope,rope,rope", heads="rope:2+none:2")
    with pytest.raises(ValueError, match="model.layout and model.nope_every are both given"):
        ModelConfig(layout="rope,rope,rope", nope_every=3)


def test_evaluation_options_reach_the_member_that_is_model_position():
    model = model_of(heads="rope:2+none:2")
    other = model.at_evaluation({"theta": 40000.0})
    assert other.position.members["rope_2"].options.theta == 40000.0
    idx = tokens(12)
    assert not torch.equal(other(idx), model(idx))
    assert torch.equal(other.at_evaluation({"theta": 10000.0})(idx), model(idx))


def test_train_prints_the_layout_the_model_runs(capsys):
    """``train.py model.layout=...`` names the layout, not a ``model.position`` it overrides."""
    import train

    train.print_start(load_config(None, ["model.layout=none,rope,rope", "run_dir=somewhere"]))
    assert capsys.readouterr().out.startswith("somewhere: none,rope*2 on svo, ")


def test_a_layout_that_is_the_plain_scheme_is_one_run_with_it(tmp_path):
    """none with nope_every=0 and 2, and rope with no layout, rope,rope and rope:2,rope, are one
    model each: they were trained several times and reported as arms ``none {nope_every=2}``
    and ``rope {layout=rope,rope}`` with identical results. A layout that runs the scheme
    alone on every head, with no window, leaves no layout in the config, so the grid points
    collapse into one run, as ``seed=0,00`` does."""
    sweep = tmp_path / "sweep.yaml"
    base = {"model": {"n_layers": 2, "n_heads": 2, "d_model": 16, "d_ff": 32}}
    grid = {"model.position": ["none"], "model.nope_every": [0, 2]}
    OmegaConf.save({"out_dir": str(tmp_path / "a"), "base": base, "grid": grid}, sweep)
    specs = expand(load_sweep(sweep))
    assert len(specs) == 1 and len(specs[0].aliases) == 1
    grid = {"model.layout": [None, "rope,rope", "rope:2,rope"]}
    OmegaConf.save({"out_dir": str(tmp_path / "b"), "base": base, "grid": grid}, sweep)
    specs = expand(load_sweep(sweep))
    assert len(specs) == 1 and len(specs[0].aliases) == 2
    kept = load_config(None, ["model.n_layers=2", "model.layout=rope@4,rope"]).model
    assert kept.layout == "rope@4,rope"  # a window is no plain scheme: kept


def test_a_layout_on_the_sweep_command_line_keeps_its_commas(tmp_path):
    """``model.layout=rope,none`` on the sweep command line is one two-layer layout (as in
    train.py), not two one-layer grid values; ``;`` separates several layouts."""
    sweep = tmp_path / "sweep.yaml"
    OmegaConf.save({"out_dir": str(tmp_path / "out"), "grid": {"seed": [0]}}, sweep)
    one = load_sweep(sweep, ["model.layout=rope,none", "model.n_layers=2"])
    assert [load_config(None, s.overrides).model.layout for s in expand(one)] == ["rope,none"]
    two = load_sweep(sweep, ["model.layout=rope,none;none,rope", "model.n_layers=2"])
    layouts = [load_config(None, s.overrides).model.layout for s in expand(two)]
    assert layouts == ["rope,none", "none,rope"]


def test_a_window_that_every_layer_overrides_is_refused():
    """model.window beside a layout whose every entry gives its own @W was stored in the run's
    config and used by no layer; where some layer has no @W it sets that layer."""
    with pytest.raises(ConfigError, match=r"model.window=8 is set by no layer: every entry of "
                       r"model.layout='rope@4,none@8' gives its own @W"):  # fmt: skip
        load_config(None, ["model.n_layers=2", "model.layout=rope@4,none@8", "model.window=8"])
    config = load_config(None, ["model.n_layers=2", "model.layout=rope@4,none", "model.window=8"])
    assert config.model.windows == (4, 8)


def test_a_layout_spelled_with_spaces_is_the_same_model_and_one_run(tmp_path):
    """'rope, none' trained the model of 'rope,none' again, in a second folder and arm (and a
    child given it was refused as another layout than its parent's); spaces are dropped."""
    config = load_config(None, ["model.n_layers=2", "model.layout=rope, none"])
    assert config.model.layout == "rope,none"
    heads = load_config(None, ["model.heads=rope:2 + none:2"])
    assert heads.model.heads == "rope:2+none:2"
    sweep = tmp_path / "sweep.yaml"
    OmegaConf.save({"out_dir": str(tmp_path / "out"), "grid": {"seed": [0]}}, sweep)
    specs = expand(load_sweep(sweep, ["model.layout=rope,none;rope, none", "model.n_layers=2"]))
    assert [s.name for s in specs] == ["seed0-layoutrope,none"]


def test_a_sweep_files_layouts_and_when_blocks_drop_spaces_too(tmp_path):
    """In a sweep file's grid, 'rope, none' and 'rope,none' were two arms of one model (a run
    folder name with a space); a when block spelled with spaces matched no run."""
    sweep = tmp_path / "sweep.yaml"
    grid = {"model.layout": ["rope, none", "rope,none", "none , none"], "seed": [0]}
    when = {"model.layout=none, none": {"train": {"lr": 3e-3}}}
    base = {"model": {"n_layers": 2}}
    OmegaConf.save(
        {"out_dir": str(tmp_path / "out"), "base": base, "grid": grid, "when": when}, sweep
    )
    specs = expand(load_sweep(sweep))
    assert [s.name for s in specs] == ["layoutrope,none-seed0", "layoutnone,none-seed0"]
    lrs = [load_config(None, s.overrides).train.lr for s in specs]
    assert lrs == [1e-3, 3e-3]
