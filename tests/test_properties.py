"""The property report: numbers measured on every registered scheme's own code, the classic
demonstrations, attention maps, and the CLI's files."""

import json
import math
import re
from pathlib import Path

import pytest
import torch
from conftest import SHORT, one_error_line, tiny_config
from test_text import pattern_file, tiny_lm

import properties
from lab.common.config import load_config
from lab.evaluation.attention_maps import attention_maps
from lab.evaluation.evaluate import evaluate_run
from lab.properties import demos
from lab.properties.fingerprints import fingerprints_elsewhere, fingerprints_here
from lab.properties.markdown import nearest
from lab.properties.measure import defined_at, measure, uniqueness
from lab.properties.probe import fresh_scheme, make_probe, position_scores, probe_config
from lab.training.trainer import train
from model import Transformer
from model.position import available_schemes, scheme_class

SPAN = 32


def measured(name: str, **values):
    config = probe_config(name, **values)
    return measure(fresh_scheme(config), make_probe(config), SPAN, 8, None)


@pytest.mark.parametrize("name", available_schemes())
def test_every_scheme_is_deterministic_and_relative_where_it_says(name):
    row = measured(name)
    assert row.deterministic
    if scheme_class(name).relative:  # the class attribute, checked on the scores
        assert row.relativity < 1e-5
    assert row.defined_at_4x


def score_rounding(config) -> float:
    """How far two of NoPE's probe scores may differ by float32 rounding alone: each is
    ``fl(q.k) / sqrt(Dh)`` of the same unit vectors, and a Dh-term dot product in any summation
    order is within ``gamma_Dh = Dh u / (1 - Dh u)`` of the exact one (Higham, Accuracy and
    Stability, 3.1), the division adds ``u``; two scores differ by at most twice that. ``u``:
    float32 unit roundoff. A BLAS may sum entries in different orders (edge tiles), so equal
    scores are equal on one CPU only; the bound holds on every one."""
    u = torch.finfo(torch.float32).eps / 2
    dh = config.head_dim
    return 2 * (dh * u / (1 - dh * u) + u) / math.sqrt(dh)


def test_nope_is_non_unique_bidirectional_or_not():
    for causal in (False, True):
        config = probe_config("none", causal=causal)
        # 5.4e-7 at Dh = 16, far below the smallest unique scheme's 2.7e-4 (sinusoidal)
        assert measured("none", causal=causal).uniqueness <= score_rounding(config)


def test_absolute_schemes_are_unique_and_not_relative():
    for name in ("learned", "sinusoidal"):
        row = measured(name)
        assert row.uniqueness > 1e-5
        assert row.relativity > 1e-3


def test_rope_relativity_below_1e5_in_fp32():
    row = measured("rope")
    assert row.relativity < 1e-5
    assert row.uniqueness > 1e-3
    assert row.boundedness < 1.2  # a rotation keeps |q| and |k|


def test_alibi_bias_is_linear_in_distance_and_unbounded():
    scheme = fresh_scheme(probe_config("alibi"))
    heads = torch.tensor(demos.bias_per_head(scheme, 40))  # (H, distance)
    slopes = -heads[:, 1]
    expected = -slopes.unsqueeze(1) * torch.arange(40)
    torch.testing.assert_close(heads, expected, rtol=0, atol=1e-5)
    assert heads[0, 1].item() == pytest.approx(-0.25)  # 4 heads: 2**-2, 2**-4, ...
    row = measured("alibi")
    assert 3.5 < row.boundedness < 4.5  # max |bias| grows with the span: (4N-1)/(N-1)


def test_learned_is_undefined_past_its_table():
    config = probe_config("learned", options={"learned": {"max_positions": 16}})
    scheme, probe = fresh_scheme(config), make_probe(config)
    assert defined_at(scheme, probe, 16)
    assert not defined_at(scheme, probe, 17)
    assert measure(scheme, probe, 4, 8, None).defined_at_4x is False
    with pytest.raises(IndexError):
        position_scores(scheme, probe, torch.arange(17))


