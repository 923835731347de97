"""Tests of the run configuration: defaults, overrides, one-line errors, round trips, configs/."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from data import available_tasks, build_task, task_options
from lab.common.config import (
    Config,
    ConfigError,
    check_evaluable,
    config_from_dict,
    config_to_dict,
    flat_keys,
    load_config,
    save_config,
    sequence_tokens,
)
from lab.common.sections import EvalConfig
from model import ModelConfig
from model.position import available_schemes

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
MODEL_KEYS = [k for k in flat_keys() if k.startswith("model.")]


def one_line_error(overrides: list[str], path: str | Path | None = None) -> str:
    """The message of the ConfigError that loading raises; asserts it is a single line."""
    with pytest.raises(ConfigError) as error:
        load_config(path, overrides)
    message = str(error.value)
    assert message and "\n" not in message
    assert "Traceback" not in message
    return message


# ---------------------------------------------------------------------------------------------
# Defaults and overrides
# ---------------------------------------------------------------------------------------------


def test_defaults_are_the_dataclass_defaults_with_the_tasks_vocab_size() -> None:
    config = load_config()
    expected = Config()
    svo_vocab = build_task("svo").vocab_size
    expected.model = dataclasses.replace(expected.model, vocab_size=svo_vocab)
    assert config == expected
    assert isinstance(config.model, ModelConfig)
    assert config.data.task == "svo"
    assert config.model.vocab_size == svo_vocab == len(build_task("svo").vocab)
    assert config.model.position == "rope"
    assert (config.data.train_min_length, config.data.train_max_length) == (3, 12)
    assert config.seed == 0
    assert config.device == "auto"
    assert config.run_dir == "runs/default"
    assert config.train.target_accuracy is None
    assert config.eval.lengths is None


def test_no_arguments_equals_the_written_out_default_file() -> None:
    """configs/default.yaml says it is what ``python train.py`` trains with no arguments."""
    if not (CONFIGS / "default.yaml").is_file():
        return
    assert load_config(CONFIGS / "default.yaml") == load_config()


def test_overrides_apply_with_the_fields_types() -> None:
    config = load_config(
        None,
        [
            "model.position=alibi",
            "model.d_model=96",
            "model.dropout=0.25",
            "data.task=copy",
            "data.options.copy.n_symbols=10",
            "data.train_min_length=2",
            "data.train_max_length=20",
            "train.lr=1e-3",
            "train.min_lr=1e-4",
            "train.target_accuracy=0.9",
            "train.progress=false",
            "eval.lengths=[4,8,16]",
            "seed=7",
            "device=cpu",
            "run_dir=/tmp/x",
        ],
    )
    assert config.model.position == "alibi"
    assert config.model.d_model == 96 and isinstance(config.model.d_model, int)
    assert config.model.dropout == 0.25
    assert config.data.task == "copy"
    assert config.data.options["copy"] == {"n_symbols": 10}
    assert (config.data.train_min_length, config.data.train_max_length) == (2, 20)
    assert config.train.lr == 1e-3 and isinstance(config.train.lr, float)
    assert config.train.min_lr == 1e-4
    assert config.train.target_accuracy == 0.9
    assert config.train.progress is False
    assert config.eval.lengths == [4, 8, 16]
    assert (config.seed, config.device, config.run_dir) == (7, "cpu", "/tmp/x")
    # Everything not overridden keeps its default.
    assert config.model.n_layers == Config().model.n_layers
    assert config.train.steps == Config().train.steps
    assert config.eval.samples == Config().eval.samples


def test_later_overrides_win_and_null_clears() -> None:
    config = load_config(
        None, ["model.position=alibi", "model.position=learned", "train.target_accuracy=null"]
    )
    assert config.model.position == "learned"
    assert config.train.target_accuracy is None


@pytest.mark.parametrize("scheme", available_schemes())
def test_every_position_scheme_is_accepted(scheme: str) -> None:
    assert load_config(None, [f"model.position={scheme}"]).model.position == scheme


@pytest.mark.parametrize(
    ("overrides", "vocab_size"),
    [
        ([], len(build_task("svo").vocab)),
        (["data.task=svo", "data.train_min_length=9"], build_task("svo").vocab_size),
        (["data.task=copy"], 16 + 3),
        (["data.task=reverse", "data.options.reverse.n_symbols=2"], 2 + 3),
        (["data.task=sort", "data.options.sort.n_symbols=62"], 62 + 3),
    ],
)
def test_vocab_size_comes_from_the_task(overrides: list[str], vocab_size: int) -> None:
    assert load_config(None, overrides).model.vocab_size == vocab_size


def test_vocab_size_set_by_hand_must_match_the_task() -> None:
    copy_vocab = build_task("copy").vocab_size
    same = load_config(None, ["data.task=copy", f"model.vocab_size={copy_vocab}"])
    assert same.model.vocab_size == copy_vocab
    message = one_line_error(["data.task=copy", "model.vocab_size=5"])
    assert "model.vocab_size" in message and str(copy_vocab) in message


def test_yaml_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  position: alibi\n  n_layers: 1\ndata:\n  task: reverse\nseed: 3\n")
    config = load_config(path, ["model.position=sinusoidal"])
    assert config.model.position == "sinusoidal"  # the override beats the file
    assert config.model.n_layers == 1
    assert config.data.task == "reverse"
    assert config.model.vocab_size == build_task("reverse").vocab_size
    assert config.seed == 3


# ---------------------------------------------------------------------------------------------
# Errors: one line, naming the key or value
# ---------------------------------------------------------------------------------------------


def test_unknown_key_names_it_and_lists_the_allowed_keys() -> None:
    message = one_line_error(["model.dmodel=3"])
    assert "model.dmodel" in message
    assert "allowed keys" in message
    for key in MODEL_KEYS:
        assert key in message
    assert "train.lr" not in message  # only the section's keys


def test_unknown_top_level_key_lists_the_sections() -> None:
    message = one_line_error(["learning_rate=3"])
    assert "learning_rate" in message
    for name in ("model", "data", "train", "eval", "seed", "device", "threads", "run_dir"):
        assert name in message


def test_unknown_key_in_a_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  learning_rate: 0.1\n")
    message = one_line_error([], path)
    assert "train.learning_rate" in message
    assert "train.lr" in message and "train.steps" in message


@pytest.mark.parametrize(
    ("override", "named", "also"),
    [
        ("model.d_model=abc", "model.d_model", "abc"),
        ("model.position=foo", "model.position", "rope"),
        ("train.target_accuracy=2", "train.target_accuracy", "(0, 1]"),
        ("train.target_accuracy=0", "train.target_accuracy", "(0, 1]"),
        ("model.dropout=1.5", "model.dropout", "[0, 1)"),
        ("model.n_heads=3", "model.n_heads", "model.d_model"),
        ("train.steps=0", "train.steps", ">= 1"),
        ("train.lr=fast", "train.lr", "fast"),
        ("train.warmup_steps=5000", "train.warmup_steps", "train.steps"),
        ("data.task=bogus", "data.task", "copy"),
        ("data.train_min_length=1", "data.train_min_length", "3"),
        ("eval.max_length_factor=0.5", "eval.max_length_factor", ">= 1"),
        ("seed=x", "seed", "x"),
    ],
)
def test_bad_value_fails_with_one_line_naming_it(override: str, named: str, also: str) -> None:
    message = one_line_error([override])
    assert named in message
    assert also in message


def test_unknown_task_lists_every_task() -> None:
    message = one_line_error(["data.task=bogus"])
    for name in available_tasks():
        assert name in message


def test_n_symbols_is_checked_for_symbol_tasks() -> None:
    message = one_line_error(["data.task=copy", "data.options.copy.n_symbols=100"])
    assert message == "data.options.copy.n_symbols=100 is invalid; it must be in 2..62"


def test_the_old_n_symbols_key_names_its_new_place() -> None:
    message = one_line_error(["data.task=copy", "data.n_symbols=10"])
    assert "data.options.TASK.n_symbols" in message and "data.options.copy.n_symbols" in message


def test_missing_config_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    message = one_line_error([], path)
    assert str(path) in message and "does not exist" in message


def test_malformed_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("model: [unclosed\n")
    message = one_line_error([], path)
    assert str(path) in message and "YAML" in message


def test_yaml_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- model\n- data\n")
    message = one_line_error([], path)
    assert str(path) in message and "mapping" in message


@pytest.mark.parametrize("override", ["train.lr", "=3", "model.position"])
def test_malformed_override(override: str) -> None:
    message = one_line_error([override])
    assert repr(override) in message
    assert "key=value" in message


# ---------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------


ROUND_TRIP = [
    [],
    ["model.position=alibi", "data.task=copy", "train.target_accuracy=0.99", "eval.lengths=[3,9]"],
    ["data.task=svo", "data.train_min_length=6", "model.dropout=0.1"],
]


@pytest.mark.parametrize("overrides", ROUND_TRIP)
def test_dict_round_trip(overrides: list[str]) -> None:
    config = load_config(None, overrides)
    values = config_to_dict(config)
    assert isinstance(values, dict) and isinstance(values["model"], dict)
    assert values["model"]["vocab_size"] == config.model.vocab_size
    assert config_from_dict(values) == config


@pytest.mark.parametrize("overrides", ROUND_TRIP)
def test_yaml_round_trip(overrides: list[str], tmp_path: Path) -> None:
    config = load_config(None, overrides)
    path = tmp_path / "config.yaml"
    save_config(config, path)
    assert load_config(path) == config
    assert OmegaConf.to_container(OmegaConf.load(path)) == config_to_dict(config)


@pytest.mark.parametrize(
    ("task", "key", "old"),
    [
        ("parity", "scratchpad", False),
        ("modular_arithmetic", "scratchpad", False),
        ("associative_recall", "echo_keys", False),
    ],
)
def test_runs_saved_before_an_option_existed_keep_their_task(task: str, key: str, old) -> None:
    """A run saved before ``key`` existed trained on the task as it was (the option's old
    value), not on the new default; a run saved now keeps the value it was trained with."""
    values = config_to_dict(load_config(None, [f"data.task={task}"]))
    assert values["data"]["options"][task][key] is (not old)  # the new default, saved
    assert config_from_dict(values).data.options[task][key] is (not old)
    del values["data"]["options"][task][key]  # as the previous version saved it
    assert config_from_dict(values).data.options[task][key] is old
    values["data"]["options"] = {}  # as versions before task options saved it
    assert config_from_dict(values).data.build_task().options == task_options(task, {key: old})


def test_incompatible_saved_config() -> None:
    values = config_to_dict(load_config())
    values["model"]["width"] = 3
    with pytest.raises(ConfigError, match=r"saved config is incompatible: .*model\.width"):
        config_from_dict(values)


# ---------------------------------------------------------------------------------------------
# Every file in configs/ loads
# ---------------------------------------------------------------------------------------------


def test_every_yaml_in_configs_loads() -> None:
    """Run configs load with load_config; sweep files (base/grid sections) with load_sweep, which
    validates every run of the grid with load_config; the extend study's file with its planner,
    which validates every run's config."""
    for path in sorted(CONFIGS.glob("*.yaml")):
        raw = OmegaConf.to_container(OmegaConf.load(path))
        assert isinstance(raw, dict), path
        if "fine_tune" in raw:  # an extend-then-fine-tune study (sweep.py --extend-study)
            from lab.lm.extend_study import plan, read_study

            assert plan(read_study(path)).children, path
        elif {"base", "grid"} & set(raw):
            from lab.sweeps.sweep import expand, load_sweep

            sweep = load_sweep(path)
            specs = expand(sweep)
            assert specs, path
            for spec in specs:
                assert isinstance(load_config(None, spec.overrides), Config)
        else:
            assert isinstance(load_config(path), Config), path


