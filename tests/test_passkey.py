"""The passkey task and its depth x length grid: the solver against the generator, where the
key lands, the same grid sequences for every model of a seed, an oracle scoring 1 in every
cell, a constant answer scoring chance, the eval.json entry, the table and the figures."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import torch
from torch import nn

from data import EOS, SEP, build_task
from data.passkey import LETTERS, PREFIX, REPEAT, byte_vocab
from lab.common.config import ConfigError, load_config
from lab.evaluation.evaluate import evaluate_model
from lab.evaluation.record import SCHEMA, inconsistency
from lab.lm.passkey import (
    DEPTHS,
    grid_batch,
    grid_lengths,
    mean_grid,
    passkey_grid,
    passkey_record,
    passkey_table,
)
from lab.lm.passkey_figure import HEATMAP_NAME, passkey_figure, write_heatmap
from model import ModelConfig

CHI2_999_DF9 = 27.877
"""The 0.999 quantile of the chi-square distribution with 9 degrees of freedom (scipy.stats.chi2
.ppf(0.999, 9) = 27.877): a uniform draw over 10 values exceeds it one time in 1000."""


def chi_square(counts: np.ndarray) -> float:
    """Pearson's statistic of ``counts`` against equal expected counts."""
    expected = counts.sum() / len(counts)
    return float(((counts - expected) ** 2 / expected).sum())


def prompts_of(task, batch) -> list[list[str]]:
    """The prompt (between ``<bos>`` and ``<sep>``) of every row, as token strings."""
    return [
        [task.vocab[i] for i in row[1 : batch.answer_start - 1]] for row in batch.tokens.tolist()
    ]


def answers_of(task, batch) -> list[list[str]]:
    """The answer of every row without its ``<eos>``, as token strings."""
    return [[task.vocab[i] for i in row[batch.answer_start : -1]] for row in batch.tokens.tolist()]


def key_start(prompt: list[str]) -> int:
    """Where the key phrase starts in a prompt, found in its text."""
    return "".join(t if len(t) == 1 else " " for t in prompt).index(PREFIX.strip())


# ---------------------------------------------------------------------------------------------
# The task
# ---------------------------------------------------------------------------------------------


def test_the_vocabulary_is_bytes_then_the_specials() -> None:
    task = build_task("passkey")
    assert task.vocab_size == 259 and task.vocab == byte_vocab()
    assert [task.token_id(t) for t in ("<bos>", "<sep>", "<eos>")] == [256, 257, 258]
    assert task.vocab[ord("7")] == "7" and task.vocab[ord(" ")] == "\\x20"
    assert task.vocab[10] == "\\x0a" and not any(c.isspace() for t in task.vocab for c in t)
    assert len(set(task.vocab)) == 259


@pytest.mark.parametrize(
    "options",
    [{}, {"filler": "random"}, {"digits": 1}, {"digits": 12, "filler": "random"}, {"depth": 0.3}],
)
def test_the_solver_answers_every_prompt_at_many_lengths_and_depths(options: dict) -> None:
    task = build_task("passkey", options)
    k = task.phrase_length
    for length in (k, k + 1, k + 7, 64, 200, 513):
        batch = task.sample(np.random.default_rng([3, length]), length, 64)
        assert batch.tokens.shape == (64, length + 1 + 1 + task.options.digits + 1)
        for prompt, answer in zip(prompts_of(task, batch), answers_of(task, batch), strict=True):
            assert len(prompt) == length
            assert task.solve(prompt) == answer and len(answer) == task.options.digits
            assert all(t in "0123456789" for t in answer)


@pytest.mark.parametrize("filler", ["repeat", "random"])
def test_depth_0_puts_the_key_first_and_depth_1_last(filler: str) -> None:
    for depth, length in [(0, 64), (1, 64), (0.5, 64), (1, 19), (0.25, 117)]:
        task = build_task("passkey", {"depth": depth, "filler": filler})
        k = task.phrase_length
        batch = task.sample(np.random.default_rng(1), length, 16)
        start = int(np.floor(depth * (length - k) + 0.5))
        for prompt, answer in zip(prompts_of(task, batch), answers_of(task, batch), strict=True):
            assert (
                "".join(prompt[start : start + k]) == f"pass\\x20key\\x20is\\x20{''.join(answer)}."
            )
            if depth == 1:
                assert prompt[-1] == "." and start + k == length
            if depth == 0:
                assert prompt[:4] == list("pass")