@pytest.mark.parametrize("name", available_schemes())
def test_probe_scores_include_every_bias_a_scheme_returns(name):
    """Trained-looking parameters (a fresh CoPE's vectors are zero): the probe's scores are
    q k^T / sqrt(Dh) plus the layer's own bias (CoPE builds it per window) and the shared one."""
    config = probe_config(name)
    scheme, probe = fresh_scheme(config), make_probe(config)
    with torch.no_grad():
        for parameter in scheme.parameters():
            parameter.normal_(generator=torch.Generator().manual_seed(0))
    t, positions = 8, torch.arange(8)
    shape = (1, config.n_heads, t, config.head_dim)
    q, k = probe.q.expand(shape), probe.k.expand(shape)
    added = scheme.embedding(positions, t)
    if added is not None:  # as position_scores adds an absolute encoding
        q = q + (added @ probe.wq).view(1, t, config.n_heads, -1).transpose(1, 2)
        k = k + (added @ probe.wk).view(1, t, config.n_heads, -1).transpose(1, 2)
    out = scheme.layer(0, q, k, scheme.prepare(positions, t))
    expected = (1.0 if out.scale is None else out.scale) * out.q @ out.k.transpose(-1, -2)
    expected = expected / config.head_dim**0.5
    for bias in (out.bias_window(), scheme.score_bias(positions, t)):
        expected = expected if bias is None else expected + bias
    torch.testing.assert_close(position_scores(scheme, probe, positions), expected[0])
    if name == "cope":  # the per-layer bias is really there
        assert (
            expected[0] - (out.q @ out.k.transpose(-1, -2))[0] / config.head_dim**0.5
        ).abs().max() > 0.1


def test_uniqueness_of_hand_made_scores():
    scores = torch.zeros(1, 3, 3)
    scores[0, 2] = 1.0  # rows 0 and 1 equal, row 2 differs by 1 in every entry
    assert uniqueness(scores) == 0.0
    scores[0, 1, 0] = 3.0
    assert uniqueness(scores) == pytest.approx(1.0)  # rows 1 and 2: distance sqrt(3)/sqrt(3)


def test_sinusoidal_distance_depends_on_the_gap_only():
    demo = demos.sinusoidal_demo()
    assert demo["spread"] < 1e-5
    assert demo["table"][0][:2] == [0.0, 1.0]  # sin(0), cos(0)
    first = demo["distance"][0]
    assert first[0] < first[2] < first[-1]  # grows with the gap, slowly


def test_rope_equal_scores_at_equal_distance_and_decay():
    demo = demos.rope_demo(starts=(0, 10, 100))
    assert demo["spread"] < 1e-5
    decay = demos.rope_decay(max_distance=1024)
    for bound in decay["bound"].values():
        assert bound[-1] < 0.5 * bound[0]  # the upper bound decays with distance
    # a larger base rotates slower, so its bound decays later
    mid = nearest(decay["distances"], 16)
    assert decay["bound"]["1000000"][mid] > decay["bound"]["10000"][mid]


def test_permutation_equivariance_only_without_positions_and_mask():
    assert demos.permutation_gap("none", causal=False) < 1e-5
    assert demos.permutation_gap("none", causal=True) > 1e-2
    assert demos.permutation_gap("learned", causal=False) > 1e-2


def test_attention_maps_reproduce_the_attention_output():
    torch.manual_seed(0)
    model = Transformer(probe_config("alibi", n_layers=2)).eval()
    idx = torch.randint(64, (1, 9))
    outputs, values = [], []
    block = model.blocks[1].attn
    block.register_forward_hook(lambda m, i, o: outputs.append(o))
    block.register_forward_pre_hook(lambda m, i: values.append(m.qkv(i[0])))
    maps = attention_maps(model, idx)
    assert len(maps) == 2 and maps[0].shape == (4, 9, 9)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(4, 9))
    assert maps[0].triu(1).abs().max() == 0  # causal
    v = values[0].view(1, 9, 3, 4, 16)[:, :, 2].transpose(1, 2)  # (1, H, T, Dh)
    y = (maps[1].unsqueeze(0) @ v).transpose(1, 2).reshape(1, 9, 64)
    torch.testing.assert_close(block.out(y), outputs[0], atol=1e-5, rtol=1e-4)


