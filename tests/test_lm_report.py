"""The language-model report: its CSV rows, tables, paired tests, findings, figures and TensorBoard
curves, made from hand-built ``eval.json`` dicts that follow the LM record's layout; and a sweep
of synthetic runs only writes exactly the files it wrote before LM records existed."""

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from lab.common.files import file_sha256
from lab.common.outputs import PROJECT, sweep_file_record
from lab.lm import findings
from lab.lm.aggregate import cell, loss_family, paired, ratio, window_p_value, window_p_values
from lab.lm.figures import log_binned, perplexity_figure, position_figure
from lab.lm.report import LM_CSV_COLUMNS, lm_markdown, perplexity_table, write_lm_reports
from lab.lm.report import LM_REPORT_NAMES as REPORT_NAMES_LM
from lab.reporting.pages import RESULTS
from lab.reporting.report import REPORT_NAMES, write_reports

TRAIN = 16
LABELS = ("1x", "2x", "4x", "8x", "16x")
TOKENS = 512


def lm_record(
    scheme: str,
    seed: int,
    losses: dict[str, float],
    *,
    unsupported: tuple[str, ...] = (),
    noise: float = 0.05,
    task: str = "text",
) -> dict:
    """An LM ``eval.json`` dict (kind "lm", schema 1) of one run trained at ``TRAIN`` tokens.

    Each length scores the first ``TOKENS`` held-out tokens in ``TOKENS // length`` windows;
    ``losses`` gives the mean loss at each label, the window losses spread around it by a fixed
    pattern (the same windows for every scheme), scaled by ``noise`` and shifted by the seed.
    """
    rng = np.random.default_rng(1000 + seed)  # the same window pattern for every scheme
    lengths = []
    for k, label in enumerate(LABELS):
        length = TRAIN * 2**k
        windows = TOKENS // length
        row = {"length": length, "multiple": 2**k, "label": label, "windows": windows}
        row["tokens_scored"] = windows * length
        if label in unsupported:
            row |= dict.fromkeys(("loss", "perplexity", "perplexity_low", "perplexity_high"))
            row |= {"window_losses": [], "supported": False, "reason": f"learned table of {TRAIN}"}
        else:
            pattern = rng.standard_normal(windows)
            window_losses = losses[label] + 0.01 * seed + noise * (pattern - pattern.mean())
            loss = float(window_losses.mean())
            row |= {"loss": loss, "perplexity": math.exp(loss)}
            row |= {
                "perplexity_low": math.exp(loss - 0.02),
                "perplexity_high": math.exp(loss + 0.02),
            }
            row |= {"window_losses": window_losses.tolist(), "supported": True, "reason": None}
        lengths.append(row)
    longest = max(row["length"] for row in lengths if row["supported"])
    position_loss = [losses["1x"] + 0.5 / (1 + p) + 0.001 * p for p in range(longest)]
    return {
        "kind": "lm",
        "schema_version": 1,
        "run_dir": f"runs/lm/{scheme}-{task}-seed{seed}",
        "config": {"model": {"causal": True}, "eval": {"position_options": {}}, "data": {}},
        "position": scheme,
        "task": task,
        "seed": seed,
        "train_lengths": [TRAIN, TRAIN],
        "train_steps": 100,
        "reached_target": None,
        "eval_seconds": 1.0,
        "checkpoint": {},
        "machine": {},
        "device": "cpu",
        "dtype": "float32",
        "corpus": {
            "source": "Python 3.11 standard library (.py files)",
            "sha256": "ab" * 32,
            "python": "3.11.2",
            "files": [90, 10],
            "heldout_tokens": 4096,
        },
        "stride": None,
        "lengths": lengths,
        "positions": {"length": longest, "loss": position_loss},
        "summary": {
            "perplexity": {row["label"]: row["perplexity"] for row in lengths},
            "notes": [],
        },
        "passkey": None,
    }


