"""A result page's "Learning rates" section: which rate each scheme trained at, how it was
chosen (``sweep.py --select-lr``'s ``lr_selection.json``, copied from the tuning folder beside
the sweep), and a run whose rate is not the one chosen for its scheme flagged."""

import json
from pathlib import Path

import pytest

from lab.reporting import readme
from lab.reporting.pages import (
    FAMILIES,
    file_problem,
    learning_rate_section,
    rates_used,
    selection_problem,
)

SELECTION = {
    "command": "python sweep.py --select-lr --config configs/passkey.yaml",
    "rates": [0.0003, 0.001, 0.003],
    "seeds": [100],
    "criterion": "in-distribution validation only",
    "chosen": {"rope": 0.003, "learned": 0.001},
    "why": {"rope": "lr=0.001: 0/1 | lr=0.003 (chosen): 1/1 reached", "learned": "lr=0.001: 1/1"},
    "arms": [{"scheme": "rope", "budget": 3000}, {"scheme": "learned", "budget": 3000}],
}


def run(position: str, lr: float, seed: int = 0, steps: int = 3000) -> dict:
    return {"position": position, "seed": seed, "config": {"train": {"lr": lr, "steps": steps}}}


def test_the_rates_each_scheme_used_in_run_order() -> None:
    results = [run("rope", 3e-3), run("learned", 1e-3), run("rope", 3e-3, 1), run("rope", 1e-3)]
    assert rates_used(results) == {"rope": [3e-3, 1e-3], "learned": [1e-3]}


def test_one_untuned_rate_says_so() -> None:
    lines = learning_rate_section([run("rope", 1e-3), run("alibi", 1e-3)], None, "x.json")
    assert lines[2] == (
        "Every run trained at lr=0.001: one rate for every scheme, not tuned per scheme "
        "(`python sweep.py --select-lr` would)."
    )


def test_a_chosen_rate_is_shown_with_why_and_a_run_at_another_rate_is_flagged() -> None:
    results = [run("rope", 3e-3), run("learned", 3e-3), run("alibi", 1e-3)]
    text = "\n".join(learning_rate_section(results, SELECTION, "passkey/lr_selection.json"))
    assert "`python sweep.py --select-lr --config configs/passkey.yaml`" in text
    assert (
        "rate of 0.0003, 0.001, 0.003 on tuning seed(s) 100 (none of them a seed of the runs "
        "above) at this study's step budget (3000 steps)"
    ) in text
    assert "[lr_selection.json](passkey/lr_selection.json)" in text
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()]
    cells = {row[0]: row[1:] for row in rows if row[0].startswith("`")}
    assert cells["`rope`"] == ["0.003", "0.003", "lr=0.001: 0/1; lr=0.003 (chosen): 1/1 reached"]
    assert cells["`learned`"][:2] == ["0.001", "**0.003: not the rate chosen**"]
    assert cells["`alibi`"] == ["not tuned", "0.001", ""]


def test_a_selection_on_the_published_seeds_or_another_budget_says_so_in_bold() -> None:
    results = [run("rope", 3e-3, seed=100, steps=500), run("learned", 1e-3, steps=500)]
    text = "\n".join(learning_rate_section(results, SELECTION, "x.json"))
    assert "on tuning seed(s) 100 (**seed(s) 100 of the runs above too**)" in text
    assert "at **a budget of 3000 steps, not this study's 500**" in text
    assert "never" not in text and "alike" not in text


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"chosen": {"rope": 3}}, "chosen['rope']=3 is not a learning rate in (0, 1)"),
        ({"chosen": {"rope": True}}, "chosen['rope']=True is not a learning rate in (0, 1)"),
        ({"chosen": {}}, "chosen={} is not an object keyed by scheme"),
        ({"seeds": "100"}, "seeds='100' is not a list"),
        ({"why": None}, "why=None is not an object keyed by scheme"),
    ],
)
def test_a_broken_selection_is_named(change: dict, problem: str) -> None:
    assert selection_problem(SELECTION) is None
    assert selection_problem({**SELECTION, **change}) == problem
    assert selection_problem([]) == "not an object but a list"
    assert selection_problem({"command": "x"}).startswith("lacks 'rates', 'seeds'")


def test_publishing_copies_the_selection_of_the_tuning_folder_beside_the_sweep(
    tmp_path: Path,
) -> None:
    sweep, results = tmp_path / "passkey", tmp_path / "results"
    sweep.mkdir()
    for name in FAMILIES["passkey"].copied:
        (sweep / name).write_text("x")
    files = readme.family_files(sweep, FAMILIES["passkey"], results)
    assert results / "passkey" / "lr_selection.json" not in files  # no tuning folder
    (tmp_path / "passkey-lr").mkdir()
    chosen = tmp_path / "passkey-lr" / "lr_selection.json"
    chosen.write_text(json.dumps(SELECTION))
    files = readme.family_files(sweep, FAMILIES["passkey"], results)
    assert files[results / "passkey" / "lr_selection.json"] == chosen
    assert file_problem(chosen, "lr_selection.json") is None
    chosen.write_text(json.dumps({**SELECTION, "chosen": {"rope": 2.0}}))
    assert file_problem(chosen, "lr_selection.json") == (
        "chosen['rope']=2.0 is not a learning rate in (0, 1)"
    )


def test_a_selection_tuned_on_another_model_or_recipe_says_which_settings_differ() -> None:
    from lab.reporting.pages import recipe_differences

    results = [run("rope", 3e-3), run("learned", 1e-3)]
    for result in results:
        result["config"] |= {"model": {"d_model": 64}, "data": {"task": "passkey"}}
    same = {"model.d_model": [64], "train.steps": [3000], "data.task": ["passkey"]}
    assert recipe_differences(results, {"recipe": same}) == (
        " Its runs had the published runs' model, recipe and tasks."
    )
    other = same | {"model.d_model": [32], "data.task": ["copy", "svo"]}
    assert recipe_differences(results, {"recipe": other}) == (
        " **It tuned other settings than the runs above: model.d_model 32 (here 64); "
        "data.task copy, svo (here passkey).**"
    )
    assert "cannot check them" in recipe_differences(results, {})
    text = "\n".join(learning_rate_section(results, SELECTION | {"recipe": other}, "x.json"))
    assert "**It tuned other settings than the runs above: model.d_model 32" in text
