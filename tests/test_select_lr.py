"""``sweep.py --select-lr``: each scheme's learning rate chosen alike, on in-distribution
validation only, at an equal budget, and written into a sweep file that then runs with it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import sweep as sweep_cli
from lab.sweeps.select_lr import Arm, choose, parse_numbers, rank_key, why
from lab.sweeps.sweep import expand, load_sweep
from tests.conftest import one_error_line

QUICK = str(Path(__file__).resolve().parents[1] / "configs" / "quick.yaml")
TINY = [
    "task=svo",
    "train.steps=60",
    "train.eval_every=20",
    "model.d_model=32",
    "model.d_ff=64",
    "model.n_layers=1",
    "eval.samples=16",
    "eval.probe_samples=8",
]


def arm(scheme="rope", lr=1e-3, steps=100, reached=True, validation=1.0, task="copy", lm=False):
    return Arm(scheme, task, 100, lr, steps, 400, reached, validation, lm)


def test_reaching_the_target_beats_fewer_steps_and_fewer_steps_beat_accuracy():
    slow = [arm(lr=1e-3, steps=380), arm(lr=1e-3, steps=390, task="svo")]
    fast_one_miss = [arm(lr=3e-3, steps=50), arm(lr=3e-3, steps=400, reached=False, task="svo")]
    assert choose([*slow, *fast_one_miss], [1e-3, 3e-3]) == {"rope": 1e-3}  # 2/2 beats 1/2
    fast = [arm(lr=3e-3, steps=50), arm(lr=3e-3, steps=60, task="svo")]
    assert choose([*slow, *fast], [1e-3, 3e-3]) == {"rope": 3e-3}  # 110 steps beat 770
    # an arm below the target counts the whole budget, whatever step it stopped at
    assert rank_key([arm(steps=10, reached=False)])[1] == 400


def test_without_a_target_reached_the_validation_accuracy_decides_and_ties_keep_the_first():
    low = [arm(lr=1e-3, steps=400, reached=False, validation=0.30)]
    high = [arm(lr=3e-4, steps=400, reached=False, validation=0.55)]
    assert choose([*low, *high], [1e-3, 3e-4]) == {"rope": 3e-4}
    same = [arm(lr=1e-3), arm(lr=3e-3)]
    assert choose(same, [1e-3, 3e-3]) == {"rope": 1e-3}
    assert choose(same, [3e-3, 1e-3]) == {"rope": 3e-3}


def test_language_model_arms_rank_by_lower_validation_perplexity():
    arms = [arm(lr=1e-3, validation=9.5, lm=True), arm(lr=3e-3, validation=7.25, lm=True)]
    assert choose(arms, [1e-3, 3e-3]) == {"rope": 3e-3}
    assert "validation perplexity 7.25" in why(arms, "rope", 3e-3)


def test_each_scheme_gets_its_own_rate():
    arms = [
        arm("rope", 1e-3, validation=0.2, reached=False),
        arm("rope", 3e-3, validation=0.9, reached=False),
        arm("learned", 1e-3, validation=0.8, reached=False),
        arm("learned", 3e-3, validation=0.1, reached=False),
    ]
    assert choose(arms, [1e-3, 3e-3]) == {"rope": 3e-3, "learned": 1e-3}
    with pytest.raises(ValueError, match="'rope' has no finished tuning run at lr=0.01"):
        choose(arms, [1e-3, 1e-2])


@pytest.mark.parametrize(
    "value, kind, message",
    [
        ("0", float, r"rates in \(0, 1\)"),
        ("abc", float, "rates"),
        ("1.5", float, "rates"),
        ("-1", int, "seeds >= 0"),
        ("", int, "seeds"),
        ("1.5", int, "seeds"),
        ("1e-3,,2e-3", float, "rates"),  # an empty entry is a typo, not two rates
        ("0,1,", int, "seeds"),
    ],
)
def test_bad_rates_and_seeds_are_one_line(value, kind, message):
    with pytest.raises(ValueError, match=message):
        parse_numbers(value, "--x", kind)


def test_duplicate_rates_are_one_rate():
    assert parse_numbers("1e-3,0.001,3e-3", "--lrs", float) == [1e-3, 3e-3]


def test_the_command_rejects_bad_input_in_one_line(tmp_path: Path, capsys):
    argv = ["--select-lr", "--config", QUICK, f"out_dir={tmp_path / 'x'}"]
    assert sweep_cli.main([*argv, "--lrs", "0,1e-3"]) == 2
    assert "--lrs='0,1e-3' is invalid" in one_error_line(capsys)
    assert sweep_cli.main([*argv, "--workers", "-1"]) == 2
    assert "--workers=-1 is invalid" in one_error_line(capsys)
    assert not (tmp_path / "x").exists()


def test_select_lr_trains_every_scheme_at_every_rate_and_writes_a_sweep_that_uses_them(
    tmp_path: Path, capsys
):
    out = tmp_path / "tune"
    argv = ["--select-lr", "--config", QUICK, "--lrs", "1e-3,3e-2", "--workers", "1"]
    argv += ["train.target_accuracy=null"]  # 60 steps learn nothing: ranked by validation
    assert sweep_cli.main([*argv, "position=rope,learned", *TINY, f"out_dir={out}"]) == 0
    selection = json.loads((out / "lr_selection.json").read_text())
    arms = [Arm(**a) for a in selection["arms"]]
    assert sorted((a.scheme, a.lr, a.seed, a.task) for a in arms) == [
        ("learned", 1e-3, 100, "svo"),
        ("learned", 3e-2, 100, "svo"),
        ("rope", 1e-3, 100, "svo"),
        ("rope", 3e-2, 100, "svo"),
    ]  # the tuning seed, never the sweep's evaluation seed 0
    assert all(a.budget == 60 and a.steps <= 60 for a in arms)  # an equal budget
    assert selection["chosen"] == choose(arms, [1e-3, 3e-2])
    assert selection["rates"] == [1e-3, 3e-2] and "--select-lr" in selection["command"]
    assert "in-distribution validation only" in selection["criterion"]
    written = out / "selected_sweep.yaml"
    assert "python sweep.py --config" in capsys.readouterr().out
    sweep = load_sweep(written, TINY + [f"out_dir={tmp_path / 'compare'}"])
    runs = {spec.name: spec.overrides for spec in expand(sweep)}
    assert len(runs) == 2
    for name, overrides in runs.items():
        scheme = name.split("-")[0]
        lrs = [o for o in overrides if o.startswith("train.lr=")]
        assert float(lrs[-1].split("=")[1]) == selection["chosen"][scheme], (name, lrs)


def test_tuning_a_sweep_file_that_holds_chosen_rates_trains_at_the_grid_rates(
    tmp_path: Path,
) -> None:
    """A committed sweep file carries its chosen rates in ``when`` blocks (as
    configs/passkey.yaml does); tuning on it again must train at ``--lrs``, not at them."""
    import argparse

    from lab.common.config import load_config
    from lab.sweeps.select_lr import tuning_sweep

    path = tmp_path / "chosen.yaml"
    path.write_text(
        f"out_dir: {tmp_path / 'compare'}\n"
        "base: {train: {steps: 10, lr: 0.01, warmup_steps: 1}}\n"
        "grid: {model.position: [rope, alibi], data.task: [copy], seed: [0]}\n"
        "when: {model.position=rope: {train: {lr: 0.003}}}\n"
    )
    args = argparse.Namespace(lrs="1e-3,3e-4", seeds="100", config=str(path), overrides=[])
    sweep, rates = tuning_sweep(args)
    trained = {s.name: load_config(None, s.overrides).train.lr for s in expand(sweep)}
    assert rates == [1e-3, 3e-4] and sweep.out_dir == f"{tmp_path / 'compare'}-lr"
    assert trained == {
        "rope-copy-seed100-lr0.001": 1e-3,
        "rope-copy-seed100-lr0.0003": 3e-4,
        "alibi-copy-seed100-lr0.001": 1e-3,
        "alibi-copy-seed100-lr0.0003": 3e-4,
    }


def test_a_rate_is_trained_exactly_as_given() -> None:
    """A rate with more than 6 significant digits once trained at its ``:g`` rounding and then
    matched no arm: a traceback after the whole tuning."""
    import argparse

    from lab.common.config import load_config
    from lab.sweeps.select_lr import tuning_sweep

    args = argparse.Namespace(
        lrs="1.23456789e-3,1.0000001e-3", seeds="100", config=QUICK, overrides=TINY
    )
    sweep, rates = tuning_sweep(args)
    trained = sorted({load_config(None, s.overrides).train.lr for s in expand(sweep)})
    assert rates == [1.23456789e-3, 1.0000001e-3]
    assert trained == sorted(rates)  # two runs per scheme, not one collapsed rate


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--seeds", "0"], "--seeds='0' includes the sweep's own seed(s) [0]"),
        (["train.lr=2e-3"], "train.lr=2e-3 beside --select-lr: the tuning takes its rates from"),
        (["model.layout=rope@4"], "sets model.layout='rope@4' (a hybrid layout"),
        (["model.heads=rope:2+none:2"], "sets model.heads='rope:2+none:2' (a hybrid layout"),
        (
            ["model.window=4,8"],
            "runs 'rope-svo-seed100-window4' and 'rope-svo-seed100-window8' differ in a setting",
        ),
    ],
)
def test_tuning_on_judged_seeds_or_hybrid_layouts_is_refused_before_training(
    tmp_path: Path, capsys, extra: list[str], message: str
) -> None:
    out = tmp_path / "tune"
    argv = ["--select-lr", "--config", QUICK, "--lrs", "1e-3", *extra, *TINY]
    if extra[0].startswith("model."):
        argv.append("position=rope")
    assert sweep_cli.main([*argv, f"out_dir={out}"]) == 2
    assert message in one_error_line(capsys)
    assert not out.exists()


def test_a_bad_write_target_is_refused_before_training(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    mine = tmp_path / "mine.yaml"
    mine.write_text("# my own sweep file\nout_dir: x\n")
    fifo = tmp_path / "fifo.yaml"  # blocked the read for good
    os.mkfifo(fifo)
    cases = {
        str(fifo): "is a link or no regular file",
        str(tmp_path): "is a folder",
        str(tmp_path / "missing" / "x.yaml"): f"is in {str(tmp_path / 'missing')!r}, which",
        str(run / "sweep.yaml"): "is inside a run's folder",
        str(mine): "is a file this command did not write",
    }
    for target, problem in cases.items():
        argv = ["--select-lr", "--config", QUICK, "--lrs", "1e-3", "--write", target, *TINY]
        assert sweep_cli.main([*argv, f"out_dir={tmp_path / 'tune'}"]) == 2
        assert f"--write={target!r} {problem}" in one_error_line(capsys), target
    assert not (tmp_path / "tune").exists() and not (tmp_path / "missing").exists()
    assert mine.read_text() == "# my own sweep file\nout_dir: x\n"


def test_a_tuning_folder_and_a_sweep_folder_are_kept_apart(tmp_path: Path, capsys) -> None:
    """A sweep (or extend study) into a finished tuning folder, and a tuning into a sweep's
    folder, are refused: each would mix its runs and replace the other's sweep.json."""
    from lab.common.config import ConfigError
    from lab.sweeps.sweep import check_program

    tuning, sweep = tmp_path / "tune", tmp_path / "sweep"
    for folder, command in (
        (tuning, "python sweep.py --select-lr --lrs 1e-3"),
        (sweep, "python sweep.py"),
    ):
        folder.mkdir()
        (folder / "sweep.json").write_text(json.dumps({"command": command}))
    for program in ("sweep", "extend-study"):
        with pytest.raises(ConfigError, match="holds the results of `python sweep.py --select-lr`"):
            check_program(tuning, program)
    check_program(tuning, "select-lr")
    argv = ["--select-lr", "--config", QUICK, "--lrs", "1e-3", *TINY, f"out_dir={sweep}"]
    assert sweep_cli.main(argv) == 2
    assert "holds the results of `python sweep.py`" in one_error_line(capsys)
    assert sorted(p.name for p in sweep.iterdir()) == ["sweep.json"]