def test_a_bare_leaf_key_suggests_its_section():
    with pytest.raises(ConfigError, match=r"'position' \(did you mean model.position\?\)"):
        load_config(None, ["position=alibi"])


# ---------------------------------------------------------------------------------------------
# Bad values stop at config time: caps, finite numbers, ranges, device names
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.grad_clip=nan"], "train.grad_clip=nan is invalid; it must be a finite number"),
        (["train.weight_decay=nan"], "train.weight_decay=nan is invalid; it must be a finite"),
        (["train.lr=inf"], "train.lr=inf is invalid; it must be a finite number"),
        (
            ["model.options.rope.theta=inf"],
            "model.options.rope.theta=inf is invalid; it must be a finite number",
        ),
        (["eval.max_length_factor=nan"], "eval.max_length_factor=nan is invalid; it must be a"),
        (["train.beta1=1.5"], "train.beta1=1.5 is invalid; it must be in [0, 1)"),
        (["train.beta2=1.0"], "train.beta2=1.0 is invalid; it must be in [0, 1)"),
        (["seed=-1"], "seed=-1 is invalid; it must be >= 0"),
        (["threads=-1"], "threads=-1 is invalid; it must be >= 0"),
        (["device=gpu"], "device='gpu' is not a device; use auto, cpu, cuda, cuda:N or mps"),
        (["run_dir="], "run_dir='' is empty"),
        (
            ["train.eval_samples=100000000"],
            "train.eval_samples=100000000 is invalid; it must be in [1, 100000]",
        ),
        (["eval.samples=100001"], "eval.samples=100001 is invalid; it must be in [1, 100000]"),
        (["eval.probe_samples=0"], "eval.probe_samples=0 is invalid; it must be in [1, 100000]"),
        (
            ["data.train_max_length=10000000"],
            "data.train_max_length=10000000 is too long: the periodic 4x evaluation needs length "
            "40000000 (over 4096 tokens for task 'svo'); the maximum is 4096 tokens per sequence",
        ),
        (
            ["eval.lengths=[10000000]"],
            "eval.lengths=[10000000] is too long: eval.py needs length 10000000",
        ),
        (
            ["eval.max_length_factor=1e6"],
            "eval.max_length_factor=1000000.0 is too long: eval.py needs length 12000000",
        ),
        (
            [
                "model.position=learned",
                "model.options.learned.max_positions=20",
                "data.task=copy",
                "data.train_max_length=10",
            ],
            "model.options.learned.max_positions=20 is shorter than the longest training "
            "sequence (22 tokens at data.train_max_length=10); set "
            "model.options.learned.max_positions >= 22",
        ),
    ],
)
def test_bad_values_fail_at_config_time(overrides: list[str], message: str) -> None:
    assert one_line_error(overrides).startswith(message)