def curve(one_x: float, *growth: float) -> dict[str, float]:
    """Mean loss per label: ``one_x`` at 1x, then 1x plus log(growth) (perplexity times growth)."""
    return {label: one_x + math.log(g) for label, g in zip(LABELS, (1.0, *growth), strict=True)}


TEXTBOOK = {  # perplexity at 1x/2x/4x/8x/16x as the issue measured them, roughly
    "alibi": curve(math.log(5.45), 0.98, 0.97, 0.97, 0.96),
    "sinusoidal": curve(math.log(6.0), 1.8, 2.9, 3.6, 4.3),
    "rope": curve(math.log(4.66), 1.2, 1.54, 2.4, 3.4),
}


def sweep(table: dict[str, dict[str, float]], seeds=(0, 1), **kwargs) -> list[dict]:
    return [lm_record(s, seed, losses, **kwargs) for s, losses in table.items() for seed in seeds]


def test_csv_has_one_row_per_run_and_length_with_the_records_values(tmp_path: Path) -> None:
    results = sweep(TEXTBOOK)
    paths = write_lm_reports(results, tmp_path)
    with open(paths["lm_csv"]) as file:
        rows = list(csv.DictReader(file))
    assert tuple(rows[0]) == LM_CSV_COLUMNS
    assert len(rows) == 3 * 2 * 5
    # runs in scheme registration order (sinusoidal, rope, alibi), then seed, then length
    assert [r["position"] for r in rows[::10]] == ["sinusoidal", "rope", "alibi"]
    first = rows[0]
    assert first["run"] == "sinusoidal-text-seed0" and first["label"] == "1x"
    assert (first["length"], first["multiple"], first["windows"]) == ("16", "1", "32")
    assert first["tokens_scored"] == "512" and first["supported"] == "True"
    assert math.isclose(float(first["perplexity"]), 6.0, rel_tol=1e-9)
    assert math.isclose(float(first["loss"]), math.log(6.0), rel_tol=1e-12)
    alibi_seed1_16x = rows[-1]
    assert alibi_seed1_16x["seed"] == "1" and alibi_seed1_16x["label"] == "16x"
    assert math.isclose(float(alibi_seed1_16x["perplexity"]), 5.45 * 0.96 * math.exp(0.01))
    saved = json.loads(paths["lm_json"].read_text())
    assert [(r["position"], r["seed"]) for r in saved] == [
        (s, seed) for s in ("sinusoidal", "rope", "alibi") for seed in (0, 1)
    ]


def test_unsupported_lengths_are_blank_in_the_csv_and_named_in_the_tables(tmp_path: Path) -> None:
    results = sweep({"learned": curve(math.log(5.5), 4.0, 4.4, 5.0, 6.0)}, unsupported=LABELS[1:])
    write_lm_reports(results, tmp_path)
    with open(tmp_path / "lm_results.csv") as file:
        rows = [r for r in csv.DictReader(file) if r["label"] == "4x"]
    assert rows[0]["supported"] == "False" and rows[0]["perplexity"] == ""
    table = perplexity_table(results, "text")
    assert f"n/a (learned table of {TRAIN})" in table
    assert cell(results, "4x").reason == f"learned table of {TRAIN}"


def test_perplexity_cells_mean_over_seeds_with_a_t_interval_else_the_bootstrap() -> None:
    runs = [lm_record("alibi", seed, TEXTBOOK["alibi"]) for seed in (0, 1)]
    two = cell(runs, "1x")
    values = [5.45 * math.exp(0.01 * s) for s in (0, 1)]
    mean = sum(values) / 2
    half = 12.7062 * abs(values[1] - values[0]) / 2  # t(0.975, 1) * sd / sqrt(2)
    assert (two.seeds, two.interval) == (2, "t")
    assert math.isclose(two.mean, mean) and math.isclose(two.high - two.mean, half, rel_tol=1e-5)
    one = cell(runs[:1], "1x")
    assert one.interval == "bootstrap"
    assert math.isclose(one.low, 5.45 * math.exp(-0.02)) and math.isclose(
        one.high, 5.45 * math.exp(0.02)
    )
    assert math.isclose(ratio(runs, "4x"), 0.97, rel_tol=1e-9)
    table = perplexity_table(runs, "text").splitlines()
    headers = ["scheme", "parameters", "seeds", *LABELS]
    assert [c.strip() for c in table[0].split("|")[1:-1]] == headers
    assert table[2].split("|")[4].strip() == f"{mean:.2f} [{mean - half:.2f}, {mean + half:.2f}]"


