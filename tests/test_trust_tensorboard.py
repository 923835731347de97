"""TensorBoard at a glance, read back from the event files: a sweep's mean-over-seeds run per
scheme holds the mean of its seeds' values (one line per scheme in a chart), the sweep's figures
are in the Images tab, the folder a sweep prints opens with every run selected (fewer runs than
TensorBoard selects, with 3 seeds or 6), length curves are named for smoothing 0 and drawn as a
figure, and the HParams tab lists the test-set metrics first with integer seeds."""

import copy
import json
import os
import re
import zipfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
import tensorboard
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
from torch.utils.tensorboard import SummaryWriter

from lab.common.config import load_config, save_config
from lab.common.events.place import events_folder, runs_root
from lab.evaluation.tensorboard import write_tensorboard
from lab.reporting.sweep_tensorboard import (
    AUTO_SELECTED,
    SUFFIX,
    tensorboard_url,
    write_sweep_tensorboard,
)
from lab.sweeps.sweep import expand, load_sweep
from lab.training.run_logs import HEADLINE, write_hparams

ABLATION = Path(__file__).parents[1] / "configs" / "ablation.yaml"

RESULTS = json.loads(
    (Path(__file__).parents[1] / "docs" / "results" / "ablation" / "results.json").read_text()
)
SCHEMES = ("none", "rope", "alibi")
STOPS = {0: 300, 1: 500, 2: 500}
"""Seed -> last validation step of the synthetic runs (seed 0 stops early)."""


def events(folder: Path) -> EventAccumulator:
    sizes = {"scalars": 0, "images": 0, "tensors": 0}
    return EventAccumulator(str(folder), size_guidance=sizes).Reload()


def validation_value(scheme: str, seed: int, step: int) -> float:
    """A synthetic validation exact-match of one run at one step, in [0, 1]."""
    return (SCHEMES.index(scheme) + 1) * step / 2000 + seed / 100


@pytest.fixture
def sweep(tmp_path: Path) -> tuple[Path, list[dict]]:
    """The committed copy results of three schemes x three seeds, each with a run folder whose
    events hold the validation curve :func:`validation_value` every 100 steps to its stop."""
    results = []
    for r in copy.deepcopy(RESULTS):
        if r["task"] != "copy" or r["position"] not in SCHEMES:
            continue
        r["run_dir"] = str(tmp_path / f"{r['position']}-copy-seed{r['seed']}")
        with SummaryWriter(r["run_dir"]) as writer:
            for step in range(100, STOPS[r["seed"]] + 1, 100):
                value = validation_value(r["position"], r["seed"], step)
                writer.add_scalar("compare/copy/exact_match_in_dist", value, step)
        results.append(r)
    assert len(results) == 9
    return tmp_path, results


def test_mean_run_holds_the_mean_over_seeds_of_every_curve(sweep):
    out, results = sweep
    root = write_sweep_tensorboard(results, out)
    assert sorted(p.name for p in (root / "mean").iterdir()) == sorted(SCHEMES)
    for scheme in SCHEMES:
        acc = events(root / "mean" / scheme)
        runs = [r for r in results if r["position"] == scheme]
        logged = acc.Scalars("copy/exact_match_in_dist")  # the task first: its chart group
        assert [e.step for e in logged] == [100, 200, 300]  # the steps every seed logged
        for e in logged:
            expected = np.mean([validation_value(scheme, r["seed"], e.step) for r in runs])
            assert e.value == pytest.approx(expected, abs=1e-6)  # float32 in the event file
        for key in ("exact_match", "token_accuracy"):
            curve = acc.Scalars(f"copy/{key}_by_length_set_smoothing_0")
            by_length = [{row["length"]: row[key] for row in r["lengths"]} for r in runs]
            assert [e.step for e in curve] == sorted(by_length[0])
            for e in curve:
                expected = np.mean([values[e.step] for values in by_length])
                assert e.value == pytest.approx(expected, abs=1e-6)
        note = acc.Tensors("about/copy/text_summary")[0].tensor_proto.string_val[0].decode()
        assert f"mean of 3 run(s): `{scheme}-copy-seed0`" in note
        layout = layout_pb2.Layout.FromString(
            acc.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0]
        )
        assert [c.title for c in layout.category] == [
            "task copy: mean over seeds (one line per scheme)"
        ]
        regexes = [tag for chart in layout.category[0].chart for tag in chart.multiline.tag]
        assert all(regex.startswith("^copy/") for regex in regexes)
        assert all(chart.title.startswith("copy: ") for chart in layout.category[0].chart)