def test_the_length_cap_is_4096_input_tokens_including_the_periodic_4x_evaluation() -> None:
    # copy at length L: <bos> L <sep> L <eos> = 2L + 3 tokens, 2L + 2 model inputs; the periodic
    # evaluation at 4L needs 8L + 2 <= 4096, so L = 511 is the longest training length.
    assert load_config(None, ["data.task=copy", "data.train_max_length=511"])
    message = one_line_error(["data.task=copy", "data.train_max_length=512"])
    assert "length 2048 (4098 tokens for task 'copy')" in message
    lengths = ["data.task=copy", "data.train_max_length=8"]
    assert load_config(None, [*lengths, "eval.lengths=[2047]"]).eval.lengths == [2047]
    assert "4098 tokens" in one_line_error([*lengths, "eval.lengths=[2048]"])
    # a learned table exactly as long as the longest training input is enough
    learned = ["model.position=learned", "data.task=copy", "data.train_max_length=10"]
    rows = "model.options.learned.max_positions=22"
    assert load_config(None, [*learned, rows]).model.options["learned"]["max_positions"] == 22


@pytest.mark.parametrize("text", ["007", "1e3", "null", "true", "[1]", "0x10"])
def test_string_settings_keep_the_literal_text(text: str) -> None:
    assert load_config(None, [f"run_dir={text}"]).run_dir == text
    assert load_config(None, [f"run_dir=runs/{text}"]).run_dir == f"runs/{text}"