def test_paired_tests_are_over_seeds_and_windows_only_describe_checkpoints() -> None:
    better = sweep(
        {"rope": curve(2.0, 1, 1, 1, 1), "alibi": curve(2.1, 1, 1, 1, 1)}, seeds=range(6)
    )
    rope, alibi = better[:6], better[6:]
    test = paired(rope, alibi, "1x")
    assert test.differences == pytest.approx((-0.1,) * 6) and test.p_sign_flip == 2 / 64
    assert all(p < 1e-6 for p in window_p_values(rope, alibi, "1x"))  # all 32 windows lower
    ((label, a, b, same, holm_p),) = loss_family({"rope": rope, "alibi": alibi}, ["1x"])
    assert (label, a, b, holm_p) == ("1x", "rope", "alibi", 2 / 64)  # one comparison: Holm x1
    # three seeds: every window lower in each, yet the sign-flip test cannot reject (p >= 1/4)
    three = loss_family({"rope": rope[:3], "alibi": alibi[:3]}, ["1x"])
    assert three[0][4] == 0.25
    tie = paired(rope, rope, "1x")
    assert tie.mean == 0 and window_p_values(rope, rope, "1x") == (1.0,) * 6
    # per-seed differences of both signs: each checkpoint pair differs, the schemes do not
    mixed = [
        lm_record("alibi", s, curve(2 + d, 1, 1, 1, 1)) for s, d in enumerate((0.1, -0.1, 0.05))
    ]
    split = paired(rope[:3], mixed, "1x")
    assert split.differences == pytest.approx((-0.1, 0.1, -0.05))
    assert all(p < 1e-6 for p in window_p_values(rope[:3], mixed, "1x"))
    assert split.low < 0 < split.high and split.p_t > 0.5
    reversed_windows = []  # the same window losses in reverse order: W+ = W- exactly, p = 1
    for run in rope[:3]:
        row = dict(run["lengths"][0], window_losses=run["lengths"][0]["window_losses"][::-1])
        reversed_windows.append(dict(run, position="alibi", lengths=[row]))
    assert window_p_values(rope, reversed_windows, "1x") == pytest.approx((1.0,) * 3)


def test_windows_that_differ_cannot_be_paired() -> None:
    a = lm_record("rope", 0, TEXTBOOK["rope"])
    b = lm_record("alibi", 0, TEXTBOOK["alibi"])
    b["lengths"][0] = dict(
        b["lengths"][0], windows=31, window_losses=b["lengths"][0]["window_losses"][:-1]
    )
    with pytest.raises(ValueError, match="cannot be paired"):
        window_p_value(a["lengths"][0], b["lengths"][0])


def verdict(line: str) -> str:
    return line.split("**")[1]