def test_write_onto_the_tuning_folders_own_files_is_refused(tmp_path: Path, capsys) -> None:
    out = tmp_path / "tune"
    out.mkdir()
    for name in ("lr_selection.json", "sweep.json"):
        argv = ["--select-lr", "--config", QUICK, "--lrs", "1e-3", "--write", str(out / name)]
        assert sweep_cli.main([*argv, *TINY, f"out_dir={out}"]) == 2
        assert "is a file of the tuning folder, which this command writes itself" in (
            one_error_line(capsys)
        )
    assert not list(out.iterdir())


def test_a_pass_that_trains_nothing_keeps_the_tuning_time_of_the_pass_that_did(
    tmp_path: Path,
) -> None:
    from lab.sweeps.select_lr import kept_seconds, recipe

    skipped = [{"status": "skipped"}] * 2
    assert kept_seconds(tmp_path, skipped, 5.0) == 5.0  # no earlier record
    (tmp_path / "lr_selection.json").write_text(json.dumps({"seconds": 1878.9}))
    assert kept_seconds(tmp_path, skipped, 5.0) == 1878.9
    assert kept_seconds(tmp_path, [{"status": "trained"}, *skipped], 5.0) == 5.0
    sweep = load_sweep(QUICK, [*TINY, "position=rope,alibi", "task=svo,copy"])
    from lab.common.config import load_config

    tuned = recipe([load_config(None, spec.overrides) for spec in expand(sweep)])
    assert tuned["data.task"] == ["copy", "svo"] and tuned["model.d_model"] == [32]
    assert tuned["train.steps"] == [60]


def test_no_rate_that_learned_is_no_rate_chosen(tmp_path: Path, capsys):
    """Every rate missing the target ranked as a tie that list order broke, and a sweep file
    'chose' the first rate; the tuning's numbers are written, no sweep file, and one line says
    which scheme learned at no rate."""
    out = tmp_path / "tune"
    argv = ["--select-lr", "--config", QUICK, "--lrs", "1e-3", "--workers", "1"]
    assert sweep_cli.main([*argv, "position=rope", *TINY, f"out_dir={out}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: no rate learned rope within the tuning budget")
    assert (out / "lr_selection.json").is_file() and not (out / "selected_sweep.yaml").exists()
