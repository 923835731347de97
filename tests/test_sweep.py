"""The sweep: one command trains and evaluates a grid, reports it, resumes, survives failures."""

import csv
import dataclasses
import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import SWEEP_TINY, one_error_line

import sweep
from data import available_tasks
from lab.common.config import RESUME_KEYS, ConfigError, load_config
from lab.common.files import file_sha256
from lab.evaluation.labels import NOT_A_SETTING
from lab.sweeps.grid import exact_match_tasks
from lab.sweeps.local import parallel_runs, worker_devices
from lab.sweeps.sweep import expand, load_sweep
from model.position import available_schemes

TINY = SWEEP_TINY
CONFIG = str(Path(__file__).parents[1] / "configs" / "quick.yaml")


def run_sweep(out_dir: Path, *overrides: str, workers: int = 1) -> int:
    argv = ["--config", CONFIG, "--workers", str(workers), f"out_dir={out_dir}", *TINY]
    return sweep.main([*argv, *overrides])


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, int]:
    out_dir = tmp_path_factory.mktemp("sweep")
    return out_dir, run_sweep(out_dir, "position=none,rope", "seed=0")


def test_sweep_writes_every_promised_file(finished):
    out_dir, code = finished
    assert code == 0
    for name in ("report.md", "results.csv", "results.json", "accuracy_vs_length.png"):
        assert (out_dir / name).is_file(), name
    assert (out_dir / "accuracy_vs_length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = sorted(p.name for p in out_dir.iterdir() if p.is_dir() and p.name != "_sweep")
    assert runs == ["none-copy-seed0", "rope-copy-seed0"]
    means = sorted(p.name for p in (out_dir / "_sweep" / "mean").iterdir())
    assert means == ["none", "rope"]  # the sweep's TensorBoard runs: one per scheme
    assert list((out_dir / "_sweep" / "figures").glob("events.out.tfevents.*"))
    beside = out_dir.with_name(f"{out_dir.name}-runs") / "copy"  # the runs' own events
    for run in runs:
        for name in ("config.yaml", "checkpoint.pt", "eval.json"):
            assert (out_dir / run / name).is_file(), (run, name)
        assert not list((out_dir / run).glob("events.out.tfevents.*"))
        assert len(list((beside / run).glob("events.out.tfevents.*"))) == 2  # training, eval
    under = {p.parent for p in out_dir.rglob("events.out.tfevents.*")}  # TensorBoard's runs
    assert under == {
        out_dir / "_sweep" / "figures",
        *(out_dir / "_sweep" / "mean" / m for m in means),
    }
    results = json.loads((out_dir / "results.json").read_text())
    assert sorted(r["position"] for r in results) == ["none", "rope"]
    report = (out_dir / "report.md").read_text()
    assert "none-copy-seed0" in report and "rope-copy-seed0" in report


def test_runs_sharing_one_device_give_the_results_of_one_worker(finished, tmp_path, capsys):
    """Two worker processes on the CPU (one device, ``--runs-per-device 2``) write the
    results.csv that one worker, running the runs in turn, wrote."""
    out_dir, _ = finished
    argv = ["--config", CONFIG, "--runs-per-device", "2", f"out_dir={tmp_path}", *TINY]
    assert sweep.main([*argv, "position=none,rope", "seed=0"]) == 0
    assert f"2 runs into {tmp_path}/ with 2 worker(s)" in capsys.readouterr().out
    assert (tmp_path / "results.csv").read_bytes() == (out_dir / "results.csv").read_bytes()


@pytest.mark.parametrize(
    ("workers", "per_device", "gpus", "cpus", "expected"),
    [
        (0, 0, 0, 2, 2),  # the CPU: one run per core
        (0, 0, 1, 16, 4),  # a GPU: GPU_RUNS_PER_DEVICE
        (0, 0, 2, 4, 4),  # at most the CPU cores per GPU
        (0, 3, 2, 16, 6),  # --runs-per-device on each GPU
        (5, 3, 2, 16, 5),  # --workers wins
        (0, 0, 0, 64, 30),  # never more than the runs
    ],
)
def test_parallel_runs_per_device(workers, per_device, gpus, cpus, expected):
    assert parallel_runs(30, workers, per_device, gpus, cpus) == expected


def test_workers_share_the_gpus_in_turn():
    assert worker_devices(5, 2) == ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]
    assert worker_devices(2, 0) == ["cpu", "cpu"]


def test_resumed_sweep_skips_finished_runs(finished, capsys):
    out_dir, _ = finished
    before = {p: p.stat().st_mtime_ns for p in out_dir.glob("*/checkpoint.pt")}
    assert run_sweep(out_dir, "position=none,rope", "seed=0") == 0
    assert "0 run(s) trained, 0 only re-evaluated, 2 skipped" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out_dir.glob("*/checkpoint.pt")} == before


def test_failing_run_is_reported_and_others_finish(tmp_path, capsys):
    # a run folder whose checkpoint.pt is not a checkpoint: that run fails (a learned table too
    # short for the training lengths, used here before, is now refused when the sweep loads)
    (tmp_path / "learned-copy-seed0").mkdir()
    (tmp_path / "learned-copy-seed0" / "checkpoint.pt").write_bytes(b"not a checkpoint")
    code = run_sweep(tmp_path, "position=learned,alibi", workers=2)
    captured = capsys.readouterr()
    assert code == 1
    assert "FAILED learned-copy-seed0: ValueError" in captured.err
    assert "not a readable checkpoint" in captured.err
    assert (tmp_path / "alibi-copy-seed0" / "eval.json").is_file()
    assert [r["position"] for r in json.loads((tmp_path / "results.json").read_text())] == ["alibi"]


def test_grid_override_from_the_command_line():
    runs = expand(load_sweep(CONFIG, ["position=rope,alibi", "task=svo", "seed=0,1"]))
    assert [r.name for r in runs] == [
        "rope-svo-seed0",
        "rope-svo-seed1",
        "alibi-svo-seed0",
        "alibi-svo-seed1",
    ]
    assert not any("train_max_length" in o for o in runs[0].overrides)  # the task's default
    assert load_config(None, runs[0].overrides).data.train_max_length == 12
    assert runs[3].overrides[-1].endswith("alibi-svo-seed1")


