"""Extend, then fine-tune: ``train.py --extend``, the study's plan and stages, and its report.

The training tests use tiny RoPE models on ``copy`` (the mechanism is task-agnostic); the report
is checked on hand-made LM records whose per-window losses are known.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import jsonschema
import pytest
import torch
from conftest import one_error_line
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

import train as train_entry
from data import available_tasks
from lab.common.checkpoint import checkpoint_digest, load_checkpoint
from lab.common.config import ConfigError, load_config
from lab.evaluation.evaluate import evaluate_run
from lab.evaluation.record import SCHEMA
from lab.lm import extend_report as rep
from lab.lm.extend_study import plan, read_study, run_study, training_tokens
from lab.training.extend import child_config, extend, parent_of, seed_child
from lab.training.run import TrainingInterrupted
from lab.training.trainer import train

TINY = [
    "data.task=copy",
    "model.d_model=16",
    "model.n_heads=2",
    "model.d_ff=32",
    "model.n_layers=1",
    "train.steps=4",
    "train.warmup_steps=1",
    "train.eval_every=4",
    "train.eval_samples=8",
    "train.progress=false",
    "eval.samples=8",
    "eval.probe_samples=8",
    "eval.max_length_factor=2",
]
RULE = ["model.options.rope.scaling=yarn", "model.options.rope.scaling_factor=2"]
LONGER = ["data.train_min_length=4", "data.train_max_length=20", "train.steps=3"]

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("extend") / "parent"
    train(load_config(None, [*TINY, f"run_dir={run_dir}"]))
    return run_dir


def test_child_starts_bit_identical_to_the_parent_with_a_fresh_optimizer(parent, tmp_path):
    child, state = child_config(parent, [*RULE, *LONGER, f"run_dir={tmp_path / 'c'}"])
    record = seed_child(child, parent, state)
    seeded = load_checkpoint(tmp_path / "c")
    assert seeded["step"] == 0 and seeded["optimizer"]["state"] == {}
    assert seeded["model"].keys() == state["model"].keys()
    assert all(torch.equal(seeded["model"][k], state["model"][k]) for k in state["model"])
    assert parent_of(seeded) == record
    assert record["sha256"] == checkpoint_digest(parent) and record["step"] == 4
    assert record["changed"]["model.options.rope.scaling"] == ["none", "yarn"]
    assert record["changed"]["data.train_max_length"] == [10, 20]


def test_extend_trains_a_new_run_that_records_its_parent(parent, tmp_path):
    child_dir = tmp_path / "child"
    result = extend(parent, [*RULE, *LONGER, f"run_dir={child_dir}"])
    assert result.step == 3 and result.finished
    saved = load_checkpoint(child_dir)
    options = saved["config"]["model"]["options"]["rope"]
    assert options["scaling"] == "yarn" and options["scaling_factor"] == 2.0
    kept = load_checkpoint(parent)["config"]["model"]["options"]["rope"]["original_max_position"]
    assert options["original_max_position"] == kept == 22  # the parent's context: copy at 10
    assert saved["config"]["data"]["train_max_length"] == 20
    assert parent_of(saved)["sha256"] == checkpoint_digest(parent)
    # the parent's weights are unchanged by the child's training
    assert load_checkpoint(parent)["step"] == 4
    evaluation = evaluate_run(child_dir, device="cpu")
    jsonschema.validate(evaluation, SCHEMA)
    assert evaluation["parent"]["run"] == "parent"
    assert evaluation["parent"]["changed"]["train.steps"] == [4, 3]
    events = EventAccumulator(str(child_dir))
    events.Reload()
    session = events.summary_metadata["_hparams_/session_start_info"].plugin_data.content
    hparams = HParamsPluginData.FromString(session).session_start_info.hparams
    assert hparams["parent"].string_value == "parent"
    assert hparams["parent_step"].number_value == 4


@pytest.mark.parametrize("spelt", ["{dir}/child/", "{dir}/other/../child"])
def test_a_child_folder_spelt_with_a_slash_or_dots_trains(parent, tmp_path, spelt):
    """The folder's spelling is where, not a setting: the child's step-0 checkpoint saves it as
    a path, and training it with the spelling given must not read as a changed setting."""
    result = extend(parent, [*LONGER, f"run_dir={spelt.format(dir=tmp_path)}"])
    assert result.step == 3 and result.finished
    assert load_checkpoint(tmp_path / "child")["step"] == 3


def test_the_parent_record_survives_a_resume(parent, tmp_path):
    child_dir = tmp_path / "child"
    extend(parent, [*LONGER, f"run_dir={child_dir}"])
    first = parent_of(load_checkpoint(child_dir))
    assert train_entry.main(["--resume", str(child_dir), "train.steps=5"]) == 0
    assert load_checkpoint(child_dir)["step"] == 5
    assert parent_of(load_checkpoint(child_dir)) == first


def test_resuming_a_child_of_a_since_retrained_parent_is_refused(tmp_path, capsys):
    """``train.py --resume CHILD`` after the parent was retrained would go on from weights that
    no longer exist: refused in one line naming both checkpoints, nothing trained."""
    parent_dir, child_dir = tmp_path / "p", tmp_path / "c"
    train(load_config(None, [*TINY, f"run_dir={parent_dir}"]))
    extend(parent_dir, [*LONGER, f"run_dir={child_dir}"])
    assert train_entry.main(["--resume", str(child_dir), "train.steps=4"]) == 0  # parent as made
    before = checkpoint_digest(child_dir)
    train(load_config(None, [*TINY, "seed=1", f"run_dir={parent_dir}"]), overwrite=True)
    assert train_entry.main(["--resume", str(child_dir), "train.steps=5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: cannot resume: c was fine-tuned from a checkpoint of sha256")
    assert checkpoint_digest(parent_dir) in err and "--extend" in err
    assert checkpoint_digest(child_dir) == before


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["{missing}"], "does not exist"),
        (["{parent}", "model.d_model=32"], "model.d_model cannot change"),
        (["{parent}", "model.position=alibi"], "model.position cannot change"),
        (["{parent}", "model.heads=alibi:1+rope:1"], "model.heads cannot change"),
        (["{parent}", "model.layout=rope:1+none:1"], "model.layout cannot change"),
        (["{parent}", "data.options.copy.n_symbols=8"], "model.vocab_size cannot change"),
        (["{parent}", "run_dir={parent}"], "is the parent's own folder"),
        (["{parent}", "train.steps=3", "run_dir={parent}/../parent/."], "own folder"),
        (["{empty}"], "no checkpoint in"),
    ],
)
def test_extend_refuses_in_one_line(parent, tmp_path, capsys, arguments, message):
    (tmp_path / "empty").mkdir()
    names = {"parent": parent, "missing": tmp_path / "nope", "empty": tmp_path / "empty"}
    argv = ["--extend", *(a.format(**names) for a in arguments)]
    assert train_entry.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_extend_refuses_an_unfinished_parent_and_an_existing_child(parent, tmp_path, capsys):
    unfinished = tmp_path / "unfinished"
    stops = iter([False, False, True])
    with pytest.raises(TrainingInterrupted):
        train(load_config(None, [*TINY, f"run_dir={unfinished}"]), should_stop=stops.__next__)
    assert train_entry.main(["--extend", str(unfinished)]) == 2
    assert "has not finished training" in capsys.readouterr().err
    target = f"run_dir={tmp_path / 'child'}"
    assert train_entry.main(["--extend", str(parent), *LONGER, target]) == 0
    assert train_entry.main(["--extend", str(parent), *LONGER, target]) == 2
    assert "already holds a run" in capsys.readouterr().err


@pytest.mark.parametrize("inside", ["evaluations/child", "child", "evaluations"])
def test_a_child_inside_its_parents_folder_is_refused_and_nothing_written(parent, capsys, inside):
    """A child in the parent's evaluations/ (or anywhere below the parent's folder) would lose
    its event files when the parent is overwritten: refused in one line, no folder made."""
    before = sorted(p.relative_to(parent) for p in parent.rglob("*"))
    assert train_entry.main(["--extend", str(parent), *LONGER, f"run_dir={parent / inside}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: run_dir=")
    assert f"is inside the folder of the run {str(parent.resolve())!r}" in err
    assert sorted(p.relative_to(parent) for p in parent.rglob("*")) == before


def test_a_child_folder_around_its_parent_is_refused(parent, capsys):
    assert train_entry.main(["--extend", str(parent), f"run_dir={parent.parent}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1  # the shared check names the run below (the parent)
    assert f"holds the run {str(parent)!r} below it" in err, err


def test_an_override_that_reshapes_the_weights_is_named_and_leaves_no_folder(
    parent, tmp_path, capsys
):
    """model.softmax_scale=ssmax adds a weight: the error names the override (not the parent's
    checkpoint) and no .lock-only folder is left behind."""
    child = tmp_path / "deep" / "child"
    assert (
        train_entry.main(["--extend", str(parent), "model.softmax_scale=ssmax", f"run_dir={child}"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: model.softmax_scale='ssmax' (parent 'none') change the model's")
    assert "blocks.0.attn.softmax_scale.ssmax_scale is not in the parent" in err
    assert "does not fit" not in err and not child.exists() and not child.parent.exists()


def test_a_failed_seeding_removes_the_folder_it_made(parent, tmp_path, monkeypatch):
    import lab.training.extend as ext

    child, state = child_config(parent, [*LONGER, f"run_dir={tmp_path / 'c'}"])

    def fail(*args):
        raise ValueError("weights refused")

    monkeypatch.setattr(ext, "load_model_state", fail)
    with pytest.raises(ValueError, match="weights refused"):
        seed_child(child, parent, state)
    assert not (tmp_path / "c").exists()


def _parent_text(folder):
    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    return [e.tensor_proto.string_val[0].decode() for e in events.Tensors("parent/text_summary")]


def test_a_stop_right_after_the_step0_checkpoint_keeps_the_parent_in_tensorboard(
    parent, tmp_path, monkeypatch
):
    """Ctrl-C just after the child's step-0 checkpoint: the parent record is already in its
    TensorBoard events (written first); Ctrl-C during the save leaves neither, and the child
    is seeded again."""
    import lab.training.run

    real = lab.training.run.Run.save
    child, state = child_config(parent, [*LONGER, f"run_dir={tmp_path / 'c'}"])

    def save_then_stop(run):
        real(run)
        raise KeyboardInterrupt

    monkeypatch.setattr(lab.training.run.Run, "save", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        seed_child(child, parent, state)
    assert load_checkpoint(tmp_path / "c")["step"] == 0
    (text,) = _parent_text(tmp_path / "c")
    assert text.startswith(
        f"fine-tuned from `{parent}` (step 4, sha256 `{checkpoint_digest(parent)}`)"
    )

    other, state = child_config(parent, [*LONGER, f"run_dir={tmp_path / 'd'}"])

    def stop_in_save(run):
        raise KeyboardInterrupt

    monkeypatch.setattr(lab.training.run.Run, "save", stop_in_save)
    with pytest.raises(KeyboardInterrupt):
        seed_child(other, parent, state)
    assert not (tmp_path / "d").exists()  # no events, no checkpoint, no folder
    monkeypatch.setattr(lab.training.run.Run, "save", real)
    seed_child(other, parent, state)
    assert len(_parent_text(tmp_path / "d")) == 1


def test_a_child_is_refused_on_a_corpus_other_than_its_parents(tmp_path, capsys):
    """The corpus changed after the parent was trained: the child would train on new text and
    be paired with its parent's old windows; refused in one line naming both digests, no folder
    made. On the parent's own corpus the child records its digest."""
    from test_text import pattern_file, tiny_lm

    from data.text import load_corpus

    corpus = pattern_file(tmp_path)
    train(load_config(None, tiny_lm(tmp_path / "lm", corpus, "train.steps=2")))
    before = load_corpus(str(corpus)).sha256
    child, state = child_config(tmp_path / "lm", [f"run_dir={tmp_path / 'ok'}"])
    assert seed_child(child, tmp_path / "lm", state)["corpus_sha256"] == before
    corpus.write_bytes(corpus.read_bytes()[:-170])  # the corpus changes
    load_corpus.cache_clear()
    after = load_corpus(str(corpus)).sha256
    try:
        code = train_entry.main(["--extend", str(tmp_path / "lm"), f"run_dir={tmp_path / 'c'}"])
    finally:
        load_corpus.cache_clear()
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(
        f"error: cannot fine-tune from {str(tmp_path / 'lm')!r}: it was trained on a corpus of "
        f"sha256 {before}, and "
    )
    assert f"now has sha256 {after}" in err and not (tmp_path / "c").exists()


