"""The README's results section is generated from the committed docs/ results, and they agree."""

import json
from pathlib import Path

import pytest

from lab import readme
from lab.bench_report import peer_table, scheme_table
from lab.readme import BEGIN, END, README, render


def test_readme_results_section_matches_the_committed_results() -> None:
    text = README.read_text()
    assert render(text) == text, "README.md is stale: run python -m lab.readme"


def test_render_replaces_only_the_marked_section() -> None:
    text = f"# title\nbefore\n{BEGIN}\nstale table\n{END}\nafter\n"
    rendered = render(text)
    head, rest = rendered.split(BEGIN)
    body, tail = rest.split(END)
    assert head == "# title\nbefore\n" and tail == "\nafter\n"
    assert "stale table" not in body and "| scheme" in body and "Findings" in body
    assert render(rendered) == rendered  # idempotent


def test_render_without_markers_fails_with_one_line() -> None:
    with pytest.raises(ValueError, match="lacks the markers"):
        render("# no markers here\n")


def test_check_flags_a_stale_readme(tmp_path: Path, monkeypatch, capsys) -> None:
    stale = tmp_path / "README.md"
    stale.write_text(f"x\n{BEGIN}\nold\n{END}\n")
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


def test_readme_benchmark_tables_match_the_committed_json() -> None:
    results = json.loads((README.parent / "docs" / "bench_cpu.json").read_text())
    text = README.read_text()
    stale = "README.md's benchmark is stale: paste python -m lab.bench_report docs/bench_cpu.json"
    assert scheme_table(results) in text, stale
    assert peer_table(results) in text, stale
