"""The task suite: every registered task's solver against its generator, option checks, padded
answers (pads never change a real token's logits and never count), and every task through one
training step and one evaluation."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config

from data import EOS, PAD, available_tasks, build_task, task_class
from data.streams import evaluation_set, validation_set
from lab.common.checkpoint import load_checkpoint
from lab.common.config import ConfigError, load_config
from lab.evaluation.extrapolation import evaluate_length
from lab.evaluation.metrics import score_answers
from lab.reporting.aggregate import groups
from lab.sweeps.sweep import expand, load_sweep
from lab.training.run_logs import periodic_lengths
from lab.training.trainer import build_model, train
from model import ModelConfig, Transformer
from model.position import available_schemes, scheme_class

VARIABLE = [name for name in available_tasks() if build_task(name).pad_id is not None]
NO_PROMPTS = "a language-model task has no prompts or exact answers (tests/test_text.py covers it)"


def with_prompts(name: str, *values: object) -> object:
    """``(name, *values)`` as a parameter, skipped (with the reason) for a language-model task."""
    marks = [pytest.mark.skip(reason=NO_PROMPTS)] if task_class(name).language_model else []
    return pytest.param(name, *values, marks=marks)


# Every task at its defaults, and the options that change what the answer is.
VARIANTS = [with_prompts(name, {}) for name in available_tasks()] + [
    ("parity", {"scratchpad": False}),
    ("modular_arithmetic", {"scratchpad": False}),
    ("modular_arithmetic", {"operations": "+-*", "modulus": 7}),
    ("modular_arithmetic", {"operations": "+-*", "scratchpad": False}),
    ("binary_addition", {"msb_first": True}),
    ("associative_recall", {"echo_keys": False}),
]


def rows_as_text(task, batch) -> list[tuple[list[str], list[str], list[str]]]:
    """``(prompt, real answer, pads)`` of every row, as token strings."""
    out = []
    for row in batch.tokens.tolist():
        tokens = [task.vocab[i] for i in row]
        answer = tokens[batch.answer_start :]
        end = answer.index(EOS)
        out.append((tokens[1 : batch.answer_start - 1], answer[:end], answer[end + 1 :]))
    return out


@pytest.mark.parametrize(("name", "options"), VARIANTS)
def test_the_solver_answers_every_generated_prompt(name: str, options: dict) -> None:
    """The solver (written apart from the generator) scores 100% in and past the training
    range, and a row's pads come only after its <eos>."""
    task = build_task(name, options)
    low, high = task.train_lengths
    for length in (low, high, 2 * high):
        batch = task.sample(np.random.default_rng([7, length]), length, 200)
        assert batch.tokens[:, 0].eq(task.token_id("<bos>")).all()
        for prompt, answer, pads in rows_as_text(task, batch):
            assert task.solve(prompt) == answer, (name, length, prompt)
            assert set(pads) <= {PAD}


@pytest.mark.parametrize("name", available_tasks())
def test_sequence_length_depends_on_the_length_only(name: str) -> None:
    task = build_task(name)
    high = task.train_lengths[1]
    shapes = {task.sample(np.random.default_rng(s), high, 64).tokens.shape for s in range(5)}
    starts = {task.sample(np.random.default_rng(s), high, 3).answer_start for s in range(5)}
    assert len(shapes) == 1 and len(starts) == 1


@pytest.mark.parametrize("name", available_tasks())
def test_validation_sets_of_the_default_lengths_are_disjoint_from_the_test_sets(name: str) -> None:
    """At every length the periodic evaluation scores in distribution (the training range's ends
    and middle), the default settings draw a validation set that holds none of the test
    sequences and at least 10 distinct ones: a shorter length would have too few sequences
    outside the 256 test ones (2**6 = 64 bit strings for parity, all of them in the test set)."""
    config = load_config(None, [f"data.task={name}"])
    task = config.data.build_task()
    samples, held_out = config.train.eval_samples, config.eval.samples
    for seed in range(3):
        for length in periodic_lengths(config)["in_dist"]:
            test = {tuple(r) for r in evaluation_set(task, seed, length, held_out).tokens.tolist()}
            rows = {
                tuple(r)
                for r in validation_set(task, seed, length, samples, held_out).tokens.tolist()
            }
            assert not rows & test and len(rows) >= 10, (name, seed, length, len(rows))


