"""TensorBoard for comparison, read back from the event files: HParams with the ablation axes
first and the headline metrics, the validation loss, samples at every evaluation and at 4x,
and the Custom Scalars group of each task."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams import backend_context
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

import eval as eval_cli
from data import build_task
from lab.common.config import load_config
from lab.training.run_logs import AXES, HEADLINE, NOISE, hparams, validation_loss
from lab.training.trainer import train
from model import ModelConfig, Transformer
from tests.conftest import tiny_config

FAST = ["eval.samples=8", "eval.probe_samples=8", "eval.lengths=[2,4,8]", "--no-progress"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ALiBi copy run (4 symbols) stopped early at a 15% target at every training length
    (step 170: 18.8% at the weakest length, 50% on average), evaluated."""
    folder = tmp_path_factory.mktemp("sweep") / "alibi-copy-seed0"
    settings = [
        "data.options.copy.n_symbols=4",
        "model.dropout=0.0",
        "eval.samples=16",
        "train.steps=200",
    ]
    config = tiny_config(folder, "model.position=alibi", "train.target_accuracy=0.15", *settings)
    result = train(config)
    assert result.step < 200 and result.reached_target  # stopped at the target
    assert result.eval["in_dist_min"] >= 0.15
    assert eval_cli.main([str(folder), *FAST]) == 0
    return folder


def events(folder: Path) -> EventAccumulator:
    return EventAccumulator(str(folder), size_guidance={"tensors": 0, "scalars": 0}).Reload()


def plugin_data(acc: EventAccumulator, tag: str) -> HParamsPluginData:
    return HParamsPluginData.FromString(acc.SummaryMetadata(tag).plugin_data.content)


def test_hparams_list_the_axes_first_without_noise():
    values = hparams(load_config(None, ["model.position=alibi", "data.task=copy", "seed=3"]))
    assert list(values)[:4] == ["scheme", "task", "seed", "lr"]
    assert values["scheme"] == "alibi" and values["task"] == "copy" and values["seed"] == 3
    assert not NOISE & set(values)
    assert not (set(AXES.values()) - set(AXES)) & set(values)  # no second copy by config key


def test_hparams_tab_shows_scheme_task_seed_first_with_headline_metrics(run: Path):
    acc = events(run)
    experiment = plugin_data(acc, "_hparams_/experiment").experiment
    backend_context._sort_and_reduce_to_hparams_limit(experiment, 4)  # TensorBoard's own order
    assert [info.name for info in experiment.hparam_infos] == ["lr", "scheme", "seed", "task"]
    assert [m.name.tag for m in experiment.metric_infos] == list(HEADLINE)
    start = plugin_data(acc, "_hparams_/session_start_info").session_start_info.hparams
    assert start["scheme"].string_value == "alibi" and start["task"].string_value == "copy"
    assert start["seed"].string_value == "0"  # shown as 0, not 0.0000
    scalars = acc.Tags()["scalars"]
    stopped = acc.Scalars("hparam/validation_exact_match_in_dist")[-1].step
    assert [e.value for e in acc.Scalars("hparam/steps_to_target")] == [stopped]
    assert acc.Scalars("eval/exact_match_in_dist")[-1].step == stopped < 200
    evaluation = json.loads((run / "eval.json").read_text())
    for label in ("1.25x", "2x", "4x"):
        assert acc.Scalars(f"headline/exact_match_{label}")[-1].value == pytest.approx(
            evaluation["summary"]["at"][label]
        )
    assert acc.Scalars("headline/permutation_tvd")[-1].value == pytest.approx(
        evaluation["order"]["permutation_tvd"]
    )
    missing = [tag for tag in HEADLINE if tag not in scalars]
    if "reached_target" not in evaluation:  # eval.json records it once the training does
        missing.remove("headline/reached_target")
    assert missing == []  # every headline metric has a value in the run's own folder


def test_validation_loss_and_samples_at_every_evaluation(straight):
    config, result = straight
    acc = events(Path(config.run_dir))
    loss = acc.Scalars("eval/loss_in_dist")
    assert [e.step for e in loss] == [10, 20]
    assert all(0 < e.value < 10 for e in loss)
    tag = "samples/text_summary" if "samples/text_summary" in acc.Tags()["tensors"] else "samples"
    samples = acc.Tensors(tag)
    assert [e.step for e in samples] == [10, 20]
    text = samples[-1].tensor_proto.string_val[0].decode()
    assert "| in_dist |" in text and "| 2x |" in text and "| 4x |" in text
    assert acc.Scalars("hparam/final_loss")[-1].value == pytest.approx(result.final_loss)


def test_custom_scalars_group_one_task_with_every_run_of_it(run: Path, straight):
    config, _ = straight
    for folder in (run, Path(config.run_dir)):  # two runs of copy: alibi and rope
        acc = events(folder)
        layout = layout_pb2.Layout.FromString(
            acc.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0]
        )
        assert [c.title for c in layout.category] == ["task copy: every run"]
        regexes = [r for chart in layout.category[0].chart for r in chart.multiline.tag]
        assert "^compare/copy/exact_match_in_dist$" in regexes
        scalars = acc.Tags()["scalars"]
        for regex in regexes:
            assert regex.strip("^$") in scalars or "by_length" in regex  # (after eval.py)
    assert "compare/copy/exact_match_by_length_set_smoothing_0" in events(run).Tags()["scalars"]


def test_validation_loss_skips_pads_as_the_training_loss_does() -> None:
    torch.manual_seed(0)
    task = build_task("selective_copy")
    batch = task.sample(np.random.default_rng(0), 8, 16)
    assert not batch.answer_mask.all()  # some rows are padded
    model = Transformer(
        ModelConfig(vocab_size=task.vocab_size, d_model=32, n_layers=4, n_heads=4, d_ff=64)
    )
    model.eval()
    with torch.no_grad():
        logits = model(batch.inputs)[:, batch.answer_slice]  # (B, A, V)
    targets = batch.answer_targets.masked_fill(~batch.answer_mask, -100)
    expected = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
    for batch_tokens in (10_000, 40):  # one chunk, and a chunk per row
        assert validation_loss(model, batch, batch_tokens) == pytest.approx(float(expected), 1e-5)
