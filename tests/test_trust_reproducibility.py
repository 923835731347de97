"""The cross-machine comparison (lab.reporting.reproducibility) and the machine record
(lab.common.machine)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from lab.common.machine import describe, machine_info
from lab.reporting.pages import RESULTS
from lab.reporting.reproducibility import compare_sweeps, markdown

PAGES = Path(__file__).parent.parent / "docs" / "results" / "reproducibility"


@pytest.fixture(scope="module")
def sweeps() -> tuple[list[dict], list[dict]]:
    read = [
        json.loads((PAGES / f"{m}_results.json").read_text()) for m in ("amd_epyc", "intel_xeon")
    ]
    return read[0], read[1]


def test_the_committed_page_is_made_from_the_committed_results(sweeps) -> None:
    page = (PAGES / "cross_machine.md").read_text()
    note = page.splitlines()[2]
    made = markdown(compare_sweeps(*sweeps), "2-core AMD EPYC VM", "2-core Intel Xeon VM", note)
    assert page == made


@pytest.mark.parametrize(("page", "runs", "arms"), [("rope-scaling", 66, 11), ("hybrids", 30, 5)])
def test_runs_evaluated_several_ways_or_hybrids_pair_by_the_reports_arms(page, runs, arms) -> None:
    """--compare once keyed runs by scheme, task and seed, so a RoPE-scaling sweep (eleven
    evaluations of each RoPE run) or a sweep of hybrid layouts (several layouts of one member
    scheme) was refused as "one run twice"; runs pair by the arm their report names."""
    results = json.loads((PAGES.parent / page / "results.json").read_text())
    c = compare_sweeps(results, copy.deepcopy(results))
    assert c["identical"] == c["runs"] == runs
    assert len({(row["scheme"], row["task"]) for row in c["cells"]}) == arms * 2
    assert all(row["shift"] == 0 and row["verdict"] == "agrees" for row in c["cells"])


def test_a_sweep_compared_with_itself_is_identical_and_every_cell_the_same(sweeps) -> None:
    a = sweeps[0]
    c = compare_sweeps(a, copy.deepcopy(a))
    assert c["identical"] == c["runs"] == 30
    assert all(row["shift"] == 0 and row["verdict"] == "agrees" for row in c["cells"])
    assert not c["claims_a_only"] and not c["claims_b_only"]
    assert all(x == y for x, y in c["verdicts"].values())


def test_a_machine_that_moves_every_seed_is_shown_to_differ(sweeps) -> None:
    a = sweeps[0]
    b = copy.deepcopy(a)
    for result in b:
        if (result["task"], result["position"]) == ("svo", "none"):
            result["summary"]["at"]["4x"] -= 0.20 + 0.01 * result["seed"]  # -20, -21, -22 points
    cell = next(
        r for r in compare_sweeps(a, b)["cells"]
        if (r["task"], r["scheme"], r["where"]) == ("svo", "none", "4x")
    )  # fmt: skip
    assert cell["verdict"] == "disagrees" and cell["high"] < -0.05


def test_one_flipped_answer_breaks_bit_identity_of_that_run_only(sweeps) -> None:
    a = sweeps[0]
    b = copy.deepcopy(a)
    row = b[0]["lengths"][0]
    row["correct"] = ("1" if row["correct"][0] == "0" else "0") + row["correct"][1:]
    assert compare_sweeps(a, b)["identical"] == 29


def test_the_two_machines_differ_as_measured(sweeps) -> None:
    """The previous recipe on AMD EPYC and Intel Xeon: 6 of 30 runs bit-identical, and the
    NoPE copy mean at 1.25x moved from 12.4% to 36.7%: at 3 seeds its interval, +24.3
    [-23.0, +71.7] points, neither shows the machines the same nor different."""
    c = compare_sweeps(*sweeps)
    assert c["identical"] == 6
    cell = next(
        r for r in c["cells"] if (r["task"], r["scheme"], r["where"]) == ("copy", "none", "1.25x")
    )
    assert round(100 * cell["mean_a"], 1) == 12.4 and round(100 * cell["mean_b"], 1) == 36.7
    assert cell["verdict"] == "inconclusive"
    assert (round(100 * cell["low"], 1), round(100 * cell["high"], 1)) == (-23.0, 71.7)
    assert all(x == y for x, y in c["verdicts"].values())  # no finding moves between machines


def test_sweeps_of_different_runs_are_refused(sweeps) -> None:
    with pytest.raises(ValueError, match="different runs"):
        compare_sweeps(sweeps[0], sweeps[1][1:])


def test_the_machine_record_names_cpu_torch_and_blas() -> None:
    info = machine_info()
    assert info["cpu"] and info["torch"] and info["blas"] and info["cpu_count"] >= 1
    assert info["torch"] in describe(info) and info["cpu"] in describe(info)
    json.dumps(info)  # JSON-ready


def test_a_file_that_is_no_results_json_is_one_line(tmp_path, capsys) -> None:
    from lab.reporting.reproducibility import main

    sweep_json = tmp_path / "sweep.json"
    sweep_json.write_text('{"seconds": 1.0}')
    assert main([str(PAGES / "amd_epyc_results.json"), str(sweep_json)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {sweep_json} is not a sweep's results.json (a list of eval.json results)"


def test_bad_compare_arguments_are_one_line_naming_the_file(sweeps, tmp_path, capsys) -> None:
    """--out a folder was a traceback (IsADirectoryError); a non-JSON file, an empty list or
    rows of mixed seed types said 'Expecting value', 'max() arg is an empty sequence' or
    "'<' not supported", naming no file."""
    import sweep

    good = str(PAGES / "amd_epyc_results.json")
    files = {"text": "not json", "empty": "[]", "dict": '{"a": 1}'}
    for name, text in files.items():
        (tmp_path / f"{name}.json").write_text(text)
    row = {**sweeps[0][0], "seed": "0"}
    (tmp_path / "text_seed.json").write_text(json.dumps([row]))
    bad = {name: str(tmp_path / f"{name}.json") for name in [*files, "text_seed"]}
    cases = [
        ([good, good, "--out", str(tmp_path)], f"--out {tmp_path} is a folder; give the file"),
        ([good, bad["text"]], f"{bad['text']} is not a readable JSON file"),
        ([good, str(tmp_path)], f"{tmp_path} is not a readable JSON file"),
        ([bad["empty"], bad["empty"]], f"{bad['empty']} holds no results"),
        ([good, bad["dict"]], f"{bad['dict']} is not a sweep's results.json"),
        ([good, bad["text_seed"]], f"{bad['text_seed']} is not a sweep's results.json"),
    ]
    for argv, message in cases:
        assert sweep.main(["--compare", *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and message in err and "\n" not in err, (argv, err)
    assert not list(tmp_path.glob(".*.tmp*"))  # no half-written page left behind
    twice = [sweeps[0][0], *sweeps[0]]  # one run listed twice would be pooled as two seeds
    (tmp_path / "twice.json").write_text(json.dumps(twice))
    assert sweep.main(["--compare", good, str(tmp_path / "twice.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {tmp_path / 'twice.json'} holds the run none-copy-seed0 twice; a run is one "
        "seed, counted once"
    )
    unlearned = copy.deepcopy(sweeps[0])
    for result in unlearned:
        result["summary"]["in_dist"] = 0.0
    (tmp_path / "unlearned.json").write_text(json.dumps(unlearned))
    (tmp_path / "unlearned_b.json").write_text(json.dumps(unlearned))
    assert (
        sweep.main(
            ["--compare", *[str(tmp_path / n) for n in ("unlearned.json", "unlearned_b.json")]]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: cannot compare {tmp_path / 'unlearned.json'} with ")
    assert "no cell holds learned runs in both sweeps" in err and "\n" not in err


def test_compare_names_each_sides_runs_and_refuses_what_it_cannot_compare(
    sweeps, tmp_path, capsys
) -> None:
    """--compare's oddities: two sweeps of different runs were refused with a list of tuples
    that said neither which file held them nor whether it was all ("... " always); an LM
    results.json was "cannot compare ...: 'in_dist'"; a seed of true was "the run ...-seed1
    twice"; --out in a missing folder created that folder after the work."""
    import sweep

    good = str(PAGES / "amd_epyc_results.json")
    twin = tmp_path / "twin.json"  # the same runs in another file (one file twice is refused)
    twin.write_bytes(Path(good).read_bytes())
    fewer = tmp_path / "fewer.json"
    fewer.write_text(json.dumps(sweeps[1][2:]))
    assert sweep.main(["--compare", good, str(fewer)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: cannot compare {good} with {fewer}: the sweeps hold different runs: only in "
        "the first 2 (none-copy-seed0, none-copy-seed1); only in the second 0"
    )
    lm = Path(__file__).parent.parent / "docs" / "results" / "lm" / "results.json"
    assert sweep.main(["--compare", str(lm), good]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {lm} holds language-model runs (kind lm); --compare compares the exact-match "
        "of synthetic sweeps' results.json"
    )
    flagged = copy.deepcopy(sweeps[0])
    flagged[0]["seed"] = True
    (tmp_path / "bool.json").write_text(json.dumps(flagged))
    assert sweep.main(["--compare", str(tmp_path / "bool.json"), good]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {tmp_path / 'bool.json'} is not a sweep's results.json (a list of eval.json "
        "results)"
    )
    victims = [Path(good), tmp_path / "notes.txt"]  # its own input; a user's file
    victims[1].write_text("my notes\n")
    for victim in victims:
        before = victim.read_bytes()
        assert sweep.main(["--compare", good, str(twin), "--out", str(victim)]) == 2
        err = capsys.readouterr().err
        assert "is a file this command did not write" in err and victim.read_bytes() == before
    run = tmp_path / "run"  # a run's folder: refused as every output folder is
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"weights")
    assert sweep.main(["--compare", good, str(twin), "--out", str(run / "page.md")]) == 2
    assert "lies in a folder refused for output" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.pt"]
    page = tmp_path / "page.md"  # a page it wrote is replaced
    assert sweep.main(["--compare", good, str(twin), "--out", str(page)]) == 0
    assert sweep.main(["--compare", good, str(twin), "--out", str(page)]) == 0
    capsys.readouterr()
    missing = tmp_path / "no such folder" / "page.md"
    assert sweep.main(["--compare", good, str(twin), "--out", str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --out=") and "does not exist" in err and "\n" not in err
    assert not missing.parent.exists()


def test_a_comparison_of_two_settings_speaks_of_settings_not_machines(sweeps) -> None:
    """``--kind setting`` compares one sweep under two values of a rule (early stopping, say)
    with the same seed-level procedure; the page names what differs, never a machine."""
    page = markdown(compare_sweeps(*sweeps), "met once", "held", "note", kind="setting")
    assert page.startswith("# The same sweep under two settings: met once (A) and held (B)\n")
    assert "the setting's effect B - A paired by seed" in page
    assert "## Cells not shown to be the same on both settings" in page
    assert "machine" not in page


def test_a_scheme_learned_on_one_side_only_is_named_not_dropped(sweeps) -> None:
    """--compare pairs only seeds learned on both sides, so a setting that made ALiBi learn on
    every seed read as "the same within 5 points, 5 of 5" with ALiBi nowhere on the page; the
    cells learned on one side only are counted and listed."""
    a = sweeps[0]
    b = copy.deepcopy(a)
    for result in b:
        if result["position"] == "alibi" and result["task"] == "copy":
            result["summary"]["in_dist"] = 0.5  # not learned in B
    c = compare_sweeps(a, b, "setting")
    assert c["learned_differs"] == [
        {"task": "copy", "scheme": "alibi", "learned_a": 3, "learned_b": 0, "seeds": 3}
    ]
    assert all(row["scheme"] != "alibi" or row["task"] != "copy" for row in c["cells"])
    page = markdown(c, "A", "B", kind="setting")
    assert "- **Learned on one setting only** (seeds learned A -> B; not in the cells): " in page
    assert "copy alibi (3 -> 0 of 3)" in page and "| copy | alibi | 3 | 3 | 0 |" in page
    assert (
        "learned_differs" in compare_sweeps(a, copy.deepcopy(a))
        and not compare_sweeps(a, copy.deepcopy(a))["learned_differs"]
    )


def test_a_file_compared_with_itself_is_refused(tmp_path, capsys) -> None:
    """``--compare A A`` printed "the same sweep on two machines, 30 of 30 bit-identical"."""
    import sweep

    path = PAGES / "amd_epyc_results.json"
    (tmp_path / "link.json").symlink_to(path)
    for b in (path, tmp_path / "link.json"):
        assert sweep.main(["--compare", str(path), str(b)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "are one file" in err and "\n" not in err


EARLY = Path(__file__).parent.parent / "docs" / "results" / "early-stopping"


def test_the_early_stopping_page_is_made_from_its_committed_results() -> None:
    """docs/results/early-stopping.md compares the headline's svo runs (target held at 3
    consecutive checks) with the same runs stopped at the first check that meets it, by
    ``sweep.py --compare --kind setting``: the page is exactly what its two JSON files give,
    and it compares the same seeds of one sweep file under two stopping rules."""
    page = (EARLY.parent / "early-stopping.md").read_text()
    once, held = (json.loads((EARLY / f"{n}_results.json").read_text()) for n in ("once", "held"))
    assert {r["config"]["train"]["target_checks"] for r in once} == {1}
    assert {r["config"]["train"]["target_checks"] for r in held} == {3}
    key = lambda r: (r["position"], r["task"], r["seed"])  # noqa: E731
    for a, b in zip(sorted(once, key=key), sorted(held, key=key), strict=True):
        assert a["config"]["train"] | {"target_checks": 3} == b["config"]["train"]
    labels = page.splitlines()[0].removeprefix("# The same sweep under two settings: ")
    label_a, label_b = (part.rsplit(" (", 1)[0] for part in labels.split(" (A) and "))
    made = markdown(
        compare_sweeps(once, held, "setting"), label_a, label_b, page.splitlines()[2], "setting"
    )
    assert page == made


def test_two_sweeps_of_other_settings_are_no_machines_effect(sweeps) -> None:
    """A results file with lr, d_model and the training length edited compared as 'the same
    sweep on two machines': 30 of 30 runs bit-identical, exit 0; the settings are compared now,
    and --kind setting is the comparison for that."""
    a = sweeps[0]
    b = copy.deepcopy(a)
    for result in b:
        result["config"]["model"]["d_model"] = 512
    with pytest.raises(
        ValueError,
        match=r"^30 of 30 runs differ in settings between the sweeps \(first [^:]+: "
        r"model.d_model\): .* --kind setting",
    ):
        compare_sweeps(a, b)
    assert compare_sweeps(a, b, "setting")["runs"] == 30


@pytest.mark.parametrize(
    ("section", "key"), [("train", "target_accuracy"), ("eval", "precision"), ("eval", "stride")]
)
def test_a_setting_null_in_one_sweep_is_a_setting_that_differs(section, key) -> None:
    """Early stopping on in one sweep (train.target_accuracy 0.99) and off in the other (null)
    was compared at exit 0 as 'the same sweep on two machines': a null was taken for a key an
    older version lacks. Only a key one record lacks is a version's."""
    a = json.loads((RESULTS / "ablation" / "results.json").read_text())
    b = copy.deepcopy(a)
    for result in b:
        result["config"][section][key] = None if result["config"][section][key] else 7
    with pytest.raises(ValueError, match=rf"^30 of 30 runs differ .*{section}\.{key}"):
        compare_sweeps(a, b)
    for result in b:
        del result["config"][section][key]
    assert compare_sweeps(a, b)["runs"] == 30  # lacking it: another version's record
