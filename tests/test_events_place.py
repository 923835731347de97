"""Where a run's TensorBoard events go (lab/common/events/place.py): only two places, each the
run's own; a sweep never takes over, nor deletes from, a folder it did not claim."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import SWEEP_TINY, one_error_line
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import eval as eval_cli
import sweep
import train as train_cli
from lab.common.config import ConfigError, load_config
from lab.common.events.place import (
    MARKER,
    SWEEP,
    check_events_root,
    claim_events_root,
    events_folder,
    normalized_log_dir,
    runs_root,
)

CONFIG = str(Path(__file__).parents[1] / "configs" / "quick.yaml")
TINY_TRAIN = [*(f"data.{o}" if o.startswith("task=") else o for o in SWEEP_TINY), "device=cpu"]
"""The sweep's tiny run as ``train.py`` overrides (``task=`` is a sweep's shorthand)."""


def run_sweep(out_dir: Path, *overrides: str) -> int:
    argv = ["--config", CONFIG, f"out_dir={out_dir}", *SWEEP_TINY, "position=rope", "seed=0"]
    return sweep.main([*argv, *overrides])


def test_the_sweep_place_is_beside_the_real_folder_holding_the_run(tmp_path):
    out = tmp_path.resolve() / "runs" / "ablation"
    assert events_folder(out / "rope-svo-seed0", SWEEP, "svo") == (
        out.parent / "ablation-runs" / "svo" / "rope-svo-seed0"
    )
    assert events_folder(out / "rope-svo-seed0", "", "svo") == out / "rope-svo-seed0"
    assert runs_root(f"{out}/") == f"{out}-runs"
    out.mkdir(parents=True)
    (tmp_path / "link").symlink_to(out)  # a link to the sweep: the real sweep's -runs
    assert (
        events_folder(tmp_path / "link" / "r", SWEEP, "svo") == out.parent / "ablation-runs/svo/r"
    )


@pytest.mark.parametrize(
    "bad", ["/", " ", "..", "../other", "checkpoint.pt", "tb", "/home/user", "../../x-runs/copy/r"]
)
def test_any_other_log_dir_is_refused_in_one_line(bad):
    with pytest.raises(ConfigError) as error:
        normalized_log_dir(bad, "runs/s1/rope-copy-seed0", "copy")
    message = str(error.value)
    assert len(message.splitlines()) == 1 and repr(bad) in message and "'sweep'" in message


def test_train_py_refuses_a_log_dir_outside_the_two_places(tmp_path, capsys):
    earlier = "../../zz-runs/copy/r"  # an earlier version's form: read from saved runs only
    for bad in ("/", earlier):
        code = train_cli.main([*TINY_TRAIN, f"run_dir={tmp_path / 'r'}", f"log_dir={bad}"])
        assert code == 2
        assert f"log_dir={bad!r}" in one_error_line(capsys)
        assert not (tmp_path / "r").exists()


def test_a_saved_runs_earlier_log_dir_reads_as_this_versions(capsys):
    """A run a sweep of an earlier version saved with ``../../OUT-runs/TASK/NAME`` reads as
    ``sweep`` (so a copied or renamed sweep writes into its own -runs); any other free path an
    earlier version allowed reads as the run folder, with one warning, and is never written."""
    from lab.common.config import config_from_dict, config_to_dict

    earlier = "../../s1-runs/copy/rope-copy-seed0"
    config = load_config(None, [*TINY_TRAIN, "run_dir=runs/s2/rope-copy-seed0"])
    saved = config_to_dict(config) | {"log_dir": earlier}
    assert config_from_dict(saved).log_dir == SWEEP
    assert config_from_dict(saved | {"log_dir": "/home/someone/tb"}).log_dir == ""
    assert "saved log_dir='/home/someone/tb' is not a place" in capsys.readouterr().err


def test_a_folder_not_claimed_is_refused_and_kept(tmp_path):
    out, root = tmp_path / "s", tmp_path / "s-runs"
    (root / "mine").mkdir(parents=True)
    (root / "mine" / "events.out.tfevents.1.host").write_bytes(b"a user's file")
    with pytest.raises(OSError, match="no .tensorboard-runs-of file claims it"):
        check_events_root(root, out)
    root.rename(tmp_path / "elsewhere")
    root.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="symbolic link or a file"):
        check_events_root(root, out)
    root.unlink()
    root.write_text("a file")
    with pytest.raises(OSError, match="symbolic link or a file"):
        check_events_root(root, out)


def test_only_a_claimed_folder_is_accepted(tmp_path):
    """An unclaimed folder is refused even when it looks like this sweep's (TASK/NAME folders
    named after its runs): a fresh train.py makes its own run folder first, so such a look
    once let it claim a user's folder and delete the event files in it."""
    out, root = tmp_path / "s", tmp_path / "s-runs"
    (out / "rope-copy-seed0").mkdir(parents=True)
    (root / "copy" / "rope-copy-seed0").mkdir(parents=True)
    with pytest.raises(OSError, match="no .tensorboard-runs-of file claims it"):
        check_events_root(root, out)
    (root / MARKER).write_text("claimed by hand\n")
    check_events_root(root, out)
    (root / "other").write_text("x")
    check_events_root(root, out)  # claimed: its own


