"""Diagnostics of why a run fails past its training length (lab/diagnostics): attention
statistics, solver alignment, failure modes and oracle length, the generated summary line, and
that measuring them changes no evaluation figure."""

from __future__ import annotations

import copy
import json
import math
import re

import jsonschema
import numpy as np
import pytest
import torch
from conftest import FAST_EVAL, one_error_line
from test_text import pattern_file, tiny_lm
from torch import nn

import eval as eval_cli
from data import build_task
from data.base import EOS, source_mask
from data.streams import evaluation_set
from lab.common.config import ConfigError, EvalConfig, load_config
from lab.diagnostics.attention_stats import alignment, entropy, row_statistics
from lab.diagnostics.failures import FailureCounts, oracle_length_hits
from lab.diagnostics.measure import attention_diagnostics
from lab.diagnostics.rope_use import pair_shares
from lab.diagnostics.summary import aligned_head, run_line
from lab.evaluation.attention_maps import captured_attention, layer_weights
from lab.evaluation.evaluate import apply_eval_overrides, evaluate_model, evaluate_run
from lab.evaluation.extrapolation import evaluate_batch
from lab.evaluation.record import SCHEMA, inconsistency
from lab.reporting.report import write_reports
from lab.training.trainer import train
from model import ModelConfig


@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_entropy_of_a_uniform_row_is_log_n_and_its_normalised_entropy_is_one(n):
    t = 64
    weights = torch.zeros(1, 1, 1, t)
    weights[..., :n] = 1 / n
    visible = torch.zeros(1, 1, 1, t, dtype=torch.bool)
    visible[..., :n] = True
    assert entropy(weights).item() == pytest.approx(math.log(n), abs=1e-6)
    sums = row_statistics(weights, visible, torch.tensor([n - 1]), torch.ones(1, 1))
    assert sums["entropy"].item() == pytest.approx(math.log(n), abs=1e-6)
    assert sums["entropy_norm"].item() == pytest.approx(1.0 if n > 1 else 0.0, abs=1e-6)
    assert sums["sink_mass"].item() == pytest.approx(1 / n, abs=1e-7)
    # mean distance of a uniform row over keys 0..n-1 from query n-1: (n - 1) / 2
    assert sums["distance"].item() == pytest.approx((n - 1) / 2, abs=1e-5)


def test_sink_and_distance_of_one_hot_rows_and_pads_weigh_nothing():
    weights = torch.zeros(1, 2, 2, 8)  # head 0 attends to <bos>, head 1 to the query itself
    weights[0, 0, :, 0] = 1.0
    weights[0, 1, 0, 5] = weights[0, 1, 1, 6] = 1.0
    visible = torch.ones(1, 1, 2, 8, dtype=torch.bool)
    sums = row_statistics(weights, visible, torch.tensor([5, 6]), torch.tensor([[1.0, 0.0]]))
    assert sums["sink_mass"].tolist() == [1.0, 0.0]
    assert sums["distance"].tolist() == [5.0, 0.0]  # the padded second query adds nothing
    assert sums["entropy"].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("task_name", ["copy", "reverse", "svo", "count", "selective_copy"])
def test_attention_exactly_on_the_solvers_positions_scores_alignment_one(task_name):
    task = build_task(task_name)
    batch = evaluation_set(task, 0, task.train_lengths[1], 16)
    sources = source_mask(task, batch).float()  # (B, A, S - 1)
    counted = sources.sum(-1) > 0
    oracle = sources / sources.sum(-1, keepdim=True).clamp(min=1)  # uniform over its positions
    weights = oracle[:, None].expand(-1, 3, -1, -1)  # (B, H=3, A, S - 1)
    found = alignment(weights, sources.bool())
    tokens = counted.sum().item()
    assert found["aligned_tokens"].item() == tokens > 0
    assert found["alignment_mass"].div(tokens).tolist() == pytest.approx([1.0] * 3)
    assert found["alignment_hit"].div(tokens).tolist() == pytest.approx([1.0] * 3)
    uniform = torch.full_like(weights, 1 / weights.shape[-1])
    share = (sources.sum(-1)[counted] / weights.shape[-1]).mean().item()
    assert alignment(uniform, sources.bool())["alignment_mass"][0].item() / tokens == (
        pytest.approx(share, abs=1e-6)
    )


