"""Tests of the evaluation: length extrapolation, order probes, reports and the ``eval.py`` CLI.

Expected values come from oracles (modules whose answers are known by construction) and from the
tasks' arithmetic, never from the code under test. One tiny model is trained once per module.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

import eval as eval_cli
from data import EOS, SEP, build_task
from data.streams import EVAL_STREAM, data_rng
from data.svo import NOUNS, VERBS
from lab.common.checkpoint import checkpoint_path
from lab.common.config import ConfigError, EvalConfig, load_config
from lab.evaluation.evaluate import (
    apply_eval_overrides,
    evaluate_model,
    evaluate_run,
    load_evaluation,
    summarize,
)
from lab.evaluation.extrapolation import LengthResult, evaluate_length
from lab.evaluation.figure import plot_accuracy_vs_length
from lab.evaluation.metrics import greedy_decode, score_answers
from lab.evaluation.order import ORDER_BLIND_TVD, minimal_pair_accuracy, permutation_probe
from lab.evaluation.record import SCHEMA
from lab.reporting.report import write_reports
from lab.reporting.tables import percent
from lab.training.trainer import build_model, train
from model import ModelConfig
from model.position import available_schemes

TINY = ["model.d_model=32", "model.n_layers=2", "model.n_heads=4", "model.d_ff=64"]
COPY = ["data.task=copy", "data.train_min_length=2", "data.train_max_length=4"]
FAST_EVAL = EvalConfig(samples=32, probe_samples=32)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------
# Oracles: modules with known answers, shaped like model.Transformer
# ---------------------------------------------------------------------------------------------


class Limit:
    """Stands in for ``model.position``: only ``max_length()`` is used by the evaluation."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit

    def max_length(self) -> int | None:
        return self.limit


class Oracle(nn.Module):
    """Predicts ``answer_fn(prompt)`` then ``<eos>`` after ``<sep>``, as one-hot logits.

    ``answer_fn`` gets the prompt's content tokens (no ``<bos>``) and returns the answer tokens.
    The output at answer position ``k`` depends on the prompt and ``k`` only, so greedy decoding
    and teacher forcing see the same predictions. Every input seen is kept in ``seen``.
    """

    def __init__(self, task, answer_fn: Callable[[list[int]], list[int]], limit=None) -> None:
        super().__init__()
        self.config = ModelConfig(vocab_size=task.vocab_size, position="none")
        self.position = Limit(limit)
        self.anchor = nn.Parameter(torch.zeros(()))  # gives the module a device
        self.answer_fn = answer_fn
        self.vocab_size = task.vocab_size
        self.sep, self.eos = task.token_id(SEP), task.token_id(EOS)
        self.bos = task.token_id("<bos>") if "<bos>" in task.vocab else None
        self.seen: list[torch.Tensor] = []

    def forward(self, idx: torch.Tensor, prefix_len: int | None = None) -> torch.Tensor:
        self.seen.append(idx.clone())
        targets = torch.full(idx.shape, self.sep, dtype=torch.int64)  # (B, T)
        for r, row in enumerate(idx.tolist()):
            s = row.index(self.sep)
            prompt = row[1:s] if row[0] == self.bos else row[:s]
            answer = [*self.answer_fn(prompt), self.eos]
            for i in range(s, len(row)):
                targets[r, i] = answer[i - s] if i - s < len(answer) else self.eos
        logits = nn.functional.one_hot(targets, self.vocab_size).float() * 10.0  # (B, T, V)
        return logits + self.anchor


def svo_answer(task) -> Callable[[list[int]], list[int]]:
    """Right answer of an ``svo`` prompt: the first noun if the verb (the prompt's last token)
    is active, the second if it is passive."""
    nouns = {task.token_id(n) for n in NOUNS}
    passive = {task.token_id(form) for _, form in VERBS}

    def answer(prompt: list[int]) -> list[int]:
        found = [t for t in prompt if t in nouns]
        return [found[1] if prompt[-1] in passive else found[0]]

    return answer


def copy_blind(prompt: list[int]) -> list[int]:
    """An order-blind copier: the prompt's symbols sorted (a function of the bag only)."""
    return sorted(prompt)


def copy_config(*extra: str):
    return load_config(None, [*COPY, *TINY, *extra])