def test_a_fresh_run_never_claims_an_unclaimed_folder_or_deletes_in_it(tmp_path, capsys):
    theirs = tmp_path / "P-runs" / "copy" / "r" / "events.out.tfevents.123.othertool"
    theirs.parent.mkdir(parents=True)
    theirs.write_bytes(b"another program's events")
    assert train_cli.main([*TINY_TRAIN, f"run_dir={tmp_path / 'P' / 'r'}", "log_dir=sweep"]) == 2
    assert "no .tensorboard-runs-of file claims it" in one_error_line(capsys)
    assert theirs.read_bytes() == b"another program's events"
    assert not (tmp_path / "P-runs" / MARKER).exists()


def test_a_claimed_events_folder_is_refused_as_an_out_dir(tmp_path):
    claim_events_root(tmp_path / "s-runs", tmp_path / "s")
    for inside in ("s-runs", "s-runs/copy"):
        with pytest.raises(OSError, match="the TensorBoard events folder of a sweep's runs"):
            check_events_root(tmp_path / f"{inside}-runs", tmp_path / inside)


def test_a_sweep_refuses_a_runs_folder_it_did_not_claim_before_creating_anything(tmp_path, capsys):
    out, root = tmp_path / "s", tmp_path / "s-runs"
    (root / "notes").mkdir(parents=True)
    user = root / "notes" / "events.out.tfevents.1.me"
    user.write_bytes(b"not the sweep's")
    assert run_sweep(out) == 2
    assert "no .tensorboard-runs-of file claims it" in one_error_line(capsys)
    assert user.read_bytes() == b"not the sweep's" and not out.exists()


def test_a_sweep_refuses_a_runs_folder_that_is_a_file(tmp_path, capsys):
    (tmp_path / "s-runs").write_text("a file")
    assert run_sweep(tmp_path / "s") == 2
    assert "symbolic link or a file" in one_error_line(capsys)
    assert not (tmp_path / "s").exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("events") / "s1"
    assert run_sweep(out) == 0
    return out


def test_a_sweep_claims_its_runs_folder_and_writes_each_run_there(trained):
    root = Path(runs_root(trained))
    assert (root / MARKER).is_file()
    (run,) = [p for p in trained.iterdir() if (p / "checkpoint.pt").is_file()]
    assert list((root / "copy" / run.name).glob("events.out.tfevents.*"))
    assert not list(run.glob("events.out.tfevents.*"))


def test_a_sweep_into_another_sweeps_events_folder_is_refused(trained, capsys):
    for inside in (Path(runs_root(trained)), Path(runs_root(trained)) / "copy"):
        assert run_sweep(inside) == 2
        assert "the folder of a sweep's runs' TensorBoard events" in one_error_line(capsys)


def test_eval_py_on_a_runs_folder_names_the_sweep_to_evaluate(trained, capsys):
    root = Path(runs_root(trained))
    assert eval_cli.main([str(root)]) == 2
    line = one_error_line(capsys)
    assert "holds a sweep's TensorBoard events, not runs" in line
    assert f"python eval.py {trained}" in line and "train.py" not in line


def test_a_copied_sweep_evaluates_into_its_own_runs_folder(trained, tmp_path):
    copy = tmp_path / "s2"
    shutil.copytree(trained, copy)
    original = Path(runs_root(trained))
    before = sorted(p.stat().st_mtime_ns for p in original.rglob("*") if p.is_file())
    (run,) = [p for p in copy.iterdir() if (p / "checkpoint.pt").is_file()]
    assert eval_cli.main([str(run)]) == 0
    assert list((tmp_path / "s2-runs" / "copy" / run.name).glob("events.out.tfevents.*"))
    assert sorted(p.stat().st_mtime_ns for p in original.rglob("*") if p.is_file()) == before