def test_train_py_refuses_an_abbreviated_or_misplaced_extend(parent, capsys):
    with pytest.raises(SystemExit) as stop:
        train_entry.main(["--ext", str(parent)])
    assert stop.value.code == 2
    assert train_entry.main(["train.steps=3", "--extend", str(parent)]) == 2
    assert "--extend must be the first argument" in capsys.readouterr().err


def test_wilcoxon_matches_the_reference_example():
    # scipy.stats.wilcoxon's documented example (Fisher 1935, via Wilcoxon 1945): T = 24;
    # normal approximation: z = (24 - 60) / sqrt(310), p = 2 Phi(-2.0447) = 0.04089
    d = [6, 8, 14, 16, 23, 24, 28, 29, 41, -48, 49, 56, 60, -67, 75]
    statistic, p = rep.wilcoxon_signed_rank(d, [0] * len(d))
    assert statistic == 24
    assert p == pytest.approx(math.erfc(36 / math.sqrt(310) / math.sqrt(2)), rel=1e-12)
    assert p == pytest.approx(0.04089, abs=1e-5)
    # ties share their mean rank and shrink the variance: |d| = 1, 1, 2, 3 (ranks 1.5, 1.5, 3, 4)
    statistic, p = rep.wilcoxon_signed_rank([1, -1, 2, 3, 5], [0, 0, 0, 0, 5])
    assert statistic == 1.5
    z = (1.5 - 5) / math.sqrt(4 * 5 * 9 / 24 - 6 / 48)
    assert p == pytest.approx(math.erfc(abs(z) / math.sqrt(2)))
    assert rep.wilcoxon_signed_rank([1, 2], [1, 2]) == (0.0, 1.0)