def strict_json(value) -> str:
    return json.dumps(value, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# A trained run, once per module
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (and many threads thrash on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("runs") / "copy_rope"
    overrides = [*COPY, *TINY, "train.steps=120", "train.warmup_steps=10", "train.lr=1e-2"]
    overrides += ["train.eval_every=120", "train.eval_samples=16", "train.progress=false"]
    train(load_config(None, [*overrides, "device=cpu", f"run_dir={run}"]))
    return run


@pytest.fixture(scope="module")
def run_result(trained_run) -> dict:
    return evaluate_run(trained_run, FAST_EVAL, device="cpu")


# ---------------------------------------------------------------------------------------------
# Length extrapolation
# ---------------------------------------------------------------------------------------------


def test_perfect_copier_scores_one_everywhere():
    config = copy_config()
    task = config.data.build_task()
    result = evaluate_model(Oracle(task, lambda p: p), config, FAST_EVAL)
    # training 2..4; 1.1x and 1.25x of 4 round to 4 and 5: every multiple lies past training
    assert [r["length"] for r in result["lengths"]] == [2, 3, 4, 5, 6, 8, 12, 16]
    for r in result["lengths"]:
        assert (r["exact_match"], r["token_accuracy"], r["supported"]) == (1.0, 1.0, True)
        assert r["exact_match_low"] < 1.0 == r["exact_match_high"]
        assert r["correct"] == "1" * FAST_EVAL.samples
        assert (r["pairs"], r["pair_accuracy"]) == (FAST_EVAL.probe_samples, 1.0)
    summary = result["summary"]
    assert summary["in_dist"] == 1.0 and summary["notes"] == []
    assert summary["at"] == dict.fromkeys(["1.1x", "1.25x", "1.5x", "2x", "3x", "4x"], 1.0)


def test_swapped_pairs_score_one_for_a_perfect_oracle_and_zero_for_an_order_blind_one():
    """At every evaluated length, on every task with pairs: both members right for a perfect
    model, never both for one whose answer depends only on the bag of prompt tokens."""
    for name, perfect, blind in (
        ("copy", lambda p: p, copy_blind),
        ("reverse", lambda p: p[::-1], copy_blind),
    ):
        config = load_config(None, [f"data.task={name}", *COPY[1:], *TINY])
        task = config.data.build_task()
        for model, expected in ((Oracle(task, perfect), 1.0), (Oracle(task, blind), 0.0)):
            rows = evaluate_model(model, config, FAST_EVAL)["lengths"]
            assert [r["pair_accuracy"] for r in rows] == [expected] * len(rows), name
    config = load_config(None, ["data.task=svo", "data.train_min_length=3"])
    task = config.data.build_task()
    nouns = {task.token_id(n) for n in NOUNS}
    blind = Oracle(task, lambda p: [min(t for t in p if t in nouns)])  # the bag of tokens only
    for model, expected in ((Oracle(task, svo_answer(task)), 1.0), (blind, 0.0)):
        for length in (3, 12, 48):
            pairs = minimal_pair_accuracy(model, task, length, 64, seed=0)
            assert pairs.pair_accuracy == expected
    sort = load_config(None, ["data.task=sort", *COPY[1:], *TINY])
    rows = evaluate_model(Oracle(sort.data.build_task(), sorted), sort, FAST_EVAL)["lengths"]
    assert all(r["pairs"] == 0 and r["pair_accuracy"] is None for r in rows)


def test_constant_eos_on_copy_gets_one_token_in_l_plus_one():
    config = copy_config()
    task = config.data.build_task()
    oracle = Oracle(task, lambda p: [])  # answers <eos> at once: right only at the last position
    for length in (2, 5, 9):
        result = evaluate_length(oracle, task, length, 24, seed=0)
        assert result.exact_match == 0.0
        assert result.token_accuracy == 1 / (length + 1)


def test_constant_noun_on_svo_matches_the_answer_frequency():
    task = build_task("svo")
    dog = task.token_id("dog")
    oracle = Oracle(task, lambda p: [dog])
    result = evaluate_length(oracle, task, 5, 1500, seed=0)
    inputs = torch.cat(oracle.seen)  # (N, T): exactly the evaluated rows
    sep_at = int((inputs[0] == task.token_id(SEP)).nonzero()[0])
    share = (inputs[:, sep_at + 1] == dog).double().mean().item()  # rows whose answer is dog
    assert result.exact_match == pytest.approx(share, abs=1e-12)
    assert result.token_accuracy == pytest.approx((share + 1) / 2, abs=1e-12)  # <eos> always right
    # Arithmetic: dog is one of the 2 nouns with probability 2/16, the agent with 1/2: 1/16.
    sigma = (1 / 16 * 15 / 16 / 1500) ** 0.5
    assert abs(result.exact_match - 1 / 16) < 4 * sigma


def noisy_copy(prompt: list[int]) -> list[int]:
    """Copy, but corrupt one token of about a third of the prompts."""
    answer = list(prompt)
    if sum(prompt) % 3 == 0:
        answer[sum(prompt) % len(prompt)] = 0  # a special token, never a symbol: wrong
    return answer


@pytest.mark.parametrize("kind", ["untrained", "trained", "noisy-oracle"])
def test_teacher_forced_exact_match_equals_greedy(kind, trained_run, make_model):
    task = build_task("copy", {"n_symbols": 16})
    if kind == "untrained":
        model = make_model("rope", strong=True, vocab_size=task.vocab_size)
    elif kind == "trained":
        model = build_model(copy_config(), torch.device("cpu"))
        model.load_state_dict(torch.load(checkpoint_path(trained_run))["model"])
    else:
        model = Oracle(task, noisy_copy)
    model.eval()
    exact_total = 0
    for length in (2, 4, 8):
        batch = task.sample(data_rng(0, EVAL_STREAM, length), length, 48)
        teacher_forced = score_answers(model(batch.inputs), batch).exact  # (B,)
        prompt, answer = (
            batch.tokens[:, : batch.answer_start],
            batch.answer_targets,
        )  # (B, P), (B, A)
        generated = greedy_decode(model, prompt, answer.shape[1])  # (B, A)
        greedy = (generated == answer).all(dim=1)  # (B,)
        assert torch.equal(teacher_forced, greedy)
        exact_total += int(greedy.sum())
    if kind != "untrained":
        assert exact_total > 0  # the check covers right answers, not only wrong ones


# ---------------------------------------------------------------------------------------------
# Summary arithmetic on hand-made curves
# ---------------------------------------------------------------------------------------------


def curve(points: dict[int, float | None]) -> list[LengthResult]:
    """LengthResults at the given lengths; None marks an unsupported length."""
    results = []
    for length, em in points.items():
        if em is None:
            results.append(
                LengthResult(length, 2 * length + 2, 0, None, None, None, None, False, "no")
            )
        else:
            results.append(LengthResult(length, 2 * length + 2, 100, em, em, em, em))
    return results


def test_summary_figures():
    # training 2..4: the multiples 1.1x .. 4x of 4 are the lengths 5, 5, 6, 8, 12, 16
    results = curve({2: 1.0, 3: 0.9, 4: 0.8, 5: 0.7, 6: 0.6, 8: 0.25, 12: 0.1, 16: 0.0})
    summary = summarize(results, [2, 3, 4, 6, 16], 2, 4, 4.0)
    assert summary["in_dist"] == pytest.approx((1.0 + 0.9 + 0.8) / 3)
    expected = {"1.1x": 0.7, "1.25x": 0.7, "1.5x": 0.6, "2x": 0.25, "3x": 0.1, "4x": 0.0}
    assert summary["at"] == expected
    assert summary["notes"] == [
        "in_dist: 90.0% is below 95%: undertrained, or the task is not learnable for this "
        "model; its extrapolation figures say little"
    ]
    short = summarize(curve({2: 1.0, 4: 0.96, 5: 0.0, 6: 0.0, 8: 0.0}), [2, 4], 2, 4, 2.0)
    assert short["notes"] == [] and list(short["at"]) == ["1.1x", "1.25x", "1.5x", "2x"]
    no_inside = summarize(curve({5: 1.0, 6: 1.0, 8: 1.0, 12: 1, 16: 1.0}), [6, 16], 2, 4, 4.0)
    assert no_inside["in_dist"] is None and "no grid length" in no_inside["notes"][0]


def test_unsupported_lengths_give_null_figures_with_reasons():
    results = curve({2: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 8: None, 12: None, 16: None})
    summary = summarize(results, [2, 4, 6, 8, 16], 2, 4, 4.0)
    assert summary["in_dist"] == 1.0
    assert summary["at"]["1.5x"] == 1.0
    assert summary["at"]["2x"] is None and summary["at"]["4x"] is None
    assert len(summary["notes"]) == 3 and all("unsupported" in n for n in summary["notes"])


def test_learned_model_reports_lengths_past_its_table_as_unsupported():
    config = copy_config("model.position=learned", "model.options.learned.max_positions=12")
    model = build_model(config, torch.device("cpu")).eval()
    result = evaluate_model(model, config, FAST_EVAL)
    rows = result["lengths"]
    assert any(r["supported"] for r in rows) and any(not r["supported"] for r in rows)
    for r in rows:
        assert r["supported"] == (r["tokens"] <= 12)
        if not r["supported"]:
            assert r["exact_match"] is None and r["token_accuracy"] is None
            assert "max_positions=12" in r["reason"]
    summary = result["summary"]
    assert summary["at"]["2x"] is None and summary["at"]["4x"] is None
    assert any(n.startswith("2x:") and "max_positions=12" in n for n in summary["notes"])
    assert result["order"]["permutation_tvd"] is not None  # the probe length fits the table
    strict_json(result)


# ---------------------------------------------------------------------------------------------
# Order sensitivity
# ---------------------------------------------------------------------------------------------


def test_permutation_probe_is_float_noise_for_bidirectional_nope(make_model):
    task = build_task("copy", {"n_symbols": 13})
    model = make_model("none", causal=False, strong=True, vocab_size=task.vocab_size)
    probe = permutation_probe(model, task, 8, 64, seed=0)
    assert probe.tvd < ORDER_BLIND_TVD and probe.order_blind
    assert probe.argmax_changed == 0.0


def test_bidirectional_nope_never_gets_both_members_of_an_svo_pair(make_model):
    """The control of the order task: a bidirectional model without positions reads the prompt
    as a set, so both members of a pair get the same answer and at most one is right."""
    task = build_task("svo")
    model = make_model("none", causal=False, strong=True, vocab_size=task.vocab_size)
    for length in (3, 12, 48):
        pairs = minimal_pair_accuracy(model, task, length, 64, seed=0)
        assert pairs.pair_accuracy == 0.0 and pairs.member_accuracy <= 0.5


@pytest.mark.parametrize("position", available_schemes())
def test_permutation_probe_moves_causal_models(position, make_model):
    # Measured on these seeded models: TVD 0.03 .. 0.21 (copy and svo); the bound leaves 30x.
    for task, length in ((build_task("copy", {"n_symbols": 13}), 8), (build_task("svo"), 6)):
        model = make_model(position, strong=True, vocab_size=task.vocab_size)
        probe = permutation_probe(model, task, length, 64, seed=0)
        assert probe.tvd > 1e-3 and probe.order_blind is False


def test_minimal_pairs_separate_order_aware_from_order_blind():
    task = build_task("svo")
    nouns = {task.token_id(n) for n in NOUNS}
    perfect = minimal_pair_accuracy(Oracle(task, svo_answer(task)), task, 6, 64, seed=0)
    assert (perfect.member_accuracy, perfect.pair_accuracy) == (1.0, 1.0)
    # Answers the lowest-id noun of the prompt: a function of the bag of tokens only.
    blind = Oracle(task, lambda p: [min(t for t in p if t in nouns)])
    pairs = minimal_pair_accuracy(blind, task, 6, 64, seed=0)
    assert (pairs.member_accuracy, pairs.pair_accuracy) == (0.5, 0.0)
    assert permutation_probe(blind, task, 6, 64, seed=0).tvd == 0.0
    assert minimal_pair_accuracy(blind, build_task("sort"), 6, 64, seed=0) is None


# ---------------------------------------------------------------------------------------------
# eval.json, TensorBoard, reports
# ---------------------------------------------------------------------------------------------


def check_fraction(value, nullable=True):
    if value is None:
        assert nullable
    else:
        assert isinstance(value, float | int) and 0 <= value <= 1


def test_eval_json_follows_the_schema(run_result, trained_run):
    saved = json.loads((trained_run / "eval.json").read_text())
    assert saved == json.loads(strict_json(run_result))
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    if jsonschema is not None:
        jsonschema.validate(saved, SCHEMA)
    # Field by field (also when jsonschema is missing), and the schema lists exactly these keys;
    # reached_target is optional so that files written before it still load; parent is only
    # in a fine-tuned run's file (train.py --extend, tests/test_extend.py); passkey only in
    # runs of the passkey task (tests/test_passkey.py); diagnostics unless eval.diagnostics=off
    # (tests/test_diagnostics.py).
    assert set(saved) == set(SCHEMA["required"]) | {"reached_target", "diagnostics"}
    assert set(SCHEMA["properties"]) == set(saved) | {"parent", "passkey"}
    assert saved["reached_target"] is None  # the run has no train.target_accuracy
    assert saved["schema_version"] == SCHEMA["properties"]["schema_version"]["const"]
    assert saved["run_dir"] == str(trained_run)
    assert saved["config"]["data"]["task"] == saved["task"] == "copy"
    assert saved["config"]["eval"]["samples"] == FAST_EVAL.samples
    assert saved["position"] == "rope" and saved["seed"] == 0
    assert saved["train_lengths"] == [2, 4]
    assert set(saved["grid_lengths"]) <= {r["length"] for r in saved["lengths"]}
    length_keys = SCHEMA["properties"]["lengths"]["items"]["required"]
    for row in saved["lengths"]:
        assert list(row) == [*length_keys, "failures", "attention"]  # tests/test_diagnostics.py
        assert isinstance(row["length"], int) and isinstance(row["tokens"], int)
        assert row["samples"] == FAST_EVAL.samples and row["supported"] is True
        assert row["reason"] is None
        for key in ("exact_match", "exact_match_low", "exact_match_high", "token_accuracy"):
            check_fraction(row[key], nullable=False)
        assert row["exact_match_low"] <= row["exact_match"] <= row["exact_match_high"]
        assert len(row["correct"]) == row["samples"]
        assert row["correct"].count("1") == round(row["exact_match"] * row["samples"])
        assert row["pairs"] == FAST_EVAL.probe_samples
        check_fraction(row["pair_accuracy"], nullable=False)
    summary = saved["summary"]
    assert set(summary) == set(SCHEMA["properties"]["summary"]["required"])
    check_fraction(summary["in_dist"])
    assert list(summary["at"]) == ["1.1x", "1.25x", "1.5x", "2x", "3x", "4x"]
    for value in summary["at"].values():
        check_fraction(value)
    assert all(isinstance(n, str) for n in summary["notes"])
    order = saved["order"]
    assert set(order) == set(SCHEMA["properties"]["order"]["required"])
    check_fraction(order["permutation_tvd"], nullable=False)
    check_fraction(order["permutation_argmax_changed"], nullable=False)
    assert order["order_blind"] is False  # causal rope
    assert order["probe_length"] == 4 and order["probe_samples"] == FAST_EVAL.probe_samples
    assert saved["train_steps"] == 120
    assert isinstance(saved["eval_seconds"], float) and saved["eval_seconds"] > 0
    # how it ran: a CPU run of the default precision (auto) evaluates in float32
    assert saved["device"] == "cpu" and saved["dtype"] == "float32"
    assert saved["config"]["eval"]["precision"] is None and saved["config"]["precision"] == "auto"


def test_load_evaluation_returns_only_current_results(run_result, trained_run, tmp_path):
    assert load_evaluation(trained_run) == json.loads(strict_json(run_result))
    assert load_evaluation(trained_run, FAST_EVAL) is not None
    assert load_evaluation(trained_run, EvalConfig(samples=33)) is None  # other settings
    assert load_evaluation(tmp_path) is None  # nothing saved
    stale = tmp_path / "stale"
    shutil.copytree(trained_run, stale)
    later = (stale / "eval.json").stat().st_mtime + 10
    os.utime(checkpoint_path(stale), (later, later))  # retrained after the evaluation
    assert load_evaluation(stale) is None


def test_tensorboard_gets_the_extrapolation_curve(run_result, trained_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(trained_run)).Reload()
    for tag, key in (("exact_match", "exact_match"), ("token_accuracy", "token_accuracy")):
        scalars = events.Scalars(f"by_length_set_smoothing_0/{tag}")
        assert [s.step for s in scalars] == [r["length"] for r in run_result["lengths"]]
        expected = [r[key] for r in run_result["lengths"]]
        assert [s.value for s in scalars] == pytest.approx(expected, abs=1e-6)


def test_reports_tables_and_plot(run_result, tmp_path):
    second = copy.deepcopy(run_result)
    second["run_dir"], second["seed"] = str(tmp_path / "copy_rope_seed1"), 1
    config = copy_config("model.position=learned", "model.options.learned.max_positions=12")
    learned = evaluate_model(build_model(config, torch.device("cpu")), config, FAST_EVAL)
    learned["run_dir"] = str(tmp_path / "copy_learned")
    results = [run_result, second, learned]
    paths = write_reports(results, tmp_path)
    figures = {"plot", "learning_speed", "order_sensitivity", "attention"}
    assert set(paths) == {"csv", "json", "markdown"} | figures
    assert all(paths[name].read_bytes()[:8] == PNG_MAGIC for name in figures)
    rows = paths["csv"].read_text().strip().splitlines()
    assert rows[0].split(",")[:6] == ["run", "position", "task", "seed", "length", "tokens"]
    assert len(rows) == 1 + sum(len(r["lengths"]) for r in results)
    assert len(json.loads(paths["json"].read_text())) == 3
    report = paths["markdown"].read_text()
    assert "## copy: exact-match at multiples of the longest training length" in report
    assert "## Findings against the literature" in report and "—" in report
    assert percent(run_result["summary"]["in_dist"]) in report
    figure = plot_accuracy_vs_length(results, None)  # untrained: none is learned
    (ax,) = figure.axes
    assert len(ax.containers) == 3  # a line per run that did not learn its task
    labels = [t.get_text() for t in figure.legends[0].get_texts()]  # one legend, below
    assert {"rope seed 1: not learned", "learned seed 0: not learned"} <= set(labels)
    learned = [r | {"summary": r["summary"] | {"in_dist": 1.0}} for r in results]
    figure = plot_accuracy_vs_length(learned, None)
    (ax,) = figure.axes
    assert len(ax.containers) == 2  # rope (mean of 2 seeds) and learned
    labels = [t.get_text() for t in figure.legends[0].get_texts()]
    assert "rope (mean of 2)" in labels and "learned" in labels
    assert percent(0.973) == "97.3%" and percent(None) == "—"


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err
    return err


def test_cli_rejects_bad_input_with_one_line(tmp_path, capsys, trained_run):
    assert eval_cli.main([str(tmp_path / "missing")]) == 2
    assert "does not exist" in one_error_line(capsys)
    (tmp_path / "empty").mkdir()
    assert eval_cli.main([str(tmp_path / "empty")]) == 2
    assert "no checkpoint.pt" in one_error_line(capsys)
    assert eval_cli.main([str(trained_run), "model.position=alibi"]) == 2
    assert "eval.* settings" in one_error_line(capsys)
    assert eval_cli.main([str(trained_run), "eval.samples=0"]) == 2
    assert "eval.samples" in one_error_line(capsys)
    state = torch.load(checkpoint_path(trained_run), weights_only=False)
    alien = tmp_path / "alien"
    alien.mkdir()
    torch.save({"model": {}, "config": {"model": {"heads": 3}}}, checkpoint_path(alien))
    assert eval_cli.main([str(alien)]) == 2
    assert "incompatible" in one_error_line(capsys)
    resized = tmp_path / "resized"
    resized.mkdir()
    state["config"]["model"]["d_model"] = 64
    torch.save(state, checkpoint_path(resized))
    assert eval_cli.main([str(resized)]) == 2
    assert "does not fit" in one_error_line(capsys)


def test_cli_evaluates_a_folder_of_runs(tmp_path, capsys, trained_run):
    for seed, name in enumerate(("a", "b")):  # two runs: one run copied twice is refused
        (tmp_path / "runs" / name).mkdir(parents=True)
        state = torch.load(checkpoint_path(trained_run), weights_only=True)
        state["config"]["seed"] = seed
        torch.save(state, checkpoint_path(tmp_path / "runs" / name))
    argv = [str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--no-progress"]
    assert (
        eval_cli.main([*argv, "eval.samples=16", "eval.probe_samples=16", "eval.lengths=[2,4]"])
        == 0
    )
    out = capsys.readouterr().out
    assert "| a " in out and "| b " in out and "1.25x" in out
    for name in ("a", "b"):
        assert sorted(p.name for p in (tmp_path / "runs" / name).iterdir()) == ["checkpoint.pt"]
        saved = json.loads((tmp_path / "out" / name / "eval.json").read_text())  # --out only
        assert list((tmp_path / "out" / name).glob("events.out.tfevents.*"))
        assert [r["length"] for r in saved["lengths"]] == [2, 4, 5, 6, 8, 12, 16]  # + multiples
        assert saved["grid_lengths"] == [2, 4] and saved["config"]["eval"]["samples"] == 16
    lines = (tmp_path / "out" / "results.csv").read_text().strip().splitlines()
    assert len(lines) == 1 + 2 * 7
    assert (tmp_path / "out" / "accuracy_vs_length.png").read_bytes()[:8] == PNG_MAGIC


def test_cli_checks_its_output_folder_before_evaluating(tmp_path, capsys, trained_run):
    """An --out that cannot be created once failed with a traceback after the whole evaluation."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert eval_cli.main([str(trained_run), "--out", str(blocker / "reports")]) == 2
    assert f"cannot write into {str(blocker / 'reports')!r}" in one_error_line(capsys)


def test_eval_py_keeps_an_extend_studys_figures_and_a_smoke_sweeps_note(
    tmp_path, capsys, trained_run
):
    """``eval.py STUDY_DIR`` once replaced an extend study's figures with eval.py's report set,
    and ``eval.py SMOKE_SWEEP_DIR`` rewrote its reports with significance tests and findings."""
    fast = ["--no-progress", "eval.samples=16", "eval.probe_samples=16", "eval.lengths=[2,4]"]
    study, smoke = tmp_path / "study", tmp_path / "smoke"
    for folder, command, flag in (
        (study, "python sweep.py --extend-study configs/lm_extend.yaml", {}),
        (smoke, "python sweep.py --config configs/quick.yaml", {"smoke": True}),
    ):
        (folder / "run").mkdir(parents=True)
        shutil.copy(checkpoint_path(trained_run), checkpoint_path(folder / "run"))
        (folder / "sweep.json").write_text(json.dumps({"command": command, **flag}))
    (study / "perplexity_vs_length.png").write_bytes(b"the study's figure")
    assert eval_cli.main([str(study), *fast]) == 2
    error = one_error_line(capsys)
    assert f"{str(study)!r} holds the results of `python sweep.py --extend-study`" in error
    assert "give --out DIR" in error
    assert (study / "perplexity_vs_length.png").read_bytes() == b"the study's figure"
    assert not (study / "run" / "eval.json").exists()  # refused before any evaluation
    assert eval_cli.main([str(study), "--out", str(tmp_path / "out"), *fast]) == 0
    assert eval_cli.main([str(smoke), *fast]) == 0
    report = (smoke / "report.md").read_text()
    assert "**Smoke test**" in report and "Findings against the literature" not in report
    capsys.readouterr()


def test_an_eval_json_that_breaks_the_schema_is_reevaluated(run_result, trained_run, tmp_path):
    """An eval.json without `summary` was once reported as it was, and every sweep re-run
    repeated the same traceback."""
    damaged = tmp_path / "damaged"
    shutil.copytree(trained_run, damaged)
    saved = json.loads((damaged / "eval.json").read_text())
    del saved["summary"]
    (damaged / "eval.json").write_text(json.dumps(saved))
    assert load_evaluation(damaged) is None
    (damaged / "eval.json").write_text("{not json")
    assert load_evaluation(damaged) is None


def test_eval_precision_bf16_records_its_dtype_and_moves_figures_only_within_tolerance(
    run_result, trained_run, tmp_path
):
    """Evaluation used to run in float32 on CPU whatever was asked; eval.precision=bf16 now runs
    the length grid in bfloat16, says so, and changes the figures only by rounding."""
    bf16 = evaluate_run(
        trained_run, replace(FAST_EVAL, precision="bf16"), "cpu", write_to=tmp_path / "bf16"
    )
    assert bf16["device"] == "cpu" and bf16["dtype"] == "bfloat16"
    assert bf16["config"]["eval"]["precision"] == "bf16"
    assert load_evaluation(trained_run, replace(FAST_EVAL, precision="bf16"), tmp_path / "bf16")
    assert load_evaluation(trained_run, FAST_EVAL, tmp_path / "bf16") is None  # other settings
    rows = zip(run_result["lengths"], bf16["lengths"], strict=True)
    for fp32_row, bf16_row in rows:
        assert fp32_row["length"] == bf16_row["length"]
        assert abs(fp32_row["token_accuracy"] - bf16_row["token_accuracy"]) <= 0.05
        assert abs(fp32_row["exact_match"] - bf16_row["exact_match"]) <= 0.1
        assert fp32_row["pair_accuracy"] == bf16_row["pair_accuracy"]  # pairs stay float32
    assert bf16["order"] == run_result["order"]  # the probe stays float32
    # and float32 asked explicitly is the default's result, number for number
    fp32 = evaluate_run(
        trained_run, replace(FAST_EVAL, precision="fp32"), "cpu", write_to=tmp_path / "fp32"
    )
    assert fp32["dtype"] == "float32" and fp32["lengths"] == run_result["lengths"]


def test_eval_precision_follows_the_run_unless_given(trained_run):
    """A run trained with precision=bf16 is evaluated in bf16 (its logits come out in
    bfloat16); eval.precision=fp32 overrides it (no bfloat16 anywhere)."""
    config = load_config(None, [*COPY, *TINY, "precision=bf16", "device=cpu"])
    model = build_model(config, torch.device("cpu"))
    seen = set()
    model.register_forward_hook(lambda module, args, output: seen.add(output.dtype))
    tiny = replace(FAST_EVAL, samples=4, probe_samples=4, lengths=[2, 4], max_length_factor=1.0)
    assert evaluate_model(model, config, tiny)["dtype"] == "bfloat16"
    assert torch.bfloat16 in seen
    seen.clear()
    assert evaluate_model(model, config, replace(tiny, precision="fp32"))["dtype"] == "float32"
    assert seen == {torch.float32}


def test_a_bad_eval_precision_is_one_line_naming_the_allowed_values():
    message = "eval.precision='fp16' is invalid; use one of auto, fp32, bf16, or null"
    with pytest.raises(ConfigError, match=re.escape(message)):
        apply_eval_overrides(EvalConfig(), ["eval.precision=fp16"])
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, ["eval.precision=fp16"])
    assert apply_eval_overrides(EvalConfig(), ["eval.precision=bf16"]).precision == "bf16"


def test_an_eval_json_of_the_previous_version_is_reevaluated_quietly(
    run_result, trained_run, tmp_path, capsys
):
    """eval.json files written before device and dtype were recorded (schema_version 2) are
    out of date, not damaged: they are evaluated again, without a warning and without a
    traceback; one whose dtype its device and precision cannot give is damaged."""
    old = tmp_path / "old"
    shutil.copytree(trained_run, old)
    saved = json.loads((old / "eval.json").read_text())
    del saved["device"], saved["dtype"], saved["config"]["eval"]["precision"]
    (old / "eval.json").write_text(json.dumps({**saved, "schema_version": 2}))
    capsys.readouterr()
    assert load_evaluation(old) is None and load_evaluation(old, FAST_EVAL) is None
    assert capsys.readouterr().err == ""
    assert (
        eval_cli.main([str(old), "--no-progress", "eval.samples=32", "eval.probe_samples=32"]) == 0
    )
    again = json.loads((old / "eval.json").read_text())
    assert again["schema_version"] == SCHEMA["properties"]["schema_version"]["const"]
    assert again["device"] == "cpu" and again["lengths"] == run_result["lengths"]
    lying = json.loads((old / "eval.json").read_text())
    (old / "eval.json").write_text(json.dumps({**lying, "dtype": "bfloat16"}))
    assert load_evaluation(old) is None
    assert "dtype 'bfloat16' is not what precision 'auto' gives on cpu" in capsys.readouterr().err


def test_eval_overrides_are_checked_against_the_run_not_the_default_task():
    """eval.py checks override keys and types up front, and lengths against each run's own
    task: a length the default task (svo, from 3) refuses is fine for a parity run."""
    assert apply_eval_overrides(EvalConfig(), ["eval.lengths=[2]"]).lengths == [2]
    with pytest.raises(ConfigError, match="unknown config key 'eval.foo'; allowed keys"):
        apply_eval_overrides(EvalConfig(), ["eval.foo=1"])


@pytest.mark.parametrize(
    ("device", "dtype"), [("cuda:0", "bfloat16"), ("cuda", "bfloat16"), ("mps", "float32")]
)
def test_an_eval_json_of_another_device_is_not_current_there(
    device, dtype, run_result, trained_run, tmp_path, capsys
):
    """An eval.json made on a GPU (bf16 under the default precision auto) was reused by a sweep
    rerun on a CPU, which would evaluate in float32: the device type and dtype must match."""
    cpu = torch.device("cpu")
    assert load_evaluation(trained_run, FAST_EVAL, device=cpu) is not None  # made on this CPU
    assert load_evaluation(trained_run, FAST_EVAL, device=torch.device("cuda")) is None
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(trained_run, elsewhere)
    saved = json.loads((elsewhere / "eval.json").read_text())
    (elsewhere / "eval.json").write_text(json.dumps({**saved, "device": device, "dtype": dtype}))
    capsys.readouterr()
    assert load_evaluation(elsewhere, FAST_EVAL) is not None  # consistent, where it was made
    assert load_evaluation(elsewhere, FAST_EVAL, device=torch.device(device)) is not None
    assert capsys.readouterr().err == ""
    assert load_evaluation(elsewhere, FAST_EVAL, device=cpu) is None
    err = capsys.readouterr().err.strip()
    assert err == (
        f"warning: {elsewhere / 'eval.json'}: evaluated on {device} in {dtype}, and this "
        "evaluation runs on cpu in float32; evaluating it again"
    )