def test_an_evaluation_whose_events_folder_is_a_file_writes_nothing(trained, tmp_path, capsys):
    copy = tmp_path / "s3"
    shutil.copytree(trained, copy)
    (run,) = [p for p in copy.iterdir() if (p / "checkpoint.pt").is_file()]
    (tmp_path / "s3-runs" / "copy").mkdir(parents=True)
    (tmp_path / "s3-runs" / MARKER).write_text("claimed\n")
    (tmp_path / "s3-runs" / "copy" / run.name).write_text("in the way")
    before = (run / "eval.json").read_bytes()
    assert eval_cli.main([str(run)]) == 2
    err = capsys.readouterr().err
    (line,) = [p for p in err.replace("\r", "\n").splitlines() if "error: " in p]
    assert "is a symbolic link or a file" in line and "nothing was deleted or written" in line
    assert "Traceback" not in err
    assert (run / "eval.json").read_bytes() == before
    assert json.loads(before)["checkpoint"]["sha256"]


def test_a_mean_run_says_when_a_runs_events_folder_is_a_file(trained, tmp_path, capsys):
    from lab.reporting.sweep_tensorboard import read_scalars

    copy = tmp_path / "s4"
    shutil.copytree(trained, copy)
    (run,) = [p for p in copy.iterdir() if (p / "checkpoint.pt").is_file()]
    assert read_scalars(str(run), "copy") == {}  # copied without s4-runs: said, not silent
    assert "is missing (a sweep copied without it?)" in capsys.readouterr().err
    (tmp_path / "s4-runs" / "copy").mkdir(parents=True)
    (tmp_path / "s4-runs" / "copy" / run.name).write_text("in the way")
    assert read_scalars(str(run), "copy") == {}
    assert "is a file; its curves are left out of the mean run" in capsys.readouterr().err
    assert read_scalars(str(trained / run.name), "copy")  # the original has its curves


def test_overwrite_into_the_run_folder_clears_the_events_it_left_in_the_sweeps_folder(tmp_path):
    run = tmp_path / "s" / "r"
    old = tmp_path / "s-runs" / "copy" / "r"
    assert train_cli.main([*TINY_TRAIN, f"run_dir={run}", "log_dir=sweep"]) == 0
    assert list(old.glob("events.out.tfevents.*")) and not list(run.glob("events.out.*"))
    assert train_cli.main([*TINY_TRAIN, f"run_dir={run}", "--overwrite"]) == 0
    assert not list(old.glob("events.out.tfevents.*"))
    assert list(run.glob("events.out.tfevents.*"))


def copy_sweep(trained: Path, to: Path) -> Path:
    """A copy of the trained sweep and its -runs folder at ``to``; returns its run folder."""
    shutil.copytree(trained, to)
    shutil.copytree(runs_root(trained), f"{to}-runs")
    (run,) = [p for p in to.iterdir() if (p / "checkpoint.pt").is_file()]
    return run


@pytest.mark.parametrize("level", ["task", "run"])
def test_train_and_eval_refuse_a_link_inside_the_runs_folder(trained, tmp_path, capsys, level):
    """A link planted in a claimed -runs folder once let ``train.py --overwrite`` and ``eval.py``
    delete and write a user's files at its target: refused in one line, the target untouched."""
    run = copy_sweep(trained, tmp_path / "s1")
    task = tmp_path / "s1-runs" / "copy"
    victim = tmp_path / "victim"
    planted = task if level == "task" else task / run.name
    shutil.move(planted, victim)
    planted.symlink_to(victim, target_is_directory=True)
    mine = (victim / run.name if level == "task" else victim) / "events.out.tfevents.1.me"
    mine.write_bytes(b"precious")
    before = {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()}
    assert eval_cli.main([str(run)]) == 2
    assert "is a symbolic link or a file" in capsys.readouterr().err
    overwrite = [*TINY_TRAIN, f"run_dir={run}", "log_dir=sweep", "--overwrite"]
    assert train_cli.main(overwrite) == 2
    assert "is a symbolic link or a file" in one_error_line(capsys)
    assert {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()} == before
    assert (run / "checkpoint.pt").is_file()  # nothing of the run deleted either


def test_a_task_folder_that_is_a_file_is_refused_before_overwrite_deletes_anything(
    trained, tmp_path, capsys
):
    run = copy_sweep(trained, tmp_path / "s1")
    task = tmp_path / "s1-runs" / "copy"
    shutil.rmtree(task)
    task.write_text("in the way")
    before = sorted(p.name for p in run.iterdir())
    assert run_sweep(tmp_path / "s1", "train.steps=7", "--overwrite") != 0
    assert sorted(p.name for p in run.iterdir()) == before and (run / "checkpoint.pt").is_file()
    assert "is a symbolic link or a file" in capsys.readouterr().err