class Scripted(nn.Module):
    """Logits chosen per answer position: the right token scores 1; ``<eos>`` scores 2 at the
    answer positions ``early`` (so it wins there), and at the final ``<eos>`` a symbol scores
    2 when ``late``."""

    def __init__(self, task, batch, early=(), late=False) -> None:
        super().__init__()
        self.config = ModelConfig(vocab_size=task.vocab_size, position="none")
        self.position = type("Unlimited", (), {"max_length": staticmethod(lambda: None)})()
        self.anchor = nn.Parameter(torch.zeros(()))
        self.task, self.batch, self.early, self.late = task, batch, set(early), late

    def forward(self, idx, prefix_len=None):
        b, t = idx.shape
        logits = torch.zeros(b, t, self.task.vocab_size)
        eos, symbol = self.task.token_id(EOS), self.task.vocab_size - 1
        for a, position in enumerate(range(self.batch.answer_start - 1, t)):
            target = self.batch.tokens[:b, position + 1]
            logits[torch.arange(b), position, target] = 1.0
            if a in self.early:
                logits[:, position, eos] = 2.0
            if self.late and a == t - self.batch.answer_start:  # the <eos> position
                logits[:, position, symbol] = 2.0
        return logits + self.anchor


def scripted_counts(task, batch, **kind) -> tuple[FailureCounts, object]:
    counts = FailureCounts(task.token_id(EOS))
    result = evaluate_batch(Scripted(task, batch, **kind), batch, failures=counts)
    return counts, result


def test_a_model_that_stops_early_is_a_length_decision_failure_and_oracle_length_fixes_it():
    task = build_task("copy")
    batch = evaluation_set(task, 0, 8, 32)
    counts, result = scripted_counts(task, batch, early=(3, 5))
    figures = counts.to_dict(train_answer_tokens=10)
    assert result.exact_match == 0.0
    assert figures["early_eos"] == 1.0 and figures["content"] == figures["late_eos"] == 0.0
    assert figures["first_error_median"] == 4  # answer token 4 (1-based): index 3
    assert figures["first_error_past_train"] == 0.0
    assert figures["oracle_exact_match"] == 1.0  # its only errors were early <eos>: 100%


def test_a_model_that_runs_on_is_late_and_a_wrong_token_is_content():
    task = build_task("copy")
    batch = evaluation_set(task, 0, 6, 16)
    late, _ = scripted_counts(task, batch, late=True)
    assert late.to_dict(None)["late_eos"] == 1.0
    assert late.to_dict(None)["first_error_median"] == 7  # the <eos> after 6 answer tokens
    assert late.to_dict(None)["oracle_exact_match"] == 1.0  # the oracle ends the answer there
    right, result = scripted_counts(task, batch)
    assert result.exact_match == 1.0 and right.to_dict(None)["right"] == 1.0
    assert right.to_dict(None)["first_error_median"] is None
    logits = torch.zeros(1, 3, 5)
    logits[0, torch.arange(3), torch.tensor([3, 4, 2])] = 1.0  # answer 3 3 <eos>, token 2 wrong
    counts = FailureCounts(eos_id=2)
    counts.add(logits, torch.tensor([[3, 3, 2]]), torch.ones(1, 3, dtype=torch.bool))
    assert counts.counts == {"right": 0, "early_eos": 0, "late_eos": 0, "content": 1}
    hits = oracle_length_hits(logits, torch.tensor([[3, 3, 2]]), torch.ones(1, 3, dtype=bool), 2)
    assert hits.tolist() == [False]