def test_findings_agree_on_the_textbook_picture_and_flip_with_the_numbers() -> None:
    table = {
        **TEXTBOOK,
        "none": curve(math.log(7.2), 1.2, 1.36, 1.6, 1.9),
        "learned": curve(math.log(5.5), 3.0, 4.4, 5.0, 6.0),
    }
    runs = sweep(table)  # every seed shifted alike: the per-seed figures have no spread
    assert verdict(findings.press(runs)) == "agrees"
    assert f"alibi growth {math.log(0.97):+.3f} nats (x0.97" in findings.press(runs)
    assert f"sinusoidal growth {math.log(2.9):+.3f} nats (x2.90" in findings.press(runs)
    assert verdict(findings.rope_degrades(runs)) == "agrees"
    assert verdict(findings.learned_fails(runs)) == "agrees"
    assert verdict(findings.kazemnejad(runs)) == "agrees"
    assert verdict(findings.peng(runs)) == "not measured"  # no RoPE run under a scaling rule
    # RoPE 4.66 against ALiBi 5.45 at 1x: ALiBi 17% worse, beyond the 5% margin
    at_length = findings.press_at_length(runs)
    assert verdict(at_length) == "disagrees" and "rope - alibi -0.157 nats (x0.86" in at_length
    flipped = sweep(
        {
            **table,
            "alibi": curve(math.log(5.45), 1.3, 1.5, 1.6, 1.7),  # alibi grows 50%
            "rope": curve(math.log(4.66), 0.99, 0.98, 0.98, 0.98),  # rope holds
            "learned": curve(math.log(5.5), 1.1, 1.2, 1.3, 1.4),  # learned holds
            "none": curve(math.log(7.2), 3.0, 5.0, 6.0, 7.0),  # NoPE explodes
        }
    )
    assert verdict(findings.press(flipped)) == "disagrees"
    assert verdict(findings.rope_degrades(flipped)) == "disagrees"
    assert verdict(findings.learned_fails(flipped)) == "disagrees"
    assert verdict(findings.kazemnejad(flipped)) == "disagrees"
    barely = sweep({**table, "rope": curve(math.log(4.66), 1.0, 1.002, 1.0, 1.0)})
    assert verdict(findings.rope_degrades(barely)) == "inconclusive"  # inside the margin
    unsupported = sweep({"learned": table["learned"]}, unsupported=LABELS[1:])
    line = findings.learned_fails(unsupported)
    assert verdict(line) == "agrees" and "learned table of 16" in line
    assert verdict(findings.press(sweep({"alibi": TEXTBOOK["alibi"]}))) == "not measured"


def test_seeds_that_disagree_leave_a_finding_inconclusive_and_one_seed_decides_nothing() -> None:
    runs = sweep({"rope": TEXTBOOK["rope"]}, seeds=(0,))
    assert "inconclusive: one seed gives no interval" in findings.rope_degrades(runs)
    spread = [  # RoPE's growth at 4x: x1.54 in one seed, x0.95 in the other
        lm_record("rope", 0, curve(math.log(4.66), 1.2, 1.54, 2.4, 3.4)),
        lm_record("rope", 1, curve(math.log(4.66), 1.0, 0.95, 1.0, 1.0)),
    ]
    line = findings.rope_degrades(spread)
    assert verdict(line) == "inconclusive" and "at 2 seeds the interval is [" in line


def test_scaling_rules_are_compared_with_rope_as_trained() -> None:
    runs = sweep({"rope": TEXTBOOK["rope"]})
    for rule, growth in (("ntk", 1.1), ("yarn", 1.2)):
        for seed in (0, 1):
            run = lm_record("rope", seed, curve(math.log(4.66), growth, growth, 2, 2))
            run["config"]["eval"]["position_options"] = {"scaling": rule, "scaling_factor": 4}
            runs.append(run)
    line = findings.peng(runs)
    assert verdict(line) == "agrees" and line.count(": agrees, [") == 2
    for run in runs[-2:]:  # yarn far worse at 4x in both seeds
        run["lengths"][2]["loss"] += 5
        run["lengths"][2]["perplexity"] *= math.exp(5)
    assert verdict(findings.peng(runs)) == "disagrees"


