"""The README's generated parts (the ablation's block, the task table) and the result pages
under docs/results/ come from the committed files and the registries, and they agree."""

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import one_error_line

from data import available_tasks, build_task, task_class
from lab.bench import report as bench_report
from lab.bench.block_sweep import ratio_table
from lab.bench.report import peer_table, scheme_table
from lab.common.files import file_sha256
from lab.common.outputs import PROJECT, sweep_file_record
from lab.reporting import readme
from lab.reporting.aggregate import headline_table, tasks
from lab.reporting.pages import FAMILIES, RESULTS
from lab.reporting.readme import BEGIN, END, README, TASKS_BEGIN, TASKS_END, render, task_row
from lab.reporting.study_pages import changed_options, learnability_table
from lab.reporting.suite_table import settings, suite_table, timing


def between(text: str, begin: str, end: str) -> str:
    """The text between two markers (without them and their line breaks)."""
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def test_readme_result_block_matches_the_committed_results() -> None:
    block = between(README.read_text(), BEGIN, END)
    assert block == readme.readme_block(), "README.md is stale: run python sweep.py --publish"


def test_every_result_page_is_made_from_the_files_beside_it() -> None:
    for path, text in readme.pages().items():
        assert path.read_text() == text, f"{path.name} is stale: run python sweep.py --publish"


def test_the_headline_is_the_ablations_file_at_6_seeds_and_its_chosen_rates() -> None:
    """The README's result comes from 6 seeds (an exact sign-flip test can reach p < 0.05), each
    run at the rate the ablation's published selection chose for its scheme; its page links
    that selection and flags no run at another rate; the quick default keeps 3 seeds."""
    runs = json.loads((RESULTS / "headline" / "results.json").read_text())
    chosen = json.loads((RESULTS / "ablation" / "lr_selection.json").read_text())["chosen"]
    assert sorted({r["seed"] for r in runs}) == [0, 1, 2, 3, 4, 5]
    assert len(runs) == 6 * len(chosen) * 2  # every scheme of the selection, on svo and copy
    assert all(float(r["config"]["train"]["lr"]) == chosen[r["position"]] for r in runs)
    page = (RESULTS / "headline.md").read_text()
    assert "[lr_selection.json](ablation/lr_selection.json)" in page
    assert "not the rate chosen" not in page and "seed(s) 0, 1, 2, 3, 4, 5" in page
    quick = json.loads((RESULTS / "ablation" / "results.json").read_text())
    assert sorted({r["seed"] for r in quick}) == [0, 1, 2]
    assert "docs/results/headline/accuracy_vs_length.png" in README.read_text()


def test_the_benchmark_pages_hold_the_tables_of_their_committed_json() -> None:
    assert not bench_report.stale_pages(), "run python bench.py --publish"
    for name in bench_report.PAGES:
        page = (RESULTS / f"{name}.md").read_text()
        files = sorted((RESULTS / name).glob("*.json"))
        assert files, name
        for path in files:
            results = json.loads(path.read_text())
            if "results" in results:  # a block sweep
                for length in (1024, 4096):
                    assert ratio_table(results, length) in page, f"{path} at {length}"
            else:
                assert scheme_table(results) in page and peer_table(results) in page, path


SWEEP_SECTIONS = {"v3": "v3", "v3-variants": "v3/variants", "hybrids": "hybrids"}
"""The version-3 and hybrid families -> their folder under docs/results."""


def test_the_v3_and_hybrid_pages_hold_the_tables_of_their_committed_json() -> None:
    """Each published sweep's learnability table and per-task headline tables, computed from
    the results.json beside its page, are on the page; an unpublished one says so."""
    for family, folder in SWEEP_SECTIONS.items():
        page = (RESULTS / f"{FAMILIES[family].name}.md").read_text()
        path = RESULTS / folder / "results.json"
        if not path.is_file():
            assert f"Not run yet: `{FAMILIES[family].command}`." in page, family
            continue
        results = json.loads(path.read_text())
        assert learnability_table(results) in page, family
        for task in tasks(results):
            assert headline_table(results, task) in page, (family, task)
        assert f"{len(results)} runs" in page, family