SIZE = {"d_model": 32, "n_layers": 2, "n_heads": 2}


def _lm_record(
    seed, train_length, losses_by_length, position_options=None, parent=None, scaling="none"
):
    """A hand-made LM eval.json: ``losses_by_length`` maps a length to its per-window losses."""
    rows = []
    for length, losses in sorted(losses_by_length.items()):
        loss = sum(losses) / len(losses)
        rows.append(
            {
                "length": length,
                "supported": True,
                "windows": len(losses),
                "window_losses": losses,
                "loss": loss,
                "perplexity": math.exp(loss),
                "perplexity_low": math.exp(min(losses)),
                "perplexity_high": math.exp(max(losses)),
            }
        )
    options = {"scaling": scaling, "scaling_factor": 1.0 if scaling == "none" else 4.0}
    record = {
        "kind": "lm",
        "task": "text",
        "seed": seed,
        "train_lengths": [train_length, train_length],
        "lengths": rows,
        "checkpoint": {"run": f"run{seed}", "step": 1, "sha256": "0" * 64},
        "config": {
            "model": {"position": "rope", "options": {"rope": options}, **SIZE},
            "eval": {"position_options": position_options or {}},
        },
    }
    if parent:
        record["parent"] = {"run": parent, "step": 10, "sha256": "0" * 64}  # its parent's
    return record


def _windows(base, shift, n=40):
    return [base + shift + 0.01 * ((7 * i) % 13) for i in range(n)]


@pytest.fixture
def study_records():
    records = []
    for seed in (0, 1):
        records.append(
            _lm_record(seed, 64, {64: _windows(1.5, 0), 256: _windows(2.8, 0.01 * seed)})
        )
        for rule, shift in (("ntk", -0.9), ("dynamic", -0.7), ("yarn", -1.0), ("linear", -0.5)):
            at_eval = {"scaling": rule, "scaling_factor": 1.0 if rule == "dynamic" else 4.0}
            records.append(
                _lm_record(seed, 64, {64: _windows(1.6, 0), 256: _windows(2.8, shift)}, at_eval)
            )
        for rule, shift in (("linear", -1.2), ("yarn", -1.25), ("none", -1.0)):
            records.append(
                _lm_record(
                    seed,
                    256,
                    {256: _windows(1.5, shift + 0.1)},
                    parent=f"parent-seed{seed}",
                    scaling=rule,
                )
            )
        records.append(_lm_record(seed, 256, {256: _windows(1.45, 0)}))
    return records


def test_report_roles_table_and_paired_tests_on_fixtures(study_records):
    original, groups = rep.grouped(study_records)
    assert original == 64
    assert list(groups)[0] == ("as trained", "") and ("from scratch", "") in groups
    assert ("zero-shot", "dynamic s=1") in groups and ("fine-tuned", "yarn s=4") in groups
    table = rep.perplexity_table(study_records)
    trained = [math.exp(sum(_windows(2.8, 0.01 * s)) / 40) for s in (0, 1)]
    interval = rep.t_interval([math.log(p) for p in trained])  # geometric mean, positive bounds
    low, mean, high = (math.exp(x) for x in (interval.low, interval.mean, interval.high))
    assert f"{mean:.2f} [{low:.2f}, {high:.2f}]" in table
    tests = {(a, b): t for a, b, t in rep.comparisons(study_records)}
    yarn = tests[("zero-shot yarn s=4", "as trained")]
    assert yarn.test.differences == pytest.approx((-1.0, -1.01))  # paired by seed
    assert yarn.window_p == tuple(  # per checkpoint, seed by seed: never pooled
        rep.wilcoxon_signed_rank(_windows(2.8, -1.0), _windows(2.8, 0.01 * s))[1] for s in (0, 1)
    )
    assert yarn.b_perplexity == pytest.approx(sum(trained) / 2)
    scratch = tests[("fine-tuned linear s=4", "from scratch")]
    assert scratch.test.mean == pytest.approx(0.4 - 1.45) and scratch.test.p_sign_flip == 0.5
    words = rep.words(scratch, 0.5)
    assert words.startswith(f"x{math.exp(0.4 - 1.45):.2f} (loss -1.050 nats")
    assert "sign-flip p=0.5, Holm p=0.5): not significant at the seed level" in words
    table = rep.tests_table(study_records)
    assert "significant at the seed level" in table and "): significant" not in table  # 2 seeds


def test_budgets_are_named_and_unequal_ones_flagged(study_records):
    for r in study_records:
        child = r.get("parent") is not None
        steps, batch = (200, 8) if child else (1000, 32)
        r["config"]["train"] = {"steps": steps, "batch_size": batch}
        r["train_steps"] = steps
    scratch = [r for r in study_records if r["train_lengths"][1] == 256 and not r.get("parent")]
    for r in scratch:
        r["config"]["train"] = {"steps": 1000, "batch_size": 8}
        r["train_steps"] = 1000
    line = rep.budget_line(study_records)
    assert "fine-tuned 2,457,600 tokens" in line and "from scratch 2,048,000 tokens" in line
    assert "UNEQUAL" in line
    for r in scratch:
        r["train_steps"] = 1200
    assert rep.budget_line(study_records).endswith("(equal)")