def test_variable_answers_are_padded_within_a_batch() -> None:
    assert {"binary_addition", "selective_copy"} <= set(VARIABLE)
    for name in VARIABLE:
        task = build_task(name)
        batch = task.sample(np.random.default_rng(0), task.train_lengths[1], 256)
        real = batch.answer_mask.sum(dim=1)  # (B,)
        assert len(set(real.tolist())) > 1, name
        assert not (batch.answer_targets[batch.answer_mask] == task.pad_id).any()


def test_binary_addition_by_hand() -> None:
    lsb, msb = build_task("binary_addition"), build_task("binary_addition", {"msb_first": True})
    # 3 + 5 = 8: LSB first 110 + 101 -> 0001; MSB first 011 + 101 -> 1000
    assert lsb.solve(list("110+101")) == list("0001")
    assert msb.solve(list("011+101")) == list("1000")
    # 1 + 2 = 3 has no carry: three bits
    assert lsb.solve(list("100+010")) == list("110")
    assert msb.solve(list("001+010")) == list("011")


def test_hand_examples_of_the_other_tasks() -> None:
    assert build_task("odds_first").solve(list("abcde")) == list("acebd")
    assert build_task("duplicate").solve(list("ab")) == list("abab")
    assert build_task("missing_duplicate").solve(list("abca_c")) == ["b"]
    assert build_task("parity").solve(list("1011")) == list("1101")
    assert build_task("parity", {"scratchpad": False}).solve(list("1011")) == ["1"]
    assert build_task("modular_arithmetic").solve(list("3+4-1")) == list("321")
    plain = build_task("modular_arithmetic", {"scratchpad": False})
    assert plain.solve(list("3+4-1")) == ["1"]
    mult = build_task("modular_arithmetic", {"operations": "+*", "modulus": 7})
    assert mult.solve(list("2+3*4")) == list("250")  # 2, 5, 14 mod 7: * binds tighter
    prompt = ["k3", "v1", "k7", "v4", "?", "k7", "k3"]
    assert build_task("associative_recall").solve(prompt) == ["k7", "v4", "k3", "v1"]
    values_only = build_task("associative_recall", {"echo_keys": False})
    assert values_only.solve(prompt) == ["v4", "v1"]
    flip = build_task("flip_flop")
    assert flip.solve(list("w1i0r1w0i1r")) == ["0"]
    assert build_task("count").solve(list("acaba#a")) == ["=3"]
    assert build_task("selective_copy").solve(list(".a..cb.")) == list("acb")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.options.binary_addition.msb_first=7"], "msb_first=7 is invalid; it must be a bool"),
        (["data.options.modular_arithmetic.modulus=11"], "modulus=11 is invalid; it must be in"),
        (["data.options.modular_arithmetic.operations=/"], "operations='/' is invalid"),
        (
            ["data.options.associative_recall.n_keys=1"],
            "n_queries=2 is invalid; it must be <= n_keys=1",
        ),
        (["data.options.flip_flop.p_ignore=1.0"], "p_ignore=1.0 is invalid; it must be in [0, 1)"),
        (["data.options.count.n_symbols=1"], "n_symbols=1 is invalid; it must be in 2..62"),
        (["data.options.selective_copy.p_blank=-0.5"], "p_blank=-0.5 is invalid"),
        (["data.options.parity.bits=3"], "data.options.parity.bits is not an option of 'parity'"),
        (["data.options.svo.n_symbols=3"], "its options: none"),
    ],
)
def test_bad_task_options_give_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(None, overrides)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert str(error.value).startswith("data.options.")


def test_lengths_past_a_tasks_vocabulary_are_refused_at_load() -> None:
    with pytest.raises(ConfigError, match=r"needs length <= max_count=20.*data.options.count"):
        load_config(None, ["data.task=count", "data.options.count.max_count=20"])  # 4x = 40