def test_cli_writes_table_json_and_pictures(tmp_path, capsys):
    assert properties.main(["--position", "none", "alibi", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "properties.json").read_text())
    assert [row["scheme"] for row in data["rows"]] == ["none", "alibi"]
    assert data["rows"][0]["uniqueness"] <= score_rounding(probe_config("none"))
    text = (tmp_path / "properties.md").read_text()
    assert "| alibi |" in text
    criteria = ["uniqueness", "boundedness", "relativity", "extrapolation", "determinism"]
    assert "The five criteria: " + ", ".join(criteria) + "." in text
    header = next(line for line in text.splitlines() if line.startswith("| scheme |"))
    columns = [c.strip().split(":")[0] for c in re.split(r"(?<!\\)\|", header)[2:-1]]
    assert list(dict.fromkeys(columns)) == criteria  # every column under one criterion's name
    row = next(line for line in text.splitlines() if line.startswith("| alibi |"))
    assert row.count("|") == len(re.split(r"(?<!\\)\|", header)) - 1  # | in headers escaped
    assert list(data["criteria"]) == criteria
    fields = [f for group in data["criteria"].values() for f in group]
    assert sorted(fields) == sorted(set(data["rows"][0]) - {"scheme"})  # each field once
    extrapolation = ["max_length", "defined_at_4x", "exact_match_2x", "perplexity_2x"]
    assert data["criteria"]["extrapolation"] == extrapolation
    assert data["notes"] == [] and "Notes:" not in text
    for name in ("similarity", "scores", "sinusoidal", "rope_decay", "bias_per_head"):
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert list(tmp_path.glob("events.out.tfevents.*"))
    assert properties.main(["--position", "nope", "--out", str(tmp_path)]) == 2
    assert "'nope' is not a registered scheme" in capsys.readouterr().err


def test_cli_measures_a_trained_run_and_draws_its_attention(tmp_path, straight):
    config, _ = straight
    out = tmp_path / "report"
    assert properties.main(["--position", "rope", "--run", config.run_dir, "--out", str(out)]) == 0
    rows = json.loads((out / "properties.json").read_text())["rows"]
    assert [row["scheme"] for row in rows] == ["rope", "rope (trained)"]
    assert rows[1]["relativity"] < 1e-5  # trained q/k content does not enter: still relative
    assert rows[1]["exact_match_2x"] is None  # the run has no eval.json
    for name in ("attention_train", "attention_4x"):
        assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


def test_out_holding_a_users_properties_md_is_refused_and_its_own_report_replaced(tmp_path, capsys):
    """A user's properties.md (docs/properties.md is one) was replaced without a word; a report
    properties.py wrote is replaced by the next."""
    user = tmp_path / "notes"
    user.mkdir()
    (user / "properties.md").write_text("# My notes on schemes\n")
    assert properties.main(["--position", "none", "--out", str(user)]) == 2
    assert "holds properties.md that properties.py did not write" in one_error_line(capsys)
    assert (user / "properties.md").read_text() == "# My notes on schemes\n"
    ours = tmp_path / "report"
    assert properties.main(["--position", "none", "--out", str(ours)]) == 0
    assert properties.main(["--position", "none", "--out", str(ours)]) == 0
    capsys.readouterr()


def test_a_fifo_in_out_is_refused_at_once_and_a_run_in_training_is_not_measured(
    tmp_path, straight, capsys
):
    """A FIFO named properties.md in --out was opened to read its first bytes and blocked for
    good; a run another process was training was measured mid-training and labelled
    '(trained)'. Each is one line, nothing measured."""
    import os

    from lab.common.runlock import run_lock

    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "properties.md")
    assert properties.main(["--position", "none", "--out", str(fifo)]) == 2
    assert "holds properties.md that properties.py did not write" in one_error_line(capsys)
    config, _ = straight
    out = tmp_path / "report"
    with run_lock(config.run_dir):  # as a training process holds it
        assert (
            properties.main(["--position", "none", "--run", config.run_dir, "--out", str(out)]) == 2
        )
    assert "is in use by another training process" in one_error_line(capsys)
    assert not (out / "properties.md").exists()