def test_findings_follow_the_numbers(study_records):
    assert "**agrees**" in rep.peng_finding(study_records)
    chen = rep.chen_finding(study_records)
    assert "**agrees**" in chen and chen.count(": agrees, [") == 3  # each of Chen's 3 claims
    assert "fine-tuned none - fine-tuned linear +0.200 nats" in chen
    # zero-shot PI as good as fine-tuned: the finding turns
    flipped = [
        _lm_record(
            r["seed"],
            64,
            {64: _windows(1.6, 0), 256: _windows(0.3, 0)},
            r["config"]["eval"]["position_options"],
        )
        if r["config"]["eval"]["position_options"].get("scaling") == "linear"
        else r
        for r in study_records
    ]
    assert "**disagrees**" in rep.chen_finding(flipped)
    no_rules = [r for r in study_records if not r["config"]["eval"]["position_options"]]
    assert "**not measured**" in rep.peng_finding(no_rules)


def test_report_files_and_page(study_records, tmp_path):
    paths = rep.write_extend_report(study_records, tmp_path)
    text = paths["report"].read_text()
    assert "## Findings against the literature" in text and "fine-tuned linear s=4" in text
    lines = paths["csv"].read_text().splitlines()
    assert lines[0] == ",".join(rep.CSV_FIELDS)
    assert len(lines) == 1 + sum(len(r["lengths"]) for r in study_records)
    folder = tmp_path / "lm-extend"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(study_records))
    page = rep.lm_extend_page(folder, "python sweep.py --publish")
    assert page.startswith("# Extend, then fine-tune") and "seed(s) 0, 1" in page


def test_study_runs_parents_then_children_on_a_synthetic_task(tmp_path):
    study_file = tmp_path / "study.yaml"
    study_file.write_text(
        "out_dir: OUT\nbase: {}\nseeds: [0]\nfactor: 2\n"
        "zero_shot: {yarn: {scaling: yarn, scaling_factor: 2}}\n"
        "fine_tune: {settings: {train: {steps: 2}},\n"
        "  rules: {linear: {scaling: linear, scaling_factor: 2}}}\n"
        "scratch: {train: {steps: 2}}\n"
    )
    raw = read_study(study_file, [*TINY, f"out_dir={tmp_path / 'out'}"])
    study = plan(raw)
    assert [s.name for s in study.parents] == ["parent-seed0"]
    assert list(study.parents[0].evaluations) == ["", "yarn"]
    assert study.parent_of == {"finetune-linear-seed0": "parent-seed0"}
    records, signum = run_study(study, workers=1, overwrite=False)
    assert signum is None
    assert {r["name"]: r["status"] for r in records} == {
        "parent-seed0": "trained",
        "scratch-seed0": "trained",
        "finetune-linear-seed0": "trained",
    }
    child = next(r for r in records if r["name"] == "finetune-linear-seed0")
    assert child["result"]["parent"]["run"] == "parent-seed0"
    assert child["result"]["config"]["data"]["train_max_length"] == 20
    assert child["result"]["config"]["model"]["options"]["rope"]["original_max_position"] == 22
    again, _ = run_study(plan(raw), workers=1, overwrite=False)
    assert {r["status"] for r in again} == {"skipped"}


STUDY = (
    "out_dir: OUT\nbase: {}\nseeds: [0]\nfactor: 2\n"
    "fine_tune: {settings: {train: {steps: 2, lr: 0.001}},\n"
    "  rules: {linear: {scaling: linear, scaling_factor: 2}}}\n"
    "scratch: {train: {steps: 2}}\n"
)


def test_a_retrained_parent_remakes_its_child_or_refuses_it(tmp_path, capsys):
    """The child's settings override train.lr, so they 'did not change' when the parent's did;
    its parent record's sha256 decides: refused in one line naming it while the parent was
    retrained out of the study, re-made under --overwrite, and never paired with the new
    parent while stale."""
    from lab.lm import extend_study

    (tmp_path / "study.yaml").write_text(STUDY)
    out = tmp_path / "out"
    first = read_study(tmp_path / "study.yaml", [*TINY, f"out_dir={out}"])
    run_study(plan(first), workers=1, overwrite=False)
    child = out / "finetune-linear-seed0"
    old = parent_of(load_checkpoint(child))["sha256"]
    assert old == checkpoint_digest(out / "parent-seed0")
    changed = read_study(tmp_path / "study.yaml", [*TINY, f"out_dir={out}", "train.lr=2e-3"])
    for spec in [*plan(changed).parents, *plan(changed).scratch]:  # retrained outside it
        train(load_config(None, spec.overrides), overwrite=True)
    new = checkpoint_digest(out / "parent-seed0")
    records, _ = run_study(plan(changed), workers=1, overwrite=False)
    status = {r["name"]: (r["status"], r["error"]) for r in records}
    assert status["finetune-linear-seed0"][0] == "failed"
    error = status["finetune-linear-seed0"][1]
    assert error.startswith(
        f"ConfigError: finetune-linear-seed0 was fine-tuned from a checkpoint "
        f"of sha256 {old}, and its parent"
    )
    assert f"now holds sha256 {new}" in error and "--overwrite re-makes it" in error
    assert "\n" not in error
    assert parent_of(load_checkpoint(child))["sha256"] == old  # refused: nothing deleted
    assert extend_study.finish(records, plan(changed), 1.0, 1) == 1
    results = json.loads((out / "results.json").read_text())
    assert not [r for r in results if r.get("parent")]  # the stale child is not reported
    capsys.readouterr()
    records, _ = run_study(plan(changed), workers=1, overwrite=True)
    status = {r["name"]: r["status"] for r in records}
    assert status["finetune-linear-seed0"] == "trained"
    assert parent_of(load_checkpoint(child))["sha256"] == new
    remade = next(r for r in records if r["name"] == "finetune-linear-seed0")["result"]
    assert remade["parent"]["sha256"] == new