@pytest.mark.parametrize("name", available_tasks())
def test_defaults_come_from_the_task(name: str) -> None:
    config = load_config(None, [f"data.task={name}"])
    cls = task_class(name)
    assert (config.data.train_min_length, config.data.train_max_length) == cls.train_lengths
    assert config.data.options == {name: asdict(build_task(name).options)}
    assert config.model.vocab_size == build_task(name).vocab_size


@pytest.mark.parametrize(
    ("scheme", "causal"),
    [
        (s, c)
        for s in available_schemes()
        for c in (True, False)
        if c or scheme_class(s).bidirectional
    ],
)
def test_pads_never_change_a_real_tokens_logits(scheme: str, causal: bool) -> None:
    """A padded batch gives, at every real position, the logits of its rows run one by one
    without their pads (causal models, and bidirectional ones read as a prefix LM, for every
    scheme that allows it)."""
    task = build_task("selective_copy")
    batch = task.sample(np.random.default_rng(3), 8, 6)
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=task.vocab_size, d_model=16, n_layers=2, n_heads=2, d_ff=32,
        position=scheme, causal=causal,
    )  # fmt: skip
    model = Transformer(config).eval()
    with torch.no_grad():
        padded = model(batch.inputs, prefix_len=batch.answer_start)  # (B, S - 1, V)
        for row in range(len(batch.tokens)):
            ends = batch.tokens[row] == task.token_id(EOS)
            real = min(int(ends.nonzero()[0]) + 1, batch.inputs.shape[1])  # up to <eos>
            alone = model(batch.tokens[row : row + 1, :real], prefix_len=batch.answer_start)
            torch.testing.assert_close(padded[row, :real], alone[0], atol=1e-5, rtol=1e-5)
    assert (batch.tokens == task.pad_id).any()  # the batch was really padded


def test_scores_count_real_answer_tokens_only() -> None:
    task = build_task("selective_copy")
    batch = task.sample(np.random.default_rng(1), 6, 32)
    logits = torch.nn.functional.one_hot(batch.tokens[:, 1:], task.vocab_size).float()  # right
    wrong_pads = logits.clone()
    wrong_pads[:, :, task.pad_id] = 0.0
    wrong_pads[:, :, 0] += (batch.tokens[:, 1:] == task.pad_id).float()  # pads -> <bos>
    scores = score_answers(wrong_pads, batch)
    assert scores.exact.all()
    assert torch.equal(scores.answer_tokens, batch.answer_mask.sum(dim=1))
    assert torch.equal(scores.correct_tokens, scores.answer_tokens)
    wrong_eos = wrong_pads.clone()
    at = batch.answer_start - 1 + (batch.answer_targets == task.token_id(EOS)).int().argmax(1)
    wrong_eos[torch.arange(len(at)), at] = 0.0  # the argmax at <eos> becomes <bos> (id 0)
    scores = score_answers(wrong_eos, batch)
    assert not scores.exact.any()
    assert torch.equal(scores.correct_tokens, scores.answer_tokens - 1)


@pytest.mark.parametrize("name", available_tasks())
def test_every_task_trains_one_step_and_evaluates(name: str, tmp_path: Path) -> None:
    high = task_class(name).train_lengths[1]
    config = tiny_config(
        tmp_path,
        f"data.task={name}",
        "data.train_min_length=null",
        "data.train_max_length=null",
        "train.steps=1",
        "train.warmup_steps=0",
        "train.eval_every=1",
        "model.dropout=0.0",
    )
    assert config.data.train_max_length == high
    result = train(config)
    assert result.finished and result.step == 1
    model = build_model(config, torch.device("cpu"))
    scores = evaluate_length(model, config.data.build_task(), 2 * high, 16, seed=0)
    assert scores.samples == 16 and scores.length == 2 * high
    assert 0.0 <= scores.exact_match <= 1.0 and 0.0 <= scores.token_accuracy <= 1.0