@pytest.mark.parametrize(
    ("position", "overrides"),
    [
        ("none", {}),
        ("rope", {}),
        ("alibi", {}),
        ("cope", {}),
        ("stickbreaking", {}),
        ("rope", {"layout": "rope@3,none"}),
        ("rope", {"softmax_scale": "ssmax"}),
        ("alibi", {"causal": False}),
    ],
)
def test_recomputed_weights_give_each_attention_layers_output(position, overrides, make_model):
    """``out(weights @ v)`` from the recomputed weights equals what each attention layer
    returned in the real forward pass, so the statistics describe the attention that ran; the
    rows asked for are those rows, and hidden keys get no weight."""
    model = make_model(position, strong=True, **overrides)
    idx = torch.randint(3, 16, (2, 12), generator=torch.Generator().manual_seed(0))
    prefix = 5 if not overrides.get("causal", True) else None
    made, returned = [], []

    def on_layer(index, module, x, context):
        b, t, d = x.shape
        v = module.qkv(x).view(b, t, 3, module.n_heads, d // module.n_heads)[:, :, 2]
        weights, visible = layer_weights(module, x, context)  # (B, H, T, T)
        assert not weights[~visible.expand_as(weights)].any()
        rows, _ = layer_weights(module, x, context, slice(7, 12))
        assert torch.allclose(rows, weights[:, :, 7:12], atol=1e-6)
        made.append(module.out((weights @ v.transpose(1, 2)).transpose(1, 2).reshape(b, t, d)))

    hooks = [b.attn.register_forward_hook(lambda m, i, o: returned.append(o)) for b in model.blocks]
    with torch.no_grad(), captured_attention(model, on_layer):
        model(idx, prefix_len=prefix)
    for hook in hooks:
        hook.remove()
    for mine, theirs in zip(made, returned, strict=True):
        assert torch.allclose(mine, theirs, atol=1e-5)


def test_attention_diagnostics_of_a_model_are_bounded_and_chunking_changes_nothing(
    make_model, monkeypatch
):
    model = make_model("rope", strong=True, vocab_size=19)
    task = build_task("copy")
    batch = evaluation_set(task, 0, 6, 12)
    whole = attention_diagnostics(model, task, batch)
    monkeypatch.setattr("lab.diagnostics.measure.WEIGHT_BUDGET", 1)  # one row per chunk
    chunked = attention_diagnostics(model, task, batch)
    for name, value in whole.items():
        assert np.allclose(chunked[name], value, atol=1e-5), name
    assert whole["samples"] == 12 and whole["answer_tokens"] == 12 * 7
    assert whole["aligned_tokens"] == 12 * 6  # every answer token but <eos> copies one item
    for name in ("entropy_norm", "sink_mass", "alignment_mass", "alignment_hit"):
        values = np.array(whole[name])
        assert values.shape == (2, 4) and (values >= 0).all() and (values <= 1 + 1e-6).all()
    assert max(max(layer) for layer in whole["entropy"]) <= math.log(batch.inputs.shape[1])


@pytest.fixture(scope="module")
def diagnosed_run(finished_run, tmp_path_factory):
    """The finished tiny run evaluated with diagnostics, and without."""
    out = tmp_path_factory.mktemp("diagnosed")
    on = evaluate_run(finished_run, FAST_EVAL, device="cpu", write_to=out / "on", root=out)
    off_settings = EvalConfig(**{**FAST_EVAL.__dict__, "diagnostics": "none"})
    off = evaluate_run(finished_run, off_settings, device="cpu", write_to=out / "off", root=out)
    return on, off, out


def test_diagnostics_change_no_figure_and_fill_every_length(diagnosed_run):
    on, off, out = diagnosed_run
    jsonschema.validate(on, SCHEMA)
    jsonschema.validate(off, SCHEMA)
    keep = ("exact_match", "token_accuracy", "correct", "pair_accuracy")
    assert [{k: r[k] for k in keep} for r in on["lengths"]] == [
        {k: r[k] for k in keep} for r in off["lengths"]
    ]
    assert on["summary"] == off["summary"] and on["order"] == off["order"]
    assert "diagnostics" not in off and all(r["attention"] is None for r in off["lengths"])
    for row in on["lengths"]:
        failures = row["failures"]
        assert sum(failures[k] for k in ("right", "early_eos", "late_eos", "content")) == (
            pytest.approx(1.0)
        )
        assert failures["right"] == row["exact_match"]
        assert failures["oracle_exact_match"] >= row["exact_match"]
        assert row["attention"]["samples"] == min(FAST_EVAL.samples, 32)
    assert on["diagnostics"]["where_it_fails"] == run_line(on)
    assert on["diagnostics"]["aligned_head"] == aligned_head(on)
    saved = json.loads((out / "on" / "eval.json").read_text())
    assert saved["diagnostics"] == on["diagnostics"]


def test_the_sweep_report_has_the_failure_table_the_line_and_the_figure(diagnosed_run, tmp_path):
    on, _, _ = diagnosed_run
    paths = write_reports([on], tmp_path)
    report = paths["markdown"].read_text()
    assert "## Where it fails" in report and "## copy: failure modes by length" in report
    assert f"- copy, {on['position']} (1 run): {run_line(on)}" in report
    assert paths["attention"].stat().st_size > 10_000
    share = on["diagnostics"]["seconds"] / on["eval_seconds"]
    assert f"The attention passes took a median {share:.1%} of a run's evaluation time" in report
    header = paths["csv"].read_text().splitlines()[0].split(",")
    assert header[-11:] == ["early_eos", "late_eos", "content_errors", "oracle_exact_match"] + [
        "first_error_median",
        "entropy",
        "entropy_norm",
        "sink_mass",
        "attended_distance",
        "alignment_mass",
        "alignment_hit",
    ]


def line_record(exact: list[float], masses: list[float], early: float) -> dict:
    """A record trained to length 10, evaluated at 10, 11, 13, 20 (only what a line reads)."""
    rows = []
    for length, em, mass in zip((10, 11, 13, 20), exact, masses, strict=True):
        wrong = 1 - em
        failures = {"right": em, "early_eos": wrong * early, "late_eos": 0.0}
        failures |= {"content": wrong * (1 - early), "oracle_exact_match": em + wrong * early}
        failures |= {"first_error_median": 11 if wrong else None}
        attention = {"entropy": [[1.0, 2.0]], "alignment_mass": [[mass, 0.1]]}
        rows.append({"length": length, "supported": True, "exact_match": em})
        rows[-1] |= {"failures": failures, "attention": attention}
    config = {"eval": {"max_length_factor": 4.0}}
    return {"train_lengths": [2, 10], "lengths": rows, "summary": {"in_dist": exact[0]}} | {
        "config": config
    }


def test_where_it_fails_line_is_made_from_the_numbers():
    record = line_record([1.0, 0.97, 0.5, 0.0], [0.93, 0.8, 0.31, 0.1], early=0.25)
    assert run_line(record) == (
        "fails at 1.25x (length 13): exact-match 50.0%; at 1.25x, 75% of errors are content "
        "errors (early `<eos>` 25%, late `<eos>` 0%), the first from answer token 11; "
        "oracle length gives 62.5%; aligned-head mass on the solver's positions 0.93 (1x) -> "
        "0.31 (1.25x); entropy +0.00 nats from 1x"
    )
    holding = line_record([1.0, 1.0, 0.99, 0.96], [0.9] * 4, early=0.0)
    assert run_line(holding) == "holds to 2x: exact-match 96.0% at length 20"
    unlearned = line_record([0.4, 0.1, 0.0, 0.0], [0.2] * 4, early=1.0)
    assert run_line(unlearned).startswith("not learned in distribution (exact-match 40.0%); at 1x,")
    assert "100% of errors are early `<eos>`" in run_line(unlearned)
    cut = line_record([1.0, 1.0, 0.99, 0.96], [0.9] * 4, early=0.0)
    cut["lengths"][2] |= {"supported": False, "exact_match": None}
    cut["lengths"] = cut["lengths"][:3]
    assert run_line(cut) == (
        "holds to 1.1x: exact-match 100.0% at length 11; the scheme cannot encode length 13 "
        "(1.25x) and beyond"
    )
    cut["summary"]["in_dist"] = None
    assert run_line(cut).startswith("in-distribution exact-match not evaluated; the scheme")


def test_a_hostile_diagnostics_edit_is_treated_as_missing(diagnosed_run, tmp_path):
    """eval.json diagnostics that contradict themselves are inconsistent, so the run is
    evaluated again instead of breaking every report."""
    on, _, _ = diagnosed_run
    assert inconsistency(on) is None
    edits = {
        "failure shares do not sum to 1": lambda r: r["lengths"][1]["failures"].update(content=9),
        "failures.right is not": lambda r: r["lengths"][1]["failures"].update(
            right=r["lengths"][1]["failures"]["right"] + 0.5,
            content=r["lengths"][1]["failures"]["content"] - 0.5,  # the shares still sum to 1
        ),
        "not one shape": lambda r: r["lengths"][1]["attention"].update(entropy=[[]]),
        "one of alignment_mass": lambda r: r["lengths"][1]["attention"].update(alignment_hit=None),
        "aligned_head [7, 9]": lambda r: r["diagnostics"].update(aligned_head=[7, 9]),
    }
    for message, edit in edits.items():
        hostile = copy.deepcopy(on)
        edit(hostile)
        assert message in (inconsistency(hostile) or ""), message


def test_a_bad_diagnostics_value_is_one_line_naming_the_allowed_ones():
    with pytest.raises(Exception, match=r"^eval.diagnostics='all' is invalid; use one of none, "):
        EvalConfig(diagnostics="all")
    with pytest.raises(Exception, match=r"^eval.diagnostic_samples=0 is invalid"):
        EvalConfig(diagnostic_samples=0)
    for value in ("none", "basic", "full"):  # eval.py's overrides read values as YAML
        assert (
            apply_eval_overrides(EvalConfig(), [f"eval.diagnostics={value}"]).diagnostics == value
        )


def test_diagnostics_of_a_language_model_run_are_refused_not_ignored(tmp_path):
    """A language-model run measures no diagnostics (lab.lm.perplexity): ``full`` and a given
    ``diagnostic_samples`` would do nothing, so each is one ConfigError line; the defaults
    (given or not: a run's saved config.yaml writes them out) and ``none`` pass."""
    lm = tiny_lm(tmp_path / "run", pattern_file(tmp_path))
    refused = {
        "eval.diagnostics=full": "eval.diagnostics=full has no effect on task 'text': a "
        "language-model run measures no diagnostics",
        "eval.diagnostic_samples=8": "eval.diagnostic_samples=8 has no effect on task 'text' "
        "(a language-model run): no attention statistics are measured; leave "
        "eval.diagnostic_samples out",
    }
    for override, message in refused.items():
        with pytest.raises(ConfigError, match="^" + re.escape(message)) as error:
            load_config(None, [*lm, override])
        assert "\n" not in str(error.value)
    assert load_config(None, lm).eval.diagnostics == "basic"  # the default: no diagnostics
    given = ["eval.diagnostics=basic", "eval.diagnostic_samples=32"]  # as config.yaml has them
    assert load_config(None, [*lm, *given]).eval.diagnostic_samples == 32
    assert load_config(None, [*lm, "eval.diagnostics=none"]).eval.diagnostics == "none"


def test_diagnostic_samples_that_would_do_nothing_are_refused(tmp_path):
    """``eval.diagnostic_samples`` given with diagnostics off, or above ``eval.samples`` (the
    statistics read the first diagnostic_samples of the samples), is one ConfigError line,
    from overrides and from a YAML file alike; the default 32 over 16 samples reads 16."""
    copy_task = ["data.task=copy", "data.train_max_length=4"]
    off = "eval.diagnostic_samples=8 has no effect with eval.diagnostics=none: no attention "
    with pytest.raises(ConfigError, match="^" + re.escape(off) + ".*or full$"):
        load_config(None, [*copy_task, "eval.diagnostics=none", "eval.diagnostic_samples=8"])
    over = "eval.diagnostic_samples=24 is more than eval.samples=16: the attention statistics "
    with pytest.raises(ConfigError, match="^" + re.escape(over) + ".*<= 16$"):
        load_config(None, [*copy_task, "eval.samples=16", "eval.diagnostic_samples=24"])
    path = tmp_path / "off.yaml"
    path.write_text("eval: {diagnostics: none, diagnostic_samples: 8}\n")
    with pytest.raises(ConfigError, match="^" + re.escape(off)):
        load_config(path, copy_task)
    assert load_config(None, [*copy_task, "eval.samples=16"]).eval.diagnostic_samples == 32
    kept = load_config(None, [*copy_task, "eval.samples=16", "eval.diagnostic_samples=16"])
    assert kept.eval.diagnostic_samples == 16


def test_eval_py_refuses_diagnostics_a_saved_run_would_ignore(finished_run, tmp_path, capsys):
    """eval.py checks its overrides against each run before any evaluation: diagnostic_samples
    with diagnostics off on a synthetic run, ``full`` on a language-model run."""
    argv = [str(finished_run), "--no-progress", "--out", str(tmp_path / "out")]
    assert eval_cli.main([*argv, "eval.diagnostics=none", "eval.diagnostic_samples=4"]) == 2
    assert "eval.diagnostic_samples=4 has no effect with eval.diagnostics=none" in (
        one_error_line(capsys)
    )
    run = tmp_path / "lm"
    train(load_config(None, tiny_lm(run, pattern_file(tmp_path))))
    assert eval_cli.main([str(run), "--no-progress", "eval.diagnostics=full"]) == 2
    assert "eval.diagnostics=full has no effect on task 'text'" in one_error_line(capsys)
    assert not (run / "eval.json").exists()


def forward_rows(model) -> tuple[list[int], object]:
    """The rows of every forward pass of ``model`` from now on, and the hook's handle."""
    rows: list[int] = []
    handle = model.register_forward_pre_hook(lambda module, args: rows.append(args[0].shape[0]))
    return rows, handle


def test_rope_pair_shares_follow_batch_tokens_and_equal_the_one_shot_pass(make_model):
    model = make_model("rope", strong=True, vocab_size=19)
    batch = evaluation_set(build_task("copy"), 0, 6, 24)
    t = batch.inputs.shape[1]
    rows, handle = forward_rows(model)
    whole = pair_shares(model, batch)
    assert rows == [24]  # no token bound: one pass, as before
    rows.clear()
    chunked = pair_shares(model, batch, batch_tokens=2 * t + 1)  # two rows a pass
    assert rows == [2] * 12
    rows.clear()
    one = pair_shares(model, batch, batch_tokens=1)  # under one row: one row a pass
    handle.remove()
    assert rows == [1] * 24
    assert np.array(whole).shape == (2, 4)
    assert np.allclose(chunked, whole, atol=2e-6) and np.allclose(one, whole, atol=2e-6)


def test_attention_diagnostics_follow_batch_tokens(make_model):
    model = make_model("rope", strong=True, vocab_size=19)
    task = build_task("copy")
    batch = evaluation_set(task, 0, 6, 12)
    t = batch.inputs.shape[1]
    whole = attention_diagnostics(model, task, batch)
    rows, handle = forward_rows(model)
    bounded = attention_diagnostics(model, task, batch, batch_tokens=3 * t)
    handle.remove()
    assert rows == [3] * 4
    for name, value in whole.items():
        assert np.allclose(bounded[name], value, atol=1e-5), name


def test_diagnostics_off_evaluates_like_before(make_model):
    """With diagnostics off, the record has no diagnostics and exact-match equals the one with
    them (evaluate_model on a model outside a run)."""
    from lab.common.config import load_config

    config = load_config(None, ["data.task=svo", "model.d_model=32", "model.n_layers=1"])
    model = make_model("alibi", vocab_size=config.model.vocab_size)
    settings = EvalConfig(samples=16, probe_samples=8, lengths=[3, 6], max_length_factor=1.5)
    on = evaluate_model(model, config, settings)
    off = evaluate_model(model, config, EvalConfig(**{**settings.__dict__, "diagnostics": "none"}))
    assert [r["correct"] for r in on["lengths"]] == [r["correct"] for r in off["lengths"]]
    assert on["diagnostics"]["mode"] == "basic" and on["lengths"][0]["attention"]["samples"] == 16


def test_full_diagnostics_of_a_rope_run_give_pair_shares_and_p_rope(make_model):
    from lab.common.config import load_config

    config = load_config(None, ["data.task=copy", "model.position=rope"])
    model = make_model("rope", strong=True, vocab_size=config.model.vocab_size)
    settings = EvalConfig(
        samples=8, probe_samples=4, lengths=[4, 10], max_length_factor=1.1, diagnostics="full"
    )
    record = evaluate_model(model, config, settings)
    jsonschema.validate(record, SCHEMA)
    rope = record["diagnostics"]["rope"]
    shares = np.array(rope["pair_shares"])
    assert shares.shape == (2, 4)  # 2 layers, head_dim 8: 4 rotated pairs
    assert np.allclose(shares.sum(1), 1.0, atol=1e-5) and (shares >= 0).all()
    assert rope["low_frequency_share"] == pytest.approx(shares[:, -1].mean(), abs=1e-5)
    assert set(rope["p_rope"]) == {"0.75", "0.5"}
    assert all(len(v) == len(rope["lengths"]) == 3 for v in rope["p_rope"].values())
    p_one = make_model("rope", strong=True, vocab_size=config.model.vocab_size)
    same = evaluate_model(p_one.at_evaluation({"p": 0.5}), config, settings)
    assert rope["p_rope"]["0.5"] == [r["exact_match"] for r in same["lengths"]]
    plain = evaluate_model(
        make_model("alibi", vocab_size=config.model.vocab_size), config, settings
    )
    assert "rope" not in plain["diagnostics"]