def test_seeds_given_twice_are_one_run_each(tmp_path):
    (tmp_path / "study.yaml").write_text(STUDY)
    study = plan(read_study(tmp_path / "study.yaml", [*TINY, "seeds=0,0,00,1"]))
    assert [s.name for s in study.parents] == ["parent-seed0", "parent-seed1"]
    assert [s.name for s in study.children] == ["finetune-linear-seed0", "finetune-linear-seed1"]
    assert [s.name for s in study.scratch] == ["scratch-seed0", "scratch-seed1"]
    (tmp_path / "bad.yaml").write_text(STUDY.replace("seeds: [0]", "seeds: [0, x]"))
    with pytest.raises(ConfigError, match=r"seeds=\[0, 'x'\] is invalid; give a list"):
        read_study(tmp_path / "bad.yaml")
    (tmp_path / "none.yaml").write_text(STUDY.replace("seeds: [0]", "seeds: []"))
    with pytest.raises(ConfigError, match=r"seeds=\[\] is invalid; give a list"):  # not seed 0
        read_study(tmp_path / "none.yaml")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("rules: {linear:", "fine_tune.rules label '../up' is not a plain name"),
        ("scratch:", "zero_shot label 'a/b' is not a plain name"),
        ("zero:", "parent-seed0: .*scaling_factor"),
        ("empty:", "zero_shot.lin sets no option"),
        ("twice:", "fine_tune.rules.linear and fine_tune.rules.again set the same options"),
    ],
)
def test_a_rule_label_that_is_no_folder_name_is_refused_before_training(tmp_path, edit, message):
    """A label names a folder (RUN/evaluations/LABEL, finetune-LABEL-seedN): '..' or '/' was
    refused only when the trained parent was evaluated, costing the whole study; so was a
    zero-shot rule's bad value."""
    text = STUDY.replace("rules: {linear:", "rules: {../up:") if "rules" in edit else STUDY
    if "scratch" in edit:
        text = text.replace("scratch:", "zero_shot: {a/b: {scaling: linear}}\nscratch:")
    if "zero" in edit:
        zero = "zero_shot: {lin: {scaling: linear, scaling_factor: 0}}\nscratch:"
        text = text.replace("scratch:", zero)
    if "empty" in edit:
        text = text.replace("scratch:", "zero_shot: {lin: {}}\nscratch:")
    if "twice" in edit:
        again = "linear: {scaling: linear, scaling_factor: 2}"
        text = text.replace(again, f"{again}, again: {{scaling: linear, scaling_factor: 2}}")
    (tmp_path / "study.yaml").write_text(text)
    raw = read_study(tmp_path / "study.yaml", [*TINY, f"out_dir={tmp_path / 'out'}"])
    with pytest.raises(
        ConfigError, match=message if "*" in message else message.replace(".", r"\.")
    ):
        plan(raw)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "train: {steps: 2, lr: 0.001}",
            "train: {steps: 2, lr: 0.001}, data: {train_max_length: 64}",
            "fine_tune.settings sets data.train_max_length=64, which the study sets from factor",
        ),
        (
            "train: {steps: 2, lr: 0.001}",
            "train: {steps: 2, lr: 0.001}, model: {options: {rope: {theta: 500.0}}}",
            "fine_tune.settings sets model.options.rope.theta=500.0, which the study sets from "
            "base",
        ),
        (
            "scratch: {train: {steps: 2}}",
            "scratch: {train: {steps: 2}, data: {train_min_length: 64}}",
            "scratch sets data.train_min_length=64, which the study sets from factor",
        ),
        (
            "base: {}",
            "base: {model: {options: {rope: {scaling: linear, scaling_factor: 2}}}}",
            "base sets model.options.rope.scaling=linear: the parents are the as-trained",
        ),
    ],
)
def test_settings_that_contradict_what_the_study_compares_are_refused(tmp_path, old, new, message):
    """Children's or the scratch run's lengths or position options given under
    fine_tune.settings or scratch, and parents trained under a rule, trained runs the report
    labelled and paired as something else (pass 10, High)."""
    (tmp_path / "study.yaml").write_text(STUDY.replace(old, new))
    raw = read_study(tmp_path / "study.yaml", [*TINY, f"out_dir={tmp_path / 'out'}"])
    with pytest.raises(ConfigError, match=re.escape(message)):
        plan(raw)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("factor", ["3", "6", "1", "true", "2.0"])
def test_a_factor_off_the_parents_evaluation_grid_is_refused(tmp_path, factor):
    """Parents are evaluated at train_max_length * 2**k: a factor of 3 trained every arm and
    measured nothing the report compares, exit 0."""
    (tmp_path / "study.yaml").write_text(STUDY.replace("factor: 2", f"factor: {factor}"))
    message = f"factor={factor.capitalize()} is invalid; it must be a power"
    with pytest.raises(ConfigError, match=message):
        read_study(tmp_path / "study.yaml")


def test_parents_evaluated_short_of_the_childrens_length_are_refused_by_the_given_value(tmp_path):
    (tmp_path / "study.yaml").write_text(STUDY.replace("factor: 2", "factor: 4"))
    raw = read_study(tmp_path / "study.yaml", [*TINY, f"out_dir={tmp_path / 'out'}"])
    with pytest.raises(ConfigError, match=r"^eval.max_length_factor=2 is below factor=4: .* >= 4$"):
        plan(raw)
    assert not (tmp_path / "out").exists()


def test_a_study_out_dir_inside_a_run_is_refused(parent, tmp_path):
    (tmp_path / "study.yaml").write_text(STUDY)
    raw = read_study(tmp_path / "study.yaml", [*TINY, f"out_dir={parent / 'evaluations' / 's'}"])
    with pytest.raises(ConfigError, match="out_dir=.* is inside the folder of the run"):
        plan(raw)


def test_a_study_whose_parents_all_failed_says_so(tmp_path, capsys):
    """No parent finished: a report saying so and one error line, not a TypeError; a
    from-scratch run alone is not mistaken for a parent."""
    from lab.lm import extend_study

    (tmp_path / "study.yaml").write_text(STUDY)
    study = plan(read_study(tmp_path / "study.yaml", [*TINY, f"out_dir={tmp_path / 'out'}"]))
    scratch = _lm_record(0, 256, {256: _windows(1.45, 0)})
    records = [
        {"name": "parent-seed0", "status": "failed", "error": "RuntimeError: boom", "result": None},
        {"name": "scratch-seed0", "status": "trained", "error": None, "result": scratch},
        {"name": "finetune-linear-seed0", "status": "failed", "error": "parent", "result": None},
    ]
    (tmp_path / "out").mkdir()
    assert extend_study.finish(records, study, 1.0, 1) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "error: no comparison: no parent finished (1 did not); see "
        f"{tmp_path / 'out' / 'extend_report.md'}"
    )
    text = (tmp_path / "out" / "extend_report.md").read_text()
    assert rep.NO_PARENT in text and "- parent-seed0: failed (RuntimeError: boom)" in text
    assert (tmp_path / "out" / "extend_results.csv").read_text() == ",".join(rep.CSV_FIELDS) + "\n"
    assert "No paired test" in rep.tests_table([scratch])  # and the table alone: no TypeError
    assert rep.format_table(["run", "rule"], []) == "| run | rule |\n| --- | ---- |"