def test_command_line_value_beats_the_task_defaults():
    """quick.yaml leaves the training lengths to each task's defaults; a value typed on the
    command line wins for every run, and the defaults still fill in the rest."""
    overrides = ["task=svo,copy", "position=rope", "data.train_max_length=20", "seed=0"]
    runs = expand(load_sweep(CONFIG, overrides))
    configs = {r.name: load_config(None, r.overrides) for r in runs}
    assert sorted(configs) == ["rope-copy-seed0", "rope-svo-seed0"]
    assert {c.data.train_max_length for c in configs.values()} == {20}
    assert configs["rope-svo-seed0"].data.train_min_length == 3  # svo's default
    assert configs["rope-copy-seed0"].data.train_min_length == 2  # copy's default
    assert configs["rope-copy-seed0"].data.options["copy"] == {"n_symbols": 16}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("position=rope,foo", "model.position='foo' is not a known scheme"),
        ("model.dmodel=3", "unknown config key 'model.dmodel'"),
        ("train.lr", "not key=value"),
    ],
)
def test_bad_override_fails_with_one_line(override, message, tmp_path, capsys):
    with pytest.raises(ConfigError, match=message):
        load_sweep(CONFIG, [override])
    assert sweep.main(["--config", CONFIG, f"out_dir={tmp_path}", override]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err
    assert not any(tmp_path.iterdir())  # nothing trained


def test_missing_sweep_file(capsys):
    assert sweep.main(["--config", "configs/nope.yaml"]) == 2
    assert "sweep file 'configs/nope.yaml' does not exist" in capsys.readouterr().err


def test_interrupted_sweep_checkpoints_and_resumes(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the first run's training: it saves a checkpoint, the rest never start,
    the command exits 130; the same command then finishes everything."""
    import lab.training.trainer

    real_batch = lab.training.trainer.training_batch

    def interrupt_at_step_3(task, seed, step, *args):
        if step == 3:
            raise KeyboardInterrupt
        return real_batch(task, seed, step, *args)

    with monkeypatch.context() as patch:
        patch.setattr(lab.training.trainer, "training_batch", interrupt_at_step_3)
        assert run_sweep(tmp_path, "position=none,rope", "seed=0") == 130
    assert "interrupted" in capsys.readouterr().err
    assert torch.load(tmp_path / "none-copy-seed0" / "checkpoint.pt")["step"] == 3
    assert not (tmp_path / "rope-copy-seed0").exists()
    assert run_sweep(tmp_path, "position=none,rope", "seed=0") == 0
    assert "2 run(s) trained" in capsys.readouterr().out


def test_a_run_an_older_sweep_began_keeps_its_events_in_its_folder(tmp_path, capsys):
    """A run an older sweep left unfinished, its events in its own folder (no ``log_dir``),
    resumes there: each step once in one TensorBoard run, nothing of it beside out_dir."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lab.training.run import TrainingInterrupted
    from lab.training.trainer import train

    grid = ["position=rope", "seed=0", "train.log_every=1"]
    (spec,) = expand(load_sweep(CONFIG, [f"out_dir={tmp_path}", *TINY, *grid]))
    calls = iter(range(100))
    with pytest.raises(TrainingInterrupted):  # as the older sweep, stopped after step 3
        train(load_config(None, [*spec.overrides, "log_dir="]), should_stop=lambda: next(calls) > 2)
    assert run_sweep(tmp_path, *grid) == 0
    assert "1 run(s) trained" in capsys.readouterr().out
    run = tmp_path / spec.name
    steps = [e.step for e in EventAccumulator(str(run)).Reload().Scalars("train/loss")]
    assert steps == sorted(set(steps)) and steps[-1] == 6  # every step once, to the end
    assert (run / "eval.json").is_file() and list(run.glob("events.out.tfevents.*.extrapolation"))
    assert not list(tmp_path.with_name(f"{tmp_path.name}-runs").rglob("events.out.tfevents.*"))


@pytest.mark.parametrize(
    ("override", "message"),
    [("run_dir=x", "use out_dir=... instead"), ("position=rope,,alibi", "empty value")],
)
def test_sweep_only_overrides_are_checked(override, message):
    with pytest.raises(ConfigError, match=message):
        load_sweep(CONFIG, [override])


def test_rerun_with_other_settings_is_refused_naming_the_keys(finished, tmp_path, capsys):
    """Re-running a finished sweep with model.d_model=16 once reported the old d_model-32
    results as "skipped (already finished)" with exit 0."""
    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    before = (copy / "results.json").read_bytes()
    assert run_sweep(copy, "position=none,rope", "seed=0", "model.d_model=16") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: 2 of 2 runs in") and "\n" not in err
    assert "none-copy-seed0: model.d_model: 32 -> 16" in err and "--overwrite" in err
    assert (copy / "results.json").read_bytes() == before  # nothing trained or rewritten
    assert run_sweep(copy, "position=none,rope", "seed=0", "model.d_model=16", "--overwrite") == 0
    assert "2 run(s) trained" in capsys.readouterr().out
    saved = torch.load(copy / "none-copy-seed0" / "checkpoint.pt", weights_only=True)
    assert saved["config"]["model"]["d_model"] == 16


def test_a_run_another_sweep_trained_since_the_check_is_refused_under_its_lock(
    finished, tmp_path, capsys, monkeypatch
):
    """A run retrained with other settings between a sweep's check of its folder and its
    runs: sweep A (lr 1e-3) checked the folder, then a run was retrained with lr 3e-3, and A
    skipped it and reported it as its own (exit 0). A second sweep into the folder is now
    refused by A's lock on out_dir; a train.py run into the run's folder is caught by the
    check A's run makes under the run's own lock. The interleaving is made deterministic."""
    from lab.training.trainer import train

    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    real = sweep.prepare_out_dir

    def then_sweep_b(*args, **kwargs):
        real(*args, **kwargs)
        monkeypatch.setattr(sweep, "prepare_out_dir", real)  # B checks as usual
        assert run_sweep(copy, "position=none", "seed=0", "train.lr=3e-3", "--overwrite") == 2
        assert "is in use by another sweep" in capsys.readouterr().err
        run = copy / "none-copy-seed0"
        train(load_config(run / "config.yaml", ["train.lr=3e-3", f"run_dir={run}"]), overwrite=True)

    monkeypatch.setattr(sweep, "prepare_out_dir", then_sweep_b)
    assert run_sweep(copy, "position=none,rope", "seed=0") == 1
    out, err = capsys.readouterr()
    assert "0 run(s) trained, 0 only re-evaluated, 1 skipped (already finished), 1 failed" in out
    failed = [line for line in err.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and failed[0].startswith("FAILED none-copy-seed0: ConfigError: ")
    assert "holds a run trained with other settings" in failed[0]
    assert "train.lr: 0.003 -> 0.001" in failed[0] and "--overwrite" in failed[0]
    results = json.loads((copy / "results.json").read_text())
    assert [(r["position"], r["config"]["train"]["lr"]) for r in results] == [("rope", 0.001)]
    saved = torch.load(copy / "none-copy-seed0" / "checkpoint.pt", weights_only=True)
    assert saved["config"]["train"]["lr"] == 0.003  # B's run, left as B made it


def test_a_check_at_train_time_stops_before_anything_is_written(tmp_path):
    """The training calls the sweep's check under the run's lock, before it reads or writes."""
    from conftest import tiny_config

    from lab.training.trainer import train

    def refuse():
        raise ConfigError("not this sweep's run")

    with pytest.raises(ConfigError, match="not this sweep's run"):
        train(tiny_config(tmp_path / "run"), check=refuse)
    assert not (tmp_path / "run").exists()  # the folder it created for the lock is removed
    (tmp_path / "kept").mkdir()  # a folder that was there before stays, with only the lock
    with pytest.raises(ConfigError, match="not this sweep's run"):
        train(tiny_config(tmp_path / "kept"), check=refuse)
    assert [p.name for p in (tmp_path / "kept").iterdir()] == [".lock"]


def test_overwrite_checks_the_device_before_deleting(finished, tmp_path, capsys):
    """`sweep.py --overwrite device=cuda` on a machine without it once deleted every finished
    run, then failed each one."""
    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    args = ("position=none,rope", "seed=0", "model.d_model=16", "device=cuda:99", "--overwrite")
    assert run_sweep(copy, *args) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: device='cuda:99' is not available on this machine; use auto or cpu"
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before


def test_changed_evaluation_or_runtime_settings_only_reevaluate(finished, tmp_path, capsys):
    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    assert run_sweep(copy, "position=none,rope", "seed=0", "eval.samples=4", "threads=2") == 0
    assert "0 run(s) trained, 2 only re-evaluated" in capsys.readouterr().out
    assert (
        json.loads((copy / "none-copy-seed0" / "eval.json").read_text())["lengths"][0]["samples"]
        == 4
    )


def test_changing_how_often_a_run_logs_saves_or_scores_2x_is_no_other_setting(
    finished, tmp_path, capsys
):
    """train.log_every, train.checkpoint_every and train.extrapolation_every are no setting of
    an arm (a grid over them is refused), yet a re-run changing one refused every finished run
    as 'trained with other settings' and offered only --overwrite; they are skipped, and
    --resume may change them too."""
    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    logging = ("train.log_every=3", "train.checkpoint_every=3", "train.extrapolation_every=0")
    assert run_sweep(copy, "position=none,rope", "seed=0", *logging) == 0
    assert "0 run(s) trained, 0 only re-evaluated, 2 skipped" in capsys.readouterr().out
    assert set(NOT_A_SETTING) - {"seed"} <= set(RESUME_KEYS) | {"run_dir", "log_dir"}


def test_repeated_grid_values_are_one_run():
    runs = expand(load_sweep(CONFIG, ["position=rope,rope,alibi", "task=svo", "seed=0,0"]))
    assert [r.name for r in runs] == ["rope-svo-seed0", "alibi-svo-seed0"]


@pytest.mark.parametrize("axis", ["train.log_every=5,10", "threads=1,2", "device=cpu,cpu:0"])
def test_a_grid_over_a_key_that_is_no_setting_is_refused_before_training(axis):
    """train.log_every=5,10 trained two runs that are one run, then refused the report; a grid
    over a key that changes how a run is logged or run is one line before anything trains."""
    with pytest.raises(ConfigError, match=f"^{axis} changes how a run is logged or run"):
        expand(load_sweep(CONFIG, [axis, "position=rope", "task=svo", "seed=0"]))
    assert len(expand(load_sweep(CONFIG, ["threads=1,1", "position=rope", "seed=0"]))) == 2


@pytest.mark.parametrize(
    ("key", "registry", "other"),
    [
        ("task", exact_match_tasks, "position=rope"),
        ("model.position", available_schemes, "task=svo"),
    ],
)
def test_all_is_every_registered_name_in_registry_order(key, registry, other, tmp_path):
    """``task=all`` on the command line, or ``data.task: all`` in a sweep file, gives exactly
    the runs of the registry's names listed by hand: same folders, same settings, same order."""
    by_hand = expand(load_sweep(CONFIG, [f"{key}={','.join(registry())}", other, "seed=0"]))
    runs = expand(load_sweep(CONFIG, [f"{key}=all", other, "seed=0"]))
    assert [(r.name, r.overrides) for r in runs] == [(r.name, r.overrides) for r in by_hand]
    assert len(runs) == len(registry())
    files = {}
    for value in ("all", f"[{', '.join(registry())}]"):
        files[value] = tmp_path / f"{len(files)}.yaml"
        files[value].write_text(f"out_dir: runs/x\ngrid:\n  {key}: {value}\n  seed: [0]\n")
    runs, by_hand = (expand(load_sweep(file, [other])) for file in files.values())
    assert [(r.name, r.overrides) for r in runs] == [(r.name, r.overrides) for r in by_hand]
    assert len(runs) == len(registry())


def test_all_with_other_values_and_on_other_keys():
    runs = expand(load_sweep(CONFIG, ["task=copy,all", "position=rope", "seed=0"]))
    tasks = [r.name.split("-")[1] for r in runs]
    assert tasks == ["copy", *(t for t in exact_match_tasks() if t != "copy")]  # in place, once
    with pytest.raises(ConfigError, match="all"):  # 'all' means something for tasks and schemes
        load_sweep(CONFIG, ["seed=all"])


@pytest.mark.parametrize("name", ["suite.yaml", "suite_quick.yaml"])
def test_the_suite_files_take_their_tasks_from_the_registry(name):
    """A new task joins the suite without an edit of the suite files (an exact-match task: the
    language-model task ``text`` is not one)."""
    sweep_file = load_sweep(Path(CONFIG).parent / name)
    assert sweep_file.grid["data.task"] == list(exact_match_tasks())
    assert set(available_tasks()) - set(exact_match_tasks()) == {"text"}
    assert "all" in (Path(CONFIG).parent / name).read_text()


def test_other_programs_are_flags_of_sweep_py(capsys):
    """``--publish`` and ``--compare`` hand the rest of the command line to their program."""
    assert "--publish" in sweep.build_parser().format_help()
    assert "--compare" in sweep.build_parser().format_help()
    with pytest.raises(SystemExit) as done:
        sweep.main(["--compare", "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python sweep.py --compare")
    with pytest.raises(SystemExit) as done:
        sweep.main(["--publish", "--help"])
    assert done.value.code == 0 and "--check" in capsys.readouterr().out
    assert sweep.main(["--publish", "/no/such/folder"]) == 2
    assert "/no/such/folder" in one_error_line(capsys)
    assert sweep.main(["--compare", "/no/such/a.json", "/no/such/b.json"]) == 2
    assert "/no/such/a.json" in one_error_line(capsys)
    assert sweep.main(["--quick", "--publish", "runs/x"]) == 2
    assert "--publish must be the first argument" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("out_dir=", "out_dir='' is invalid"),
        ("out_dir= ", "out_dir=' ' is invalid"),
        ("out_dir=configs/quick.yaml", "is a file, not a folder"),
        ("out_dir=/", "out_dir='/' is the filesystem root"),
        ("out_dir=.", "out_dir='.' names no folder of its own"),
        ("out_dir=..", "out_dir='..' names no folder of its own"),
        ("out_dir=~", "out_dir='~' starts with '~', which is not expanded here"),
    ],
)
@pytest.mark.parametrize(
    "program", [["--config", CONFIG], ["--extend-study", "configs/lm_extend.yaml"]]
)
def test_bad_out_dir_is_one_line(override, message, program, capsys, tmp_path, monkeypatch):
    """Every entry point checks out_dir alike: an unset shell variable (``out_dir=``) or the
    root never writes run folders or results anywhere (the extend study wrote into / and
    replaced results.json in the current folder)."""
    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(tmp_path)
    argv = [program[0], str(root / program[1]), override.replace("configs/", f"{root}/configs/")]
    assert sweep.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err
    assert not list(tmp_path.iterdir())


def test_sweep_file_with_a_yaml_syntax_error_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid:\n  seed: [0, 1\n")
    assert sweep.main(["--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: config file {str(bad)!r} is not valid YAML") and "\n" not in err


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_stops_the_sweep_like_ctrl_c(tmp_path, workers):
    """SIGTERM (what `timeout` and schedulers send) once killed the parent and left workers
    training, starting queued runs, then hanging. Now: every running training saves a
    checkpoint, queued runs never start, the command exits 143 (128 + SIGTERM) and no worker
    outlives it."""
    root = Path(__file__).parents[1]
    argv = [sys.executable, str(root / "sweep.py"), "--config", CONFIG]
    argv += ["--workers", str(workers), f"out_dir={tmp_path}", *TINY]
    argv += ["position=none,rope,alibi", "train.steps=100000", "train.checkpoint_every=5"]
    sweep_process = subprocess.Popen(argv, cwd=root, stderr=subprocess.PIPE, text=True)
    first = tmp_path / "none-copy-seed0" / "checkpoint.pt"
    deadline = time.monotonic() + 120
    while not first.exists() or (workers == 2 and not (tmp_path / "rope-copy-seed0").exists()):
        assert time.monotonic() < deadline and sweep_process.poll() is None
        time.sleep(0.1)
    time.sleep(0.5)  # a few more steps
    sweep_process.send_signal(signal.SIGTERM)
    _, err = sweep_process.communicate(timeout=120)
    assert sweep_process.returncode == 143, err
    assert "run the same command again to resume" in err
    started = sorted(p.parent.name for p in tmp_path.glob("*/checkpoint.pt"))
    assert started == ["none-copy-seed0", "rope-copy-seed0"][:workers]
    assert not (tmp_path / "alibi-copy-seed0").exists()  # queued, never started
    for name in started:
        state = torch.load(tmp_path / name / "checkpoint.pt", weights_only=False)
        assert 0 < state["step"] < 100000 and not state["finished"]
        assert not (tmp_path / name / "eval.json").exists()
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""


def test_a_run_stopped_on_its_own_is_named_and_fails_the_sweep(finished, capsys, tmp_path):
    """SIGTERM sent to one worker (not to the sweep) once made its run vanish from the report
    while the sweep exited 0."""
    out_dir, _ = finished
    result = json.loads((out_dir / "none-copy-seed0" / "eval.json").read_text())
    records = [
        {"name": "none-copy-seed0", "status": "skipped", "error": None, "result": result},
        {"name": "rope-copy-seed0", "status": "interrupted", "error": None, "result": None},
    ]
    assert sweep.report(records, tmp_path, 1.0) == 1
    captured = capsys.readouterr()
    assert "0 failed, 1 interrupted" in captured.out
    assert "INTERRUPTED rope-copy-seed0: its worker was stopped" in captured.err


SCALINGS = ["eval.position_options.scaling=linear,yarn", "eval.position_options.scaling_factor=2,4"]
RULES = [(rule, factor) for rule in ("linear", "yarn") for factor in (2, 4)]


def test_evaluation_axes_share_one_training():
    runs = expand(load_sweep(CONFIG, ["position=rope", "task=svo", "seed=0,1", *SCALINGS]))
    assert [r.name for r in runs] == ["rope-svo-seed0", "rope-svo-seed1"]
    assert runs[0].evaluations == {
        "": [],
        **{
            f"scaling{rule}-scaling_factor{factor}": [
                f"eval.position_options.scaling={rule}",
                f"eval.position_options.scaling_factor={factor}",
            ]
            for rule, factor in RULES
        },
    }
    assert not any("position_options" in o for o in runs[0].overrides)


def test_evaluation_axes_of_one_scheme_leave_the_others_as_trained():
    """RoPE's rules in a sweep over several schemes: the RoPE run is evaluated under each, the
    others (no such option) as trained only, with no alias lines for the skipped points."""
    runs = expand(load_sweep(CONFIG, ["position=none,rope,alibi", "task=svo", "seed=0", *SCALINGS]))
    assert [r.name for r in runs] == ["none-svo-seed0", "rope-svo-seed0", "alibi-svo-seed0"]
    assert [len(r.evaluations) for r in runs] == [1, 1 + len(RULES), 1]
    assert all(not r.aliases for r in runs)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.samples=4,8", "eval.samples cannot be a grid axis; only eval.position_options.KEY"),
        (
            "eval.position_options.rotary_fraction=0.5,1",
            "rope-svo-seed0: eval.position_options.rotary_fraction cannot change at evaluation",
        ),
    ],
)
def test_bad_evaluation_axes_are_refused_before_training(override, message):
    with pytest.raises(ConfigError, match=message):
        load_sweep(CONFIG, ["position=rope", "task=svo", "seed=0", override])


def test_a_trained_run_is_evaluated_many_ways_without_retraining(finished, tmp_path, capsys):
    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    run = copy / "rope-copy-seed0"
    checkpoint = (run / "checkpoint.pt").read_bytes()
    assert run_sweep(copy, "position=rope", "seed=0", *SCALINGS) == 0
    assert "0 run(s) trained, 1 only re-evaluated" in capsys.readouterr().out
    assert (run / "checkpoint.pt").read_bytes() == checkpoint
    for rule, factor in RULES:
        folder = run / "evaluations" / f"scaling{rule}-scaling_factor{factor}"
        saved = json.loads((folder / "eval.json").read_text())
        wanted = {"scaling": rule, "scaling_factor": factor}
        assert saved["config"]["eval"]["position_options"] == wanted
        assert saved["config"]["model"]["options"]["rope"]["scaling"] == "none"  # as trained
    results = json.loads((copy / "results.json").read_text())
    labels = [r["config"]["eval"]["position_options"] for r in results]
    assert labels == [{}, *({"scaling": rule, "scaling_factor": f} for rule, f in RULES)]
    with (copy / "results.csv").open() as file:
        runs = list(dict.fromkeys(row["run"] for row in csv.DictReader(file)))
    assert runs == [
        "rope-copy-seed0",
        *(f"rope-copy-seed0 [scaling={rule}, scaling_factor={f}]" for rule, f in RULES),
    ]
    assert "rope [scaling=yarn, scaling_factor=4]" in (copy / "report.md").read_text()
    from lab.evaluation.figure import plot_accuracy_vs_length

    assert len(plot_accuracy_vs_length(results, None).axes[0].containers) == 5  # one per rule
    assert run_sweep(copy, "position=rope", "seed=0", *SCALINGS) == 0
    assert "1 skipped" in capsys.readouterr().out
    assert run_sweep(copy, "position=rope", "seed=0", *SCALINGS, "eval.samples=4") == 0
    assert "0 run(s) trained, 1 only re-evaluated" in capsys.readouterr().out
    folder = run / "evaluations" / "scalingyarn-scaling_factor4"
    assert json.loads((folder / "eval.json").read_text())["lengths"][0]["samples"] == 4


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ("grid: 5", "grid must be a mapping of dotted key -> a value or a list of values"),
        ("grid: [all]", "grid must be a mapping of dotted key -> a value or a list of values"),
        ("grid: {data.task: [[all]]}", "grid key 'data.task' has the value [['all']]; give a"),
        ("grid: {seed: [[0]]}", "grid key 'seed' has the value [[0]]; give a value or a list"),
        ("grid: {data.task: {a: all}}", "grid key 'data.task' has the value {'a': 'all'}"),
        ("grid: {data.task: []}", "grid key 'data.task' has no values; give at least one"),
        ("grid: {seed: [0]}\nwhen: {data.task=copy: 5}", "must be a mapping of settings"),
        ("grid: {seed: [0]}\nbase: [1]", "base must be a mapping"),
    ],
)
def test_a_grid_of_other_shapes_or_an_empty_axis_is_one_line(grid, message, tmp_path, capsys):
    """These once crashed with a traceback (nested values, a grid that is no mapping) or swept
    '0 runs' with exit status 0 (an empty axis)."""
    path = tmp_path / "sweep.yaml"
    path.write_text(f"out_dir: {tmp_path / 'out'}\n{grid}\n")
    assert sweep.main(["--config", str(path)]) == 2
    err = one_error_line(capsys)
    assert message in err and str(path) in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ("data.task=al", "when block 'data.task=al' names data.task='al', which is not a value"),
        ("task=all", "when block 'task=all' names data.task='all', which is not a value"),
        ("seed=7", "when block 'seed=7' names seed='7', which is not a value of the grid"),
        ("model.d_model=32", "when block 'model.d_model=32' is not KEY=VALUE with KEY a grid key"),
        ("copy", "when block 'copy' is not KEY=VALUE"),
    ],
)
def test_a_when_block_on_no_grid_value_is_one_line(when, message, tmp_path):
    """A typo in a when key was silently never applied."""
    path = tmp_path / "sweep.yaml"
    grid = "grid: {data.task: [svo, copy], seed: [0, 1]}"
    path.write_text(f"out_dir: {tmp_path}\n{grid}\nwhen: {{{when}: {{train: {{steps: 5}}}}}}\n")
    with pytest.raises(ConfigError, match="^sweep file .*") as error:
        load_sweep(path)
    assert message in str(error.value)