def test_learnability_table_by_hand() -> None:
    """The ablation's three RoPE copy runs with their in-distribution exact-match set to 50%,
    97% and 99% (seeds 0, 1, 2): mean 82.0%, seed 0 50.0%, lowest 50.0%, two seeds at 95% or
    more, the same two learned; the learned table's non-default option is named."""
    runs = json.loads((RESULTS / "ablation" / "results.json").read_text())
    rope = [r for r in runs if r["position"] == "rope" and r["task"] == "copy"]
    for run, value in zip(sorted(rope, key=lambda r: r["seed"]), (0.5, 0.97, 0.99), strict=True):
        run["summary"] = {**run["summary"], "in_dist": value}
    table = rows(learnability_table(rope))
    assert table == [["copy", "rope", "—", "3", "82.0%", "50.0%", "50.0%", "2", "2", "0.0%"]]
    learned = next(r for r in runs if r["position"] == "learned")
    assert changed_options(learned) == "max_positions=256"


def test_a_length_aware_softmax_is_in_the_scheme_label() -> None:
    """RoPE with and without SSMax in one sweep are two schemes, not seeds of one."""
    from lab.evaluation.labels import scheme_label

    def result(**model: str) -> dict:
        return {"position": "rope", "task": "none", "config": {"model": model, "eval": {}}}

    assert scheme_label(result(softmax_scale="ssmax")) == "rope (ssmax)"
    assert scheme_label(result(softmax_scale="logn")) == "rope (logn)"
    assert scheme_label(result(softmax_scale="none")) == scheme_label(result()) == "rope"


def rows(table: str) -> list[list[str]]:
    """The body rows of a Markdown table, as stripped cells (`\\|` kept inside a cell)."""
    lines = [line for line in table.splitlines() if line.startswith("|")][2:]
    split = [line.replace("\\|", "\0").strip("|").split("|") for line in lines]
    return [[cell.replace("\0", "\\|").strip() for cell in cells] for cells in split]


def test_every_task_in_the_readme_table_is_registered_and_generated() -> None:
    """Each row is the generator's row of a registered task (a task registered since the last
    publish may be missing: the next publish adds it), and its example is one the task's solver
    answers."""
    listed = rows(between(README.read_text(), TASKS_BEGIN, TASKS_END))
    assert listed
    for row in listed:
        name = row[0].strip("`")
        assert name in available_tasks(), f"README lists {name!r}, which is not registered"
        assert row == [cell.strip() for cell in task_row(name)], name
        if task_class(name).language_model:  # an example window of text: no prompt to solve
            continue
        tokens = row[3].strip("`").split()
        sep, eos = tokens.index("<sep>"), tokens.index("<eos>")
        assert build_task(name).solve(tokens[1:sep]) == tokens[sep + 1 : eos], name


def test_render_replaces_only_the_marked_parts() -> None:
    text = f"# title\nbefore\n{BEGIN}\nstale\n{END}\nmid\n{TASKS_BEGIN}\nXYZZY\n{TASKS_END}\nend\n"
    rendered = render(text)
    head, rest = rendered.split(BEGIN)
    body, rest = rest.split(END)
    middle, rest = rest.split(TASKS_BEGIN)
    table, tail = rest.split(TASKS_END)
    assert head == "# title\nbefore\n" and middle == "\nmid\n" and tail == "\nend\n"
    assert "stale" not in body and "| scheme" in body and "Findings" in body
    assert "XYZZY" not in table and "| `copy`" in table
    assert render(rendered) == rendered  # idempotent


@pytest.mark.parametrize("markers", [(), (BEGIN, END), (TASKS_BEGIN, TASKS_END)])
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
    table = suite_table(results).splitlines()
    assert [c.strip() for c in table[0].split("|")[1:-1]] == [
        "task",
        "lengths",
        "none",
        "rope",
        "alibi",
        "in-dist >= 95%",
    ]
    body = rows("\n".join(table))
    assert body[0] == ["`count`", "2..10", "94.9 / 0.0", "—", "95.0 / 31.2", "`alibi`"]
    assert body[1] == ["`parity`", "2..10", "—", "50.0 / 50.0", "— / 50.0", "none"]


