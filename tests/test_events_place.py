"""Where a run's TensorBoard events go (lab/common/events/place.py): only two places, each the
run's own; a sweep never takes over, nor deletes from, a folder it did not claim."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import SWEEP_TINY, one_error_line

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


def test_the_sweep_place_is_beside_the_folder_holding_the_run():
    assert events_folder("runs/ablation/rope-svo-seed0", SWEEP, "svo") == Path(
        "runs/ablation-runs/svo/rope-svo-seed0"
    )
    assert events_folder("runs/ablation/rope-svo-seed0", "", "svo") == Path(
        "runs/ablation/rope-svo-seed0"
    )
    assert runs_root("runs/ablation/") == "runs/ablation-runs"


@pytest.mark.parametrize(
    "bad", ["/", " ", "..", "../other", "checkpoint.pt", "tb", "/home/user", "../../x-runs/copy/r"]
)
def test_any_other_log_dir_is_refused_in_one_line(bad):
    with pytest.raises(ConfigError) as error:
        normalized_log_dir(bad, "runs/s1/rope-copy-seed0", "copy")
    message = str(error.value)
    assert len(message.splitlines()) == 1 and repr(bad) in message and "'sweep'" in message


def test_train_py_refuses_a_log_dir_outside_the_two_places(tmp_path, capsys):
    code = train_cli.main([*TINY_TRAIN, f"run_dir={tmp_path / 'r'}", "log_dir=/"])
    assert code == 2
    assert "log_dir='/'" in one_error_line(capsys)
    assert not (tmp_path / "r").exists()


def test_an_earlier_versions_relative_log_dir_reads_as_the_sweep_place_of_its_own_folder():
    """A run folder of a sweep copied or renamed (s1 -> s2) writes into s2-runs, never s1's."""
    earlier = "../../s1-runs/copy/rope-copy-seed0"
    assert normalized_log_dir(earlier, "runs/s1/rope-copy-seed0", "copy") == SWEEP
    assert normalized_log_dir(earlier, "runs/s2/rope-copy-seed0", "copy") == SWEEP
    config = load_config(
        None, [*TINY_TRAIN, "run_dir=runs/s2/rope-copy-seed0", f"log_dir={earlier}"]
    )
    assert config.log_dir == SWEEP
    assert events_folder(config.run_dir, config.log_dir, config.data.task) == Path(
        "runs/s2-runs/copy/rope-copy-seed0"
    )


def test_a_folder_not_claimed_is_refused_and_kept(tmp_path):
    out, root = tmp_path / "s", tmp_path / "s-runs"
    (root / "mine").mkdir(parents=True)
    (root / "mine" / "events.out.tfevents.1.host").write_bytes(b"a user's file")
    with pytest.raises(OSError, match="is not the events folder"):
        check_events_root(root, out)
    root.rename(tmp_path / "elsewhere")
    root.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="symbolic link or a file"):
        check_events_root(root, out)
    root.unlink()
    root.write_text("a file")
    with pytest.raises(OSError, match="symbolic link or a file"):
        check_events_root(root, out)


def test_a_claimed_folder_and_an_earlier_versions_unclaimed_one_are_accepted(tmp_path):
    out, root = tmp_path / "s", tmp_path / "s-runs"
    (out / "rope-copy-seed0").mkdir(parents=True)
    (root / "copy" / "rope-copy-seed0").mkdir(parents=True)
    check_events_root(root, out)  # only TASK/NAME folders named after runs of out_dir
    claim_events_root(root, out)
    assert (root / MARKER).is_file()
    (root / "other").write_text("x")
    check_events_root(root, out)  # claimed: its own


def test_a_claimed_events_folder_is_refused_as_an_out_dir(tmp_path):
    claim_events_root(tmp_path / "s-runs", tmp_path / "s")
    with pytest.raises(OSError, match="holds the TensorBoard events of another sweep"):
        check_events_root(tmp_path / "s-runs-runs", tmp_path / "s-runs")


def test_a_sweep_refuses_a_runs_folder_it_did_not_claim_before_creating_anything(tmp_path, capsys):
    out, root = tmp_path / "s", tmp_path / "s-runs"
    (root / "notes").mkdir(parents=True)
    user = root / "notes" / "events.out.tfevents.1.me"
    user.write_bytes(b"not the sweep's")
    assert run_sweep(out) == 2
    assert "is not the events folder" in one_error_line(capsys)
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
    assert run_sweep(Path(runs_root(trained))) == 2
    assert "holds the TensorBoard events of another sweep" in one_error_line(capsys)


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
    assert "is a file" in line and "nothing was written" in line and "Traceback" not in err
    assert (run / "eval.json").read_bytes() == before
    assert json.loads(before)["checkpoint"]["sha256"]


def test_a_mean_run_says_when_a_runs_events_folder_is_a_file(trained, tmp_path, capsys):
    from lab.reporting.sweep_tensorboard import read_scalars

    copy = tmp_path / "s4"
    shutil.copytree(trained, copy)
    (run,) = [p for p in copy.iterdir() if (p / "checkpoint.pt").is_file()]
    assert read_scalars(str(run), "copy") == {}  # s4-runs does not exist: no curves, no warning
    assert "warning" not in capsys.readouterr().err
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