def test_a_copied_sweeps_mean_run_reads_its_own_runs_events(trained, tmp_path):
    """A finished run of a copied sweep is skipped, and its eval.json still names the original
    folder: the copy's mean run and results read the copy's own runs, never the original's."""
    from lab.common.events.files import EventLog

    run = copy_sweep(trained, tmp_path / "s5")
    own = tmp_path / "s5-runs" / "copy" / run.name
    log = EventLog()
    log.add_scalar("compare/copy/exact_match_in_dist", 0.25, 99)  # only the copy has step 99
    log.write(own, ".marked")
    assert run_sweep(tmp_path / "s5") == 0
    results = json.loads((tmp_path / "s5" / "results.json").read_text())
    assert [r["run_dir"] for r in results] == [str(run)]
    from lab.reporting.sweep_tensorboard import SWEEP_RUNS

    mean = EventAccumulator(str(tmp_path / "s5" / SWEEP_RUNS / "mean" / "rope")).Reload()
    assert 99 in [e.step for e in mean.Scalars("copy/exact_match_in_dist")]


def test_eval_out_keeps_files_that_are_not_its_own_evaluation_events(trained, tmp_path):
    run = copy_sweep(trained, tmp_path / "s4")
    out = tmp_path / "out"
    out.mkdir()
    mine = out / "events.out.tfevents.999.user.extrapolation"
    mine.write_bytes(b"precious")
    assert eval_cli.main([str(run), "--out", str(out), "--no-progress"]) == 0
    assert mine.read_bytes() == b"precious"
    assert eval_cli.main([str(run), "--out", str(out), "--no-progress", "eval.samples=16"]) == 0
    written = sorted(out.glob("events.out.tfevents.*.extrapolation"))
    assert len(written) == 2 and mine in written  # its own earlier file replaced, mine kept


def test_events_are_written_before_eval_json_so_a_stop_between_them_is_redone(
    trained, tmp_path, monkeypatch
):
    """A stop after the events and before eval.json leaves the old eval.json, so the next run
    evaluates again; never a new eval.json beside the old evaluation's curves."""
    import lab.evaluation.evaluate as evaluate

    run = copy_sweep(trained, tmp_path / "k1")
    before = (run / "eval.json").read_bytes()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluate, "write_eval_json", stopped)
    with pytest.raises(KeyboardInterrupt):
        evaluate.evaluate_run(run, device="cpu")
    assert (run / "eval.json").read_bytes() == before
    monkeypatch.undo()
    assert evaluate.load_evaluation(run) is not None  # still the old, complete evaluation


def test_a_marker_that_is_not_a_file_is_refused_before_out_dir_is_made(tmp_path, capsys):
    (tmp_path / "m1-runs" / MARKER).mkdir(parents=True)
    assert run_sweep(tmp_path / "m1") == 2
    assert "is not a plain file" in one_error_line(capsys)
    assert not (tmp_path / "m1").exists()


def test_a_run_folder_inside_a_claimed_runs_folder_is_refused_without_a_lock(tmp_path, capsys):
    claim_events_root(tmp_path / "s-runs", tmp_path / "s")
    run = tmp_path / "s-runs" / "newrun"
    assert train_cli.main([*TINY_TRAIN, f"run_dir={run}"]) == 2
    assert "the folder of a sweep's runs' TensorBoard events" in one_error_line(capsys)
    assert not run.exists()


def test_a_link_in_place_of_the_evaluations_folder_is_refused_before_the_run_is_replaced(
    trained, tmp_path, capsys
):
    run = copy_sweep(trained, tmp_path / "s6")
    events = tmp_path / "s6-runs" / "copy" / run.name
    (tmp_path / "user").mkdir()
    (events / "evaluations").symlink_to(tmp_path / "user", target_is_directory=True)
    before = (run / "checkpoint.pt").read_bytes()
    assert run_sweep(tmp_path / "s6", "train.steps=7", "--overwrite") != 0
    assert "is a symbolic link or a file" in capsys.readouterr().err
    assert (run / "checkpoint.pt").read_bytes() == before and not list(
        (tmp_path / "user").iterdir()
    )


def test_a_linked_marker_does_not_let_overwrite_clear_a_runs_old_events(trained, tmp_path):
    from lab.common.events.place import is_claimed_events_folder

    run = copy_sweep(trained, tmp_path / "s8")
    marker = tmp_path / "s8-runs" / MARKER
    marker.unlink()
    (tmp_path / "mine.txt").write_text("a user's file")
    marker.symlink_to(tmp_path / "mine.txt")
    assert not is_claimed_events_folder(tmp_path / "s8-runs" / "copy" / run.name)
