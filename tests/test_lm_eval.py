"""Language-model evaluation: perplexity by length on the same held-out tokens, per-position
loss, sliding windows, bootstrap intervals, unsupported lengths, the eval.json record and its
checks, and a repeated pattern learned to near-zero loss."""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import torch
from test_text import PATTERN, pattern_file, tiny_lm

import lab.evaluation.evaluate
import lab.lm.perplexity
from lab.common.config import ConfigError, load_config
from lab.evaluation.evaluate import (
    evaluate_model,
    evaluate_run,
    evaluation_lengths,
    load_evaluation,
)
from lab.evaluation.runs import lm_summary_line
from lab.lm.aggregate import cell, window_p_values
from lab.lm.perplexity import bootstrap_interval, evaluate_lm, lm_plan
from lab.lm.record import LM_SCHEMA, lm_inconsistency
from lab.lm.report import ppl_cell
from lab.lm.windows import MAX_WINDOW_TOKENS, evaluation_windows, window_count, window_starts
from lab.training.trainer import build_model, train


def lm_config(tmp_path: Path, *overrides: str):
    """A tiny LM config on a file of the pattern with a random tail (so losses differ)."""
    path = tmp_path / "mixed.txt"
    rng = np.random.default_rng(0)
    path.write_bytes(PATTERN * 600 + bytes(rng.integers(97, 123, size=10_000).tolist()))
    return load_config(None, tiny_lm(tmp_path / "run", path, *overrides))


def test_per_position_loss_is_the_mean_of_independently_computed_token_losses(
    tmp_path: Path,
) -> None:
    config = lm_config(tmp_path, "eval.max_length_factor=2", "eval.lm_tokens=640")
    model = build_model(config, torch.device("cpu")).eval()
    record = evaluate_lm(model, config)
    longest = 64
    assert record["positions"]["length"] == longest
    heldout = config.data.build_task().corpus.heldout
    by_position = np.zeros(longest)
    total, count = 0.0, 0
    for start in range(0, 640, longest):  # 10 windows, one at a time, log-softmax by hand
        window = torch.tensor(heldout[start : start + longest + 1].astype(np.int64))[None]
        with torch.no_grad():
            logits = model(window[:, :-1])[0]  # (64, V)
        losses = -torch.log_softmax(logits.double(), dim=-1)[torch.arange(longest), window[0, 1:]]
        by_position += losses.numpy() / 10
        total, count = total + float(losses.sum()), count + longest
    np.testing.assert_allclose(record["positions"]["loss"], by_position, rtol=1e-5)
    row = record["lengths"][-1]
    assert row["tokens_scored"] == count == 640 and row["windows"] == 10
    assert math.isclose(row["loss"], total / count, rel_tol=1e-5)
    assert math.isclose(row["perplexity"], math.exp(total / count), rel_tol=1e-5)
    assert math.isclose(row["perplexity"], math.exp(row["loss"]), rel_tol=1e-12)
    assert math.isclose(np.mean(row["window_losses"]), row["loss"], rel_tol=1e-9)


@pytest.mark.parametrize(("length", "stride"), [(32, 8), (64, 24), (128, 32), (32, 32)])
def test_sliding_windows_score_each_target_once_as_non_overlapping_ones_do(
    length: int, stride: int
) -> None:
    n_tokens = 512
    for step in (None, stride):
        starts, first = window_starts(n_tokens, length, step)
        targets = [s + j + 1 for s, f in zip(starts, first, strict=True) for j in range(f, length)]
        assert sorted(targets) == list(range(1, n_tokens + 1)), (length, step)
    starts, first = window_starts(n_tokens, length, stride)
    assert first[0] == 0 and (first[1:-1] == length - stride).all()
    assert starts[-1] == n_tokens - length


def test_stride_equal_to_the_length_is_the_non_overlapping_evaluation(tmp_path: Path) -> None:
    config = lm_config(tmp_path)
    model = build_model(config, torch.device("cpu")).eval()
    plain = evaluate_lm(model, config)
    same = evaluate_lm(model, config, replace(config.eval, stride=32))
    assert plain["lengths"][0]["window_losses"] == same["lengths"][0]["window_losses"]
    sliding = evaluate_lm(model, config, replace(config.eval, stride=16))
    assert sliding["stride"] == 16 and lm_inconsistency(with_device(sliding)) is None
    for a, b in zip(plain["lengths"], sliding["lengths"], strict=True):
        assert a["tokens_scored"] == b["tokens_scored"] == 1024
        assert b["windows"] == (1024 - a["length"]) // 16 + 1


