"""Break tests of run-folder safety and hostile inputs: each is an input that
got past the round's guarantees, run as a user would, with the file system checked afterwards.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import SHORT, TINY_RUN, one_error_line, tiny_config

import eval as eval_cli
import lab.evaluation.runs
import sweep as sweep_cli
import train as train_cli
from lab.common.checkpoint import checkpoint_path, load_checkpoint
from lab.common.config import ConfigError, config_from_dict
from lab.evaluation.evaluate import load_evaluation
from lab.reporting.sweep_tensorboard import write_sweep_tensorboard
from lab.sweeps.sweep import expand, load_sweep, prepare_out_dir, run_identity

ROOT = Path(__file__).resolve().parent.parent
QUICK = str(ROOT / "configs" / "quick.yaml")


def test_another_schemes_option_does_not_duplicate_a_run() -> None:
    """`sweep.py position=rope,alibi model.options.rope.theta=10000,20000` trained alibi twice
    (alibi never reads rope's options), bit-identical, and the report pooled the copies."""
    grid = ["position=rope,alibi", "model.options.rope.theta=10000,20000", "seed=0", "task=svo"]
    runs = expand(load_sweep(QUICK, grid))
    assert [r.name for r in runs] == [
        "rope-svo-seed0-theta10000",
        "rope-svo-seed0-theta20000",
        "alibi-svo-seed0",
    ]
    assert runs[2].aliases == ["alibi-svo-seed0-theta20000 = alibi-svo-seed0"]
    assert not any("model.options.rope" in o for o in runs[2].overrides)


def test_another_schemes_options_are_not_part_of_a_runs_identity() -> None:
    one = tiny_config(Path("a"), "model.position=alibi", "model.options.rope.theta=10000")
    two = tiny_config(Path("b"), "model.position=alibi", "model.options.rope.theta=20000")
    assert run_identity(one) == run_identity(two)
    rope = [tiny_config(Path("a"), f"model.options.rope.theta={t}") for t in (10000, 20000)]
    assert run_identity(rope[0]) != run_identity(rope[1])


def test_a_linked_sweep_tensorboard_folder_is_refused_before_any_run(tmp_path: Path) -> None:
    """`OUT/_sweep/mean -> /elsewhere` once got the mean runs' events written elsewhere, and
    `OUT/_sweep -> /elsewhere` a traceback after every run had trained."""
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "sweep"
    sweep = load_sweep(QUICK, [f"out_dir={out}", "position=rope", "task=copy", "seed=0"])
    for link in (out / "_sweep", out / "_sweep" / "mean", out / "_sweep" / "figures"):
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(outside, target_is_directory=True)
        with pytest.raises(OSError, match="symbolic link or a file"):
            prepare_out_dir(sweep, expand(sweep))
        link.unlink()
    assert not any(outside.iterdir())


def test_the_mean_runs_never_follow_a_link_below_sweep(finished_run: Path, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "sweep"
    result = json.loads((finished_run / "eval.json").read_text())
    for below in ("figures", "mean", f"mean/{result['position']}"):
        link = out / "_sweep" / below
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(outside, target_is_directory=True)
        with pytest.raises(OSError, match="symbolic link"):
            write_sweep_tensorboard([result], out)
        link.unlink()
    assert not any(outside.iterdir())
    result["task"] = "../../outside"  # a hand-edited eval.json: a tag name, never a folder
    write_sweep_tensorboard([result], out)
    assert not any(outside.iterdir())
    assert sorted(p.name for p in (out / "_sweep" / "mean").iterdir()) == [result["position"]]


def test_a_sweep_report_with_a_linked_mean_folder_is_one_line(tmp_path: Path, capsys, monkeypatch):
    """The report's TensorBoard runs refused at report time (a link planted during the sweep)
    are one error line and exit 1; the other reports are written."""
    outside = tmp_path / "outside"
    outside.mkdir()
    argv = ["--config", QUICK, "--workers", "1", f"out_dir={tmp_path / 's'}", "position=rope"]
    argv += ["task=copy", "seed=0", "train.steps=6", "train.warmup_steps=1", "train.eval_every=6"]
    argv += ["model.d_model=16", "model.n_layers=1", "model.d_ff=32", "train.progress=false"]
    argv += ["eval.samples=8", "eval.probe_samples=8", "data.train_max_length=3"]
    real = sweep_cli.run_all

    def plant_then_run(*args, **kwargs):
        (tmp_path / "s" / "_sweep").mkdir(parents=True)
        (tmp_path / "s" / "_sweep" / "mean").symlink_to(outside, target_is_directory=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_cli, "run_all", plant_then_run)
    assert sweep_cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "TensorBoard mean runs were not written" in err
    assert (tmp_path / "s" / "report.md").is_file()
    assert not any(outside.iterdir())


def checkpoint_with(run: Path, where: Path, **changes) -> Path:
    folder = where / "hostile"
    folder.mkdir(parents=True)
    state = torch.load(checkpoint_path(run), weights_only=True)
    state.update(changes)
    torch.save(state, checkpoint_path(folder))
    return folder


def test_a_checkpoint_whose_config_names_another_task_is_refused(finished_run, tmp_path, capsys):
    """A copy checkpoint whose saved config names svo was evaluated and reported as svo
    (`eval.py`), and `--resume` trained on it and died in an IndexError traceback."""
    state = torch.load(checkpoint_path(finished_run), weights_only=True)
    config = dict(state["config"], data={**state["config"]["data"], "task": "svo"})
    config["data"]["train_min_length"] = config["data"]["train_max_length"] = None
    with pytest.raises(ConfigError, match="model.vocab_size=.* but its task 'svo' has"):
        config_from_dict(config)
    folder = checkpoint_with(finished_run, tmp_path, config=config)
    assert eval_cli.main([str(folder), "--no-progress", "eval.samples=8"]) == 2
    assert "another task" in one_error_line(capsys)
    assert not (folder / "eval.json").exists()
    assert train_cli.main(["--resume", str(folder), "train.steps=8"]) == 2
    assert "another task" in one_error_line(capsys)


def test_a_checkpoint_step_beyond_any_budget_is_refused(finished_run, tmp_path, capsys) -> None:
    """A step of 10**30 was evaluated, wrote eval.json, then failed in TensorBoard."""
    folder = checkpoint_with(finished_run, tmp_path, step=10**30)
    with pytest.raises(ValueError, match="its 'step' is .* it must be an integer >= 0 and <="):
        load_checkpoint(folder)
    assert eval_cli.main([str(folder), "--no-progress", "eval.samples=8"]) == 2
    one_error_line(capsys)
    assert not (folder / "eval.json").exists()


def test_an_eval_json_nested_too_deep_is_treated_as_missing(finished_run, tmp_path, capsys):
    """`[[[[...]]]]` gave a RecursionError that failed the run in a sweep, never re-evaluated."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "eval.json").write_text("[" * 100_000 + "]" * 100_000)
    assert load_evaluation(run) is None
    assert "treated as missing" in capsys.readouterr().err


def test_overwrite_with_a_folder_named_checkpoint_pt_deletes_nothing(finished_run, tmp_path):
    """A run folder (config + events) holding a DIRECTORY named checkpoint.pt lost its config
    and events to --overwrite, then trained and failed at the first save."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    checkpoint_path(run).unlink()  # a run stopped before its first checkpoint ...
    checkpoint_path(run).mkdir()  # ... and a user's folder of that name
    (checkpoint_path(run) / "mine.txt").write_text("mine")
    before = sorted(p.name for p in run.iterdir())
    for flags in (["--overwrite"], []):
        code = train_cli.main([*TINY_RUN, *SHORT, f"run_dir={run}", *flags])
        assert code == 2
        assert sorted(p.name for p in run.iterdir()) == before
    assert (checkpoint_path(run) / "mine.txt").read_text() == "mine"


def test_workers_are_bounded_and_never_more_than_the_runs(tmp_path: Path, capsys, monkeypatch):
    """`--workers 1000` was taken as is: one process per run, however many."""
    assert sweep_cli.main(["--config", QUICK, "--workers", "1000", f"out_dir={tmp_path}"]) == 2
    assert "--workers=1000 is invalid" in one_error_line(capsys)
    seen = []
    monkeypatch.setattr(sweep_cli, "run_all", lambda specs, w, g: (seen.append(w), ([], None))[1])
    monkeypatch.setattr(sweep_cli, "report", lambda *_, **__: 0)
    argv = ["--config", QUICK, "--workers", "200", f"out_dir={tmp_path}", "position=rope,alibi"]
    assert sweep_cli.main([*argv, "task=copy", "seed=0"]) == 0
    assert seen == [2] and "2 runs into" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("key", "value"),
    [("position", "alibi"), ("task", "svo"), ("seed", 7), ("train_lengths", [2, 3])],
)
def test_an_eval_json_at_odds_with_its_own_config_is_re_evaluated(
    finished_run, tmp_path, capsys, key, value
):
    """A hand-edited `"position": "alibi"` (checksum untouched) was taken as current, and the
    sweep reported the rope run in an alibi row."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    assert load_evaluation(run) is not None
    result = json.loads((run / "eval.json").read_text())
    (run / "eval.json").write_text(json.dumps({**result, key: value}))
    assert load_evaluation(run) is None
    err = capsys.readouterr().err
    assert f"{key} " in err and "its config's" in err and "treated as missing" in err


def test_eval_with_a_folder_named_like_a_report_refuses_before_evaluating(
    finished_run, tmp_path, capsys, monkeypatch
):
    """A folder named report.md in the run: eval.py evaluated, wrote eval.json, results.csv and
    results.json, then failed naming a temporary file."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "eval.json").unlink()
    (run / "report.md").mkdir()

    def refuse(*args, **kwargs):
        raise AssertionError("evaluated before refusing")

    monkeypatch.setattr(lab.evaluation.runs, "evaluate_run", refuse)
    before = sorted(p.name for p in run.iterdir())
    assert eval_cli.main([str(run), "--no-progress"]) == 2
    assert "report.md' is a folder" in one_error_line(capsys)
    assert sorted(p.name for p in run.iterdir()) == before
    (run / "report.md").rmdir()
    (run / "eval.json").mkdir()
    before = sorted(p.name for p in run.iterdir())
    assert eval_cli.main([str(run), "--no-progress"]) == 2
    assert "eval.json' is a folder" in one_error_line(capsys)
    assert sorted(p.name for p in run.iterdir()) == before


def test_a_sweep_with_a_folder_named_like_a_report_refuses_before_any_run(tmp_path: Path):
    (tmp_path / "results.csv").mkdir()
    sweep = load_sweep(QUICK, [f"out_dir={tmp_path}", "position=rope", "task=copy", "seed=0"])
    with pytest.raises(IsADirectoryError, match="results.csv' is a folder"):
        prepare_out_dir(sweep, expand(sweep))


@pytest.mark.parametrize("at", [{}, "halved"])
def test_an_eval_json_whose_multiples_are_not_its_lengths_is_re_evaluated(
    finished_run, tmp_path, capsys, at
):
    """`"summary": {"at": {}}` (checksum untouched) was taken as current: the report's
    1.25x ... 4x cells showed dashes, as if those lengths were unsupported."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    result = json.loads((run / "eval.json").read_text())
    if at == "halved":
        at = {label: value / 2 + 0.25 for label, value in result["summary"]["at"].items()}
    result["summary"]["at"] = at
    (run / "eval.json").write_text(json.dumps(result))
    assert load_evaluation(run) is None
    assert "summary.at[" in capsys.readouterr().err


def test_eval_with_an_empty_out_writes_nothing(finished_run, tmp_path, capsys) -> None:
    """`eval.py RUN --out "$UNSET"` wrote the reports into the run folder."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = sorted(p.name for p in run.iterdir())
    assert eval_cli.main([str(run), "--out", "", "--no-progress"]) == 2
    assert "--out is empty" in one_error_line(capsys)
    assert sorted(p.name for p in run.iterdir()) == before


def test_eval_refuses_a_linked_out_folder_before_evaluating_any_run(
    finished_run, tmp_path, capsys, monkeypatch
):
    """With two runs, `--out DIR` where DIR/b -> elsewhere evaluated run a first."""
    parent = tmp_path / "runs"
    for name in ("a", "b"):
        shutil.copytree(finished_run, parent / name)
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "b").symlink_to(outside, target_is_directory=True)

    def refuse(*args, **kwargs):
        raise AssertionError("evaluated before refusing")

    monkeypatch.setattr(lab.evaluation.runs, "evaluate_run", refuse)
    argv = [str(parent), "--out", str(tmp_path / "out"), "--no-progress"]
    assert eval_cli.main(argv) == 2
    assert "is a symbolic link" in one_error_line(capsys)
    assert not any(outside.iterdir())


@pytest.mark.parametrize(("field", "value"), [("reached_target", "yes"), ("eval_pending", 1)])
def test_a_checkpoints_training_record_of_another_type_is_refused(
    finished_run, tmp_path, field, value
):
    """`reached_target: "yes"` was read as not reached (a learned run reported as not learned),
    `eval_pending: 1` as no evaluation pending (a stopped evaluation never redone)."""
    folder = checkpoint_with(finished_run, tmp_path, **{field: value})
    with pytest.raises(ValueError, match=f"its {field!r} is"):
        load_checkpoint(folder)


def test_every_field_of_a_real_checkpoint_has_a_type_check(finished_run: Path) -> None:
    from lab.common.checkpoint import FIELDS

    assert set(torch.load(checkpoint_path(finished_run), weights_only=True)) <= set(FIELDS)