def test_a_when_block_applies_to_a_value_on_the_command_line_or_in_the_file(tmp_path):
    path = tmp_path / "sweep.yaml"
    blocks = "when: {seed=3: {train: {steps: 700}}, data.task=svo: {train: {steps: 900}}}"
    path.write_text(f"out_dir: {tmp_path}\ngrid: {{data.task: [copy], seed: [0]}}\n{blocks}\n")
    runs = expand(load_sweep(path, ["seed=3,4"]))  # seed=3 only on the command line
    steps = {r.name: load_config(None, r.overrides).train.steps for r in runs}
    assert steps == {"copy-seed3": 700, "copy-seed4": load_config().train.steps}
    assert len(expand(load_sweep(path, ["task=svo", "seed=3"]))) == 1  # svo: a registered task


@pytest.mark.parametrize("override", ["seed=all", "model.d_model=all", "seed=0,all"])
def test_all_on_another_key_says_where_it_belongs(override):
    with pytest.raises(ConfigError, match="only for data.task and model.position"):
        load_sweep(CONFIG, [override])


@pytest.mark.parametrize(
    ("override", "kind"), [("task=copy,al", "task"), ("position=ROPE", "scheme")]
)
def test_a_bad_task_or_scheme_names_all_as_allowed(override, kind):
    with pytest.raises(ConfigError, match=rf"is not a known {kind}; choose one of .*, or all"):
        load_sweep(CONFIG, [override])