def test_every_scheme_and_seed_reads_the_same_windows(tmp_path: Path) -> None:
    seen = {}
    for scheme, seed in (("rope", 0), ("alibi", 1), ("none", 2)):
        config = lm_config(tmp_path, f"model.position={scheme}", f"seed={seed}")
        model = build_model(config, torch.device("cpu")).eval()
        inputs = []
        model.register_forward_hook(lambda module, args, out, seen=inputs: seen.append(args[0]))
        record = evaluate_lm(model, config)
        seen[scheme] = (inputs, [r["tokens_scored"] for r in record["lengths"]])
    (a, scored_a), *others = seen.values()
    for b, scored_b in others:
        assert scored_a == scored_b == [1024, 1024, 1024]
        assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    corpus = config.data.build_task().corpus
    windows = evaluation_windows(corpus, 1024, 64, None)
    assert torch.equal(windows.tokens[:, :-1], a[1][: windows.tokens.shape[0]])


def test_the_bootstrap_interval_is_seeded_and_around_the_perplexity() -> None:
    losses = np.random.default_rng(1).gamma(2.0, 0.5, size=200)
    tokens = np.full(200, 64.0)
    low, high = bootstrap_interval(losses, tokens)
    assert (low, high) == bootstrap_interval(losses, tokens)
    assert low < math.exp(losses.mean()) < high
    narrow = bootstrap_interval(np.repeat(losses, 4), np.full(800, 64.0))
    assert narrow[1] - narrow[0] < 0.7 * (high - low)  # 4x the windows: about half as wide
    assert bootstrap_interval(np.array([0.5]), np.array([8.0])) == pytest.approx(
        (math.exp(0.5), math.exp(0.5))
    )


def test_a_length_past_the_learned_table_is_reported_not_crashed(tmp_path: Path) -> None:
    config = lm_config(tmp_path, "model.position=learned", "model.options.learned.max_positions=64")
    record = with_device(evaluate_model(build_model(config, torch.device("cpu")), config))
    rows = {row["label"]: row for row in record["lengths"]}
    assert rows["1x"]["supported"] and rows["2x"]["supported"] and not rows["4x"]["supported"]
    assert "max_positions=64" in rows["4x"]["reason"] and rows["4x"]["perplexity"] is None
    assert record["summary"]["perplexity"]["4x"] is None
    assert any("4x" in note for note in record["summary"]["notes"])
    assert record["positions"]["length"] == 64
    jsonschema.validate(record, LM_SCHEMA)
    assert lm_inconsistency(record) is None
    assert "4x -" in lm_summary_line(record | {"run_dir": "runs/x"})


def with_device(record: dict) -> dict:
    return record | {"device": record["device"] or "cpu"}


def test_the_record_is_checked_when_read_back(tmp_path: Path) -> None:
    config = lm_config(tmp_path)
    record = with_device(evaluate_model(build_model(config, torch.device("cpu")), config))
    jsonschema.validate(record, LM_SCHEMA)
    assert record["kind"] == "lm" and record["corpus"]["heldout_tokens"] > 1024
    assert lm_inconsistency(record) is None
    edits = {
        "perplexity": lambda r: r["lengths"][0].update(
            perplexity=r["lengths"][0]["perplexity"] * 2
        ),
        "window": lambda r: r["lengths"][1]["window_losses"].pop(),
        "position": lambda r: r.update(position="alibi"),
        "summary": lambda r: r["summary"]["perplexity"].update({"2x": 1.5}),
        "tokens": lambda r: r["lengths"][2].update(tokens_scored=512),
        "positions": lambda r: r["positions"]["loss"].pop(),
    }
    for name, edit in edits.items():
        broken = copy.deepcopy(record)
        edit(broken)
        assert lm_inconsistency(broken) is not None, name


def test_evaluation_settings_a_language_model_refuses_are_one_line(tmp_path: Path) -> None:
    config = lm_config(tmp_path)
    task = config.data.build_task()
    cases = {
        "eval.lengths=[32]": replace(config.eval, lengths=[32]),
        "eval.stride=33 is longer": replace(config.eval, stride=33),
        "eval.lm_tokens=100 is shorter": replace(config.eval, lm_tokens=100),
        "eval.lm_tokens=999999 is more": replace(config.eval, lm_tokens=999_999),
    }
    for named, settings in cases.items():
        with pytest.raises(ConfigError, match=named.replace("[", r"\[").replace("]", r"\]")):
            evaluation_lengths(config, settings, task)
    assert evaluation_lengths(config, config.eval, task) == ([32, 64, 128], [32, 64, 128])


def test_training_refused_at_start_up_leaves_no_folder(tmp_path: Path) -> None:
    """A run refused under its folder's lock (its evaluation needs more held-out tokens than
    the corpus has) leaves no folder holding only ``.lock``: it wrote nothing."""
    config = lm_config(tmp_path, "eval.lm_tokens=999999")
    with pytest.raises(ConfigError, match="eval.lm_tokens=999999 is more"):
        train(config)
    assert not Path(config.run_dir).exists()


