"""Trust in run folders: eval.py refuses bad values before any work, every way a run
(re)starts logs each TensorBoard step once, sweep grid points that are one run train once,
--overwrite deletes only the project's files of a proven run, an eval.json is never taken for
another run's, and writes never follow a linked folder out of a run. Each test is one input of
the issue, run as the user ran it, with the file system checked afterwards.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import (
    FAST_EVAL,
    SHORT,
    STEPS,
    SWEEP_TINY,
    TINY_RUN,
    crash_at,
    interrupt_at,
    one_error_line,
    tiny_config,
)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

import eval as eval_cli
import lab.evaluation.evaluate
import lab.evaluation.runs
import lab.training.trainer
import sweep as sweep_cli
import train as train_cli
from lab.common.checkpoint import checkpoint_path, load_checkpoint
from lab.common.config import save_config
from lab.common.files import safe_folder
from lab.common.outputs import run_below
from lab.evaluation.evaluate import evaluate_run, load_evaluation
from lab.reporting.report import write_reports
from lab.sweeps.sweep import RunSpec, changed_settings, expand, load_sweep
from lab.training.resume import resume_config
from lab.training.trainer import TrainingInterrupted, train

ROOT = Path(__file__).resolve().parent.parent
QUICK = str(ROOT / "configs" / "quick.yaml")


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (relative path -> bytes), but the run lock (``.lock``, which
    a refused training leaves, holding its process id)."""
    files = [p for p in folder.rglob("*") if p.is_file() and p.name != ".lock"]
    return {str(p.relative_to(folder)): p.read_bytes() for p in files}


def logged_steps(run_dir: Path, tag: str = "train/loss") -> list[int]:
    """Every step logged under ``tag`` in every event file of ``run_dir`` (read raw: no purge,
    as any viewer reads them), sorted: a step logged twice shows twice. (Sorted, since file
    names end in a writer counter that sorts "10" before "9", so file order is no step order.)"""
    steps = []
    for path in run_dir.glob("events.out.tfevents.*"):
        for event in EventFileLoader(str(path)).Load():
            steps += [event.step for value in event.summary.value if value.tag == tag]
    return sorted(steps)


def copy_of(run: Path, where: Path) -> Path:
    shutil.copytree(run, where)
    return where


# ---------------------------------------------------------------------------------------------
# (7) eval.py checks every value before any evaluation; --out is created only when written
# ---------------------------------------------------------------------------------------------


