"""Issue 24, item 15: unbounded or late failures become one line, at once.

Every size-like value has a stated maximum checked when the config is built (and on
``eval.py``'s override path); RoPE scaling options that make no sense are refused; a checkpoint
with a field of the wrong type is refused by name; a schema-valid but inconsistent ``eval.json``
is treated as missing (re-evaluated) with a one-line warning, never reported.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lab.common.checkpoint import FIELDS, checkpoint_digest, checkpoint_path, load_checkpoint
from lab.common.config import (
    MAX_BATCH_TOKENS,
    MAX_EVAL_LENGTHS,
    MAX_SEED,
    MAX_STEPS,
    MAX_TOKENS,
    ConfigError,
    EvalConfig,
    config_to_dict,
    load_config,
)
from lab.common.runtime import MAX_THREADS
from lab.evaluation.evaluate import evaluate_model, evaluation_lengths, load_evaluation
from lab.evaluation.record import EVAL_NAME, inconsistency, write_eval_json
from lab.sweeps.sweep import expand, load_sweep
from model import ModelConfig, Transformer
from model.config import MAX_PARAMETERS, MAX_RANDOMIZED_POSITIONS, MAX_WIDTH
from model.position.cope import CopeOptions
from model.position.learned import LearnedOptions
from model.position.rope_scaling import rope_inv_freq
from model.position.t5 import T5Options

ROOT = Path(__file__).resolve().parent.parent
TINY = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=32"]


def config_error(overrides: list[str]) -> str:
    """The one-line message of the ConfigError that building the config raises."""
    with pytest.raises(ConfigError) as error:
        load_config(None, overrides)
    message = str(error.value)
    assert message and "\n" not in message
    return message


def run(*argv: str) -> subprocess.CompletedProcess:
    """A project entry point as a user runs it (one CPU thread)."""
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120
    )


# ---------------------------------------------------------------------------------------------
# Size limits, from the config builder
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "named", "bound"),
    [
        (["eval.lengths=[1000000]"], "eval.lengths=[1000000] is too long", f"{MAX_TOKENS} tokens"),
        (
            ["data.task=associative_recall", "data.options.associative_recall.n_keys=1000000000"],
            "data.options.associative_recall.n_keys=1000000000 is invalid",
            "[1, 4096]",
        ),
        (
            ["data.task=associative_recall", "data.options.associative_recall.n_values=5000"],
            "data.options.associative_recall.n_values=5000 is invalid",
            "[1, 4096]",
        ),
        (
            ["data.task=count", "data.options.count.max_count=1000000000"],
            "data.options.count.max_count=1000000000 is invalid",
            "[1, 4096]",
        ),
        (
            ["model.position=cope", "model.options.cope.npos_max=1000000000"],
            "model.options.cope.npos_max=1000000000 is invalid",
            "[2, 4096]",
        ),
        (
            ["model.position=learned", "model.options.learned.max_positions=1000000000"],
            "model.options.learned.max_positions=1000000000 is invalid",
            "[1, 65536]",
        ),
        (
            ["model.position=fire", "model.options.fire.mlp_width=100000"],
            "model.options.fire.mlp_width=100000 is invalid",
            "[1, 256]",
        ),
        (
            ["model.position=t5", "model.options.t5.num_buckets=100000"],
            "model.options.t5.num_buckets=100000 is invalid",
            "[4, 1024]",
        ),
        (
            ["model.position=t5", "model.options.t5.max_distance=1000000000"],
            "model.options.t5.max_distance=1000000000 is invalid",
            "<= 65536",
        ),
        (
            ["model.options.rope.original_max_position=1000000000"],
            "model.options.rope.original_max_position=1000000000 is invalid",
            "[0, 65536]",
        ),
        (
            ["model.randomized_positions=10000000000"],
            "model.randomized_positions=10000000000 is invalid",
            f"[1, {MAX_RANDOMIZED_POSITIONS}]",
        ),
        (
            ["data.task=copy", "data.train_max_length=10", "model.randomized_positions=5"],
            "model.randomized_positions=5 is too small",
            "[22, 65536]",
        ),
        (["model.d_model=100000"], "model.d_model=100000 is invalid", f"[1, {MAX_WIDTH}]"),
        (["model.d_ff=100000"], "model.d_ff=100000 is invalid", f"[1, {MAX_WIDTH}]"),
        (["model.n_layers=100000"], "model.n_layers=100000 is invalid", "[1, 256]"),
        (
            ["model.d_model=4096", "model.d_ff=16384", "model.n_layers=100"],
            "model.d_model=4096, n_layers=100, d_ff=16384",
            f"the maximum is {MAX_PARAMETERS:,}",
        ),
        (
            ["train.batch_size=10000000"],
            "train.batch_size=10000000 is invalid",
            f"<= {MAX_BATCH_TOKENS}",
        ),
        (
            ["data.task=copy", "data.train_max_length=500", "train.batch_size=1000"],
            "train.batch_size=1000 is too large: 1000 rows of 1002 tokens",
            f"give train.batch_size <= {MAX_BATCH_TOKENS // 1002}",
        ),
        (["train.steps=1000000000"], "train.steps=1000000000 is invalid", f"<= {MAX_STEPS}"),
        (["train.eval_every=100000000"], "train.eval_every=100000000", f"<= {MAX_STEPS}"),
        (["eval.batch_tokens=1000000000"], "eval.batch_tokens=1000000000", f"<= {2**18}"),
        ([f"seed={2**40}"], f"seed={2**40} is invalid", f"<= {MAX_SEED}"),
        (["threads=100000"], "threads=100000 is invalid", f"<= {MAX_THREADS}"),
        (
            [f"eval.lengths=[{','.join(str(n) for n in range(1, MAX_EVAL_LENGTHS + 2))}]"],
            f"eval.lengths has {MAX_EVAL_LENGTHS + 1} lengths",
            f"the maximum is {MAX_EVAL_LENGTHS}",
        ),
    ],
)
def test_each_size_has_a_maximum_named_in_one_line(overrides, named, bound):
    message = config_error(overrides)
    assert named in message and bound in message, message


def test_a_class_constant_is_not_an_option():
    message = config_error(
        ["data.task=associative_recall", "data.options.associative_recall.MAX_TOKENS=5"]
    )
    assert "MAX_TOKENS is not an option of 'associative_recall'" in message
    assert "its options: n_keys, n_values, n_queries, echo_keys" in message


def test_the_maxima_are_the_values_they_are_documented_as_and_the_defaults_fit():
    assert CopeOptions.MAX_NPOS >= MAX_TOKENS  # every contextual position a run can reach
    assert T5Options.MAX_DISTANCE >= MAX_TOKENS
    assert LearnedOptions.MAX_POSITIONS >= MAX_RANDOMIZED_POSITIONS
    assert MAX_BATCH_TOKENS == 64 * MAX_TOKENS  # the default batch of the longest sequences
    load_config(ROOT / "configs" / "default.yaml")
    specs = expand(load_sweep(ROOT / "configs" / "suite.yaml"))  # every task, every scheme

    def last(spec, key: str) -> str:
        return next(o for o in spec.overrides[::-1] if o.startswith(f"{key}="))

    by_task = {last(spec, "data.task"): spec for spec in specs}
    schemes = {last(spec, "model.position"): spec for spec in specs}
    assert len(by_task) >= 10 and len(schemes) >= 5
    for spec in [*by_task.values(), *schemes.values()]:  # each fits the maxima
        load_config(None, spec.overrides)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"d_model": 64, "n_layers": 3, "d_ff": 256, "vocab_size": 20}, {"tie_embeddings": False}],
)
def test_the_parameter_estimate_is_within_two_percent_of_the_model(kwargs):
    config = ModelConfig(**kwargs)
    real = sum(p.numel() for p in Transformer(config).parameters())
    assert abs(config.approx_parameters() - real) <= 0.02 * real


def test_the_longest_allowed_values_still_build():
    load_config(None, ["model.position=cope", "model.options.cope.npos_max=4096"])
    load_config(None, ["model.randomized_positions=65536"])
    load_config(None, ["data.task=copy", "data.train_max_length=500", "train.batch_size=261"])


def test_eval_overrides_meet_the_same_length_check_before_anything_is_evaluated():
    config = load_config(None, ["data.task=copy", "data.train_max_length=10", *TINY])
    task = config.data.build_task()
    with pytest.raises(ConfigError, match=r"eval.max_length_factor=1000.0 is too long: eval.py "):
        evaluation_lengths(config, EvalConfig(max_length_factor=1000.0), task)
    with pytest.raises(ConfigError, match=r"eval.lengths=\[2048\] is too long.*4098 tokens"):
        evaluation_lengths(config, EvalConfig(lengths=[2048]), task)  # copy: 2 L + 2 tokens
    grid, lengths = evaluation_lengths(config, EvalConfig(lengths=[2, 2047]), task)
    assert grid == [2, 2047] and lengths[-1] == 2047  # 4096 tokens: the longest allowed


def test_eval_py_refuses_a_huge_length_in_one_line(tmp_path):
    result = run("eval.py", str(tmp_path), "eval.lengths=[1000000]")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "eval.lengths=[1000000] is too long" in lines[0]
    assert f"the maximum is {MAX_TOKENS} tokens" in lines[0]


def test_eval_py_checks_overrides_against_each_run_before_evaluating(tmp_path, capsys):
    import eval as eval_cli

    config = load_config(None, ["data.task=copy", "data.train_max_length=10", *TINY])
    folder = tmp_path / "run"
    folder.mkdir()
    weights = Transformer(config.model).state_dict()
    torch.save({"model": weights, "config": config_to_dict(config)}, folder / "checkpoint.pt")
    too_long = (
        "eval.max_length_factor=1000.0 is too long: eval.py needs length 10000 (over 4096 "
        "tokens for task 'copy'); the maximum is 4096 tokens"
    )
    for override, message in (
        ("eval.max_length_factor=1000", too_long),
        ("eval.position_options.scaling=yarn", "scaling_factor=1.0 is invalid for scaling='yarn'"),
    ):
        assert eval_cli.main([str(folder), override, "--no-progress"]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], lines
        assert sorted(p.name for p in folder.iterdir()) == ["checkpoint.pt"]  # nothing written


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--lengths", "100000000"],
            "--lengths=100000000 is invalid; it must be >= 1 and <= 16384",
        ),
        (["--lengths", "1e8"], "--lengths='1e8' is not a comma-separated list of integers"),
        (["--batch-tokens", "1000000000"], "--batch-tokens=1000000000 is invalid"),
        (["--batch", "100000"], "--batch=100000 is invalid; it must be >= 1 and <= 4096"),
        (["--repeats", "100000"], "--repeats=100000 is invalid; it must be >= 1 and <= 1000"),
        (["--threads", "100000"], "--threads=100000 is invalid; it must be >= 0 and <= 1024"),
    ],
)
def test_bench_refuses_huge_values_in_one_line(argv, message, tmp_path, capsys):
    import bench

    assert bench.main([*argv, "--out", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and message in err, err
    assert not (tmp_path / "b.json").exists()


def test_every_command_refuses_a_huge_thread_count(tmp_path, capsys):
    import eval as eval_cli

    assert eval_cli.main(["--threads", "100000", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: threads=100000 is invalid; it must be >= 0 (0 = PyTorch default) " + (
        f"and <= {MAX_THREADS}"
    )


def test_the_block_sweep_has_the_same_maxima(tmp_path, capsys):
    from lab.bench import block_sweep

    argv = ["--lengths", "100000000", "--out", str(tmp_path / "b.json")]
    assert block_sweep.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --lengths=100000000 is invalid; it must be >= 1 and <= 16384"


def test_bench_command_line_fails_at_once():
    result = run("bench.py", "--lengths", "100000000")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: --lengths=100000000 is invalid; it must be >= 1 and <= 16384"
    )


# ---------------------------------------------------------------------------------------------
# RoPE scaling options
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["scaling=yarn"],
            "model.options.rope.scaling_factor=1.0 is invalid for scaling='yarn'; it must be > 1 "
            "(at 1 it is plain RoPE: use scaling=none)",
        ),
        (["scaling=linear"], "scaling_factor=1.0 is invalid for scaling='linear'"),
        (["scaling=ntk", "scaling_factor=1"], "scaling_factor=1.0 is invalid for scaling='ntk'"),
        (["scaling=llama3"], "scaling_factor=1.0 is invalid for scaling='llama3'"),
        (["scaling_factor=1e6"], "scaling_factor=1000000.0 is invalid; it must be in [1, 1024]"),
        (
            ["scaling=yarn", "scaling_factor=4", "beta_fast=1", "beta_slow=32"],
            "model.options.rope.beta_fast=1.0 is invalid; it must be > beta_slow=32.0",
        ),
        (["beta_fast=2", "beta_slow=2"], "beta_fast=2.0 is invalid; it must be > beta_slow=2.0"),
        (["beta_slow=0"], "model.options.rope.beta_slow=0.0 is invalid; it must be > 0"),
        (["low_freq_factor=0"], "model.options.rope.low_freq_factor=0.0 is invalid; it must be"),
        (["attention_factor=-1"], "model.options.rope.attention_factor=-1.0 is invalid"),
    ],
)
def test_rope_scaling_options_that_make_no_sense_are_refused(options, message):
    assert message in config_error([f"model.options.rope.{o}" for o in options])


def test_rope_scaling_that_does_something_is_accepted():
    for options in (["scaling=yarn", "scaling_factor=4"], ["scaling=dynamic"]):
        load_config(None, [f"model.options.rope.{o}" for o in options])  # dynamic at 1: T / L


def test_an_evaluation_time_yarn_without_a_factor_is_refused():
    config = load_config(None, TINY)
    with pytest.raises(ValueError, match="scaling_factor=1.0 is invalid for scaling='yarn'"):
        config.model.at_evaluation({"scaling": "yarn"})
    config.model.at_evaluation({"scaling": "yarn", "scaling_factor": 2.0})


def test_the_rope_scaling_dict_refuses_an_inverted_yarn_ramp():
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    with pytest.raises(ValueError, match="beta_fast > beta_slow.*beta_fast=1.0, beta_slow=32.0"):
        rope_inv_freq(16, 10000.0, {**scaling, "beta_fast": 1.0, "beta_slow": 32.0})
    assert rope_inv_freq(16, 10000.0, scaling)[1] == pytest.approx(0.1 * math.log(4) + 1)


# ---------------------------------------------------------------------------------------------
# Checkpoint fields
# ---------------------------------------------------------------------------------------------


def write_checkpoint(folder: Path, **fields) -> Path:
    """A checkpoint holding the default tiny config, no weights and ``fields``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = load_config(None, [*TINY, f"run_dir={folder}"])
    state = {"model": {}, "config": config_to_dict(config), **fields}
    torch.save(state, folder / "checkpoint.pt")
    return folder