def test_figure_names_are_the_reports_own_and_an_earlier_reports_maps_go(
    tmp_path, straight, capsys
):
    """A user's scores.png in --out was replaced at exit 0, and a folder named rope_decay.png
    failed with a raw error after most of the report was written; both are refused at once.
    An earlier report's attention maps (made with --run) stayed beside a report without one."""
    for name, make in (("scores.png", "file"), ("rope_decay.png", "folder")):
        out = tmp_path / name.split(".")[0]
        out.mkdir()
        if make == "file":
            (out / name).write_text("my notes\n")
        else:
            (out / name).mkdir()
        assert properties.main(["--position", "none", "--out", str(out)]) == 2
        assert f"holds {name} that properties.py did not write" in one_error_line(capsys)
        assert sorted(p.name for p in out.iterdir()) == [name]
    config, _ = straight
    report = tmp_path / "report"
    assert (
        properties.main(["--position", "rope", "--run", config.run_dir, "--out", str(report)]) == 0
    )
    assert (report / "attention_train.png").is_file()
    assert properties.main(["--position", "rope", "--out", str(report)]) == 0
    assert (
        not (report / "attention_train.png").exists() and not (report / "attention_4x.png").exists()
    )
    capsys.readouterr()


def test_out_in_a_runs_or_a_sweeps_folder_is_refused(tmp_path, straight, capsys):
    """--out is checked as every output folder is: a run's folder (its report beside the run's
    files) or a sweep's is one line, nothing written."""
    config, _ = straight
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / "sweep.json").write_text("{}")
    for out, message in ((config.run_dir, "holds another run"), (sweep_dir, "is a sweep's folder")):
        before = sorted(Path(out).iterdir())
        assert properties.main(["--position", "none", "--out", str(out)]) == 2
        assert message in one_error_line(capsys) and sorted(Path(out).iterdir()) == before


@pytest.mark.parametrize(
    ("setting", "label"),
    [("model.heads=rope:1+none:1", "rope:1+none:1"), ("model.layout=rope,none", "rope,none")],
)
def test_a_trained_hybrid_row_is_named_by_its_layout(tmp_path, setting, label):
    """A head split and a per-layer layout of the same two schemes are different models: the
    trained row names each as the reports do (it read "rope+none (trained)" for both)."""
    run = tmp_path / "run"
    train(tiny_config(run, *SHORT, "model.n_layers=2", "model.n_heads=2", setting))
    out = tmp_path / "report"
    assert properties.main(["--position", "none", "--run", str(run), "--out", str(out)]) == 0
    rows = json.loads((out / "properties.json").read_text())["rows"]
    assert [row["scheme"] for row in rows] == ["none", f"{label} (trained)"]


