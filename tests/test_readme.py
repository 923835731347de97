"""The README's generated sections (the ablation, the task suite, the benchmark) come from the
committed docs/ results, and they agree."""

import json
from pathlib import Path

import pytest

from lab.bench.block_sweep import ratio_table
from lab.bench.report import peer_table, scheme_table
from lab.reporting import readme
from lab.reporting.readme import BEGIN, END, README, SUITE_BEGIN, SUITE_END, render
from lab.reporting.suite_table import settings, suite_table, timing


def test_readme_results_section_matches_the_committed_results() -> None:
    text = README.read_text()
    assert render(text) == text, "README.md is stale: run python -m lab.reporting.readme"


def test_render_replaces_only_the_marked_sections() -> None:
    text = (
        f"# title\nbefore\n{BEGIN}\nstale table\n{END}\nmid\n{SUITE_BEGIN}\nold\n{SUITE_END}\nend\n"
    )
    rendered = render(text)
    head, rest = rendered.split(BEGIN)
    body, rest = rest.split(END)
    middle, rest = rest.split(SUITE_BEGIN)
    suite, tail = rest.split(SUITE_END)
    assert head == "# title\nbefore\n" and middle == "\nmid\n" and tail == "\nend\n"
    assert "stale table" not in body and "| scheme" in body and "Findings" in body
    assert "old" not in suite and "configs/suite.yaml" in suite and "| `parity`" in suite
    assert render(rendered) == rendered  # idempotent


@pytest.mark.parametrize("markers", [(), (BEGIN, END), (SUITE_BEGIN, SUITE_END)])
def test_render_without_markers_fails_with_one_line(markers: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="lacks the markers") as error:
        render("# some markers missing\n" + "\n".join(markers))
    assert "\n" not in str(error.value)


def result(task: str, scheme: str, in_dist: float | None, at_2x: float) -> dict:
    """The fields of one run's eval.json that the suite table reads."""
    return {
        "task": task,
        "position": scheme,
        "seed": 0,
        "config": {"model": {"causal": True}, "train": {"steps": 1000}, "eval": {"samples": 256}},
        "train_lengths": [2, 10],
        "summary": {"in_dist": in_dist, "at": {"2x": at_2x}},
    }


def test_suite_table_by_hand() -> None:
    """One row per task, ``in-dist / 2x`` per scheme in registration order, and the schemes at
    or above 95% in distribution."""
    results = [
        result("parity", "rope", 0.5, 0.5),
        result("count", "alibi", 0.95, 0.3125),
        result("count", "none", 0.949, 0.0),
        result("parity", "alibi", None, 0.5),
    ]
    rows = [
        [c.strip() for c in line.split("|")[1:-1]] for line in suite_table(results).splitlines()
    ]
    assert rows[0] == ["task", "lengths", "none", "rope", "alibi", "in-dist >= 95%"]
    assert rows[2] == ["`count`", "2..10", "94.9 / 0.0", "—", "95.0 / 31.2", "`alibi`"]
    assert rows[3] == ["`parity`", "2..10", "—", "50.0 / 50.0", "— / 50.0", "none"]


def test_suite_settings_and_timing_by_hand() -> None:
    results = [result("parity", "rope", 0.5, 0.5), result("count", "alibi", 1.0, 0.0)]
    assert (
        settings(results)
        == "2 tasks x 2 schemes, seed 0, a 1000-step cap, 256 test sequences per length"
    )
    sweep = {"seconds": 90.0, "workers": 1, "runs": {"trained": 49, "skipped": 1}, "machine": "M"}
    assert timing(sweep) == "50 runs in **1.5 min** with 1 worker(s) on M"


def test_suite_results_are_copied_under_their_docs_names(tmp_path: Path) -> None:
    sweep, docs = tmp_path / "suite", tmp_path / "docs"
    sweep.mkdir(), docs.mkdir()
    (sweep / "results.json").write_text("[1]")
    with pytest.raises(FileNotFoundError, match="lacks sweep.json; run python sweep.py first"):
        readme.copy_results(sweep, docs, readme.SUITE_COPIED)
    (sweep / "sweep.json").write_text("{}")
    readme.copy_results(sweep, docs, readme.SUITE_COPIED)
    assert sorted(p.name for p in docs.iterdir()) == ["suite_results.json", "suite_sweep.json"]
    assert (docs / "suite_results.json").read_text() == "[1]"


def test_check_flags_a_stale_readme(tmp_path: Path, monkeypatch, capsys) -> None:
    stale = tmp_path / "README.md"
    stale.write_text(f"x\n{BEGIN}\nold\n{END}\n{SUITE_BEGIN}\nold\n{SUITE_END}\n")
    monkeypatch.setattr(readme, "README", stale)
    assert readme.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert readme.main([]) == 0  # rewrites it
    assert readme.main(["--check"]) == 0


def test_readme_version_2_table_is_the_committed_reports() -> None:
    """The version-2 runs in the README are copied from docs/v2_report.md, row for row."""
    text = README.read_text()
    begin, end = "<!-- v2-runs:begin", "<!-- v2-runs:end -->"
    table = text.split(begin)[1].split(end)[0].splitlines()[1:]
    rows = [line for line in table if line.startswith("|")]
    report = (README.parent / "docs" / "v2_report.md").read_text().splitlines()
    assert len(rows) == 12  # header, rule, ten runs
    start = report.index(rows[0])
    assert report[start : start + len(rows)] == rows


@pytest.mark.parametrize(
    "name", ["bench_cpu", "bench_cuda", "bench_cuda_b1024", "bench_cuda_compiled"]
)
def test_readme_benchmark_tables_match_the_committed_json(name) -> None:
    results = json.loads((README.parent / "docs" / f"{name}.json").read_text())
    text = README.read_text()
    stale = f"README.md's benchmark is stale: paste python -m lab.bench.report docs/{name}.json"
    assert scheme_table(results) in text, stale
    assert peer_table(results) in text, stale


@pytest.mark.parametrize("name", ["block_sweep_cuda", "block_sweep_cpu_cope"])
def test_readme_block_sweep_tables_match_the_committed_json(name) -> None:
    result = json.loads((README.parent / "docs" / f"{name}.json").read_text())
    text = README.read_text()
    for length in (1024, 4096):
        assert ratio_table(result, length) in text, f"README.md's {name} at {length} is stale"


def test_every_task_has_a_readme_example_its_solver_answers() -> None:
    """The README's task table shows every registered task with an example whose answer is the
    one the task's solver (at its default options) gives."""
    from data import available_tasks, build_task

    examples = {}
    for line in README.read_text().splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) == 5 and cells[1].startswith("`<bos> "):
            examples[cells[0].strip("`")] = cells[1].split("`")[1].split()
    assert sorted(examples) == sorted(available_tasks())
    for name, tokens in examples.items():
        sep, eos = tokens.index("<sep>"), tokens.index("<eos>")
        assert build_task(name).solve(tokens[1:sep]) == tokens[sep + 1 : eos], name