@pytest.mark.parametrize(
    ("field", "value", "wanted"),
    [
        ("step", "100", "its 'step' is '100' (str); it must be an integer >= 0"),
        ("step", -1, "its 'step' is -1 (int); it must be an integer >= 0"),
        ("step", True, "its 'step' is True (bool); it must be an integer >= 0"),
        ("finished", "yes", "its 'finished' is 'yes' (str); it must be true or false"),
        ("final_loss", "low", "its 'final_loss' is 'low' (str); it must be a number"),
        ("history", "none", "its 'history' is 'none' (str); it must be a list of dicts"),
        ("rng", {"torch": 1}, "its 'rng' is a value (dict); it must be a dict of generator"),
        ("optimizer", [1], "its 'optimizer' is a value (list); it must be a dict"),
        ("model", {"w": 1}, "its 'model' is a value (dict); it must be a dict of tensors"),
    ],
)
def test_a_checkpoint_field_of_the_wrong_type_is_one_line(tmp_path, field, value, wanted):
    folder = write_checkpoint(tmp_path / "run", **{field: value})
    with pytest.raises(ValueError) as error:
        load_checkpoint(folder)
    message = str(error.value)
    assert "\n" not in message and "is not a valid checkpoint" in message
    assert wanted in message, message


def test_every_field_the_trainer_writes_has_a_type_check():
    written = "model optimizer scheduler step rng rank_rng config finished final_loss eval history"
    written += " reached_target target_streak eval_pending"
    assert set(written.split()) == set(FIELDS)