@pytest.mark.parametrize("override", ["task=text", "data.task=svo,text"])
def test_a_language_model_task_on_the_task_axis_says_where_it_goes(override):
    """text is a registered task, so "not a known task" was wrong: it is refused because the
    axis holds exact-match tasks, and the message names the sweep file that takes it."""
    with pytest.raises(ConfigError, match=r"'text' is a language-model task .* configs/lm.yaml"):
        load_sweep(CONFIG, [override])


def test_a_grid_value_with_a_path_never_nests_or_moves_a_run_folder(tmp_path):
    """A corpus-path axis once named runs ``rope-seed0-path/tmp/a.txt`` (nested folders, events
    in a stray -runs folder) and, with ``..`` in the path, put them outside out_dir, where
    --overwrite replaced a user's run: every run is now one folder directly in out_dir."""
    (tmp_path / "c").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "c" / name).write_bytes(b"the quick brown fox jumps over the lazy dog. " * 80)
    paths = f"{tmp_path}/c/a.txt,/../..{tmp_path}/c/../c/b.txt"
    lm_quick = str(Path(CONFIG).with_name("lm_quick.yaml"))
    out = tmp_path / "out"
    overrides = [f"out_dir={out}", f"data.options.text.path={paths}", "eval.lm_tokens=256"]
    specs = expand(load_sweep(lm_quick, [*overrides, "position=rope"]))
    assert len({spec.name for spec in specs}) == len(specs) == 2
    for spec in specs:
        assert "/" not in spec.name and ".." not in spec.name, spec.name
        run_dir = load_config(None, spec.overrides).run_dir
        assert Path(run_dir).parent == out, run_dir