@pytest.mark.parametrize("name", ["suite.yaml", "suite_quick.yaml"])
def test_the_suite_runs_every_task_with_the_mission_schemes(name: str) -> None:
    """Every exact-match task (the language-model task has its own sweep, configs/lm.yaml)."""
    runs = expand(load_sweep(Path("configs") / name, []))
    configs = [load_config(None, run.overrides) for run in runs]
    exact_match = {t for t in available_tasks() if not task_class(t).language_model}
    assert "text" not in exact_match and {c.data.task for c in configs} == exact_match
    assert {c.model.position for c in configs} == {"none", "learned", "sinusoidal", "rope", "alibi"}
    for c in configs:  # the task's own training lengths
        assert (c.data.train_min_length, c.data.train_max_length) == task_class(
            c.data.task
        ).train_lengths


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "scheme"),
    [
        ("flip_flop", "rope"),
        ("modular_arithmetic", "rope"),
        ("associative_recall", "learned"),
    ],
)
def test_a_scheme_learns_the_task_at_its_defaults(name: str, scheme: str, tmp_path: Path) -> None:
    """The learnability check of the suite run (README, "The task suite"), for the tasks whose
    defaults were set by it: the run of ``configs/suite.yaml`` (default options and lengths,
    its model and recipe, seed 0) reaches >= 95% exact-match on the test sequences at the
    shortest, middle and longest training lengths, on average. ``count`` (``alibi``) and
    ``parity`` (``rope``, 4700 of its 5000 steps) are left to the suite run: together they would
    add about 4 minutes to the test suite."""
    (run,) = expand(load_sweep(Path("configs/suite.yaml"), [f"task={name}", f"position={scheme}"]))
    config = load_config(None, [*run.overrides, "device=cpu", f"run_dir={tmp_path}"])
    train(config)
    model = build_model(config, torch.device("cpu"))
    model.load_state_dict(load_checkpoint(tmp_path)["model"])
    task = config.data.build_task()
    low, high = task.train_lengths
    lengths = (low, (low + high) // 2, high)
    scores = [evaluate_length(model, task, n, 256, seed=0).exact_match for n in lengths]
    assert np.mean(scores) >= 0.95, scores


def test_runs_with_other_task_options_are_grouped_apart() -> None:
    """Runs of one task and scheme whose task options differ are two groups in every report,
    labelled with the options that differ from the task's defaults."""

    def result(options: dict, seed: int) -> dict:
        data = {"task": "parity", "options": {"parity": options}}
        config = {"model": {}, "data": data, "eval": {}}
        return {"position": "rope", "task": "parity", "seed": seed, "config": config}

    runs = [result({"scratchpad": True}, 0), result({"scratchpad": False}, 0)]
    runs.append(result({"scratchpad": True}, 1))
    grouped = groups(runs, "parity")
    assert {k: len(v) for k, v in grouped.items()} == {"rope": 2, "rope {scratchpad=False}": 1}
    old = result({}, 2)  # saved before the option existed: the one-bit answer
    assert "rope {scratchpad=False}" in groups([old], "parity")


def test_runs_with_other_task_options_are_not_compared_as_schemes() -> None:
    """Two answer forms of a task have different chance levels: a significance test between
    them would rank the forms, not the schemes; schemes of one form are still compared."""
    from lab.reporting.aggregate import significance_lines

    def result(position: str, options: dict, at_2x: float, seed: int) -> dict:
        data = {"task": "parity", "options": {"parity": options}}
        config = {"model": {}, "data": data, "eval": {"max_length_factor": 4.0}}
        return {
            "position": position,
            "task": "parity",
            "seed": seed,
            "config": config,
            "train_lengths": [8, 12],
            "lengths": [{"length": 24}],
            # learned: the report compares learned runs only
            "summary": {"in_dist": 1.0, "at": {"2x": at_2x}},
        }

    runs = []
    for seed in range(6):  # six seeds: the sign-flip test can reach p < 0.05
        runs.append(result("rope", {"scratchpad": False}, 1.0, seed))
        runs.append(result("rope", {"scratchpad": True}, 0.0, seed))
        runs.append(result("alibi", {"scratchpad": True}, 1.0, seed))
    lines = "\n".join(significance_lines(runs, "parity"))
    assert "alibi > rope (+100.0 points" in lines and "scratchpad" not in lines