def test_the_training_depth_is_uniform_over_every_start() -> None:
    """Depth null: the key starts at each of the ``length - K + 1`` places equally often
    (a chi-square test over 6000 rows)."""
    task = build_task("passkey")
    length = task.phrase_length + 9  # 10 starts
    batch = task.sample(np.random.default_rng(0), length, 6000)
    prefix = [ord(c) for c in "pass"]
    starts = []
    for row in batch.tokens[:, 1 : length + 1].tolist():
        starts.append(next(i for i in range(10) if row[i : i + 4] == prefix))
    counts = np.bincount(starts, minlength=10)
    assert counts.sum() == 6000 and chi_square(counts) < CHI2_999_DF9, counts


def test_the_fillers_hold_no_digit_and_are_what_they_say() -> None:
    length = 300
    repeat = build_task("passkey", {"depth": 1})
    batch = repeat.sample(np.random.default_rng(2), length, 32)
    k = repeat.phrase_length
    for row in batch.tokens[:, 1 : length - k + 1].tolist():
        text = bytes(row).decode()
        assert text in REPEAT * 5 and not any(c.isdigit() for c in text)
    letters = build_task("passkey", {"depth": 0, "filler": "random"})
    batch = letters.sample(np.random.default_rng(2), length, 32)
    filler = batch.tokens[:, 1 + k : length + 1]
    assert set(bytes(filler.flatten().tolist()).decode()) == set(LETTERS)


def test_keys_are_uniform_digits() -> None:
    task = build_task("passkey", {"digits": 3})
    batch = task.sample(np.random.default_rng(4), 40, 5000)
    digits = batch.answer_targets[:, :3].flatten() - ord("0")
    counts = np.bincount(digits.numpy(), minlength=10)
    assert len(counts) == 10 and chi_square(counts) < CHI2_999_DF9, counts
    assert (batch.answer_targets[:, 3] == task.token_id(EOS)).all()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("digits=0", "data.options.passkey.digits=0 is invalid; it must be in 1..20"),
        ("digits=21", "data.options.passkey.digits=21 is invalid; it must be in 1..20"),
        ("filler=corpus", "data.options.passkey.filler='corpus' is invalid; use one of repeat"),
        ("depth=1.5", "data.options.passkey.depth=1.5 is invalid; it must be a number in [0, 1]"),
        ("depth=-0.1", "data.options.passkey.depth=-0.1 is invalid"),
        ("depth=deep", "data.options.passkey.depth='deep' is invalid"),
        ("key=1", "data.options.passkey.key is not an option of 'passkey'"),
    ],
)
def test_bad_options_give_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(None, ["data.task=passkey", f"data.options.passkey.{override}"])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_length_below_the_key_phrase_is_refused() -> None:
    task = build_task("passkey", {"digits": 2})
    assert task.min_length == 15
    with pytest.raises(ValueError, match=r"needs length >= 15, got length=14"):
        task.sample(np.random.default_rng(0), 14, 1)


def test_an_integer_depth_is_a_float() -> None:
    assert build_task("passkey", {"depth": 1}).options.depth == 1.0
    config = load_config(None, ["data.task=passkey", "data.options.passkey.depth=0"])
    assert config.data.options["passkey"]["depth"] == 0.0


# ---------------------------------------------------------------------------------------------
# The grid
# ---------------------------------------------------------------------------------------------