def test_suite_settings_and_timing_by_hand() -> None:
    results = [result("parity", "rope", 0.5, 0.5), result("count", "alibi", 1.0, 0.0)]
    assert (
        settings(results)
        == "2 tasks x 2 schemes, seed 0, a 1000-step cap, 256 test sequences per length"
    )
    sweep = {"seconds": 90.0, "workers": 1, "runs": {"trained": 49, "skipped": 1}, "machine": "M"}
    assert timing(sweep) == "50 runs in **1.5 min** with 1 worker(s) on M"


def test_a_sweeps_files_are_copied_beside_their_page(tmp_path: Path) -> None:
    sweep, results = tmp_path / "suite", tmp_path / "results"
    sweep.mkdir()
    (sweep / "results.json").write_text("[1]")
    made = "lacks sweep.json; make them with `python sweep.py --config configs/suite.yaml` "
    with pytest.raises(FileNotFoundError, match=re.escape(made)):
        readme.copy_results(sweep, FAMILIES["suite"], results)
    (sweep / "sweep.json").write_text("{}")
    readme.copy_results(sweep, FAMILIES["suite"], results)
    study = tmp_path / "study"  # an extend study's folder in a sweep's slot: told where it goes
    study.mkdir()
    (study / "sweep.json").write_text('{"command": "python sweep.py --extend-study s.yaml"}')
    where = "`python sweep.py --extend-study`: publish it with --publish --lm-extend DIR"
    with pytest.raises(FileNotFoundError, match=re.escape(where)):
        readme.copy_results(study, FAMILIES["ablation"], results)
    readme.copy_results(sweep, FAMILIES["suite-quick"], results)
    names = sorted(p.name for p in (results / "suite").iterdir())
    assert names == ["quick_sweep.json", "results.json", "sweep.json"]
    assert (results / "suite" / "results.json").read_text() == "[1]"


def test_check_flags_a_stale_readme(tmp_path: Path, monkeypatch, capsys) -> None:
    stale = tmp_path / "README.md"
    stale.write_text(f"x\n{BEGIN}\nold\n{END}\n{TASKS_BEGIN}\nold\n{TASKS_END}\n")
    monkeypatch.setattr(readme, "README", stale)
    assert readme.main(["--check"]) == 1
    assert "README.md is stale" in capsys.readouterr().err
    assert readme.main([]) == 0  # rewrites it
    assert readme.main(["--check"]) == 0


def sandbox(tmp_path: Path, monkeypatch) -> Path:
    """A copy of docs/results and the README under ``tmp_path``, which :func:`readme.main`
    publishes into; returns the copy of docs/results."""
    results = tmp_path / "docs" / "results"
    shutil.copytree(RESULTS, results)
    shutil.copyfile(README, tmp_path / "README.md")
    monkeypatch.setattr(readme, "RESULTS", results)
    monkeypatch.setattr(readme, "README", tmp_path / "README.md")
    return results


def snapshot(root: Path) -> dict[Path, bytes]:
    """Every file of the sandbox's docs/ and its README.md -> its bytes."""
    files = [root / "README.md", *(root / "docs").rglob("*")]
    return {p: p.read_bytes() for p in sorted(files) if p.is_file()}


def bad_sweep(tmp_path: Path, name: str, text: str) -> Path:
    """A copy of the committed ablation's files with ``name`` holding ``text``, its sweep.json
    recording them (:func:`recorded`), so each case meets the check it is about."""
    sweep = tmp_path / "runs" / f"bad_{len(list(tmp_path.glob('runs/*')))}"
    shutil.copytree(RESULTS / "ablation", sweep)
    (sweep / name).write_text(text)
    recorded(sweep)
    return sweep


def recorded(sweep: Path, sweep_file: str = "configs/ablation.yaml") -> None:
    """Give a copied sweep folder's sweep.json the SHA-256 of each file beside it and the sweep
    file it read (the ablation's), as a sweep of this version records them (the committed ones
    predate it)."""
    path = sweep / "sweep.json"
    try:
        timing = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # a case about sweep.json itself
    if isinstance(timing, dict):
        files = [p for p in sweep.iterdir() if p.is_file() and p.name != "sweep.json"]
        timing["files"] = {p.name: file_sha256(p) for p in files}
        timing.setdefault("sweep_file", sweep_file_record(PROJECT / sweep_file))
        path.write_text(json.dumps(timing))