def never_evaluate(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("evaluated before refusing")

    monkeypatch.setattr(lab.evaluation.runs, "evaluate_run", refuse)


def test_eval_refuses_a_length_over_the_limit_before_evaluating(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch
) -> None:
    """`eval.py runs/default eval.lengths=[5000] --out runs/evlong` once evaluated for 174 s,
    wrote six files, then exited 2; a refused --out was also left behind as an empty folder."""
    never_evaluate(monkeypatch)
    before = files_of(finished_run)
    out = tmp_path / "evlong" / "deeper"
    assert eval_cli.main([str(finished_run), "eval.lengths=[5000]", "--out", str(out)]) == 2
    err = one_error_line(capsys)
    assert "eval.lengths=[5000] is too long" in err and "maximum is 4096 tokens" in err
    assert not (tmp_path / "evlong").exists()
    assert files_of(finished_run) == before


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.max_length_factor=2000", "eval.max_length_factor=2000.0 is too long"),
        ("eval.position_options.rotary_fraction=0.5", "cannot change at evaluation"),
    ],
)
def test_eval_refuses_a_value_this_run_cannot_take_and_creates_nothing(
    finished_run: Path, tmp_path: Path, capsys, monkeypatch, override: str, message: str
) -> None:
    never_evaluate(monkeypatch)
    assert eval_cli.main([str(finished_run), override, "--out", str(tmp_path / "out")]) == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_eval_creates_out_when_it_writes(finished_run: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "new" / "out"
    argv = [str(finished_run), "--out", str(out), "--no-progress", "eval.lengths=[2,4]"]
    assert eval_cli.main([*argv, "eval.samples=8", "eval.probe_samples=8"]) == 0
    assert (out / "eval.json").is_file() and (out / "results.csv").is_file()


# ---------------------------------------------------------------------------------------------
# (13) an eval.json carries the identity of the run it evaluated; readers check it
# ---------------------------------------------------------------------------------------------


def test_eval_json_names_the_checkpoint_it_evaluated(finished_run: Path) -> None:
    saved = json.loads((finished_run / "eval.json").read_text())
    digest = hashlib.sha256(checkpoint_path(finished_run).read_bytes()).hexdigest()
    assert saved["checkpoint"] == {"run": "run", "step": 6, "sha256": digest}
    assert load_evaluation(finished_run) == saved


def test_eval_out_into_another_run_is_refused(
    finished_run: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """`eval.py RUN_A --out RUN_B` once replaced RUN_B's eval.json with RUN_A's."""
    run_b = tmp_path / "b"
    train(tiny_config(run_b, *SHORT, "seed=1"))
    before = files_of(run_b)
    never_evaluate(monkeypatch)
    assert eval_cli.main([str(finished_run), "--out", str(run_b)]) == 2
    assert "holds another run (checkpoint.pt)" in one_error_line(capsys)
    assert files_of(run_b) == before


def test_every_entry_point_refuses_the_same_output_folders(
    finished_run: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """`eval.py RUN --out SWEEP_DIR` once replaced that sweep's LM report and figures and added
    files at its root; one check (lab.common.outputs.output_problem) now refuses, for every
    entry point, the root, a sweep's folder and a folder inside another run's."""
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / "sweep.json").write_text('{"seconds": 1.0}\n')
    (sweep_dir / "lm_report.md").write_text("# Language-model report\n")
    before, run_before = files_of(sweep_dir), files_of(finished_run)
    inside = finished_run / "evaluations" / "x"
    never_evaluate(monkeypatch)
    refusals = {
        ("--out", str(sweep_dir)): f"--out '{sweep_dir}' is a sweep's folder (sweep.json)",
        ("--out", "/"): "--out '/' is the filesystem root",
        ("--out", str(inside)): f"--out '{inside}' is inside the folder of the run",
    }
    for argv, message in refusals.items():
        assert eval_cli.main([str(finished_run), *argv]) == 2
        assert message in one_error_line(capsys)
    for run_dir, message in {
        sweep_dir: f"run_dir='{sweep_dir}' is a sweep's folder (sweep.json)",
        inside: f"run_dir='{inside}' is inside the folder of the run '{finished_run}'",
        "/": "run_dir='/' is the filesystem root",
    }.items():
        code, err = train_cli_line(capsys, *TINY_RUN, *SHORT, f"run_dir={run_dir}")
        assert code == 2 and message in err
    child = finished_run / "child"
    assert train_cli.main(["--extend", str(finished_run), f"run_dir={child}"]) == 2
    assert f"run_dir='{child}' is inside the folder of the run" in one_error_line(capsys)
    out_dir = finished_run / "sweep"
    assert sweep_cli.main(["--config", QUICK, f"out_dir={out_dir}", *SWEEP_TINY]) == 2
    assert f"out_dir='{out_dir}' is inside the folder of the run" in one_error_line(capsys)
    assert sweep_cli.main(["--config", QUICK, f"out_dir={finished_run}", *SWEEP_TINY]) == 2
    assert "holds another run (checkpoint.pt)" in one_error_line(capsys)
    assert files_of(sweep_dir) == before and files_of(finished_run) == run_before
    assert eval_cli.main([str(sweep_dir), "--out", str(sweep_dir)]) == 2  # PATH itself: allowed
    assert "no checkpoint.pt in" in one_error_line(capsys)  # refused later: no run under it


def test_a_run_dir_holding_another_run_below_it_is_refused(
    finished_run: Path, tmp_path: Path, capsys
) -> None:
    """A run trained into a folder that holds runs below it (``run_dir=runs``) shared its
    folder with theirs, and its ``--overwrite`` deleted files of theirs; it is refused in one
    line naming the run below, for train.py and an extend child alike. The search is bounded
    (three levels, symbolic links not followed)."""
    holder = finished_run.parent
    before = files_of(finished_run)
    code, err = train_cli_line(capsys, *TINY_RUN, *SHORT, f"run_dir={holder}")
    assert code == 2
    assert f"run_dir='{holder}' holds the run '{finished_run}' below it" in err
    deep = tmp_path / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / "checkpoint.pt").write_bytes(b"")
    assert run_below(tmp_path / "a") == deep and run_below(tmp_path) is None  # 4 levels down
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "to").symlink_to(finished_run)
    assert run_below(tmp_path / "link") is None
    assert train_cli.main(["--extend", str(finished_run), f"run_dir={tmp_path / 'a'}"]) == 2
    assert f"holds the run '{deep}' below it" in one_error_line(capsys)
    assert files_of(finished_run) == before