def test_resume_and_eval_refuse_a_text_step_in_one_line(tmp_path, capsys):
    import eval as eval_cli
    import train as train_cli

    folder = write_checkpoint(tmp_path / "run", step="100", finished=False)
    for main, argv in ((train_cli.main, ["--resume", str(folder)]), (eval_cli.main, [str(folder)])):
        assert main(argv) == 2
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in err, err
        assert "its 'step' is '100' (str); it must be an integer >= 0" in errors[0]


# ---------------------------------------------------------------------------------------------
# eval.json consistency
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evaluation() -> dict:
    """A real ``eval.json`` dict of an untrained tiny model on ``copy``."""
    torch.manual_seed(0)
    config = load_config(None, ["data.task=copy", "data.train_max_length=6", *TINY])
    model = Transformer(config.model).eval()
    settings = EvalConfig(samples=16, probe_samples=4, max_length_factor=2.0)
    result = evaluate_model(model, config, settings)
    result["run_dir"] = "run"
    return result


def broken(result: dict, change) -> dict:
    result = copy.deepcopy(result)
    change(result)
    return result


def _swap(result: dict) -> None:
    rows = result["lengths"]
    rows[0], rows[1] = rows[1], rows[0]


def _set(path: list, value) -> callable:
    def change(result: dict) -> None:
        target = result
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