def test_sweep_figures_are_in_the_images_tab(sweep):
    out, results = sweep
    acc = events(write_sweep_tensorboard(results, out) / "figures")
    tags = ["sweep/accuracy_vs_length", "sweep/attention_vs_length", "sweep/learning_speed"]
    tags.append("sweep/order_sensitivity")  # sorted; attention: the runs hold diagnostics
    assert sorted(acc.Tags()["images"]) == tags
    for tag in tags:
        image = acc.Images(tag)[0]
        assert image.encoded_image_string[:4] == b"\x89PNG" and image.width > 300


def test_tensorboard_lists_the_sweep_runs_and_a_new_report_replaces_them(sweep):
    out, results = sweep
    root = write_sweep_tensorboard(results, out)
    keep = root / "notes.txt"
    keep.write_text("the user's own file")
    write_sweep_tensorboard([r for r in results if r["position"] != "alibi"], out)
    assert sorted(p.name for p in (root / "mean").iterdir()) == ["none", "rope"]
    assert keep.read_text() == "the user's own file"  # only the report's own files go
    assert len(list(root.rglob(f"*{SUFFIX}"))) == 3  # figures, two means: no leftovers
    runs = EventMultiplexer().AddRunsFromDirectory(str(out)).Runs()
    assert {"_sweep/figures", "_sweep/mean/none", "_sweep/mean/rope"} <= set(runs)


def test_a_symlinked_sweep_folder_is_refused(sweep, tmp_path_factory: pytest.TempPathFactory):
    out, results = sweep
    outside = tmp_path_factory.mktemp("outside")
    (out / "_sweep").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError, match="is a symlink"):
        write_sweep_tensorboard(results, out)
    assert list(outside.iterdir()) == []


def test_link_shows_the_mean_runs_unsmoothed_one_colour_per_scheme():
    url = urlsplit(tensorboard_url())
    query = parse_qs(url.query)
    assert url.fragment == "timeseries" and query["smoothing"] == ["0"]
    for run in ("_sweep/mean/rope", "_sweep/figures", "ablation/_sweep/mean/rope"):
        assert re.search(query["runFilter"][0], run)  # the logdir the sweep prints, or above it
    assert not re.search(query["runFilter"][0], "rope-copy-seed0")  # an older sweep's runs
    assert "runColorGroup" not in query  # one run per scheme: its colour in every task


def tensorboard_runs(logdir: Path) -> set[str]:
    """The runs TensorBoard lists for ``--logdir logdir``: every folder below it (links
    followed) that directly holds a file named like an event file, by its relative path."""
    return {
        os.path.relpath(folder, logdir)
        for folder, _, files in os.walk(logdir, followlinks=True)
        if any("tfevents" in name for name in files)
    }


def test_auto_selected_is_the_run_selectors_limit():
    """TensorBoard's run selector (Scalars, Custom Scalars, Images) checks every run when at
    most ``maxNamesToEnableByDefault`` of them match, else none: read from its frontend."""
    bundle = Path(tensorboard.__file__).parent / "webfiles.zip"
    with zipfile.ZipFile(bundle) as files:
        script = files.read("index.js").decode("utf-8", "replace")
    assert re.findall(r"maxNamesToEnableByDefault=(\d+)", script) == [str(AUTO_SELECTED)]
    assert "namesMatchingRegex.length<=i" in script  # at most that many: all checked


@pytest.mark.parametrize("seeds", [3, 6])
def test_a_sweep_writes_fewer_runs_than_tensorboard_selects(tmp_path: Path, seeds: int):
    """The default ablation (5 schemes x 2 tasks) with 3 and 6 seeds, each run's events where
    the training writes them (:func:`events_folder` of its config) and the sweep's report: the
    folder the sweep prints (``tensorboard --logdir OUT_DIR``) holds at most AUTO_SELECTED
    runs (it once held 41, and 71 with 6 seeds, and every chart opened empty), as does each
    task's folder of the runs' own events; the mean runs still read every run's events."""
    out = tmp_path / "ablation"
    seed_list = ",".join(str(seed) for seed in range(seeds))
    specs = expand(load_sweep(ABLATION, [f"out_dir={out}", f"seed={seed_list}"]))
    assert len(specs) == 10 * seeds
    committed = {(r["position"], r["task"]): r for r in RESULTS}
    results = []
    for spec in specs:
        config = load_config(None, spec.overrides)
        Path(config.run_dir).mkdir(parents=True)
        save_config(config, Path(config.run_dir) / "config.yaml")  # as the training does
        with SummaryWriter(
            str(events_folder(config.run_dir, config.log_dir, config.data.task))
        ) as writer:
            writer.add_scalar(f"compare/{config.data.task}/exact_match_in_dist", 0.5, 100)
        result = copy.deepcopy(committed[(config.model.position, config.data.task)])
        results.append(result | {"seed": config.seed, "run_dir": config.run_dir})
    root = write_sweep_tensorboard(results, out)
    opened = tensorboard_runs(out)
    assert opened == set(EventMultiplexer().AddRunsFromDirectory(str(out)).Runs())
    schemes = {r["position"] for r in RESULTS}
    assert opened == {"_sweep/figures", *(f"_sweep/mean/{scheme}" for scheme in schemes)}
    assert len(opened) <= AUTO_SELECTED
    for task in ("copy", "svo"):
        each = tensorboard_runs(Path(runs_root(out)) / task)
        assert len(each) == 5 * seeds <= AUTO_SELECTED
        assert events(root / "mean" / "rope").Scalars(f"{task}/exact_match_in_dist")[0].value == 0.5