def test_an_evaluation_made_on_another_device_is_redone(finished, tmp_path, capsys):
    """A sweep evaluated on a GPU (bf16 under precision auto) and rerun on a CPU reported the
    GPU's figures as 'skipped (already finished)'."""
    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    here = "cuda" if torch.cuda.is_available() else "cpu"  # where device=auto evaluates
    other = {"device": "cpu", "dtype": "float32"} if here == "cuda" else {}
    other = other or {"device": "cuda:0", "dtype": "bfloat16"}
    path = copy / "rope-copy-seed0" / "eval.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **other}))
    assert run_sweep(copy, "position=none,rope", "seed=0") == 0
    captured = capsys.readouterr()
    assert "0 run(s) trained, 1 only re-evaluated, 1 skipped" in captured.out
    assert f"{path}: evaluated on {other['device']} in {other['dtype']}" in captured.err
    assert torch.device(json.loads(path.read_text())["device"]).type == here


def test_sweep_json_records_the_command_and_a_skip_all_rerun_keeps_its_wall_time(
    finished, tmp_path, capsys
):
    """sweep.json recorded no command (so a published page named the family's), and a re-run
    that skipped every run replaced the training's wall time with its own few seconds."""
    out_dir, _ = finished
    timing = json.loads((out_dir / "sweep.json").read_text())
    argv = ["--config", CONFIG, "--workers", "1", f"out_dir={out_dir}", *TINY]
    made = shlex.join(["python", "sweep.py", *argv, "position=none,rope", "seed=0"])
    assert timing["command"] == made
    assert timing["runs"] == {"trained": 2} and timing["machine"] and timing["seconds"] > 0
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    before = json.loads((copy / "sweep.json").read_text())
    assert run_sweep(copy, "position=none,rope", "seed=0") == 0
    assert "0 run(s) trained, 0 only re-evaluated, 2 skipped" in capsys.readouterr().out
    kept = json.loads((copy / "sweep.json").read_text())
    assert {**kept, "files": None} == {**before, "files": None}  # the training pass's, kept
    assert {"results.json", "report.md", "results.csv"} <= set(kept["files"])
    for name, digest in kept["files"].items():  # the digests of the reports it rewrote
        assert file_sha256(copy / name) == digest, name
    assert run_sweep(copy, "position=none,rope", "seed=0", "eval.samples=4") == 0  # work done
    rerun = json.loads((copy / "sweep.json").read_text())
    assert rerun["runs"] == {"evaluated": 2} and rerun["command"].endswith("eval.samples=4")
    assert rerun["seconds"] == before["seconds"] and rerun["trained_by"] == made  # training's


def test_a_skip_all_pass_of_another_command_is_no_result_to_publish(finished, tmp_path, capsys):
    """A subset of a sweep re-run into its folder (position=rope over position=none,rope) kept
    the training pass's sweep.json, and --publish named that command and its time above a
    table of the subset's runs; the other command's pass writes its own skipped counts, which
    publishing refuses in one line."""
    from lab.reporting import readme

    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    assert run_sweep(copy, "position=rope", "seed=0") == 0
    timing = json.loads((copy / "sweep.json").read_text())
    assert timing["runs"] == {"skipped": 1} and timing["command"].endswith("position=rope seed=0")
    capsys.readouterr()
    with pytest.raises(ValueError, match="records a pass that trained and evaluated nothing"):
        readme.check_complete(copy, readme.FAMILIES["ablation"])