def test_report_files_and_figures(tmp_path: Path) -> None:
    results = sweep(TEXTBOOK)
    paths = write_lm_reports(results, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["lm_results.csv", "lm_results.json", "lm_report.md"]
        + ["perplexity_vs_length.png", "loss_vs_position.png"]
    )
    for key in ("perplexity_plot", "position_plot"):
        assert paths[key].read_bytes().startswith(b"\x89PNG")
    figure = perplexity_figure(results)
    ax = figure.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [line.get_label() for line in ax.get_lines()][1:] == [
        "sinusoidal (mean of 2)",
        "rope (mean of 2)",
        "alibi (mean of 2)",
    ]
    assert list(ax.get_lines()[0].get_xdata()) == [TRAIN, TRAIN]  # the training length
    assert list(ax.get_lines()[1].get_xdata()) == [16, 32, 64, 128, 256]
    position = position_figure(results).axes[0]
    assert position.get_xscale() == "log" and len(position.get_lines()) == 4
    markdown = paths["lm_markdown"].read_text()
    assert markdown == lm_markdown(results, tmp_path)
    assert "![perplexity against evaluation length](perplexity_vs_length.png)" in markdown
    assert (
        "### text: paired tests between schemes" in markdown and "- Press et al. 2022" in markdown
    )
    assert "sha256 abababababab" in markdown


def test_log_binned_means_cover_every_position_once() -> None:
    loss = [float(p) for p in range(1000)]
    positions, means = log_binned(loss, 50)
    assert positions[-1] == 999 and len(positions) <= 50 and np.all(np.diff(positions) > 0)
    starts = np.concatenate([[0], positions[:-1] + 1])
    assert means == pytest.approx([(s + e) / 2 for s, e in zip(starts, positions, strict=True)])
    assert list(log_binned([3.0, 1.0])[0]) == [0, 1]
    with pytest.raises(ValueError, match="log_binned"):
        log_binned([])


def test_lm_tensorboard_curves_and_layout(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lab.evaluation.tensorboard import write_tensorboard

    record = lm_record("alibi", 0, TEXTBOOK["alibi"])
    write_tensorboard(record, tmp_path)
    write_tensorboard(record, tmp_path)  # a new evaluation replaces the old one
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0}).Reload()
    ppl = events.Scalars("lm/perplexity")
    assert [e.step for e in ppl] == [16, 32, 64, 128, 256]
    assert ppl[0].value == pytest.approx(record["lengths"][0]["perplexity"], rel=1e-6)
    loss = events.Scalars("lm/loss_at_position")
    assert loss[0].step == 0 and loss[-1].step == 255 and len(loss) <= 200
    assert loss[0].value == pytest.approx(record["positions"]["loss"][0], rel=1e-6)
    tags = events.Tags()["scalars"]
    assert "compare/text/lm_perplexity_by_length_set_smoothing_0" in tags
    assert sorted(events.Tags()["images"]) == [
        "figures/loss_vs_position",
        "figures/perplexity_vs_length",
    ]


def test_write_reports_sends_lm_runs_to_their_own_files(tmp_path: Path) -> None:
    write_reports(sweep(TEXTBOOK), tmp_path / "lm")
    assert not any((tmp_path / "lm" / name).exists() for name in REPORT_NAMES)
    assert (tmp_path / "lm" / "lm_report.md").is_file()


def test_a_synthetic_sweep_writes_what_it_wrote_before(tmp_path: Path) -> None:
    """The committed ablation's results.json gives back its committed results.csv and report.md
    byte for byte (no passkey section or figure without passkey grids), and the report names
    only synthetic files."""
    folder = tmp_path / "ablation"
    shutil.copytree(RESULTS / "ablation", folder)
    results = json.loads((folder / "results.json").read_text())
    paths = write_reports(results, tmp_path / "out")
    for name in ("results.csv", "results.json", "report.md"):
        assert (tmp_path / "out" / name).read_bytes() == (folder / name).read_bytes(), name
    assert not (tmp_path / "out" / "passkey_grid.png").exists()
    assert sorted(paths) == [
        "attention",  # its runs hold diagnostics (docs/diagnostics.md)
        "csv",
        "json",
        "learning_speed",
        "markdown",
        "order_sensitivity",
        "plot",
    ]
    assert not (tmp_path / "out" / "lm_report.md").exists()