def test_the_report_pairs_no_child_of_a_retrained_parent(study_records):
    stale = next(
        r
        for r in study_records
        if r["seed"] == 0
        and r.get("parent")
        and r["config"]["model"]["options"]["rope"]["scaling"] == "linear"
    )
    stale["parent"]["sha256"] = "2" * 64
    stale["checkpoint"]["run"] = "finetune-linear-seed0"
    kept, left_out = rep.consistent(study_records)
    assert len(kept) == len(study_records) - 1 and stale not in kept
    assert left_out == [
        "finetune-linear-seed0 (fine-tuned linear s=4, seed 0): fine-tuned from a checkpoint "
        "of sha256 222222222222, which no parent of seed 0 here is (the parent was retrained "
        "since)"
    ]
    text = rep.report_text(study_records)
    assert "## Left out" in text and left_out[0] in text
    tests = {(a, b): t for a, b, t in rep.comparisons(kept)}
    assert tests[("fine-tuned linear s=4", "as trained")].test.n == 1  # seed 1 alone
    zero = next(
        r for r in study_records if r["seed"] == 1 and r["config"]["eval"]["position_options"]
    )
    zero["checkpoint"] = {"run": "parent-seed1", "step": 1, "sha256": "3" * 64}
    _, left_out = rep.consistent(study_records)
    assert left_out[1] == (
        "parent-seed1 (zero-shot ntk s=4, seed 1): evaluated on a checkpoint of sha256 "
        "333333333333, not its parent's as trained (000000000000)"
    )


def test_the_report_pairs_no_run_of_another_corpus(study_records):
    for r in study_records:
        r["corpus"] = {"sha256": "a" * 64}
    other = next(
        r
        for r in study_records
        if r["seed"] == 1
        and r.get("parent")
        and r["config"]["model"]["options"]["rope"]["scaling"] == "yarn"
    )
    other["corpus"] = {"sha256": "b" * 64}
    kept, left_out = rep.consistent(study_records)
    assert other not in kept and len(left_out) == 1
    assert left_out[0].endswith(
        "(fine-tuned yarn s=4, seed 1): its corpus (sha256 bbbbbbbbbbbb) is not the parents' "
        "(sha256 aaaaaaaaaaaa): it scored other windows"
    )
    tests = {(a, b): t for a, b, t in rep.comparisons(kept)}
    assert tests[("fine-tuned yarn s=4", "as trained")].test.n == 1
    assert left_out[0] in rep.report_text(study_records)


def test_the_study_config_plans():
    if "text" not in available_tasks():
        pytest.skip("the text task is not registered in this checkout")
    study = plan(read_study("configs/lm_extend.yaml"))
    assert len(study.parents) == 3 and len(study.children) == 9 and len(study.scratch) == 3
    child = load_config(None, study.children[0].overrides)
    assert child.data.train_max_length == 256 and child.eval.max_length_factor == 4
    # equal budgets: from scratch trains a parent's tokens plus a child's (2,048,000 + 409,600)
    parent = load_config(None, study.parents[0].overrides)
    scratch = load_config(None, study.scratch[0].overrides)
    assert scratch.train.steps == 1200 and scratch.data.train_max_length == 256
    assert training_tokens(scratch) == training_tokens(parent) + training_tokens(child) == 2457600


def test_study_refuses_bad_input(tmp_path):
    study_file = tmp_path / "study.yaml"
    study_file.write_text("out_dir: x\nbase: {}\ngrid: {}\n")
    with pytest.raises(ConfigError, match="unknown sections"):
        read_study(study_file)


def test_a_parent_with_another_schemes_options_can_be_compared_with_its_child():
    """A parent trained by a sweep over several schemes keeps their options (configs/lm.yaml's
    RoPE runs hold ``model.options.learned``); a child without them differs there, not in its
    architecture, and the difference is named instead of failing with a KeyError."""
    from lab.common.config import changed_keys
    from lab.training.extend import check_architecture

    parent = load_config(None, ["model.position=rope", "model.options.learned.max_positions=1024"])
    child = load_config(None, ["model.position=rope", "model.options.rope.theta=500000.0"])
    assert changed_keys(parent, child) == {
        "model.options.learned.max_positions": (1024, None),
        "model.options.rope.theta": (10000.0, 500000.0),
    }
    assert changed_keys(child, parent)["model.options.learned.max_positions"] == (None, 1024)
    check_architecture(parent, child)  # no error: the architecture is the same


def test_the_figure_names_one_line_per_arm_and_marks_the_training_lengths(study_records, tmp_path):
    """extend_figure draws one labelled line per arm (as trained, four zero-shot rules, three
    fine-tuned rules, from scratch: nine), each the geometric mean over its seeds, every seed a
    faint unlabelled dot, and one labelled vertical line per training length (64: the parents;
    256: fine-tuned and from scratch); the legend names them all and lies inside the figure.
    The report and the page show it."""
    from lab.lm.figures import arm_label, extend_figure

    _, groups = rep.grouped(study_records)
    figure = extend_figure(*rep.grouped(study_records))
    (ax,) = figure.axes
    labelled = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    arms = [arm_label(kind, rule, len(runs)) for (kind, rule), runs in groups.items()]
    assert len(arms) == 9 and arms[0] == "as trained (mean of 2 seeds)"
    assert [line.get_label() for line in labelled[:9]] == arms
    assert [line.get_label() for line in labelled[9:]] == [
        "training length 64: parents",
        "training length 256: fine-tuned, from scratch",
    ]
    assert [list(line.get_xdata()) for line in labelled[9:]] == [[64, 64], [256, 256]]
    trained = [math.exp(sum(_windows(2.8, 0.01 * s)) / 40) for s in (0, 1)]
    assert labelled[0].get_ydata()[1] == pytest.approx(math.sqrt(trained[0] * trained[1]))
    assert ax.get_xscale() == "log"
    figure.canvas.draw()
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == [line.get_label() for line in labelled]
    box, frame = legend.get_window_extent(), figure.bbox
    assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= frame.x1 and box.y1 <= frame.y1
    paths = rep.write_extend_report(study_records, tmp_path)
    assert paths["figure"] == tmp_path / "perplexity_vs_length.png"
    assert paths["figure"].read_bytes()[:4] == b"\x89PNG"
    line = "![perplexity against evaluation length, every arm](perplexity_vs_length.png)"
    assert line in paths["report"].read_text()
    folder = tmp_path / "lm-extend"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(study_records))
    assert "every arm](lm-extend/" not in rep.lm_extend_page(folder, "publish")  # no file yet
    (folder / "perplexity_vs_length.png").write_bytes(paths["figure"].read_bytes())
    page = rep.lm_extend_page(folder, "publish")
    assert "every arm](lm-extend/perplexity_vs_length.png)" in page
    no_windows = json.loads(json.dumps(study_records))
    for record in no_windows:
        for row in record["lengths"]:
            del row["window_losses"]
    with pytest.raises(ValueError, match="nothing to draw"):
        extend_figure(*rep.grouped(no_windows))