def test_reports_rewritten_by_eval_py_are_no_result_to_publish(finished, tmp_path, capsys):
    """eval.py over a sweep's folder with other eval.* values rewrote its reports, and --publish
    named the sweep's command above tables of the other settings; sweep.json now records the
    eval.py command, and publishing refuses the folder until the sweep itself re-evaluates."""
    import eval as eval_cli
    from lab.reporting import readme

    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    assert eval_cli.main([str(copy), "--no-progress", "eval.samples=4"]) == 0
    timing = json.loads((copy / "sweep.json").read_text())
    assert timing["reports_rewritten_by"].startswith("python eval.py ")
    with pytest.raises(ValueError, match="reports were rewritten by `python eval.py"):
        readme.check_complete(copy, readme.FAMILIES["ablation"])
    assert run_sweep(copy, "position=none,rope", "seed=0") == 0  # the sweep's settings again
    assert "reports_rewritten_by" not in json.loads((copy / "sweep.json").read_text())
    capsys.readouterr()


def test_a_folder_eval_py_rewrote_with_the_sweeps_settings_is_publishable_again(
    finished, tmp_path, capsys
):
    """eval.py over a sweep with its own settings marked the reports rewritten; the sweep's
    command then skipped every run and kept the mark, so the folder could never be published
    again short of --overwrite. The sweep's own skip-all pass drops the mark."""
    import eval as eval_cli
    from lab.reporting import readme

    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    assert eval_cli.main([str(copy), "--no-progress"]) == 0
    assert "reports_rewritten_by" in json.loads((copy / "sweep.json").read_text())
    assert run_sweep(copy, "position=none,rope", "seed=0") == 0
    assert "2 skipped" in capsys.readouterr().out
    assert "reports_rewritten_by" not in json.loads((copy / "sweep.json").read_text())
    readme.check_complete(copy, readme.FAMILIES["ablation"])  # publishable


def test_a_pass_that_only_re_evaluates_keeps_the_training_time_and_machine(
    finished, tmp_path, capsys
):
    """A pass of the same command that re-evaluated one run (its eval.json gone) replaced the
    training pass's wall time and machine with its own, which a page then published as the
    sweep's; they are kept, and the re-evaluation's time stands beside them."""
    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    before = json.loads((copy / "sweep.json").read_text())
    (copy / "rope-copy-seed0" / "eval.json").unlink()
    assert run_sweep(copy, "position=none,rope", "seed=0") == 0
    assert "1 only re-evaluated, 1 skipped" in capsys.readouterr().out
    timing = json.loads((copy / "sweep.json").read_text())
    assert timing["runs"] == {"evaluated": 1, "skipped": 1}
    assert (timing["seconds"], timing["machine"]) == (before["seconds"], before["machine"])
    assert timing["reevaluated"]["seconds"] > 0 and timing["reevaluated"]["machine"]


@pytest.mark.parametrize("name", ["results.json", "report.md"])
def test_a_report_file_not_the_sweeps_own_is_no_result_to_publish(finished, tmp_path, name):
    """A results.json or report.md copied in from another sweep (same run count, same folder)
    was published at exit 0 under this sweep's command; sweep.json records the SHA-256 of
    every report file its last pass wrote, and publishing refuses one that differs."""
    from lab.reporting import readme

    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    family = made_by(copy, readme.FAMILIES["ablation"])
    readme.check_recorded(copy, family)  # as written: accepted
    if name == "results.json":  # the same records, written anew: another file all the same
        records = json.loads((copy / name).read_text())
        (copy / name).write_text(json.dumps(records, indent=1))
    else:
        (copy / name).write_text("# Evaluation report\n\nanother sweep's runs\n")
    with pytest.raises(ValueError, match=f"{name} is not the file the sweep's last pass wrote"):
        readme.check_recorded(copy, family)


def made_by(folder: Path, family):
    """``family`` as if its page stated the command that made the sweep in ``folder``."""
    command = json.loads((folder / "sweep.json").read_text())["command"]
    return dataclasses.replace(family, command=command)


@pytest.mark.parametrize("slot", ["ablation", "headline", "lm-extend"])
def test_a_sweep_of_another_command_is_refused_by_a_page_that_describes_its_own(
    finished, tmp_path, slot
):
    """Any sweep could be published as the headline, the ablation or the extend study, under
    README prose that describes configs/ablation.yaml at 6 seeds; a sweep whose command differs
    from the page's (workers, threads, device and out_dir aside) is refused in one line."""
    from lab.reporting import readme

    out_dir, _ = finished
    with pytest.raises(ValueError, match=rf"was made by `python sweep.py .*`; the {slot} page "):
        readme.check_recorded(out_dir, readme.FAMILIES[slot])
    family = made_by(out_dir, readme.FAMILIES[slot])
    how = "--workers 7 threads=3 --overwrite --launcher submitit-local --slurm.cpus 2"
    more = dataclasses.replace(family, command=f"{family.command} {how}")
    readme.check_recorded(out_dir, more)  # how it ran is no part of what it computed


def test_a_stopped_re_evaluation_and_its_resumption_keep_the_training_time(tmp_path):
    """A re-evaluating pass stopped by a signal (runs evaluated and cancelled), then resumed,
    lost the training pass's time, machine and command: the page gave the re-evaluations'
    seconds as the training's. Both passes keep them and add up their own re-evaluation."""
    from lab.sweeps.summary import write_timing

    trained = [{"name": n, "status": "trained"} for n in "ab"]
    write_timing(trained, tmp_path, 4.5, 1, command="python sweep.py")
    again = "python sweep.py eval.samples=100"
    stopped = [{"name": "a", "status": "evaluated"}, {"name": "b", "status": "cancelled"}]
    first = json.loads(write_timing(stopped, tmp_path, 7.7, 1, command=again).read_text())
    assert (first["seconds"], first["trained_by"]) == (4.5, "python sweep.py")
    assert first["reevaluated"]["seconds"] == 7.7 and first["runs"]["cancelled"] == 1
    resumed = [{"name": "a", "status": "skipped"}, {"name": "b", "status": "evaluated"}]
    last = json.loads(write_timing(resumed, tmp_path, 15.5, 1, command=again).read_text())
    assert (last["seconds"], last["trained_by"]) == (4.5, "python sweep.py")
    assert last["reevaluated"]["seconds"] == 23.2 and last["runs"] == {"skipped": 1, "evaluated": 1}


def test_a_file_the_last_pass_did_not_write_is_no_result_to_publish(finished, tmp_path):
    """A figure the last pass did not write (a learned run's heatmap, an attention figure from
    another sweep), copied into the folder, was published unchecked: only files sweep.json
    named were compared. A file to be copied that sweep.json records no digest of is refused."""
    from lab.reporting import readme

    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    timing = json.loads((copy / "sweep.json").read_text())
    del timing["files"]["learning_speed.png"]  # as if another sweep's figure were copied in
    (copy / "sweep.json").write_text(json.dumps(timing))
    with pytest.raises(ValueError, match="learning_speed.png was not written by the sweep's last"):
        readme.check_recorded(copy, made_by(copy, readme.FAMILIES["ablation"]))