INCONSISTENT = [
    (_set(["lengths", 0, "exact_match"], math.nan), "lengths.0.exact_match is not a finite"),
    (_set(["summary", "in_dist"], math.inf), "summary.in_dist is not a finite number"),
    (_swap, "are not strictly increasing"),
    (lambda r: r["lengths"].append(copy.deepcopy(r["lengths"][-1])), "not strictly increasing"),
    (_set(["grid_lengths"], [2, 3, 999]), "grid_lengths [2, 3, 999] are not increasing lengths"),
    (_set(["train_lengths"], [6, 2]), "train_lengths [6, 2] are not a range"),
    (_set(["lengths", 0, "exact_match_low"], 0.9), "lies outside its interval [0.9, "),
    (_set(["lengths", 0, "correct"], "1"), "'correct' has 1 results for 16 samples"),
    (_set(["lengths", 0, "correct"], "1" * 16), "'correct' gives 1.0, not exact_match"),
    (_set(["lengths", 0, "token_accuracy"], None), "supported, yet a figure"),
    (_set(["lengths", 0, "pairs"], 0), "pair_accuracy without pairs"),
    (_set(["summary", "in_dist"], 0.5), "summary.in_dist=0.5 is not the mean"),
]


def test_a_real_evaluation_is_consistent(evaluation):
    assert evaluation["lengths"][0]["pair_accuracy"] is not None  # copy probes pairs
    assert all(row["exact_match"] < 0.5 for row in evaluation["lengths"])  # untrained
    assert inconsistency(evaluation) is None