@pytest.mark.parametrize("text", ["*", "-", "*+", "+-*"])
def test_text_task_options_keep_the_literal_text(text: str) -> None:
    """``*`` would be a YAML alias and ``-`` a YAML list; a text option takes them as typed."""
    overrides = [
        "data.task=modular_arithmetic",
        f"data.options.modular_arithmetic.operations={text}",
    ]
    assert load_config(None, overrides).data.options["modular_arithmetic"]["operations"] == text


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["train.lr=*"],
            "cannot read the overrides 'train.lr=*' as YAML (while scanning an alias)",
        ),
        (
            [
                "data.task=associative_recall",
                "data.options.associative_recall.n_keys=8",
                "data.train_max_length=8",
            ],
            "data.train_max_length=8: the periodic 4x evaluation needs length 32, but task "
            "'associative_recall' needs length <= n_keys=8",
        ),
        (
            ["data.task=associative_recall", "data.options.associative_recall.n_queries=3"],
            "data.train_min_length=2 and data.train_max_length=8 are invalid; need 3 <= "
            "train_min_length <= train_max_length for task 'associative_recall' with "
            "data.options.associative_recall={'n_keys': 64, 'n_values': 16, 'n_queries': 3",
        ),
    ],
)
def test_errors_from_task_options_name_the_option(overrides: list[str], message: str) -> None:
    assert one_line_error(overrides).startswith(message)