def test_a_pass_that_trained_nothing_keeps_the_training_passs_sweep_json(tmp_path):
    """A re-run that skipped every run once replaced the training pass's wall time with its own
    seconds; it keeps it. A pass where a run failed writes its counts (its reports lack that
    run, and publishing refuses them), and a pass that trained or evaluated writes anew."""
    from lab.sweeps.summary import write_timing

    first = [{"name": "a", "status": "trained"}, {"name": "b", "status": "trained"}]
    first[0]["results"] = [{"kind": "lm"}, {"kind": "lm"}]  # a run evaluated two ways
    first[1]["result"] = {"task": "copy"}
    path = write_timing(first, tmp_path, 600.0, 2, command="python sweep.py")
    assert json.loads(path.read_text())["results"] == {"synthetic": 1, "lm": 2}
    before = path.read_bytes()
    idle = [{"name": "a", "status": "skipped"}, {"name": "b", "status": "skipped"}]
    assert write_timing(idle, tmp_path, 3.0, 2, command="python sweep.py").read_bytes() == before
    failed = [{"name": "a", "status": "skipped"}, {"name": "b", "status": "failed"}]
    runs = json.loads(write_timing(failed, tmp_path, 3.0, 2).read_text())["runs"]
    assert runs == {"skipped": 1, "failed": 1}
    again = [{"name": "a", "status": "skipped"}, {"name": "b", "status": "evaluated"}]
    timing = json.loads(write_timing(again, tmp_path, 5.0, 2).read_text())
    assert timing["seconds"] == 8.0 and timing["passes"] == 2  # goes on with the failed pass
    assert json.loads(write_timing(again, tmp_path, 5.0, 2).read_text())["seconds"] == 5.0


def test_a_sweep_stopped_and_resumed_states_the_time_of_every_pass(tmp_path):
    """After several stopped passes of one extend study, sweep.json said 6.8 s (the last
    pass's) and a page would quote it for the whole study; a pass that goes on with an
    unfinished one of the same command adds its seconds, another command starts anew."""
    from lab.sweeps.summary import write_timing

    command = "python sweep.py --extend-study s.yaml"
    stopped = [{"name": "a", "status": "trained"}, {"name": "b", "status": "interrupted"}]
    write_timing(stopped, tmp_path, 100.0, 2, command=command)
    cancelled = [{"name": "a", "status": "skipped"}, {"name": "b", "status": "cancelled"}]
    write_timing(cancelled, tmp_path, 20.0, 2, command=command)
    done = [{"name": "a", "status": "skipped"}, {"name": "b", "status": "trained"}]
    timing = json.loads(write_timing(done, tmp_path, 50.0, 2, command=command).read_text())
    assert timing["seconds"] == 170.0 and timing["passes"] == 3
    write_timing(stopped, tmp_path, 100.0, 2, command=command)
    other = json.loads(write_timing(done, tmp_path, 50.0, 2, command="python sweep.py").read_text())
    assert other["seconds"] == 50.0 and "passes" not in other


def test_a_smoke_sweep_reports_tables_and_no_verdict(finished, capsys, tmp_path):
    """configs/quick.yaml once printed "NoPE learns order: disagrees" from undertrained runs."""
    out_dir, _ = finished
    result = json.loads((out_dir / "none-copy-seed0" / "eval.json").read_text())
    records = [{"name": "none-copy-seed0", "status": "skipped", "error": None, "result": result}]
    assert sweep.report(records, tmp_path, 1.0, smoke=True) == 0
    printed = capsys.readouterr().out
    assert "Smoke test (`smoke: true` in its sweep file)" in printed
    assert "Findings at" not in printed and "agrees" not in printed
    report = (tmp_path / "report.md").read_text()
    assert "**Smoke test**" in report and "exact-match at multiples" in report
    for absent in ("Findings against the literature", "Significant", "Paired differences"):
        assert absent not in report
    assert json.loads((tmp_path / "sweep.json").read_text())["smoke"] is True
    for name in ("quick.yaml", "lm_quick.yaml", "suite_quick.yaml"):
        assert load_sweep(Path("configs") / name).smoke, name
    assert not load_sweep(Path("configs") / "ablation.yaml").smoke


def test_smoke_must_be_a_boolean(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("smoke: yes please\ngrid: {seed: [0]}\n")
    with pytest.raises(ConfigError, match="smoke must be true or false; got 'yes please'"):
        load_sweep(bad)


def test_start_order_puts_its_axes_outermost_and_changes_no_name(tmp_path: Path) -> None:
    """configs/ablation.yaml starts every copy run first (start_order: [data.task]); the runs,
    their names and their overrides are those of the grid without it, in another order."""
    ablation = load_sweep(sweep.CONFIGS / "ablation.yaml")
    specs = expand(ablation)
    tasks = [load_config(None, s.overrides).data.task for s in specs]
    assert tasks == ["copy"] * 15 + ["svo"] * 15
    ablation.start_order = []
    plain = expand(ablation)
    assert [s.name for s in plain][:4] == [
        "none-copy-seed0", "none-copy-seed1", "none-copy-seed2", "none-svo-seed0",
    ]  # fmt: skip
    assert sorted((s.name, s.overrides) for s in specs) == sorted(
        (s.name, s.overrides) for s in plain
    )


@pytest.mark.parametrize(
    "order",
    ["[seed, seed]", "[model.window]", "seed", "{}", "false", "0", "''", "[[seed]]", "[{seed: 1}]"],
)
def test_a_start_order_that_is_not_a_list_of_grid_keys_is_refused(
    tmp_path: Path, order: str
) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"grid: {{seed: [0, 1], task: [copy, svo]}}\nstart_order: {order}\n")
    with pytest.raises(ConfigError, match=r"start_order=.* is invalid; give a list of its grid"):
        load_sweep(path)


def test_a_second_sweep_into_a_folder_in_use_is_refused_before_it_starts(tmp_path, capsys):
    """Two sweeps into one out_dir at once each trained half the runs, failed the other half
    on the run locks and wrote a report of half the sweep; the second is refused in one line
    naming the holder, and nothing of it is written."""
    from lab.common.runlock import run_lock

    out_dir = tmp_path / "out"
    with run_lock(out_dir, "out_dir", "another sweep"):  # as a running sweep holds it
        assert run_sweep(out_dir, "position=rope", "seed=0") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: out_dir={str(out_dir)!r} is in use by ")
    assert "another sweep (pid" in err[0]
    assert sorted(p.name for p in out_dir.iterdir()) == [".lock"]


def test_a_stop_names_how_to_go_on_for_the_program_that_ran():
    """A stop during --publish ended with the sweep's line (runs kept, resume with the same
    command); the programs that train nothing say what they leave instead."""
    assert sweep.stop_hint(["--publish", "runs/x"]).startswith("pages are rendered before any")
    assert sweep.stop_hint(["--compare", "a", "b"]) == "it writes its page at the end; run it again"
    resume = sweep.stop_hint(["seed=0"])
    assert resume.endswith("(finished runs are skipped): python sweep.py seed=0")
    assert sweep.stop_hint([]).endswith(": python sweep.py")