def test_publish_checks_and_renders_everything_before_writing_anything(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """A bad file among the inputs (not JSON, the wrong kind, a missing file, a README without
    its markers, runs a page cannot be made from) is one line naming it, exit 2, and not one
    file of docs/results or the README changed."""
    results = sandbox(tmp_path, monkeypatch)
    before = snapshot(tmp_path)
    good = str(results / "ablation")
    runs = json.loads((RESULTS / "ablation" / "results.json").read_text())
    no_in_dist = [{**r, "summary": {}, "schema_version": 2} for r in runs]  # older: unchecked
    twice = [*runs, runs[0]]  # one run listed twice: it would be pooled as two seeds
    edited = [{**runs[0], "summary": {**runs[0]["summary"], "at": {"4x": 0.05}}}, *runs[1:]]
    cases = [
        (["results.json", "not json"], "results.json is not a sweep's results.json (not JSON"),
        (["results.json", '{"a": 1}'], "results.json is not a sweep's results.json (not a list"),
        (["results.json", "[]"], "results.json is not a sweep's results.json (an empty list"),
        (["results.json", "[1]"], "results.json is not a sweep's results.json (item 0 is not"),
        (["results.json", '[{"seed": 0}]'], "item 0 lacks 'task', 'position', 'config'"),
        (["sweep.json", "[]"], "sweep.json is not a sweep's sweep.json (not an object"),
        (["sweep.json", '{"seconds": 1}'], "sweep.json is not a sweep's sweep.json (lacks"),
        (["results.json", json.dumps(no_in_dist)], "ablation.md cannot be made from /"),
        (["results.json", json.dumps(twice)], "items 0 and 30 are one run evaluated alike"),
        (["results.json", json.dumps(edited)], "item 0 (none, copy, seed 0): summary.at"),
        (["accuracy_vs_length.png", "text"], "is not a sweep's accuracy_vs_length.png (not a PNG"),
    ]
    for (name, text), message in cases:
        sweep = bad_sweep(tmp_path, name, text)
        assert readme.main([str(sweep)]) == 2, message
        error = one_error_line(capsys)
        assert message in error and (name in error or ".md" in error), error
        assert snapshot(tmp_path) == before, message
    empty = tmp_path / "empty"
    empty.mkdir()
    assert readme.main([good, "--suite", str(empty)]) == 2
    assert "lacks results.json, sweep.json" in one_error_line(capsys)
    assert snapshot(tmp_path) == before
    (tmp_path / "README.md").write_text("# no markers\n")
    before = snapshot(tmp_path)
    assert readme.main([str(bad_sweep(tmp_path, "report.md", "# another report\n"))]) == 2
    assert "lacks the markers" in one_error_line(capsys)
    assert snapshot(tmp_path) == before


def test_a_smoke_sweep_is_no_result_page(tmp_path: Path, monkeypatch, capsys) -> None:
    """A smoke sweep (sweep.json says "smoke": true) published as the ablation or an LM page is
    one line and nothing written: its undertrained models would read as results with
    literature verdicts; only the suite's smoke-test timing takes one."""
    sandbox(tmp_path, monkeypatch)
    before = snapshot(tmp_path)
    smoke = bad_sweep(tmp_path, "sweep.json", "")
    timing = json.loads((RESULTS / "ablation" / "sweep.json").read_text()) | {"smoke": True}
    (smoke / "sweep.json").write_text(json.dumps(timing))
    for flags in ([str(smoke)], ["--lm", str(smoke)], ["--v3", str(smoke)]):
        assert readme.main(flags) == 2
        error = one_error_line(capsys)
        assert 'is a smoke test (sweep.json says "smoke": true)' in error, error
        assert snapshot(tmp_path) == before
    readme.check_not_smoke(smoke, FAMILIES["suite-quick"])  # the suite's smoke test: accepted


@pytest.mark.parametrize(
    "runs",
    [
        {"trained": 1, "failed": 1},
        {"interrupted": 2, "skipped": 28},
        {"evaluated": 1, "cancelled": 29},  # a stopped pass: its runs not yet begun
    ],
)
def test_a_sweep_with_failed_or_interrupted_runs_is_no_result_page(
    tmp_path: Path, monkeypatch, capsys, runs
) -> None:
    """A sweep whose sweep.json counts a failed or interrupted run is refused in one line,
    nothing written: its page would show the runs that finished as the whole sweep."""
    sandbox(tmp_path, monkeypatch)
    before = snapshot(tmp_path)
    partial = bad_sweep(tmp_path, "sweep.json", "")
    timing = json.loads((RESULTS / "ablation" / "sweep.json").read_text()) | {"runs": runs}
    (partial / "sweep.json").write_text(json.dumps(timing))
    assert readme.main([str(partial)]) == 2
    error = one_error_line(capsys)
    assert "run(s): a page would show the others as the whole sweep" in error, error
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("edit", ["dropped", "refiled", "foreign"])
def test_a_results_file_that_is_not_the_sweeps_runs_is_no_result_page(
    tmp_path: Path, monkeypatch, capsys, edit
) -> None:
    """A results.json with a run dropped by hand (29 of the 30 sweep.json counts) was published
    at exit 0 beside a report.md and results.csv that still held the run; two records given one
    run folder with other seeds were too. Both are one line now, nothing written."""
    sandbox(tmp_path, monkeypatch)
    before = snapshot(tmp_path)
    records = json.loads((RESULTS / "ablation" / "results.json").read_text())
    if edit == "dropped":
        records = records[:-1]
        message = "holds 29 evaluation record(s), but sweep.json beside it counts 30"
    elif edit == "refiled":
        records[1]["run_dir"], message = records[0]["run_dir"], "gives one run folder two seeds"
    else:  # another sweep's run swapped in for one of this sweep's
        records[1]["run_dir"], message = "runs/other/none-copy-seed1", "holds runs of 2 folders"
    partial = bad_sweep(tmp_path, "results.json", json.dumps(records))
    assert readme.main([str(partial)]) == 2
    error = one_error_line(capsys)
    assert message in error, error
    assert snapshot(tmp_path) == before


def test_an_evaluation_dropped_from_a_sweep_evaluated_several_ways_is_no_result_page(
    tmp_path: Path,
) -> None:
    """A sweep that evaluates each run several ways (the RoPE-scaling rules) holds several
    records per run folder, so counting folders missed one evaluation dropped from its
    results.json; sweep.json counts the records of each kind, and the check refuses it."""
    from lab.sweeps.summary import record_counts

    sweep = tmp_path / "rope-scaling"
    shutil.copytree(RESULTS / "rope-scaling", sweep)
    records = json.loads((sweep / "results.json").read_text())
    assert len(records) == 66 and record_counts(records) == {"synthetic": 66, "lm": 0}
    timing = json.loads((sweep / "sweep.json").read_text())
    (sweep / "sweep.json").write_text(json.dumps(timing | {"results": record_counts(records)}))
    family = FAMILIES["rope-scaling"]
    readme.check_complete(sweep, family)  # every record there: accepted
    (sweep / "results.json").write_text(json.dumps(records[:-1]))  # one rule's record dropped
    with pytest.raises(ValueError, match="holds 65 evaluation record.s., but sweep.json beside"):
        readme.check_complete(sweep, family)


def test_publishing_the_committed_folder_onto_itself_changes_nothing(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    results = sandbox(tmp_path, monkeypatch)
    assert readme.main([]) == 0  # current first: a task registered since then joins the table
    capsys.readouterr()
    before = snapshot(tmp_path)
    folders = [str(results / "ablation"), "--v2", str(results / "v2")]
    for family, folder in SWEEP_SECTIONS.items():
        if (results / folder / "results.json").is_file():
            folders += [f"--{family}", str(results / folder)]
    assert readme.main(folders) == 0
    assert "rewrote 0 of" in capsys.readouterr().out
    assert snapshot(tmp_path) == before


def counted(sweep: Path, runs: int) -> None:
    """Make ``sweep``'s sweep.json count ``runs`` trained runs, and record its files."""
    timing = json.loads((sweep / "sweep.json").read_text()) | {"runs": {"trained": runs}}
    if "results" in timing:  # the evaluation records it counts, as a sweep writes them
        timing["results"] = {"synthetic": runs, "lm": 0}
    (sweep / "sweep.json").write_text(json.dumps(timing))
    recorded(sweep)


def test_publish_copies_a_good_sweep_then_rewrites_its_page(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    results = sandbox(tmp_path, monkeypatch)
    sweep = tmp_path / "runs" / "ablation"
    shutil.copytree(RESULTS / "ablation", sweep)
    runs = json.loads((sweep / "results.json").read_text())
    (sweep / "results.json").write_text(json.dumps(runs[:-1]))
    counted(sweep, 29)  # a sweep of one run fewer, whose sweep.json says so
    readme_before = (tmp_path / "README.md").read_text()
    assert readme.main([str(sweep)]) == 0
    assert (results / "ablation" / "results.json").read_text() == json.dumps(runs[:-1])
    assert "29 runs" in (results / "ablation.md").read_text()
    assert (tmp_path / "README.md").read_text() == readme_before  # the README is the headline's
    headline = tmp_path / "runs" / "headline"
    shutil.copytree(RESULTS / "headline", headline)
    runs = json.loads((headline / "results.json").read_text())
    (headline / "results.json").write_text(json.dumps(runs[:-1]))
    counted(headline, 59)
    assert readme.main(["--headline", str(headline)]) == 0
    assert "59 runs" in (results / "headline.md").read_text()
    assert "59 runs" in (tmp_path / "README.md").read_text()
    assert readme.main(["--check"]) == 0


def test_publish_check_takes_no_folder(tmp_path: Path, capsys) -> None:
    assert readme.main(["--check", str(tmp_path)]) == 2
    assert "--check takes no folder" in one_error_line(capsys)


def test_publish_help_states_the_whole_description(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        readme.main(["--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    first = " ".join(readme.__doc__.split("\n\n")[0].split()).replace("``", "")
    assert first.endswith("(or check them).") and first in out


# --- language-modelling track: the lm, passkey and lm-extend pages ----------------------------


def same_files(made: Path, committed: Path, names: dict[str, str]) -> None:
    """Each file ``made/NAME`` has the bytes of ``committed/COPY`` (``names``: NAME -> COPY)."""
    for name, copy in names.items():
        assert (made / name).read_bytes() == (committed / copy).read_bytes(), (
            f"{committed.name}/{copy}"
        )


def test_the_lm_page_and_its_report_come_from_its_committed_runs(tmp_path: Path) -> None:
    """docs/results/lm/: the report writer makes the committed report.md, results.csv and
    results.json from the committed results.json; the page holds its perplexity table, the
    five schemes' findings and both figures."""
    from lab.lm.findings import lm_findings
    from lab.lm.report import perplexity_table, write_lm_reports

    results = json.loads((RESULTS / "lm" / "results.json").read_text())
    write_lm_reports(results, tmp_path)
    names = {"lm_report.md": "report.md", "lm_results.csv": "results.csv"}
    same_files(tmp_path, RESULTS / "lm", {**names, "lm_results.json": "results.json"})
    page = (RESULTS / "lm.md").read_text()
    assert {r["position"] for r in results} == {"none", "learned", "sinusoidal", "rope", "alibi"}
    assert perplexity_table(results, "text") in page
    assert all(line in page for line in lm_findings(results)) and len(lm_findings(results)) == 6
    for figure in ("perplexity_vs_length.png", "loss_vs_position.png"):
        assert f"(lm/{figure})" in page and (RESULTS / "lm" / figure).is_file()


def test_the_passkey_page_and_its_report_come_from_its_committed_runs(tmp_path: Path) -> None:
    """docs/results/passkey/: the sweep's report writer makes the committed report.md,
    results.csv and results.json from the committed results.json; the page holds the passkey
    table (every learned scheme, RoPE under each of four rules, and a row for each run not
    learned within its budget, never a 0% cell) and the heatmaps."""
    from lab.lm.passkey import grouped, passkey_table
    from lab.reporting.report import write_reports

    results = json.loads((RESULTS / "passkey" / "results.json").read_text())
    write_reports(results, tmp_path)
    same_files(
        tmp_path, RESULTS / "passkey", {n: n for n in ("report.md", "results.csv", "results.json")}
    )
    labels = list(grouped(results))
    assert len(labels) == 9 and {label.split(" ")[0] for label in labels} == {
        "none",
        "learned",
        "sinusoidal",
        "rope",
        "alibi",
    }  # at each scheme's own rate every scheme learned at 2 or 3 of its 3 seeds
    table = passkey_table(results)
    assert (
        "| `learned` | 2 |" in table
        and "| `learned` seed 2 | 0 | not learned within budget: " in table
    )
    assert table.count("not learned within budget") == 1
    assert sum(label.startswith("rope [scaling=") for label in labels) == 4, labels
    page = (RESULTS / "passkey.md").read_text()
    assert (
        passkey_table(results) in page
        and passkey_table(results) in (RESULTS / "passkey" / "report.md").read_text()
    )
    assert (
        "(passkey/passkey_grid.png)" in page
        and (RESULTS / "passkey" / "passkey_grid.png").is_file()
    )


def test_the_extend_page_and_its_report_come_from_its_committed_runs(tmp_path: Path) -> None:
    """docs/results/lm-extend/: the extend report writer makes the committed report.md and
    results.csv from the committed results.json; the page holds its perplexity table, paired
    tests and both findings."""
    from lab.lm import extend_report

    results = json.loads((RESULTS / "lm-extend" / "results.json").read_text())
    extend_report.write_extend_report(results, tmp_path)
    names = {"extend_report.md": "report.md", "extend_results.csv": "results.csv"}
    same_files(tmp_path, RESULTS / "lm-extend", names)
    page = (RESULTS / "lm-extend.md").read_text()
    assert extend_report.report_text(results) in page
    kinds = {kind for kind, _ in extend_report.grouped(results)[1]}
    assert kinds == set(extend_report.KINDS)
    assert page.count("- Peng et al. 2023") == 1 and page.count("- Chen et al. 2023") == 1


def test_the_suite_page_names_the_commands_its_sweep_json_records(tmp_path: Path) -> None:
    """The suite's page names the command each ``sweep.json`` recorded, and the family's fixed
    command (with its note on how the committed files were made) only for files that predate
    recording one."""
    from lab.reporting.pages import suite_page

    folder = tmp_path / "suite"
    shutil.copytree(RESULTS / "suite", folder)
    committed = suite_page(folder, "python sweep.py --publish")
    assert "`python sweep.py --config configs/suite.yaml`: 14 tasks" in committed
    assert "earlier early-stopping rule" in committed and "either way.." not in committed
    for name, command in [
        ("sweep.json", "python sweep.py --config configs/suite.yaml seed=1 --workers 2"),
        ("quick_sweep.json", "python sweep.py --config configs/suite_quick.yaml seed=1"),
    ]:
        sweep = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps(sweep | {"command": command}))
    page = suite_page(folder, "python sweep.py --publish")
    assert "`python sweep.py --config configs/suite.yaml seed=1 --workers 2`: 14 tasks" in page
    assert "`python sweep.py --config configs/suite_quick.yaml seed=1` (the smoke test)" in page
    assert "earlier early-stopping rule" not in page  # the note is about the committed files


def test_an_optional_file_the_sweep_lacks_is_removed_from_the_published_folder(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """An extend study published without its perplexity figure (optional: older studies lack
    it) left the committed figure, of other runs, beside the new tables and linked from the
    page; the published copy goes with the sweep's lack of it, and the page links none."""
    results = sandbox(tmp_path, monkeypatch)
    family = FAMILIES["lm-extend"]
    study = tmp_path / "runs" / "study"
    study.mkdir(parents=True)
    for name, copy in family.copied.items():
        shutil.copy(results / family.name / copy, study / name)
    recorded(study, "configs/lm_extend.yaml")
    assert (results / family.name / "perplexity_vs_length.png").is_file()
    assert readme.main(["--lm-extend", str(study)]) == 0
    assert not (results / family.name / "perplexity_vs_length.png").exists()
    assert "perplexity_vs_length.png" not in (results / f"{family.name}.md").read_text()


def test_the_steps_line_gives_each_task_its_range_and_true_median() -> None:
    """The pages said "200 to 8000, median 3400" for 15 svo runs of at most 700 steps and 15
    copy runs of at least 3400: one range hid the two groups, and the "median" was the upper
    middle value (2050 is the median of the 30). Each task gets its own range and median, and
    a run evaluated several ways counts once."""
    from lab.reporting.pages import steps_line

    def run(task: str, steps: int, name: str, rule: str = "") -> dict:
        return {"task": task, "train_steps": steps, "run_dir": name, "rule": rule}

    runs = [run("svo", s, f"svo{s}") for s in (200, 300, 700)]
    runs += [run("copy", s, f"copy{s}") for s in (3400, 5000, 6000, 8000)]
    runs += [run("copy", 8000, "copy8000", rule) for rule in ("linear", "yarn")]  # same run
    assert steps_line(runs) == (
        "Training steps per run (early stopping on the validation set, or the cap): "
        "copy 3400 to 8000, median 5500; svo 200 to 700, median 300."
    )


def test_a_page_of_a_re_evaluated_sweep_gives_the_training_time_and_says_it_re_evaluated() -> None:
    """A pass that only re-evaluated (here under other eval.* values) was published with its own
    few seconds and machine as the sweep's time; the page gives the training's, names the
    command that trained, and says when the reports were re-evaluated."""
    from lab.reporting.pages import provenance

    results = json.loads((RESULTS / "ablation" / "results.json").read_text())
    sweep = json.loads((RESULTS / "ablation" / "sweep.json").read_text())
    sweep |= {
        "command": "python sweep.py eval.samples=64",
        "trained_by": "python sweep.py",
        "reevaluated": {"seconds": 24.0, "machine": "another machine"},
    }
    line = provenance(results, sweep, FAMILIES["ablation"])
    minutes = f"{sweep['seconds'] / 60:.1f}"  # the training's, not the re-evaluation's
    command = "`python sweep.py eval.samples=64`"
    assert line.startswith(f"{command}: 30 runs, seed(s) 0, 1, 2, in **{minutes} min**")
    assert line.endswith(
        "; trained by `python sweep.py`; its reports re-evaluated in 0.4 min on another machine."
    )


def test_a_sweep_folder_that_does_not_record_its_files_is_no_result_page(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """The RoPE-scaling slot takes an optional sweep.json (the v2 slot did): without one (or
    with one that records no files) a hand-edited report.md was published at exit 0, under
    the family's command. A folder must record its files; the RoPE-scaling page, which states
    its own command and runs, takes only a sweep of that command. Nothing is written."""
    sandbox(tmp_path, monkeypatch)
    before = snapshot(tmp_path)
    edited = bad_sweep(tmp_path, "report.md", "# Evaluation report\n\nhand-written\n")
    (edited / "sweep.json").unlink()
    assert readme.main(["--rope-scaling", str(edited)]) == 2
    assert one_error_line(capsys).endswith(
        "has no sweep.json: nothing shows its files are one sweep's; run the sweep's command "
        "into it (a finished sweep skips its runs and records its files)"
    )
    assert readme.main(["--v2", str(edited)]) == 2  # the v2 slot takes only a whole sweep
    assert one_error_line(capsys).endswith(
        "lacks sweep.json; make them with `python sweep.py position=t5,fire,kerple,xpos,cope "
        "seed=0,1,2 out_dir=runs/v2` (into this folder) first"
    )
    old = bad_sweep(tmp_path, "report.md", "# Evaluation report\n\nhand-written\n")
    timing = json.loads((old / "sweep.json").read_text())
    (old / "sweep.json").write_text(json.dumps({k: v for k, v in timing.items() if k != "files"}))
    assert readme.main(["--v2", str(old)]) == 2
    assert "has a sweep.json that records no files" in one_error_line(capsys)
    other = bad_sweep(tmp_path, "report.md", (RESULTS / "ablation" / "report.md").read_text())
    assert readme.main(["--rope-scaling", str(other)]) == 2
    assert "the rope-scaling page states `python sweep.py --workers 1 position=rope" in (
        one_error_line(capsys)
    )
    assert snapshot(tmp_path) == before