@pytest.mark.parametrize(
    "made_by, program",
    [
        ("python sweep.py --config configs/lm_quick.yaml", "extend-study"),
        ("python sweep.py --extend-study configs/lm_extend.yaml", "sweep"),
    ],
)
def test_a_folder_of_another_programs_results_is_refused_and_kept(tmp_path, made_by, program):
    """An extend study into a sweep's folder (or a sweep into a study's) would replace its
    sweep.json, results.json and figures; a folder with no recorded command is not judged."""
    from lab.sweeps.sweep import Sweep, prepare_out_dir

    timing = json.dumps({"command": made_by, "seconds": 12.0})
    (tmp_path / "sweep.json").write_text(timing)
    with pytest.raises(ConfigError, match="holds the results of `python sweep.py"):
        prepare_out_dir(Sweep(str(tmp_path), [], {}, {}), [], program=program)
    assert (tmp_path / "sweep.json").read_text() == timing
    (tmp_path / "sweep.json").write_text(json.dumps({"command": None, "seconds": 1.0}))
    prepare_out_dir(Sweep(str(tmp_path), [], {}, {}), [], program=program)


def test_a_study_into_a_sweeps_folder_exits_2_in_one_line(tmp_path, capsys):
    from lab.lm import extend_study

    (tmp_path / "study.yaml").write_text(STUDY)
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"command": "python sweep.py --quick"}))
    assert extend_study.main([str(tmp_path / "study.yaml"), *TINY, f"out_dir={out}"]) == 2
    assert "holds the results of `python sweep.py`" in one_error_line(capsys)
    assert sorted(p.name for p in out.iterdir()) == ["sweep.json"]


def test_a_length_scored_on_too_few_windows_has_empty_interval_cells_in_the_csv() -> None:
    """8x and 16x scored on fewer than 5 windows have no interval (null in eval.json, "n/a" in
    the report): the CSV once crashed formatting None, on every re-run of the study."""
    import csv
    import io

    committed = Path(__file__).resolve().parents[1] / "docs" / "results" / "lm-extend"
    results = json.loads((committed / "results.json").read_text())
    row = next(r for r in results[0]["lengths"] if r["supported"])
    row["perplexity_low"] = row["perplexity_high"] = None
    rows = list(csv.DictReader(io.StringIO(rep.results_csv(results))))
    blank = [r for r in rows if r["perplexity_low"] == "" and r["perplexity_high"] == ""]
    assert len(blank) == 1 and float(blank[0]["perplexity"]) == pytest.approx(row["perplexity"])
    assert len(rows) == sum(r["supported"] for run in results for r in run["lengths"])


def test_an_extend_study_of_an_exact_match_task_is_refused_before_training(tmp_path, capsys):
    """``--extend-study data.task=copy`` once trained every arm, then ended on a missing
    perplexity with an empty report."""
    import sweep as sweep_cli

    config = Path(__file__).resolve().parents[1] / "configs" / "lm_extend.yaml"
    out = tmp_path / "study"
    argv = ["--extend-study", str(config), "data.task=copy", f"out_dir={out}"]
    assert sweep_cli.main(argv) == 2
    assert one_error_line(capsys) == (
        "error: data.task='copy' is not a language-model task; the extend study compares "
        "perplexity by length: use one of text"
    )
    assert not out.exists()


@pytest.mark.parametrize("suffix", ["/", "//", "/./"])
def test_an_out_dir_spelled_with_extra_slashes_gives_the_run_dirs_its_runs_record(tmp_path, suffix):
    """``out_dir=runs/x/`` once made every child fail at its fine-tuning: the child recorded
    ``runs/x/finetune-...`` and was resumed as ``runs/x//finetune-...``."""
    (tmp_path / "study.yaml").write_text(STUDY)
    study = plan(read_study(tmp_path / "study.yaml", [*TINY, f"out_dir={tmp_path}/x{suffix}"]))
    for spec in [*study.parents, *study.scratch, *study.children]:
        run_dir = load_config(None, spec.overrides).run_dir
        assert run_dir == f"{tmp_path}/x/{spec.name}", run_dir


def test_arms_trained_at_other_lengths_are_never_paired(tmp_path):
    """eval.py over an extend study's folder groups its parent (L) and its from-scratch run
    (2L) as arms of their own; their "1x" are other lengths and windows, so the LM report
    compares neither (it stopped with "the windows cannot be paired" and wrote no report)."""
    from lab.lm.report import paired_rows
    from lab.reporting.aggregate import groups

    runs = []
    for seed in (0, 1):
        parent = _lm_record(seed, 64, {64: _windows(1.5, seed), 128: _windows(1.9, seed, 20)})
        scratch = _lm_record(
            seed, 128, {128: _windows(1.4, seed, 20), 256: _windows(1.6, seed, 10)}
        )
        runs += [parent, scratch]
    for run in runs:
        run |= {"task": "text", "position": "rope"}
        low, high = run["train_lengths"]  # as a run's config records them
        run["config"]["data"] = {"train_min_length": low, "train_max_length": high}
        for row in run["lengths"]:
            row["multiple"] = row["length"] // run["train_lengths"][1]
            row["label"] = f"{row['multiple']}x"
    arms = groups(runs, "text")
    assert [len(a) for a in arms.values()] == [2, 2]  # the parent's, the from-scratch run's
    assert paired_rows(runs, "text") == []