def test_a_bare_task_option_suggests_its_place() -> None:
    assert one_line_error(["echo_keys=false"]).startswith(
        "unknown config key 'echo_keys' (did you mean data.options.associative_recall.echo_keys?)"
    )


def test_string_literals_do_not_change_how_other_types_parse() -> None:
    config = load_config(None, ["seed=007", "train.lr=1e-3", "train.target_accuracy=null"])
    assert config.seed == 7 and config.train.lr == 1e-3 and config.train.target_accuracy is None


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("eval.lengths=4", "eval.lengths: "),
        ("eval.lengths=[4,nan]", "eval.lengths[1]: "),
        ("train.steps=abc", "train.steps: "),
        ("model.causal=maybe", "model.causal: "),
        ("train.target_accuracy=x", "train.target_accuracy: "),
    ],
)
def test_a_value_of_the_wrong_type_says_what_the_key_accepts(override, expected):
    words = {
        "eval.lengths: ": "expected a list of integers, e.g. [4, 8, 16], or null",
        "eval.lengths[1]: ": "expected an integer",
        "train.steps: ": "expected an integer",
        "model.causal: ": "expected a boolean (true or false)",
        "train.target_accuracy: ": "expected a number, or null",
    }
    with pytest.raises(ConfigError) as error:
        load_config(None, [override])
    message = str(error.value)
    assert message.startswith(expected) and message.endswith(words[expected])
    assert "\n" not in message


# ---------------------------------------------------------------------------------------------
# Randomized evaluation needs positions for every evaluated length
# ---------------------------------------------------------------------------------------------


def test_randomized_eval_with_too_few_positions_is_refused_before_training(tmp_path: Path) -> None:
    """``model.randomized_eval`` draws every evaluated sequence's positions from ``[0, L)``:
    an ``L`` below the periodic 4x evaluation killed the run at its first periodic evaluation
    (and every resume). The bound is exact: one position fewer is refused in one line, the
    bound itself trains through a periodic evaluation at every step."""
    from conftest import TINY_RUN

    from lab.training.trainer import train

    tiny = [*TINY_RUN, "train.steps=2", "train.warmup_steps=0", "train.eval_every=1"]
    needed = sequence_tokens(build_task("copy"), 16)  # 4x data.train_max_length=4
    random = ["model.randomized_eval=true", f"run_dir={tmp_path / 'run'}"]
    message = one_line_error([*tiny, *random, f"model.randomized_positions={needed - 1}"])
    assert message == (
        f"model.randomized_eval=true with model.randomized_positions={needed - 1} is too few "
        "positions: the periodic evaluation at 4x data.train_max_length=4 evaluates sequences "
        f"of {needed} tokens, each needing as many distinct positions; give "
        f"model.randomized_positions >= {needed} (at most 65536) or model.randomized_eval=false"
    )
    grid = one_line_error(
        [*tiny, *random, f"model.randomized_positions={needed}", "eval.lengths=[20]"]
    )
    assert "eval.lengths=[20] evaluates sequences of 42 tokens" in grid
    result = train(load_config(None, [*tiny, *random, f"model.randomized_positions={needed}"]))
    assert result.step == 2


