"""Evaluation-time position options: a scheme's ``evaluable`` options change at evaluation
without retraining (same weights), are refused otherwise, and are recorded in ``eval.json``."""

import json

import pytest
import torch

import eval as eval_cli
import train as train_cli
from lab.common.config import load_config
from lab.training.run_logs import hparams
from lab.training.trainer import train
from model.position import available_schemes, scheme_class


@pytest.mark.parametrize("scheme", available_schemes())
def test_evaluable_options_at_their_values_change_nothing(scheme, make_model):
    model = make_model(scheme, strong=True)
    same = {key: model.config.options[scheme][key] for key in scheme_class(scheme).evaluable}
    again = model.at_evaluation(same)
    idx = torch.randint(0, 16, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(again(idx), model(idx))


def test_rope_theta_at_evaluation_keeps_weights_and_changes_the_rotation(make_model):
    model = make_model("rope", strong=True)
    other = model.at_evaluation({"theta": 40.0})
    assert other.config.options["rope"]["theta"] == 40.0
    assert model.config.options["rope"]["theta"] == 10000.0  # the trained model is untouched
    for (name, a), b in zip(model.state_dict().items(), other.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    idx = torch.randint(0, 16, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (other(idx) - model(idx)).abs().max() > 1e-3
        direct = make_model("rope", strong=True, options={"rope": {"theta": 40.0}})
        torch.testing.assert_close(other(idx), direct(idx), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("scheme", "key", "match"),
    [
        (
            "rope",
            "rotary_fraction",
            r"eval\.position_options\.rotary_fraction .*'rope'.*: attention_factor, .*, truncate$",
        ),
        (
            "alibi",
            "theta",
            r"eval\.position_options\.theta .*'alibi'; its evaluable options: none$",
        ),
    ],
)
def test_other_options_are_refused_at_evaluation(scheme, key, match, make_model):
    with pytest.raises(ValueError, match=match):
        make_model(scheme).at_evaluation({key: 0.5})


def test_eval_cli_applies_and_records_position_overrides(tmp_path, capsys):
    run = tmp_path / "rope"
    overrides = ["data.task=copy", "data.train_min_length=2", "data.train_max_length=4"]
    overrides += ["model.d_model=32", "model.n_layers=1", "model.n_heads=4", "model.d_ff=64"]
    overrides += ["train.steps=20", "train.warmup_steps=2", "train.eval_every=20"]
    overrides += ["train.eval_samples=8", "train.progress=false", "device=cpu", f"run_dir={run}"]
    train(load_config(None, overrides))
    fast = ["eval.samples=8", "eval.probe_samples=8", "eval.lengths=[2,4]", "--no-progress"]
    assert eval_cli.main([str(run), *fast, "eval.position_options.theta=40000"]) == 0
    saved = json.loads((run / "eval.json").read_text())
    assert saved["config"]["eval"]["position_options"] == {"theta": 40000}
    assert saved["config"]["model"]["options"]["rope"]["theta"] == 10000.0  # as trained
    report = (run / "report.md").read_text()
    line = ": rope(theta=10000.0, rotary_fraction=1.0, scaling=none, scaling_factor=1.0, "
    assert line in report and "original_max_position=10, " in report
    assert "- rope [theta=40000]: " in report and "; evaluated with {'theta': 40000}" in report
    capsys.readouterr()
    assert eval_cli.main([str(run), *fast, "eval.position_options.rotary_fraction=0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its evaluable options: attention_factor, beta_fast" in err[0]


def test_tensorboard_hparams_show_the_active_scheme_options():
    values = hparams(load_config(None, ["model.position=t5", "model.options.t5.num_buckets=16"]))
    assert values["model.options.t5.num_buckets"] == 16
    assert values["model.options.t5.max_distance"] == 128
    assert not any(key.startswith("model.options.rope") for key in values)


TINY_RUN = [
    "data.task=copy",
    "data.train_min_length=2",
    "data.train_max_length=4",
    "model.d_model=32",
    "model.n_layers=1",
    "model.d_ff=64",
    "train.steps=4",
    "train.warmup_steps=1",
    "train.eval_every=4",
    "train.eval_samples=8",
    "train.progress=false",
    "device=cpu",
]
FAST = ["eval.samples=8", "eval.probe_samples=8", "eval.lengths=[2,4]", "--no-progress"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["eval.position_options.bogus=1"], "eval.position_options.bogus cannot change"),
        (
            ["model.position=alibi", "eval.position_options.theta=40000"],
            "its evaluable options: none",
        ),
        (["eval.position_options.theta=abc"], "model.options.rope.theta='abc' is invalid"),
    ],
)
def test_train_refuses_position_options_its_evaluation_would_refuse(
    overrides, message, tmp_path, capsys
):
    """train.py once trained and saved these, and eval.py then refused the run every time."""
    run = tmp_path / "run"
    assert train_cli.main([*TINY_RUN, *overrides, f"run_dir={run}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert not run.exists()  # refused before anything was written


def test_a_run_saved_with_refused_options_is_evaluated_again_once_they_are_cleared(
    tmp_path, capsys
):
    """A run saved (by an earlier version) with eval.position_options its scheme refuses:
    eval.py refuses it as it is, and ``eval.position_options={}`` or ``=null`` clears them."""
    run = tmp_path / "run"
    train(load_config(None, [*TINY_RUN, "eval.position_options.bogus=1", f"run_dir={run}"]))
    capsys.readouterr()
    assert eval_cli.main([str(run), *FAST]) == 2
    assert "eval.position_options.bogus cannot change" in capsys.readouterr().err
    for cleared in ("{}", "null"):
        assert eval_cli.main([str(run), *FAST, f"eval.position_options={cleared}"]) == 0
        saved = json.loads((run / "eval.json").read_text())
        assert saved["config"]["eval"]["position_options"] == {}, cleared
    replaced = ["eval.position_options.bogus=1", "eval.position_options={theta: 40000}"]
    replaced += ["eval.position_options.scaling=dynamic", "eval.position_options.scaling_factor=2"]
    assert eval_cli.main([str(run), *FAST, *replaced]) == 0  # earlier ones dropped, later kept
    saved = json.loads((run / "eval.json").read_text())["config"]["eval"]["position_options"]
    assert saved == {"theta": 40000, "scaling": "dynamic", "scaling_factor": 2}
    capsys.readouterr()
    assert eval_cli.main([str(run), *FAST, "eval.position_options=5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'eval.position_options=5' is invalid; give a mapping" in err and "\n" not in err