class Limit:
    """Stands in for ``model.position``: the evaluation reads ``max_length()`` only."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit

    def max_length(self) -> int | None:
        return self.limit


class Answering(nn.Module):
    """One-hot logits of ``answer(prompt tokens)`` then ``<eos>`` after ``<sep>``: a stub model
    (``answer`` None: nothing after <sep>). Keeps every input it sees in ``seen``."""

    def __init__(self, answer: Callable[[list[str]], list[str]], limit: int | None = None):
        super().__init__()
        self.task = build_task("passkey")
        self.config = ModelConfig(vocab_size=259, position="learned")
        self.position = Limit(limit)
        self.anchor = nn.Parameter(torch.zeros(()))
        self.answer = answer
        self.seen: list[torch.Tensor] = []

    def forward(self, idx: torch.Tensor, prefix_len: int | None = None) -> torch.Tensor:
        self.seen.append(idx.clone())
        sep, eos = self.task.token_id(SEP), self.task.token_id(EOS)
        targets = torch.full(idx.shape, sep, dtype=torch.int64)
        for r, row in enumerate(idx.tolist()):
            if sep not in row:
                continue
            s = row.index(sep)
            try:
                prompt = [self.task.vocab[i] for i in row[1:s]]
                answer = [self.task.token_id(t) for t in self.answer(prompt)]
            except ValueError:
                answer = []  # a shuffled prompt (the permutation probe): no key phrase left
            answer.append(eos)
            for i in range(s, len(row)):
                targets[r, i] = answer[min(i - s, len(answer) - 1)]
        return nn.functional.one_hot(targets, 259).float() * 10.0 + self.anchor


def zeros(prompt: list[str]) -> list[str]:
    """A model that always answers one ``0`` (chance: 1 in 10 for one-digit keys)."""
    return ["0"]


def test_the_grid_lengths_are_the_multiples_up_to_the_factor() -> None:
    assert grid_lengths(64, 8.0) == {"1x": 64, "2x": 128, "4x": 256, "8x": 512}
    assert grid_lengths(64, 4.0) == {"1x": 64, "2x": 128, "4x": 256}
    assert grid_lengths(20, 1.5) == {"1x": 20}
    assert DEPTHS == (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def test_grid_sequences_are_a_function_of_seed_depth_and_length() -> None:
    task = build_task("passkey")
    a = grid_batch(task, 0, 3, 64, 8)
    assert torch.equal(a.tokens, grid_batch(build_task("passkey"), 0, 3, 64, 8).tokens)
    for other in (grid_batch(task, 1, 3, 64, 8), grid_batch(task, 0, 4, 64, 8)):
        assert not torch.equal(a.tokens, other.tokens)
    start = int(np.floor(0.3 * (64 - task.phrase_length) + 0.5))
    assert all(key_start(p) == start for p in prompts_of(task, a))
    # the training depth option of the run does not change the grid (each row fixes its own)
    fixed = build_task("passkey", {"depth": 0.9})
    assert torch.equal(a.tokens, grid_batch(fixed, 0, 3, 64, 8).tokens)


def test_two_models_read_the_same_grid_sequences() -> None:
    task = build_task("passkey")
    lengths = grid_lengths(24, 2.0)
    first, second = Answering(task.solve), Answering(zeros)
    for model in (first, second):
        passkey_grid(model, task, 5, lengths, 6, batch_tokens=10**6)
    assert len(first.seen) == len(second.seen) == len(DEPTHS) * len(lengths)
    for a, b in zip(first.seen, second.seen, strict=True):
        assert torch.equal(a, b)


def test_an_oracle_scores_1_in_every_cell_and_a_constant_answer_chance() -> None:
    """The solver as a model is right everywhere; always answering 0 to one-digit keys is right
    1 time in 10 (within 4 standard deviations of the binomial over the 11 x 3 x 40
    sequences)."""
    task = build_task("passkey", {"digits": 1})
    lengths = grid_lengths(20, 4.0)
    oracle = passkey_grid(Answering(task.solve), task, 0, lengths, 40)
    assert oracle["accuracy"] == [[1.0] * 3] * 11
    assert oracle["labels"] == ["1x", "2x", "4x"] and oracle["lengths"] == [20, 40, 80]
    chance = passkey_grid(Answering(zeros), task, 0, lengths, 40)
    cells = np.array(chance["accuracy"])  # (11, 3)
    hits = int(round(cells.sum() * 40))
    assert abs(hits - 132) < 4 * (1320 * 0.1 * 0.9) ** 0.5, hits  # binomial(1320, 0.1): 4 sd
    assert 0 < cells.mean() < 0.2


def test_lengths_past_the_table_are_null() -> None:
    task = build_task("passkey")
    grid = passkey_grid(Answering(task.solve, limit=60), task, 0, grid_lengths(24, 4.0), 4)
    assert grid["accuracy"] == [[1.0, 1.0, None]] * 11  # 96 + 8 tokens > 60


# ---------------------------------------------------------------------------------------------
# eval.json, table and figures
# ---------------------------------------------------------------------------------------------

FAST = [
    "data.task=passkey",
    "data.train_min_length=20",
    "data.train_max_length=24",
    "eval.samples=8",
    "eval.probe_samples=4",
    "eval.max_length_factor=2",
]


def test_evaluate_model_records_the_grid_for_passkey_only() -> None:
    config = load_config(None, FAST)
    record = evaluate_model(Answering(build_task("passkey").solve), config)
    jsonschema.validate(record, SCHEMA)
    assert inconsistency(record) is None
    grid = record["passkey"]
    assert grid["lengths"] == [24, 48] and grid["samples"] == 8
    assert grid["accuracy"] == [[1.0, 1.0]] * 11
    assert record["summary"]["in_dist"] == 1.0
    grid["accuracy"][3] = [1.0]
    assert inconsistency(record) == "passkey: a row of accuracy has not 2 cells (one per length)"
    copy = load_config(None, ["data.task=copy", "eval.samples=8", "eval.probe_samples=4"])
    assert passkey_record(Answering(zeros), copy, copy.eval, "auto") is None


def result(position: str, seed: int, accuracy: list[list[float | None]], rule: dict) -> dict:
    """A hand-made eval.json dict with a passkey grid over 1x and 2x of 32."""
    config = {"model": {"position": position}, "data": {"task": "passkey"}}
    config["eval"] = {"position_options": rule}
    grid = {"depths": [0.0, 0.5, 1.0], "lengths": [32, 64], "labels": ["1x", "2x"]}
    grid |= {"samples": 10, "accuracy": accuracy}
    return {"position": position, "task": "passkey", "seed": seed, "config": config,
            "passkey": grid, "run_dir": f"runs/{position}-seed{seed}",
            "summary": {"in_dist": 1.0}}  # fmt: skip


RESULTS = [
    result("rope", 0, [[1.0, 0.2], [1.0, 0.0], [1.0, 0.4]], {}),
    result("rope", 1, [[1.0, 0.4], [0.8, 0.0], [1.0, 0.6]], {}),
    result("rope", 0, [[1.0, 1.0], [1.0, 0.5], [1.0, 1.0]], {"scaling": "yarn"}),
    result("learned", 0, [[1.0, None], [0.9, None], [1.0, None]], {}),
]


def test_the_table_gives_the_mean_per_length_and_the_worst_depth() -> None:
    assert mean_grid(RESULTS[:2]) == [[1.0, 0.30000000000000004], [0.9, 0.0], [1.0, 0.5]]
    lines = passkey_table(RESULTS).splitlines()
    assert lines[0] == "| scheme | seeds | 1x | 2x | worst depth |"
    assert lines[2] == "| `learned` | 1 | 96.7 | — | 0.5 (90.0) |"
    assert lines[3] == "| `rope` | 2 | 96.7 | 26.7 | 0.5 (45.0) |"
    assert lines[4] == "| `rope [scaling=yarn]` | 1 | 100.0 | 83.3 | 0.5 (75.0) |"
    assert passkey_table([{"task": "copy"}]) == ""
    flat = result("alibi", 0, [[1.0, 0.0]] * 3, {})
    assert passkey_table([flat]).splitlines()[2] == "| `alibi` | 1 | 100.0 | 0.0 | — |"


def test_heatmaps_are_written_per_run_and_per_sweep(tmp_path: Path) -> None:
    path = write_heatmap(RESULTS[3], tmp_path / "run")
    assert path == tmp_path / "run" / HEATMAP_NAME and path.read_bytes()[:4] == b"\x89PNG"
    figure = passkey_figure(RESULTS, tmp_path / "passkey.png")
    titles = [a.get_title() for a in figure.axes if a.get_title()]
    assert titles == ["learned (seed 0)", "rope (2 seeds)", "rope [scaling=yarn] (seed 0)"]
    assert (tmp_path / "passkey.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="no result has a passkey grid"):
        passkey_figure([{"task": "copy"}])
    assert json.dumps(RESULTS)  # plain JSON, as eval.json holds it


def test_the_passkey_sweep_and_its_rope_rules_load() -> None:
    """configs/passkey.yaml trains the five mission schemes at three seeds, each at the rate
    sweep.py --select-lr chose for it (docs/results/passkey/lr_selection.json); the RoPE runs
    get four evaluations (one grid per rule), no training."""
    from lab.common.config import load_config
    from lab.sweeps.sweep import expand, load_sweep

    specs = expand(load_sweep(Path("configs/passkey.yaml")))
    schemes = ("none", "learned", "sinusoidal", "rope", "alibi")
    assert [s.name for s in specs] == [
        f"{p}-passkey-seed{seed}" for p in schemes for seed in (0, 1, 2)
    ]
    chosen = json.loads(Path("docs/results/passkey/lr_selection.json").read_text())["chosen"]
    assert {s.name.split("-")[0]: load_config(None, s.overrides).train.lr for s in specs} == chosen
    assert len(specs[9].evaluations) == 5  # rope-passkey-seed0: as trained and four rules
    rules = ["eval.position_options.scaling=linear,ntk,dynamic,yarn"]
    rules.append("eval.position_options.scaling_factor=4")
    (rope,) = expand(load_sweep(Path("configs/passkey.yaml"), ["position=rope", "seed=0", *rules]))
    assert rope.name == "rope-passkey-seed0"
    assert sorted(rope.evaluations) == [  # "": as trained
        "",
        *(f"scaling{r}-scaling_factor4" for r in ("dynamic", "linear", "ntk", "yarn")),
    ]


def test_a_run_not_learned_is_no_cell_and_no_heatmap_but_a_row_saying_so() -> None:
    stuck = result("learned", 1, [[0.0, 0.0]] * 3, {})
    stuck |= {"reached_target": False, "train_steps": 3000}
    stuck["config"]["train"] = {"steps": 3000, "target_accuracy": 0.99}
    lines = passkey_table([*RESULTS, stuck]).splitlines()
    assert lines[2] == "| `learned` | 1 | 96.7 | — | 0.5 (90.0) |"  # seed 0 alone, not 48.3
    assert lines[-1].startswith("| `learned` seed 1 | 0 | not learned within budget: ended at")
    assert "0.0" not in lines[-1]
    assert len(passkey_figure([*RESULTS, stuck]).axes) == len(passkey_figure(RESULTS).axes)


def test_a_sweep_with_passkey_grids_gets_their_section_and_heatmaps(tmp_path: Path) -> None:
    """write_reports on runs holding a passkey grid (the committed ablation's runs, given the
    grids of RESULTS) adds passkey_grid.png and a "Passkey retrieval" section holding the
    passkey table and the figure, before the diagnostics and the runs; the rest of report.md is
    unchanged."""
    from lab.reporting.pages import RESULTS as PUBLISHED
    from lab.reporting.report import write_reports

    runs = json.loads((PUBLISHED / "ablation" / "results.json").read_text())[:4]
    plain = (write_reports(runs, tmp_path / "plain")["markdown"]).read_text()
    for run, grid in zip(runs, RESULTS, strict=True):
        run["passkey"] = grid["passkey"]
    paths = write_reports(runs, tmp_path / "grid")
    assert paths["passkey"] == tmp_path / "grid" / "passkey_grid.png"
    assert paths["passkey"].read_bytes()[:4] == b"\x89PNG"
    report = paths["markdown"].read_text()
    head, rest = report.split("## Passkey retrieval\n\n", 1)
    section, tail = rest.split("## Where it fails\n", 1)
    table = passkey_table(runs)  # three none runs (seeds pooled), then learned
    assert table in section and table.splitlines()[3] == "| `learned` | 1 | 96.7 | — | 0.5 (90.0) |"
    assert "![passkey exact-match by depth and length](passkey_grid.png)" in section
    assert head + "## Where it fails\n" + tail == plain


def test_a_sweep_whose_passkey_runs_all_failed_writes_every_report_without_heatmaps(
    tmp_path: Path,
) -> None:
    """When no passkey run learned, eval.py stopped with "no result has a passkey grid" after
    writing results.csv and results.json, leaving an old report.md beside them. Every report is
    written; the section says why there are no heatmaps, and an old heatmap file is removed."""
    from lab.reporting.pages import RESULTS as PUBLISHED
    from lab.reporting.report import write_reports

    runs = json.loads((PUBLISHED / "ablation" / "results.json").read_text())[:2]
    for run, grid in zip(runs, RESULTS[:2], strict=True):
        run["passkey"] = grid["passkey"]
        run |= {"reached_target": False, "train_steps": run["config"]["train"]["steps"]}
    out = tmp_path / "report"
    out.mkdir()
    (out / "passkey_grid.png").write_bytes(
        (PUBLISHED / "passkey" / "passkey_grid.png").read_bytes()
    )
    paths = write_reports(runs, out)
    assert "passkey" not in paths and not (out / "passkey_grid.png").exists()
    report = paths["markdown"].read_text()
    assert "No heatmaps: no passkey run learned its task within its budget." in report
    assert "passkey_grid.png" not in report


def _inside(legend, figure) -> bool:
    """Whether ``legend``'s drawn box lies within ``figure``'s (after a draw)."""
    box, frame = legend.get_window_extent(), figure.bbox
    return box.x0 >= frame.x0 and box.y0 >= frame.y0 and box.x1 <= frame.x1 and box.y1 <= frame.y1


@pytest.mark.parametrize("extra", [0, 6])
def test_the_passkey_curves_legend_names_every_line_inside_the_saved_figure(tmp_path, extra):
    """The committed passkey sweep draws 10 lines in one narrow panel (9 means and a run not
    learned; the legend of 7 columns was cut off on both sides); with 6 more rules, 16: every
    line is named in the one legend,
    whose box lies within the figure, so within the PNG saved without a tight crop."""
    from PIL import Image

    from lab.evaluation.figure import plot_accuracy_vs_length
    from lab.reporting.pages import RESULTS as PUBLISHED

    results = json.loads((PUBLISHED / "passkey" / "results.json").read_text())
    rope = next(
        r
        for r in results
        if r["position"] == "rope" and not r["config"]["eval"].get("position_options")
    )
    for factor in range(extra):  # more rules: more lines, as a larger sweep draws
        more = json.loads(json.dumps(rope))
        more["config"]["eval"]["position_options"] = {
            "scaling": "yarn",
            "scaling_factor": 10 + factor,
        }
        results.append(more)
    figure = plot_accuracy_vs_length(results, tmp_path / "accuracy_vs_length.png")
    (ax,) = figure.axes
    assert len(ax.containers) == 10 + extra
    figure.canvas.draw()
    (legend,) = figure.legends
    names = [t.get_text() for t in legend.get_texts()]
    assert [c.get_label() for c in ax.containers] == names[2:]  # one entry per line
    assert names[:2] == ["training range", "longest training length"]
    looks = {(c.lines[0].get_color(), c.lines[0].get_marker()) for c in ax.containers}
    assert len(looks) == len(ax.containers)  # past ten colours, the markers change
    assert _inside(legend, figure)
    with Image.open(tmp_path / "accuracy_vs_length.png") as image:  # written at 120 dpi
        saved = image.size
    assert saved == pytest.approx(tuple(figure.get_size_inches() * 120), abs=1)  # not cropped


def test_a_published_passkey_sweep_without_heatmaps_says_so(tmp_path: Path) -> None:
    """Publishing asked for passkey_grid.png, which a sweep none of whose runs learned rightly
    does not draw; the file is optional, and the page says there are no heatmaps."""
    from lab.reporting.pages import FAMILIES
    from lab.reporting.pages import RESULTS as PUBLISHED
    from lab.reporting.study_pages import passkey_page

    assert "passkey_grid.png" in FAMILIES["passkey"].optional
    folder = tmp_path / "passkey"
    shutil.copytree(PUBLISHED / "passkey", folder)
    assert "](passkey/passkey_grid.png)" in passkey_page(folder, "python sweep.py --publish")
    (folder / "passkey_grid.png").unlink()
    page = passkey_page(folder, "python sweep.py --publish")
    assert "No heatmaps: no passkey run learned its task within its budget." in page
    assert "passkey_grid.png" not in page