def test_a_study_or_a_tuning_into_a_running_sweeps_folder_is_refused(tmp_path, capsys):
    """The out_dir lock kept a second sweep out, but --extend-study and --select-lr trained
    into a running sweep's folder (the study's stopped pass then replaced its sweep.json); they
    take the same lock and are refused in one line before anything of theirs is written."""
    from lab.common.runlock import run_lock

    out_dir = tmp_path / "out"
    study = str(Path(CONFIG).parent / "lm_extend.yaml")
    with run_lock(out_dir, "out_dir", "another sweep"):  # as a running sweep holds it
        tuning = ["--select-lr", "--config", CONFIG, *TINY, f"out_dir={out_dir}", "--lrs", "1e-3"]
        assert sweep.main(tuning) == 2
        assert sweep.main(["--extend-study", study, f"out_dir={out_dir}", "threads=1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all("is in use by another sweep (pid" in line for line in lines)
    assert sorted(p.name for p in out_dir.iterdir()) == [".lock"]


def test_a_sweep_from_an_edited_sweep_file_is_refused_and_a_spelled_out_one_accepted(
    finished, tmp_path
):
    """sweep.json records the sweep file's path and SHA-256: a sweep made from the page's file
    as it was not (edited, run, put back) was published under the page's command; it is
    refused. Naming the page's file another way (--config for --quick) is the same sweep."""
    from lab.common.files import file_sha256
    from lab.reporting import readme

    out_dir, _ = finished
    timing = json.loads((out_dir / "sweep.json").read_text())
    assert timing["sweep_file"] == {
        "path": "configs/quick.yaml",
        "sha256": file_sha256(Path(CONFIG)),
    }
    family = made_by(out_dir, readme.FAMILIES["ablation"])
    quick = family.command.replace(f"--config {CONFIG}", "--quick")
    assert quick != family.command
    readme.check_recorded(out_dir, dataclasses.replace(family, command=quick))
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    edited = timing | {"sweep_file": {"path": "configs/quick.yaml", "sha256": "0" * 64}}
    (copy / "sweep.json").write_text(json.dumps(edited))
    with pytest.raises(ValueError, match=r"was made from 'configs/quick.yaml' as it was then"):
        readme.check_recorded(copy, family)
    stripped = {k: v for k, v in timing.items() if k != "sweep_file"}  # the key deleted
    (copy / "sweep.json").write_text(json.dumps(stripped))
    with pytest.raises(ValueError, match=r"sweep.json records no sweep file: nothing shows"):
        readme.check_recorded(copy, family)


def test_a_skip_all_pass_after_an_overwrite_pass_keeps_the_training_time(tmp_path):
    """A sweep retrained with --overwrite, then run again as the page's plain command (which
    skips every run), lost its training time: the second command counted as another one. How a
    pass ran (--overwrite, workers, launcher) is no part of the command's identity."""
    from lab.sweeps.summary import write_timing

    trained = [{"name": n, "status": "trained"} for n in "ab"]
    write_timing(trained, tmp_path, 600.0, 2, command="python sweep.py --overwrite seed=0")
    skipped = [{"name": n, "status": "skipped"} for n in "ab"]
    kept = json.loads(write_timing(skipped, tmp_path, 0.7, 1, command="python sweep.py seed=0")
                      .read_text())  # fmt: skip
    assert (kept["seconds"], kept["runs"]) == (600.0, {"trained": 2})


def test_eval_py_on_a_sweep_folder_in_use_is_refused(finished, tmp_path, capsys):
    """eval.py over a running sweep's folder evaluated half-trained checkpoints and wrote its
    reports into the live folder; it takes the folder's lock as the sweep programs do."""
    import eval as eval_cli
    from lab.common.runlock import run_lock

    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    before = (copy / "report.md").read_bytes()
    with run_lock(copy, "out_dir", "another sweep"):  # as a running sweep holds it
        assert eval_cli.main([str(copy), "--threads", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is in use by another sweep (pid" in err[0]
    assert (copy / "report.md").read_bytes() == before


def test_eval_py_on_a_run_a_training_process_holds_is_refused(finished, tmp_path, capsys):
    """eval.py RUN on a run that train.py was training wrote eval.json, reports, figures and
    events into the live folder at exit 0; without --out it takes the run's lock, as --resume
    does. With --out (nothing written into the run) it evaluates the checkpoint there."""
    import eval as eval_cli
    from lab.common.runlock import run_lock

    out_dir, _ = finished
    run = tmp_path / "run"
    shutil.copytree(out_dir / "rope-copy-seed0", run)

    def files() -> dict[str, bytes]:  # the lock file aside: its holder writes its name there
        return {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"}

    before = files()
    (tmp_path / "link").symlink_to(run)
    flags = ["--threads", "1", "--no-progress"]
    with run_lock(run):  # as a training process holds it
        for out in ([], ["--out", f"{run}/."], ["--out", str(tmp_path / "link")]):
            assert eval_cli.main([str(run), *out, *flags]) == 2  # --out spelled as the run too
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "is in use by another training process (pid" in err[0]
        assert files() == before
        out = tmp_path / "out"
        assert eval_cli.main([str(run), "--out", str(out), *flags]) == 0
    assert (out / "report.md").is_file()


def test_eval_py_out_refuses_an_eval_json_it_did_not_write(finished, tmp_path, capsys):
    """eval.py RUN --out DIR replaced a user's eval.json in DIR (and a link named eval.json)
    at exit 0, while a user's report.md there was refused; both are refused alike."""
    import eval as eval_cli

    out_dir, _ = finished
    run = out_dir / "rope-copy-seed0"
    mine, linked = tmp_path / "mine", tmp_path / "linked"
    mine.mkdir()
    (mine / "eval.json").write_text("mine\n")
    linked.mkdir()
    (tmp_path / "victim.txt").write_text("precious\n")
    (linked / "eval.json").symlink_to(tmp_path / "victim.txt")
    for out in (mine, linked):
        assert eval_cli.main([str(run), "--out", str(out), "--threads", "1", "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "holds eval.json that this project did not write" in err[0]
    assert (mine / "eval.json").read_text() == "mine\n"
    assert (linked / "eval.json").is_symlink()
    assert (tmp_path / "victim.txt").read_text() == "precious\n"


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        (["eval.max_length_factor=16", "eval.lm_tokens=65536", "eval.stride=1"], "is too small"),
        (["eval.lm_tokens=16777216"], "give eval.lm_tokens <="),
    ],
)
def test_a_language_model_sweeps_corpus_sized_limits_are_checked_before_any_folder(
    tmp_path, sizes, message
):
    """eval.stride or eval.lm_tokens past what the corpus allows failed each run at its start
    (exit 1), leaving out_dir and run folders that held only a .lock; train.py refuses them
    in one line before creating anything, and now the sweep does too."""
    out = tmp_path / "lm"
    overrides = ["position=rope", f"out_dir={out}", "train.steps=20", *sizes]
    with pytest.raises(ConfigError, match=message):
        load_sweep(Path(CONFIG).parent / "lm_quick.yaml", overrides)
    assert not out.exists()


def test_eval_py_on_a_folder_holding_a_run_in_training_is_refused_before_writing(
    finished, tmp_path, capsys
):
    """eval.py SWEEP_DIR with one run held by train.py refused that run but re-evaluated the
    others and rewrote the folder's reports with them alone (exit 2); the locks of every run
    it writes into are taken first, so nothing is written."""
    import eval as eval_cli
    from lab.common.runlock import run_lock

    out_dir, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(out_dir, copy)
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file() and p.name != ".lock"}
    with run_lock(copy / "rope-copy-seed0"):  # as train.py --resume holds it
        assert eval_cli.main([str(copy), "--threads", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rope-copy-seed0' is in use by another training process" in err[0]
    after = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before