def test_a_repeated_pattern_is_learned_to_near_zero_loss_and_its_record_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 steps of a 2-layer, 32-wide RoPE model on a period-17 pattern: the held-out loss at
    1x falls below 0.03 nats per byte (perplexity < 1.031; an untrained model is near
    ln 259 = 5.6) at every position (each byte of the pattern determines the next); eval.json
    round-trips through load_evaluation."""
    path = pattern_file(tmp_path)
    overrides = [
        "train.steps=300",
        "train.warmup_steps=20",
        "train.lr=3e-3",
        "train.eval_every=300",
    ]
    config = load_config(
        None, tiny_lm(tmp_path / "run", path, *overrides, "train.checkpoint_every=300")
    )
    train(config)
    monkeypatch.setattr(lab.evaluation.evaluate, "write_tensorboard", lambda *args: None)
    record = evaluate_run(config.run_dir, device="cpu")
    one = record["lengths"][0]
    assert one["loss"] < 0.03 and one["perplexity"] < 1.031, one["loss"]  # measured 0.0097
    assert max(record["positions"]["loss"]) < 0.03  # every position, the first one included
    assert record["checkpoint"]["step"] == 300 and record["train_steps"] == 300
    assert load_evaluation(config.run_dir, config.eval, device=torch.device("cpu")) == record
    line = lm_summary_line(record)
    assert (
        line.startswith("run: rope") and " on text, held-out perplexity over 1,024 tokens: " in line
    )
    assert f"1x {one['perplexity']:.2f} [" in line


def test_a_stride_that_would_evaluate_too_many_tokens_is_one_line_naming_the_count() -> None:
    config = load_config(None, ["data.task=text", "eval.stride=1", "eval.max_length_factor=16"])
    with pytest.raises(ConfigError) as error:
        lm_plan(config, config.eval, config.data.build_task())
    assert str(error.value) == (
        "eval.stride=1 is too small: at 8x (length 512) it makes 65,025 windows, 33,292,800 "
        f"input tokens to evaluate; the maximum is {MAX_WINDOW_TOKENS:,} per length: give "
        "eval.stride >= 4, a lower eval.lm_tokens or eval.max_length_factor"
    )  # 4, not 2: the stride must fit at 16x too (2 gave 'at 16x ... >= 4' next)
    suggested = replace(config.eval, stride=4)
    assert lm_plan(config, suggested, config.data.build_task())[1] == 65536
    with pytest.raises(ConfigError, match="at 16x .* give eval.stride >= 4"):
        lm_plan(config, replace(config.eval, stride=3), config.data.build_task())
    fits = replace(config.eval, stride=16)  # 16 tokens a window at 16x: within the bound
    assert lm_plan(config, fits, config.data.build_task())[1] == 65536
    for n, length, stride in [(1024, 32, 1), (1024, 32, 7), (640, 64, 24), (1024, 128, None)]:
        assert window_count(n, length, stride) == len(window_starts(n, length, stride)[0])


def test_the_bootstrap_in_chunks_is_the_one_shot_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    losses = np.random.default_rng(2).gamma(2.0, 0.5, size=300)
    tokens = np.random.default_rng(3).integers(1, 64, size=300).astype(float)
    whole = bootstrap_interval(losses, tokens)  # 1000 x 300 draws in one chunk
    monkeypatch.setattr(lab.lm.perplexity, "BOOTSTRAP_BUDGET", 300 * 7)  # 7 resamples a chunk
    assert bootstrap_interval(losses, tokens) == whole


def test_too_few_windows_give_no_interval_and_no_window_test(tmp_path: Path) -> None:
    config = lm_config(tmp_path, "eval.lm_tokens=128")  # 4, 2 and 1 window at 1x, 2x, 4x
    record = with_device(evaluate_model(build_model(config, torch.device("cpu")), config))
    rows = {row["label"]: row for row in record["lengths"]}
    assert [row["windows"] for row in rows.values()] == [4, 2, 1]
    assert all(row["perplexity_low"] is row["perplexity_high"] is None for row in rows.values())
    assert all(row["perplexity"] > 1 for row in rows.values())
    jsonschema.validate(record, LM_SCHEMA)
    assert lm_inconsistency(record) is None
    assert (
        "4x: 1 window(s) scored: too few for a 95% interval (needs 5), so none is given and no "
        "per-window test is made; raise eval.lm_tokens or give eval.stride"
    ) in record["summary"]["notes"]
    line = lm_summary_line(record | {"run_dir": "runs/x"})
    assert "4x " in line and "[n/a: 1 window(s)]" in line
    other = copy.deepcopy(record) | {"position": "alibi"}
    assert window_p_values([record], [other], "4x") == ()  # no per-checkpoint test on 1 window
    assert ppl_cell(cell([record], "4x")).endswith("[n/a: too few windows]")
    half = copy.deepcopy(record)
    half["lengths"][0]["perplexity_low"] = 1.0  # one end alone is inconsistent
    assert lm_inconsistency(half) == "length 32: one end of its interval is missing"
    enough = with_device(evaluate_model(build_model(config, torch.device("cpu")), lm_config(
        tmp_path, "eval.lm_tokens=640", "eval.max_length_factor=2")))  # fmt: skip
    assert all(row["perplexity_low"] is not None for row in enough["lengths"])  # 20, 10 windows