def test_an_lm_sweep_publishes_its_page_from_the_files_beside_it(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """``python sweep.py --publish --lm RUNS`` copies the LM report's files into docs/results/lm/
    and writes docs/results/lm.md from them: command, runs, seeds, time and machine once, the
    perplexity table and the findings; then the committed pages are current."""
    from lab.reporting import readme
    from lab.reporting.study_pages import lm_page

    results_dir = tmp_path / "docs" / "results"
    shutil.copytree(RESULTS, results_dir)
    shutil.copyfile(readme.README, tmp_path / "README.md")
    monkeypatch.setattr(readme, "RESULTS", results_dir)
    monkeypatch.setattr(readme, "README", tmp_path / "README.md")
    assert readme.main([]) == 0  # the sandbox current first
    runs = tmp_path / "runs" / "lm"
    # hand-made records, not whole eval.json files: as an earlier version's, publishing reads
    # them without the schema and consistency checks it gives current ones
    results = [r | {"schema_version": 0} for r in sweep(TEXTBOOK)]
    write_lm_reports(results, runs)
    command = "python sweep.py --config configs/lm.yaml --workers 1"  # the page's, 1 worker
    machine = {"seconds": 90.0, "workers": 1, "runs": {"trained": 6}, "machine": "a test CPU"}
    machine["files"] = {p.name: file_sha256(p) for p in runs.iterdir() if p.is_file()}
    machine["sweep_file"] = sweep_file_record(PROJECT / "configs" / "lm.yaml")
    (runs / "sweep.json").write_text(json.dumps({"command": command, **machine}))
    capsys.readouterr()
    assert readme.main(["--lm", str(runs)]) == 0
    assert "rewrote 1 of" in capsys.readouterr().out  # the LM page only
    page = (results_dir / "lm.md").read_text()
    assert page == lm_page(results_dir / "lm", readme.PUBLISH)
    provenance = f"`{command}`: 6 runs, seed(s) 0, 1, in **1.5 min**"  # the recorded command
    assert page.count(provenance) == 1 and "with 1 worker(s) on a test CPU." in page
    assert "cores were shared" not in page  # no family stamp
    assert perplexity_table(results, "text") in page
    assert "- Press et al. 2022 (ALiBi's perplexity stays near its 1x value" in page
    assert "![perplexity against evaluation length](lm/perplexity_vs_length.png)" in page
    copied = sorted(p.name for p in (results_dir / "lm").iterdir())
    assert copied == sorted(
        ["results.json", "results.csv", "report.md", "sweep.json"]
        + ["perplexity_vs_length.png", "loss_vs_position.png"]
    )
    assert readme.main(["--check"]) == 0
    for other in (None, "python sweep.py --config configs/lm_quick.yaml train.steps=20"):
        (runs / "sweep.json").write_text(json.dumps({"command": other, **machine}))
        assert readme.main(["--lm", str(runs)]) == 2  # the page describes configs/lm.yaml
        assert "the lm page states `python sweep.py --config configs/lm.yaml`" in (
            capsys.readouterr().err
        )
    assert (results_dir / "lm.md").read_text() == page  # unchanged
    assert readme.main(["--check"]) == 0
    (runs / "lm_results.json").write_text("[]")  # a bad file: one line, nothing written
    assert readme.main(["--lm", str(runs)]) == 2
    assert (
        "lm_results.json is not a sweep's lm_results.json (an empty list" in capsys.readouterr().err
    )


def test_a_sweep_of_lm_runs_prints_their_table_and_writes_no_synthetic_file(
    tmp_path: Path, capsys
) -> None:
    from lab.sweeps.summary import report

    records = [
        {"status": "evaluated", "name": f"run{i}", "result": r}
        for i, r in enumerate(sweep(TEXTBOOK))
    ]
    assert report(records, tmp_path, 60.0) == 0
    out = capsys.readouterr().out
    assert "| alibi-text-seed1 " in out and "| perplexity 16x " in out
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {*REPORT_NAMES_LM, "sweep.json"}


def test_runs_of_two_corpora_are_never_paired_nor_pooled() -> None:
    """alibi's runs scored another corpus (another sha256: other held-out windows): the report
    gives each corpus its own section, so no paired test sets alibi against rope, and no
    perplexity cell pools the two; the markdown says why."""
    runs = sweep({"rope": TEXTBOOK["rope"], "alibi": TEXTBOOK["alibi"]})
    for run in runs:
        if run["position"] == "alibi":
            run["corpus"] = dict(run["corpus"], sha256="cd" * 32)
    text = lm_markdown(runs)
    assert "## text on corpus abababababab: perplexity at multiples" in text
    assert "## text on corpus cdcdcdcdcdcd: perplexity at multiples" in text
    assert text.count("The text runs fall into 2 parts (another corpus") == 2
    assert "alibi vs rope" not in text and "rope vs alibi" not in text
    assert text.count("One scheme only: no pair to test.") == 2
    same = lm_markdown(sweep({"rope": TEXTBOOK["rope"], "alibi": TEXTBOOK["alibi"]}))
    assert "## text: perplexity at multiples" in same and "parts" not in same
    assert "alibi vs rope" in same or "rope vs alibi" in same


@pytest.mark.parametrize("change", ["length", "split"])
def test_runs_of_two_training_lengths_or_splits_are_reported_apart(change) -> None:
    """A parent trained at 16 tokens beside a child trained at 32 sat in one table titled
    '32 tokens' (its 1x was 16); two held-out splits of one corpus file scored other text under
    one 'same held-out tokens' line. Each now is a part of its own, titled by what differs."""
    runs = sweep({"rope": TEXTBOOK["rope"], "alibi": TEXTBOOK["alibi"]})
    heldout = runs[0]["corpus"]["heldout_tokens"]  # every run's, before the change
    for run in runs:
        if run["position"] == "alibi" and change == "length":
            run["train_lengths"] = [32, 32]
        elif run["position"] == "alibi":
            run["corpus"] = dict(run["corpus"], heldout_tokens=run["corpus"]["heldout_tokens"] * 2)
    text = lm_markdown(runs)
    titles = (
        ["## text, trained at 16 tokens: perplexity", "## text, trained at 32 tokens: perplexity"]
        if change == "length"
        else [f"## text, {heldout:,} held-out tokens:", f"## text, {2 * heldout:,} held-out"]
    )
    assert all(title in text for title in titles), text[:2000]
    assert "alibi vs rope" not in text and "rope vs alibi" not in text
    assert text.count("The text runs fall into 2 parts") == 2


def test_the_figures_draw_runs_of_two_corpora_in_panels_of_their_own() -> None:
    """Each corpus a panel of its own, titled by its sha256, so no two lines compared by eye
    come from different held-out windows; one corpus keeps one panel titled by the task."""
    runs = sweep({"rope": TEXTBOOK["rope"], "alibi": TEXTBOOK["alibi"]})
    for run in runs:
        if run["position"] == "alibi":
            run["corpus"] = dict(run["corpus"], sha256="cd" * 32)
    for draw in (perplexity_figure, position_figure):
        panels = draw(runs).axes
        assert [ax.get_title() for ax in panels] == [
            "text on corpus abababababab",
            "text on corpus cdcdcdcdcdcd",
        ]
        labels = [[line.get_label() for line in ax.get_lines()][1:] for ax in panels]
        assert labels == [["rope (mean of 2)"], ["alibi (mean of 2)"]]
    one = perplexity_figure(sweep({"rope": TEXTBOOK["rope"]})).axes
    assert [ax.get_title() for ax in one] == ["text"]