def test_a_trained_rope_with_an_extension_rule_is_named_by_its_rule(tmp_path):
    """A RoPE run trained (or fine-tuned) with YaRN was named "rope (trained)" as plain RoPE;
    its row names the rule as the extend report does."""
    run = tmp_path / "run"
    rule = ["model.options.rope.scaling=yarn", "model.options.rope.scaling_factor=2"]
    train(tiny_config(run, *SHORT, "model.position=rope", *rule))
    out = tmp_path / "report"
    assert properties.main(["--position", "none", "--run", str(run), "--out", str(out)]) == 0
    rows = json.loads((out / "properties.json").read_text())["rows"]
    assert [row["scheme"] for row in rows] == ["none", "rope yarn s=2 (trained)"]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("", "run folder '' is empty; give a run's folder"),
        ("README.md", "'README.md' is a file, not a run folder"),
        (".", "no checkpoint in '.' (expected checkpoint.pt); train it first with: python "
              "train.py run_dir=runs/NAME, and give that folder"),
    ],
)  # fmt: skip
def test_a_run_that_is_no_run_folder_is_named_as_what_it_is(
    tmp_path, monkeypatch, capsys, given, message
):
    """``--run ""`` read as the current folder and suggested ``train.py run_dir=.`` (which
    train.py refuses); a file was "a folder that does not exist". Each is one line saying what
    it is, and nothing is written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("notes\n")
    assert properties.main(["--run", given, "--out", "report"]) == 2
    assert one_error_line(capsys) == f"error: {message}"
    assert not (tmp_path / "report").exists()


def test_a_language_model_run_reports_its_perplexity_at_2x_and_its_windows(tmp_path):
    """An LM run's eval.json has no exact-match (``summary.perplexity``, not ``summary.at``):
    its row takes the perplexity at 2x, and its attention maps show whole windows (its only
    prompt is one byte)."""
    run = tmp_path / "run"
    train(load_config(None, tiny_lm(run, pattern_file(tmp_path), "eval.max_length_factor=2")))
    evaluation = evaluate_run(run, device="cpu")
    out = tmp_path / "report"
    assert properties.main(["--position", "rope", "--run", str(run), "--out", str(out)]) == 0
    data = json.loads((out / "properties.json").read_text())
    row = data["rows"][1]
    assert row["scheme"] == "rope (trained)" and row["exact_match_2x"] is None
    assert row["perplexity_2x"] == evaluation["summary"]["perplexity"]["2x"]
    assert data["notes"] == []
    for name in ("attention_train", "attention_4x"):
        assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert f"| {row['perplexity_2x']:.3g} |" in (out / "properties.md").read_text()


def test_a_short_learned_table_is_measured_within_it_and_its_4x_map_left_out(tmp_path):
    """A learned table as long as the training sequences (10 rows: copy at length 4) cannot
    encode the 64 positions the report measures nor 4x the training length: the trained row
    is measured over the N its table holds and the 4x attention map is left out, each with
    one note, not an IndexError."""
    run = tmp_path / "run"
    train(
        tiny_config(run, *SHORT, "model.position=learned", "model.options.learned.max_positions=10")
    )
    out = tmp_path / "report"
    assert properties.main(["--position", "rope", "--run", str(run), "--out", str(out)]) == 0
    data = json.loads((out / "properties.json").read_text())
    assert data["rows"][1]["scheme"] == "learned (trained)" and data["rows"][1]["max_length"] == 10
    assert data["rows"][1]["defined_at_4x"] is False
    assert data["notes"] == [
        "learned (trained): measured over N = 2, not 64: it encodes only 10 positions and "
        "boundedness reads positions up to 4N - 1",
        "attention_4x.png not drawn: at 4x (16) the model reads 18 tokens, past the 10 "
        "positions its learned scheme encodes",
    ]
    assert (out / "attention_train.png").exists() and not (out / "attention_4x.png").exists()
    text = (out / "properties.md").read_text()
    assert all(f"- {note}" in text for note in data["notes"])


def test_a_learned_table_too_short_to_measure_is_one_error_line(tmp_path, capsys):
    run = tmp_path / "run"
    lengths = ["data.train_min_length=2", "data.train_max_length=2"]
    train(
        tiny_config(
            run, *SHORT, *lengths, "model.position=learned", "model.options.learned.max_positions=6"
        )
    )
    assert properties.main(["--position", "none", "--run", str(run), "--out", str(tmp_path)]) == 2
    err = one_error_line(capsys)
    assert f"run {run}: its learned scheme encodes only 6 positions" in err
    assert "needs at least 8" in err


def test_fingerprints_in_a_fresh_process_match_this_ones():
    """Determinism across processes: a spawned process (nothing inherited) hashes the same
    scores as this one, whatever this process's seed."""
    torch.manual_seed(1234)
    names = ["learned", "rope", "alibi"]
    elsewhere = fingerprints_elsewhere(names, 16)
    assert elsewhere == fingerprints_here(names, 16)
    assert len(set(elsewhere.values())) == 3


def test_a_failing_fingerprint_process_is_one_line():
    with pytest.raises(RuntimeError, match=r"^fingerprint process failed: .*'nope'") as error:
        fingerprints_elsewhere(["nope"], 16)
    assert "\n" not in str(error.value)