def test_a_symlink_loop_as_any_output_folder_or_corpus_is_one_line(
    finished_run: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """Two links pointing at each other, given as run_dir, out_dir, --out or the corpus: one
    line each (Path.resolve raised RuntimeError: a traceback), nothing written."""
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    loop, before = tmp_path / "loop1", files_of(tmp_path)
    never_evaluate(monkeypatch)
    for run_dir in (loop, loop / "x"):
        code, err = train_cli_line(capsys, *TINY_RUN, *SHORT, f"run_dir={run_dir}")
        assert code == 2 and f"run_dir='{run_dir}' is a symlink loop" in err
    assert sweep_cli.main(["--config", QUICK, f"out_dir={loop}", *SWEEP_TINY]) == 2
    assert f"out_dir='{loop}' is a symlink loop" in one_error_line(capsys)
    assert eval_cli.main([str(finished_run), "--out", str(loop)]) == 2
    assert f"--out '{loop}' is a symlink loop" in one_error_line(capsys)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    dangling = tmp_path / "dangling"
    code, err = train_cli_line(capsys, *TINY_RUN, *SHORT, f"run_dir={dangling}")
    assert code == 2 and f"run_dir='{dangling}' is a symbolic link to" in err  # was: Errno 17
    assert sweep_cli.main(["--config", QUICK, f"out_dir={dangling}", *SWEEP_TINY]) == 2
    assert "which does not exist" in one_error_line(capsys)
    before = files_of(tmp_path)
    corpus = ["data.task=text", f"data.options.text.path={loop}", f"run_dir={tmp_path / 'r'}"]
    code, err = train_cli_line(capsys, *TINY_RUN, *SHORT, *corpus)
    assert code == 2 and f"data.options.text.path='{loop}' does not exist" in err
    assert files_of(tmp_path) == before


def test_resuming_a_run_that_trains_now_before_its_first_checkpoint_names_the_holder(
    tmp_path: Path, capsys
) -> None:
    """--resume of a run another process is training, before its first checkpoint, said "train
    it first"; it names the holder, from train.py as from train(), and writes nothing."""
    from lab.common.runlock import run_lock

    run_dir = tmp_path / "busy"
    busy = "yet: run_dir=.* is in use by another training process"
    with run_lock(run_dir):  # the lock: the other process, in its first steps
        with pytest.raises(FileNotFoundError, match=busy):
            train(tiny_config(run_dir, *SHORT), resume=True)
        code, err = train_cli_line(capsys, "--resume", str(run_dir))
        assert code == 2 and "is in use by another training process" in err, err
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock"]
    with pytest.raises(FileNotFoundError, match="train it first"):  # once it has gone
        train(tiny_config(run_dir, *SHORT), resume=True)


def test_a_sweeps_tensorboard_tree_or_a_link_is_no_output(
    finished_run: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """A sweep's _sweep/ tree (its comparison runs, rewritten by each re-run) is refused as an
    output folder, and a --out file that is a symbolic link (dangling, or a loop) is refused
    rather than replaced by a file."""
    import bench

    sweep_dir = tmp_path / "sweep"
    (sweep_dir / "_sweep" / "mean").mkdir(parents=True)
    (sweep_dir / "sweep.json").write_text("{}")
    never_evaluate(monkeypatch)
    assert eval_cli.main([str(finished_run), "--out", str(sweep_dir / "_sweep" / "mean")]) == 2
    assert "a sweep's TensorBoard comparison runs" in one_error_line(capsys)
    link = tmp_path / "dangling.json"
    link.symlink_to(tmp_path / "nowhere.json")
    assert bench.main(["--threads", "1", "--out", str(link)]) == 2
    assert "is a symbolic link" in one_error_line(capsys) and link.is_symlink()


def test_eval_out_holding_a_users_report_is_refused_before_evaluating(
    finished_run: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """eval.py --out DIR replaced a user's report.md or results.json of the same name; it is
    refused in one line before any run is evaluated, the files untouched."""
    never_evaluate(monkeypatch)
    for name in ("report.md", "results.json", "results.csv"):
        folder = tmp_path / name.replace(".", "_")
        folder.mkdir()
        (folder / name).write_text("mine\n")
        assert eval_cli.main([str(finished_run), "--out", str(folder)]) == 2
        assert f"holds {name} that this project did not write" in one_error_line(capsys)
        assert (folder / name).read_text() == "mine\n"


def test_another_runs_eval_json_is_never_taken_for_this_run(finished_run: Path, tmp_path) -> None:
    run_b = tmp_path / "b"
    train(tiny_config(run_b, *SHORT, "seed=1"))
    evaluate_run(finished_run, FAST_EVAL, device="cpu", write_to=run_b)  # as old versions did
    assert json.loads((run_b / "eval.json").read_text())["checkpoint"]["run"] == "run"
    assert load_evaluation(run_b) is None
    shutil.copy(finished_run / "eval.json", run_b / "eval.json")  # a hand copy, newer mtime
    assert load_evaluation(run_b) is None
    fresh = evaluate_run(run_b, FAST_EVAL, device="cpu")
    assert fresh["seed"] == 1 and load_evaluation(run_b)["seed"] == 1


def test_a_sweep_re_evaluates_a_run_whose_eval_json_is_another_runs(tmp_path, capsys) -> None:
    """The sweep re-run once skipped RUN_B and reported RUN_A twice, as 2 seeds."""
    argv = ["--config", QUICK, "--workers", "1", f"out_dir={tmp_path}", *SWEEP_TINY]
    argv += ["position=none,rope", "seed=0"]
    assert sweep_cli.main(argv) == 0
    shutil.copy(tmp_path / "rope-copy-seed0" / "eval.json", tmp_path / "none-copy-seed0")
    capsys.readouterr()
    assert sweep_cli.main(argv) == 0
    assert "0 run(s) trained, 1 only re-evaluated, 1 skipped" in capsys.readouterr().out
    saved = json.loads((tmp_path / "none-copy-seed0" / "eval.json").read_text())
    assert saved["position"] == "none" and saved["checkpoint"]["run"] == "none-copy-seed0"
    results = json.loads((tmp_path / "results.json").read_text())
    assert sorted(r["position"] for r in results) == ["none", "rope"]


# ---------------------------------------------------------------------------------------------
# (14) writes never follow a linked folder out of a run folder
# ---------------------------------------------------------------------------------------------


def test_safe_folder_refuses_links_below_the_root_only(tmp_path: Path) -> None:
    outside, real_root = tmp_path / "outside", tmp_path / "disk"
    outside.mkdir()
    real_root.mkdir()
    (tmp_path / "root").symlink_to(real_root)  # the root itself may be a link
    assert safe_folder(tmp_path / "root" / "a" / "b", tmp_path / "root").is_dir()
    assert (real_root / "a" / "b").is_dir()
    (real_root / "evaluations").symlink_to(outside)
    with pytest.raises(OSError, match="evaluations': it is a symbolic link"):
        safe_folder(tmp_path / "root" / "evaluations" / "x", tmp_path / "root")
    (real_root / "file").write_text("")
    with pytest.raises(OSError, match="it is not a folder"):
        safe_folder(tmp_path / "root" / "file" / "x", tmp_path / "root")
    with pytest.raises(ValueError, match="through '..'"):
        safe_folder(tmp_path / "root" / ".." / "outside", tmp_path / "root")
    assert list(outside.iterdir()) == []


def test_a_sweep_never_writes_through_a_linked_evaluations_folder(tmp_path: Path, capsys) -> None:
    """RUN/evaluations -> OUTSIDE once made the sweep overwrite OUTSIDE/.../eval.json."""
    out, outside = tmp_path / "sweep", tmp_path / "outside"
    argv = ["--config", QUICK, "--workers", "1", f"out_dir={out}", *SWEEP_TINY]
    argv += ["position=rope", "seed=0"]
    assert sweep_cli.main(argv) == 0
    label = outside / "scalinglinear-scaling_factor2"
    label.mkdir(parents=True)
    (label / "eval.json").write_text("precious")
    (out / "rope-copy-seed0" / "evaluations").symlink_to(outside)
    capsys.readouterr()
    scaled = ["eval.position_options.scaling=linear", "eval.position_options.scaling_factor=2"]
    assert sweep_cli.main([*argv, *scaled]) == 1
    err = capsys.readouterr().err
    assert "FAILED rope-copy-seed0" in err and "it is a symbolic link" in err
    assert files_of(outside) == {"scalinglinear-scaling_factor2/eval.json": b"precious"}


def test_a_sweep_refuses_a_linked_run_folder_before_training(tmp_path: Path, capsys) -> None:
    out, outside = tmp_path / "sweep", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / "rope-copy-seed0").symlink_to(outside)
    argv = ["--config", QUICK, "--workers", "1", f"out_dir={out}", *SWEEP_TINY, "position=rope"]
    assert sweep_cli.main([*argv, "seed=0"]) == 2
    assert "rope-copy-seed0': it is a symbolic link" in one_error_line(capsys)
    assert list(outside.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# (11) grid points that resolve to one run config are one run; (8) eval options are labels
# ---------------------------------------------------------------------------------------------


def test_another_tasks_option_does_not_duplicate_a_run(capsys, monkeypatch, tmp_path) -> None:
    """`sweep.py task=svo,modular_arithmetic data.options.modular_arithmetic.operations=+-,*`
    once trained svo twice and pooled the copies as 2 seeds."""
    grid = ["task=svo,modular_arithmetic", "data.options.modular_arithmetic.operations=+-,*"]
    runs = expand(load_sweep(QUICK, ["position=rope", "seed=0", *grid]))
    assert [r.name for r in runs] == [
        "rope-svo-seed0",
        "rope-modular_arithmetic-seed0-operations+-",
        "rope-modular_arithmetic-seed0-operations*",
    ]
    assert runs[0].aliases == ["rope-svo-seed0-operations* = rope-svo-seed0"]
    assert not any("modular_arithmetic" in o for o in runs[0].overrides)
    monkeypatch.setattr(sweep_cli, "run_all", lambda specs, *_: ([], None))
    monkeypatch.setattr(sweep_cli, "report", lambda *_, **__: 0)
    assert sweep_cli.main(["--config", QUICK, f"out_dir={tmp_path}", "position=rope", *grid]) == 0
    out = capsys.readouterr().out
    assert "1 grid point(s) resolve to a run already in the grid" in out


@pytest.mark.parametrize("seeds", ["seed=0,00", "seed=0,0"])
def test_values_spelled_differently_are_one_run(seeds: str) -> None:
    runs = expand(load_sweep(QUICK, ["position=rope", "task=svo", seeds]))
    assert [r.name for r in runs] == ["rope-svo-seed0"]
    assert runs[0].aliases == (["rope-svo-seed00 = rope-svo-seed0"] if "00" in seeds else [])


def test_evaluation_values_spelled_differently_are_one_evaluation() -> None:
    grid = ["eval.position_options.scaling=linear", "eval.position_options.scaling_factor=2,2.0"]
    (run,) = expand(load_sweep(QUICK, ["position=rope", "task=svo", "seed=0", *grid]))
    assert list(run.evaluations) == ["", "scalinglinear-scaling_factor2"]
    assert len(run.aliases) == 1


def test_a_sweep_keeps_the_as_trained_evaluation_beside_a_single_valued_option(
    tmp_path: Path, capsys
) -> None:
    argv = ["--config", QUICK, "--workers", "1", f"out_dir={tmp_path}", *SWEEP_TINY]
    argv += ["position=rope", "seed=0"]
    assert sweep_cli.main(argv) == 0
    run = tmp_path / "rope-copy-seed0"
    as_trained = (run / "eval.json").read_bytes()
    assert sweep_cli.main([*argv, "eval.position_options.scaling_factor=2"]) == 0
    assert "0 run(s) trained, 1 only re-evaluated" in capsys.readouterr().out
    assert (run / "eval.json").read_bytes() == as_trained
    scaled = json.loads((run / "evaluations" / "scaling_factor2" / "eval.json").read_text())
    assert scaled["config"]["eval"]["position_options"] == {"scaling_factor": 2}
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [r["config"]["eval"]["position_options"] for r in rows] == [{}, {"scaling_factor": 2}]


def test_another_tasks_options_are_not_a_changed_setting(tmp_path: Path) -> None:
    """A run saved with another task's options section (as sweeps wrote it) is the same run."""
    run = tmp_path / "run"
    train(tiny_config(run, *SHORT, "data.options.modular_arithmetic.operations=+-"))
    spec = RunSpec("run", [*TINY_RUN, *SHORT, f"run_dir={run}"])
    assert changed_settings(spec) == []
    other = RunSpec("run", [*TINY_RUN, *SHORT, f"run_dir={run}", "seed=3"])
    assert changed_settings(other) == ["seed: 0 -> 3"]


def test_a_single_valued_evaluation_option_is_a_label_of_its_own(tmp_path: Path) -> None:
    """A single `eval.position_options.scaling_factor=2` once re-evaluated and relabelled the
    as-trained run."""
    (run,) = expand(load_sweep(QUICK, ["position=rope", "task=svo", "seed=0"]))
    assert run.evaluations == {"": []}
    single = ["position=rope", "task=svo", "seed=0", "eval.position_options.scaling_factor=2"]
    (run,) = expand(load_sweep(QUICK, single))
    assert run.evaluations == {
        "": [],
        "scaling_factor2": ["eval.position_options.scaling_factor=2"],
    }
    assert not any("position_options" in o for o in run.overrides)
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(
        "base:\n  data:\n    task: svo\n  eval:\n    position_options:\n      scaling_factor: 2\n"
        "grid:\n  model.position: [rope]\n"
    )
    (run,) = expand(load_sweep(sweep_file))
    assert list(run.evaluations) == ["", "scaling_factor2"]


# ---------------------------------------------------------------------------------------------
# (12) --overwrite proves a run and deletes only the files it wrote
# ---------------------------------------------------------------------------------------------


def train_cli_line(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    code = train_cli.main(list(argv))
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return code, err


def test_overwrite_keeps_a_users_reports_beside_a_valid_config(tmp_path: Path, capsys) -> None:
    """A user's folder with config.yaml (valid), report.md and results.csv once lost both."""
    folder = tmp_path / "mine"
    folder.mkdir()
    save_config(tiny_config(folder, *SHORT), folder / "config.yaml")
    (folder / "report.md").write_text("# Evaluation report\nmy notes\n")
    (folder / "results.csv").write_text("run,position,task,seed,length,mine\n")
    before = files_of(folder)
    code, err = train_cli_line(capsys, *TINY_RUN, *SHORT, f"run_dir={folder}", "--overwrite")
    assert code == 2 and "holds files but no run of this project" in err
    assert files_of(folder) == before


def test_overwrite_of_a_run_with_a_folder_named_report_md(finished_run, tmp_path, capsys):
    """A run folder holding a DIRECTORY named report.md once lost its checkpoint, config and
    events, then failed with "Is a directory"."""
    run = copy_of(finished_run, tmp_path / "run")
    (run / "report.md").mkdir()
    (run / "report.md" / "inside.txt").write_text("mine")
    (run / "results.json").write_text('{"mine": 1}')
    (run / "accuracy_vs_length.png").write_bytes(b"\x89PNG\r\n\x1a\n my photo")
    code, _ = train_cli_line(capsys, *TINY_RUN, *SHORT, f"run_dir={run}", "--overwrite", "seed=1")
    assert code == 0
    assert (run / "report.md" / "inside.txt").read_text() == "mine"
    assert (run / "results.json").read_text() == '{"mine": 1}'
    assert (run / "accuracy_vs_length.png").read_bytes().endswith(b"my photo")
    assert load_checkpoint(run)["config"]["seed"] == 1
    assert not (run / "eval.json").exists()  # the seed-0 evaluation went with its run


def test_overwrite_leaves_no_report_figure_or_temporary_file(finished_run, tmp_path, capsys):
    run = copy_of(finished_run, tmp_path / "run")
    argv = [str(run), "--no-progress", "eval.lengths=[2,4]", "eval.samples=8"]
    assert eval_cli.main([*argv, "eval.probe_samples=8"]) == 0  # the reports, into the run
    reports = {"report.md", "results.csv", "results.json", "accuracy_vs_length.png"}
    reports |= {"learning_speed.png", "order_sensitivity.png", "attention_vs_length.png"}
    assert reports <= {p.name for p in run.iterdir()}
    png = (run / "learning_speed.png").read_bytes()
    written = {
        ".learning_speed.png.ab12.tmp": png,
        ".eval.json.cd34.tmp": b"{",
        "evaluations/scalinglinear/eval.json": (run / "eval.json").read_bytes(),
        "evaluations/scalinglinear/events.out.tfevents.1.h.2.extrapolation": b"",
    }
    for name, data in written.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(data)
    (run / "notes.txt").write_text("keep me")
    assert files_after_overwrite(run, capsys) == [
        ".lock",
        "checkpoint.pt",
        "config.yaml",
        "notes.txt",
    ]
    assert logged_steps(run) == list(range(1, 7))


def files_after_overwrite(run, capsys) -> list[str]:
    """Retrain ``run`` with ``--overwrite`` (another seed); the files left in it, its event
    files aside (the new run's)."""
    code, _ = train_cli_line(capsys, *TINY_RUN, *SHORT, f"run_dir={run}", "--overwrite", "seed=1")
    assert code == 0
    left = sorted(p.relative_to(run).as_posix() for p in run.rglob("*"))
    return [p for p in left if not p.startswith("events.out.tfevents.")]


def test_overwrite_removes_the_lm_reports_and_passkey_heatmaps_it_wrote(
    finished_run, tmp_path, capsys
):
    """--overwrite once left the old run's lm_report.md, lm_results.*, LM figures and passkey
    heatmaps (the file list knew only the synthetic report's files); the writers and
    --overwrite now share one list (lab.common.outputs)."""
    from test_lm_report import TEXTBOOK
    from test_lm_report import sweep as lm_sweep
    from test_passkey import RESULTS as PASSKEY

    from lab.common.outputs import LM_REPORT_NAMES
    from lab.lm.passkey_figure import passkey_figure, write_heatmap
    from lab.lm.report import write_lm_reports

    run = copy_of(finished_run, tmp_path / "run")
    written = write_lm_reports(lm_sweep(TEXTBOOK), run)  # what eval.py RUN writes for LM runs
    assert sorted(p.name for p in written.values()) == sorted(LM_REPORT_NAMES)
    passkey_figure(PASSKEY, run / "passkey_grid.png")
    write_heatmap(PASSKEY[3], run)
    label = run / "evaluations" / "scalingyarn"
    write_heatmap(PASSKEY[2], label)
    shutil.copy(run / "eval.json", label / "eval.json")
    (run / "lm_report.md.txt").write_text("mine")  # no name of the list: kept
    kept = files_after_overwrite(run, capsys)
    assert kept == [".lock", "checkpoint.pt", "config.yaml", "lm_report.md.txt"]


def test_overwrite_keeps_a_file_named_eval_json_that_is_no_evaluation(
    finished_run, tmp_path, capsys
):
    """--overwrite once deleted any file named eval.json under evaluations/ (and in the run
    folder): only a JSON object with the fields of every eval.json is the project's."""
    run = copy_of(finished_run, tmp_path / "run")
    mine = {
        "evaluations/notes/eval.json": b'{"mine": 1}',
        "evaluations/text/eval.json": b"precious, not JSON",
        "evaluations/list/eval.json": b"[1, 2]",
    }
    for name, data in mine.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(data)
    (run / "evaluations" / "ours").mkdir()
    shutil.copy(run / "eval.json", run / "evaluations" / "ours" / "eval.json")
    (run / "passkey.png").write_bytes(b"\x89PNG\r\n\x1a\n my photo")  # not drawn by matplotlib
    code, _ = train_cli_line(capsys, *TINY_RUN, *SHORT, f"run_dir={run}", "--overwrite", "seed=1")
    assert code == 0
    kept = {k: v for k, v in files_of(run).items() if k.startswith(("evaluations", "passkey"))}
    assert kept == {**mine, "passkey.png": b"\x89PNG\r\n\x1a\n my photo"}
    assert not (run / "eval.json").exists()  # the seed-0 evaluation went with its run


# ---------------------------------------------------------------------------------------------
# (9) a fresh start over another run's files; every (re)start logs each step once
# ---------------------------------------------------------------------------------------------


def test_a_fresh_start_after_kill_9_before_the_first_checkpoint_logs_each_step_once(
    tmp_path: Path,
) -> None:
    """`train.py` killed with kill -9 before its first checkpoint, then started again into the
    same run_dir (no --resume, no --overwrite), once left both event files: every step twice."""
    run, flags = tmp_path / "run", tmp_path / "flags"
    flags.mkdir()
    extra = ["train.checkpoint_every=100", "train.log_every=1", f"run_dir={run}"]
    command = [sys.executable, str(ROOT / "tests" / "paused_train.py"), "batch", "4", str(flags)]
    child = subprocess.Popen([*command, *TINY_RUN, *extra], cwd=ROOT, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not (flags / "paused").exists():
        assert child.poll() is None and time.monotonic() < deadline, child.stderr.read()
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    assert list(run.glob("events.out.tfevents.*")) and not checkpoint_path(run).exists()
    assert train_cli.main([*TINY_RUN, *extra]) == 0
    assert len(list(run.glob("events.out.tfevents.*"))) == 1
    assert logged_steps(run) == list(range(1, STEPS + 1))


def test_a_fresh_start_after_a_crash_before_the_first_checkpoint(tmp_path: Path, monkeypatch):
    extra = ["train.checkpoint_every=100", "train.log_every=1"]
    with monkeypatch.context() as patch:
        crash_at(patch, 4)
        with pytest.raises(RuntimeError, match="killed"):
            train(tiny_config(tmp_path, *extra))
    assert logged_steps(tmp_path) == [1, 2, 3, 4]
    train(tiny_config(tmp_path, *extra))
    assert logged_steps(tmp_path) == list(range(1, STEPS + 1))


def test_a_fresh_start_into_project_files_without_a_run_is_one_line(
    finished_run: Path, tmp_path: Path, capsys
) -> None:
    """eval.py --out output (events, eval.json, reports) is no run: refused by name."""
    out = tmp_path / "out"
    argv = [str(finished_run), "--out", str(out), "--no-progress", "eval.lengths=[2,4]"]
    assert eval_cli.main([*argv, "eval.samples=8", "eval.probe_samples=8"]) == 0
    before = files_of(out)
    capsys.readouterr()
    code, err = train_cli_line(capsys, *TINY_RUN, *SHORT, f"run_dir={out}")
    assert code == 2 and "--resume" in err and "--overwrite" in err
    assert files_of(out) == before


def test_every_restart_logs_each_step_once(tmp_path: Path, monkeypatch) -> None:
    """Fresh, stop (Ctrl-C/SIGTERM path) then --resume, then --overwrite: read back raw."""
    extra = ["train.log_every=1"]
    with monkeypatch.context() as patch:
        interrupt_at(patch, 7)
        with pytest.raises(TrainingInterrupted):
            train(tiny_config(tmp_path, *extra))
    assert logged_steps(tmp_path) == list(range(1, 8))
    train(resume_config(tmp_path), resume=True)
    assert logged_steps(tmp_path) == list(range(1, STEPS + 1))
    train(tiny_config(tmp_path, *extra, "seed=2"), overwrite=True)
    assert logged_steps(tmp_path) == list(range(1, STEPS + 1))
    events = EventAccumulator(str(tmp_path)).Reload().Scalars("train/loss")
    assert [e.step for e in events] == list(range(1, STEPS + 1))


def test_a_resume_after_sigterm_logs_each_step_once(tmp_path: Path) -> None:
    run, flags = tmp_path / "run", tmp_path / "flags"
    flags.mkdir()
    command = [sys.executable, str(ROOT / "tests" / "paused_train.py"), "batch", "7", str(flags)]
    argv = [*command, *TINY_RUN, "train.log_every=1", f"run_dir={run}"]
    child = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (flags / "paused").exists():
        assert child.poll() is None and time.monotonic() < deadline, child.stderr.read()
        time.sleep(0.02)
    child.send_signal(signal.SIGTERM)
    (flags / "go").touch()
    assert child.wait(timeout=300) == 143
    assert load_checkpoint(run)["step"] == 8 and logged_steps(run) == list(range(1, 9))
    train(resume_config(run), resume=True)
    assert logged_steps(run) == list(range(1, STEPS + 1))


def test_a_resume_after_kill_9_past_a_checkpoint_drops_the_lost_steps(tmp_path, monkeypatch):
    """Steps logged after the last checkpoint of a killed run are dropped from its event files
    on resume, so a viewer that ignores TensorBoard's purge shows each step once too."""
    with monkeypatch.context() as patch:
        crash_at(patch, 13)
        with pytest.raises(RuntimeError, match="killed"):
            train(tiny_config(tmp_path, "train.log_every=1"))
    assert load_checkpoint(tmp_path)["step"] == 10 and logged_steps(tmp_path)[-1] == 13
    train(resume_config(tmp_path), resume=True)
    assert logged_steps(tmp_path) == list(range(1, STEPS + 1))
    state = torch.load(checkpoint_path(tmp_path), weights_only=True)
    assert state["step"] == STEPS


def test_evaluate_run_defaults_its_root_to_the_run(finished_run: Path, tmp_path: Path) -> None:
    run = copy_of(finished_run, tmp_path / "run")
    (tmp_path / "elsewhere").mkdir()
    (run / "evaluations").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="symbolic link"):
        evaluate_run(run, FAST_EVAL, device="cpu", write_to=run / "evaluations" / "x")
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert (
        lab.evaluation.evaluate.load_evaluation(run, FAST_EVAL, run / "evaluations" / "x") is None
    )


def test_one_run_in_two_folders_is_never_counted_as_two_seeds(
    finished_run: Path, tmp_path: Path, capsys
) -> None:
    """`eval.py FOLDER` over a run copied (or a child extended twice alike) pooled the two
    copies as two seeds, with a zero-width interval, at exit 0; the report is refused in one
    line naming both folders (each run's own eval.json is still written)."""
    for name in ("a", "b"):
        shutil.copytree(finished_run, tmp_path / "dup" / name)
    assert eval_cli.main([str(tmp_path / "dup"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "are one run (" in err and "two seeds" in err, err
    assert not (tmp_path / "dup" / "report.md").exists()


def test_a_report_of_other_runs_leaves_none_of_an_earlier_reports_files(
    finished_run: Path, tmp_path: Path
) -> None:
    """A sweep re-run with another task left the text runs' lm_report.md, lm_results.* and
    figures beside the new report, and --publish took them as current; a report now removes
    the project's report files it did not write this time (a user's file of such a name
    stays)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "lm_report.md").write_text("# Language-model report\nold runs\n")
    (out / "lm_results.json").write_text('[{"kind": "lm"}]\n')
    (out / "perplexity_vs_length.png").write_text("a user's notes, not a figure\n")
    result = json.loads((finished_run / "eval.json").read_text())
    written = write_reports([result], out)
    assert {p.name for p in written.values()} <= {p.name for p in out.iterdir()}
    assert not (out / "lm_report.md").exists() and not (out / "lm_results.json").exists()
    assert (out / "perplexity_vs_length.png").read_text() == "a user's notes, not a figure\n"


@pytest.mark.parametrize("run_dir", [".", "..", "runs/.."])
def test_a_run_dir_that_names_no_folder_of_its_own_is_refused(
    finished_run: Path, run_dir: str, capsys, monkeypatch
) -> None:
    """`train.py --extend P run_dir=.` trained into the current folder (the repository root)
    and named the run '' in every message; '.' and '..' are refused as out_dir already was."""
    monkeypatch.chdir(finished_run.parent)
    code, err = train_cli_line(capsys, *TINY_RUN, *SHORT, f"run_dir={run_dir}")
    assert code == 2 and f"run_dir='{run_dir}' names no folder of its own" in err
    assert train_cli.main(["--extend", str(finished_run), f"run_dir={run_dir}"]) == 2
    assert "names no folder of its own" in one_error_line(capsys)