def test_randomized_eval_at_evaluation_needs_as_many_positions() -> None:
    """``eval.py RUN eval.position_options.randomized_eval=true`` is checked the same way."""
    config = load_config(
        None,
        [
            "data.task=copy",
            "model.randomized_positions=40",
            "eval.position_options.randomized_eval=true",
        ],
    )
    with pytest.raises(ConfigError, match="model.randomized_positions=40 is too few positions"):
        check_evaluable(config)
    check_evaluable(
        dataclasses.replace(config, eval=dataclasses.replace(config.eval, position_options={}))
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.lengths={a: 1}", "eval.lengths={'a': 1} is a mapping, but eval.lengths is a list"),
        ("data.options=[1]", "data.options=[1] is a list, but data.options is a mapping"),
        ("model.options=[1]", "model.options=[1] is a list, but model.options is a mapping"),
        ("eval.position_options=[1]", "eval.position_options=[1] is a list, but"),
        (
            "model.options.rope.short_factor={a: 1}",
            "model.options.rope.short_factor={'a': 1} is a mapping, but "
            "model.options.rope.short_factor is a list",
        ),
        ("eval=[1]", "eval=[1] is a list, but eval is a mapping"),
        ("train=5", "train=5 is a single value, but train is a mapping of settings; give train."),
        ("eval.lengths=[[1]]", "eval.lengths=[[1]] is invalid; give a list of integers >= 1"),
    ],
)
def test_a_mapping_for_a_list_or_a_list_for_a_mapping_is_one_line(override, message):
    """OmegaConf's "Cannot merge incompatible container types" was a TypeError traceback from
    every entry point; it is one line naming the key and the kind it takes."""
    with pytest.raises(ConfigError) as error:
        load_config(None, [override])
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


@pytest.mark.parametrize("override", ["eval.stride=4", "eval.lm_tokens=100"])
def test_a_language_model_key_on_an_exact_match_task_is_refused(override):
    """eval.stride and eval.lm_tokens were accepted on a copy run and written into its config,
    doing nothing; like a diagnostics setting that would do nothing, they are one line, and
    the defaults (as a saved config.yaml writes them) still pass."""
    key, value = override.split("=")
    with pytest.raises(ConfigError, match=f"^{key}={value} has no effect on task 'copy'"):
        load_config(None, ["data.task=copy", override])
    load_config(None, ["data.task=copy", f"{key}={'null' if key == 'eval.stride' else 65536}"])
    assert load_config(None, ["data.task=text", override]).eval.lm_tokens > 0


@pytest.mark.parametrize("override", ["eval.samples=8", "eval.probe_samples=8"])
def test_an_exact_match_key_on_a_language_model_task_is_refused(override):
    """eval.samples and eval.probe_samples were accepted on a text run and recorded in its
    eval.json, changing nothing (it scores eval.lm_tokens held-out tokens at every length);
    the reverse (eval.lm_tokens on svo) was already refused. The defaults still pass."""
    text = ["data.task=text", "train.target_accuracy=null"]
    with pytest.raises(ConfigError, match=rf"^{re.escape(override)} has no effect on task 'text'"):
        load_config(None, [*text, override])
    key = override.split("=")[0]
    default = getattr(EvalConfig(), key.split(".")[1])
    assert load_config(None, [*text, f"{key}={default}"]).data.task == "text"


def test_a_bidirectional_language_model_and_a_quoted_empty_run_dir_are_refused():
    """model.causal=false on text trained the causal model bit for bit (next-byte scoring
    reads from position 1, so the prefix mask is the causal mask) while reports called it
    bidirectional; run_dir='' inside double quotes made a folder named ''."""
    text = ["data.task=text", "train.target_accuracy=null"]
    with pytest.raises(ConfigError, match=r"^model.causal=false has no effect on task 'text'"):
        load_config(None, [*text, "model.causal=false"])
    with pytest.raises(ConfigError, match=r"""^run_dir="''" is empty"""):
        load_config(None, ["run_dir=''"])