def test_hparams_list_test_metrics_first_and_the_seed_as_an_integer(tmp_path: Path):
    config = load_config(None, ["seed=2", "train.target_accuracy=0.9", f"run_dir={tmp_path}"])
    with SummaryWriter(str(tmp_path)) as writer:
        write_hparams(writer, config, {"in_dist": 0.5, "2x": 0.1, "4x": 0.0}, 40, 1.5, False)
    acc = events(tmp_path)

    def plugin(tag: str) -> HParamsPluginData:
        return HParamsPluginData.FromString(acc.SummaryMetadata(tag).plugin_data.content)

    metrics = plugin("_hparams_/experiment").experiment.metric_infos
    tags = [m.name.tag for m in metrics]
    assert tags == list(HEADLINE)
    test = [i for i, tag in enumerate(tags) if tag.startswith("headline/")]
    assert test == list(range(len(test))) and len(test) == 8  # the test set's, first
    assert all("validation" in m.display_name for m in metrics if "validation" in m.name.tag)
    assert metrics[0].display_name == "TEST exact-match in dist"
    seed = plugin("_hparams_/session_start_info").session_start_info.hparams["seed"]
    assert seed.string_value == "2" and int(seed.string_value) == 2  # not 2.0000
    assert acc.Scalars("hparam/validation_reached_target")[0].value == 0.0  # 0.5 < 0.9
    assert "hparam/steps_to_target" not in acc.Tags()["scalars"]
    assert acc.Scalars("hparam/validation_exact_match_in_dist")[0].value == 0.5


def test_an_evaluation_logs_unsmoothable_names_a_figure_and_reached_target(tmp_path: Path):
    result = copy.deepcopy(next(r for r in RESULTS if r["task"] == "copy"))
    result["reached_target"] = False  # a run that ended at its step cap
    write_tensorboard(result, tmp_path)
    acc = events(tmp_path)
    curve = acc.Scalars("by_length_set_smoothing_0/exact_match")
    rows = [row for row in result["lengths"] if row["supported"]]
    assert [e.step for e in curve] == [row["length"] for row in rows]
    assert [e.value for e in curve] == pytest.approx([row["exact_match"] for row in rows], abs=1e-6)
    (image,) = acc.Images("figures/accuracy_vs_length")
    assert image.encoded_image_string[:4] == b"\x89PNG" and image.step == result["train_steps"]
    assert acc.Scalars("headline/reached_target")[0].value == 0.0


def test_a_full_disk_while_the_report_writes_its_tensorboard_runs_is_one_line(
    sweep, monkeypatch: pytest.MonkeyPatch
):
    """The mean runs and the figures run are written whole or not at all: a full disk is one
    ``OSError`` line naming the file (no writer-thread traceback), and no torn event file."""
    import errno

    import lab.common.events.files

    out, results = sweep
    real = lab.common.events.files.atomic_writer

    def full_disk(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lab.common.events.files, "atomic_writer", full_disk)
    with pytest.raises(OSError) as error:
        write_sweep_tensorboard(results, out)
    assert error.value.errno == errno.ENOSPC and "\n" not in str(error.value)
    assert "cannot write" in str(error.value) and "_sweep" in str(error.value)
    assert not list((out / "_sweep").rglob("events.out.tfevents.*"))
    monkeypatch.setattr(lab.common.events.files, "atomic_writer", real)
    root = write_sweep_tensorboard(results, out)  # room again: every run written
    assert len(list(root.rglob(f"*{SUFFIX}"))) == 4