def tiny_text(tmp_path: Path) -> list[str]:
    """:data:`TINY` on a small corpus written into ``tmp_path`` (data.task=text, 16 tokens,
    256 held-out tokens scored at 1x and 2x)."""
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"the quick brown fox jumps over the lazy dog. " * 400)
    text = ["data.task=text", f"data.options.text.path={corpus}", "data.train_min_length=16"]
    text += ["data.train_max_length=16", "eval.lm_tokens=256", "eval.max_length_factor=2"]
    exact_match = ("data.task", "eval.max_length", "eval.samples", "eval.probe_samples")
    return [*(o for o in TINY if not o.startswith(exact_match)), *text]


def test_a_child_on_another_held_out_split_is_refused(tmp_path):
    """Another data.options.text.holdout_every would test the child on text its parent trained
    on: refused in one line before the child's folder exists."""
    train(load_config(None, [*tiny_text(tmp_path), f"run_dir={tmp_path / 'p'}"]))
    with pytest.raises(ConfigError, match="holdout_every cannot change when extending"):
        child_config(
            tmp_path / "p", ["data.options.text.holdout_every=5", f"run_dir={tmp_path / 'c'}"]
        )
    assert not (tmp_path / "c").exists()


def test_factor_given_on_the_command_line_is_the_study_files_key(tmp_path):
    """`factor=8` on the command line was read as a run-config key ('unknown config key
    factor'); it sets the study's factor, and a bad one is refused as in the file."""
    (tmp_path / "study.yaml").write_text(STUDY)
    assert read_study(tmp_path / "study.yaml", ["factor=4"])["factor"] == 4
    with pytest.raises(ConfigError, match="factor=3 is invalid; it must be a power of two"):
        read_study(tmp_path / "study.yaml", ["factor=3"])


def test_the_report_names_a_hybrid_or_windowed_model_as_every_report_does(study_records):
    """The extend report named no model, so a study of a hybrid layout or a sliding-window
    model read as one of plain RoPE; its first line names the parents' scheme as the other
    reports do (layout, window), with their size and task."""
    assert rep.model_line(study_records) == "Model: rope (d_model 32, 2 layers, 2 heads) on text."
    windowed = [{**r, "config": {**r["config"], "model": {**r["config"]["model"], "window": 16}}}
                for r in study_records]  # fmt: skip
    assert rep.model_line(windowed).startswith("Model: rope@16 (d_model 32")
    hybrid = [{**r, "config": {**r["config"], "model": {**r["config"]["model"], "nope_every": 2}}}
              for r in study_records]  # fmt: skip
    assert rep.model_line(hybrid).startswith("Model: rope,none (d_model 32")
    assert rep.report_text(hybrid).startswith("Model: rope,none")


def test_a_rope_rule_given_to_alibi_parents_names_the_rule_and_the_scheme():
    """An extend study of ALiBi parents with the RoPE rules said only that
    model.options.alibi.scaling is no option, a key the user never wrote; the line names the
    rule and the parents' scheme whose options it sets, for a fine-tuning and a zero-shot rule."""
    raw = read_study(CONFIGS / "lm_extend.yaml", ["model.position=alibi"])
    with pytest.raises(ConfigError) as error:
        plan(raw)
    assert str(error.value).startswith(
        "fine_tune.rules.linear sets options of the parents' scheme 'alibi': "
        "model.options.alibi.scaling is not an option of 'alibi'"
    )
    with pytest.raises(ConfigError, match=r"^zero_shot\.linear sets options of the parents' "):
        plan({**raw, "fine_tune": None})


def test_a_study_out_dir_inside_its_corpus_is_refused_by_its_own_name(tmp_path):
    """A study whose out_dir lies inside the corpus folder was refused, but the line named a
    parent's run_dir, a key the study file does not have; it names out_dir now."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(12):  # enough files to hold one out in every 10
        (corpus / f"{i}.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 40)
    out_dir = corpus / "study"
    raw = read_study(CONFIGS / "lm_extend.yaml", [f"data.options.text.path={corpus}"])
    with pytest.raises(ConfigError, match=r"^out_dir='.*/corpus/study' lies inside data.options"):
        plan({**raw, "out_dir": str(out_dir)})
    assert not out_dir.exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"scratch": 5}, "scratch=5 is not a mapping"),
        ({"base": 5}, "base=5 is not a mapping"),
        ({"fine_tune": 5}, "fine_tune=5 is not a mapping"),
        ({"zero_shot": [1]}, "zero_shot=[1] is not a mapping"),
        ({"zero_shot": {"linear": 3}}, "zero_shot.linear=3 is not a mapping"),
        ({"fine_tune": {"settings": [1]}}, "fine_tune.settings=[1] is not a mapping"),
        ({"fine_tune": {"rules": {"yarn": 4}}}, "fine_tune.rules.yarn=4 is not a mapping"),
        ({"fine_tune": {"rule": {}}}, "fine_tune has unknown keys ['rule']"),
    ],
)
def test_a_study_section_of_the_wrong_kind_is_one_line(tmp_path, edit, message):
    """``scratch: 5`` or ``zero_shot: [1]`` in a study file was an AttributeError traceback
    ('int' object has no attribute 'items'); each is one line naming the section."""
    study = OmegaConf.to_container(OmegaConf.load(CONFIGS / "lm_extend.yaml")) | edit
    OmegaConf.save(study, tmp_path / "study.yaml")
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        read_study(tmp_path / "study.yaml")


def test_bad_fine_tuning_settings_are_named_as_the_settings_not_a_rule():
    """A bad value under fine_tune.settings was blamed on the first rule (``fine_tune.rules.
    linear sets options of the parents' scheme``); it names fine_tune.settings."""
    raw = read_study(CONFIGS / "lm_extend.yaml")
    raw["fine_tune"]["settings"]["train"]["steps"] = "abc"
    with pytest.raises(ConfigError, match=r"^fine_tune\.settings: train\.steps: "):
        plan(raw)


def test_an_extend_study_past_its_corpus_is_refused_before_any_folder(tmp_path):
    """eval.lm_tokens past what the corpus holds out failed the parents at their start (exit
    1), leaving out_dir and a parent folder holding only a .lock; the study checks the
    corpus-sized limits of every run before any folder, as sweep.py and train.py do."""
    (tmp_path / "study.yaml").write_text(STUDY)
    past = [*tiny_text(tmp_path), "eval.lm_tokens=100000", f"out_dir={tmp_path / 'out'}"]
    raw = read_study(tmp_path / "study.yaml", past)
    with pytest.raises(ConfigError, match="give eval.lm_tokens <="):
        plan(raw)
    assert not (tmp_path / "out").exists()