@pytest.mark.parametrize(("change", "problem"), INCONSISTENT)
def test_an_inconsistent_evaluation_names_its_problem(evaluation, change, problem):
    found = inconsistency(broken(evaluation, change))
    assert found is not None and problem in found, found


@pytest.mark.parametrize(("change", "problem"), INCONSISTENT[2:])
def test_an_inconsistent_eval_json_is_re_evaluated_with_one_warning(
    evaluation, change, problem, tmp_path, capsys
):
    checkpoint_path(tmp_path).write_bytes(b"weights")  # load_evaluation wants its digest
    evaluation = copy.deepcopy(evaluation)
    evaluation["checkpoint"] = {"run": "run", "step": 1, "sha256": checkpoint_digest(tmp_path)}
    write_eval_json(evaluation, tmp_path)
    saved = json.loads((tmp_path / EVAL_NAME).read_text())
    assert load_evaluation(tmp_path) == saved | {"run_dir": str(tmp_path)}  # where it lies now
    assert capsys.readouterr().err == ""
    write_eval_json(broken(evaluation, change), tmp_path)
    assert load_evaluation(tmp_path) is None
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and problem in err and "treated as missing" in err


def test_an_eval_json_with_nan_is_re_evaluated_with_one_warning(evaluation, tmp_path, capsys):
    text = json.dumps(broken(evaluation, INCONSISTENT[0][0]))  # NaN, which JSON readers accept
    (tmp_path / EVAL_NAME).write_text(text)
    assert load_evaluation(tmp_path) is None
    err = capsys.readouterr().err.strip()
    assert err.startswith("warning: ") and "lengths.0.exact_match is not a finite number" in err


def test_the_property_report_reads_a_trained_runs_eval_json_through_the_same_check(
    evaluation, tmp_path, capsys
):
    from lab.properties.report import run_rows

    config = load_config(None, ["data.task=copy", "data.train_max_length=6", *TINY])
    weights = Transformer(config.model).state_dict()
    torch.save({"model": weights, "config": config_to_dict(config)}, tmp_path / "checkpoint.pt")
    evaluation = copy.deepcopy(evaluation)
    evaluation["checkpoint"] = {"run": "run", "step": 1, "sha256": checkpoint_digest(tmp_path)}
    write_eval_json(evaluation, tmp_path)
    assert run_rows(tmp_path, 16)[0].exact_match_2x == evaluation["summary"]["at"]["2x"]
    write_eval_json(broken(evaluation, _swap), tmp_path)
    assert run_rows(tmp_path, 16)[0].exact_match_2x is None
    assert "are not strictly increasing; treated as missing" in capsys.readouterr().err
