"""Findings and seed tables follow the numbers: hand-made runs with known results."""

import pytest

from lab.reporting.aggregate import cell, comparison, groups, headline_table, significance_lines
from lab.reporting.findings import haviv, kazemnejad_order, press, ruoss

GRID = [4, 8, 12, 16]
MULTIPLES = {"1.1x": 18, "1.25x": 20, "1.5x": 24, "2x": 32, "3x": 48, "4x": 64}


def run(position: str, seed: int, at_125: int, in_dist: float = 1.0, task: str = "copy") -> dict:
    """A copy run (training 4..16, 100 sequences per length) whose exact-match at 1.25x is
    ``at_125`` of 100: the first ``at_125`` sequences right; 0 at every other multiple."""
    lengths = []
    for length in sorted({*GRID, *MULTIPLES.values()}):
        right = at_125 if length == 20 else (round(100 * in_dist) if length <= 16 else 0)
        correct = "1" * right + "0" * (100 - right)
        lengths.append(
            {"length": length, "exact_match": right / 100, "correct": correct, "pair_accuracy": 0.5}
        )
    at = {label: (at_125 / 100 if n == 20 else 0.0) for label, n in MULTIPLES.items()}
    return {
        "task": task,
        "position": position,
        "seed": seed,
        "run_dir": f"runs/{position}-{task}-seed{seed}",
        "config": {"model": {"causal": True}, "eval": {"max_length_factor": 4.0}},
        "train_lengths": [4, 16],
        "grid_lengths": GRID,
        "lengths": lengths,
        "summary": {"in_dist": in_dist, "at": at, "notes": []},
        "order": {"order_blind": False},
    }


def sweep(alibi: tuple[int, ...], others: tuple[int, ...]) -> list[dict]:
    """ALiBi's and every other scheme's exact-match at 1.25x per seed (of 100 sequences)."""
    results = [run("alibi", s, v) for s, v in enumerate(alibi)]
    for position in ("none", "learned", "sinusoidal", "rope"):
        results += [run(position, s, v) for s, v in enumerate(others)]
    return results


def word(finding) -> str:
    return finding.word


def test_press_is_decided_by_the_interval_beyond_the_margin() -> None:
    # a lead of 80-90 points in each of 6 seeds: the interval lies beyond +5 points
    lead = sweep((90, 85, 95, 88, 92, 91), (10, 5, 0, 3, 7, 2))
    found = press(lead, lead)
    assert found.word == "agrees" and "alibi - learned +85.7 points" in found.text
    # the same means at 3 seeds with a spread: the interval is wide, nothing is decided
    wide = sweep((90, 20, 95), (10, 5, 0))
    found = press(wide, wide)
    assert found.word == "inconclusive" and "about" in found.text and "seeds" in found.text
    behind = sweep((0, 1, 0, 2, 0, 1), (40, 45, 35, 50, 42, 38))
    assert word(press(behind, behind)) == "disagrees"
    one = [run("alibi", 0, 90)]
    assert word(press(one, one)) == "not measured"


def test_a_small_lead_short_of_the_margin_never_agrees() -> None:
    # alibi leads by 1-3 points in every seed: significant, but not beyond the 5-point margin
    small = sweep((12, 13, 11, 12, 14, 12), (10, 10, 10, 10, 11, 10))
    assert word(press(small, small)) == "inconclusive"


def test_ruoss_asks_for_each_interval_below_the_failure_bar() -> None:
    results = sweep((90, 85, 95), (10, 5, 0))  # every 2x is 0% in every seed
    assert word(ruoss(results, results)) == "agrees"
    for r in results:
        if r["position"] == "rope":
            r["summary"]["at"]["2x"] = 0.6
    assert word(ruoss(results, results)) == "disagrees"  # rope 60% in every seed
    for r in results:
        if r["position"] == "rope":
            r["summary"]["at"]["2x"] = [0.0, 0.3, 0.05][r["seed"]]
    assert word(ruoss(results, results)) == "inconclusive"  # mean 11.7%, interval [0, 50]


def test_haviv_reads_nope_in_distribution() -> None:
    results = sweep((90, 85, 95), (10, 5, 0))
    assert word(haviv(results, results)) == "agrees"  # 100% in every seed
    low = [run("none", s, 0, in_dist=0.5) for s in range(3)]
    found = haviv(low, low)
    assert found.word == "disagrees" and "50.0%" in found.text


def test_a_run_not_learned_within_budget_is_no_evidence_against_learning() -> None:
    runs = [run("none", s, 0, in_dist=1.0) for s in range(2)] + [run("none", 2, 0, in_dist=0.2)]
    found = haviv(runs, runs[:2])  # the third run hit its step budget at 20%
    assert found.word == "inconclusive"
    assert "1 of 3 runs not learned within budget (inconclusive, not a failure)" in found.text
    assert "20.0" not in found.text  # its exact-match enters nothing
    svo = [run("none", s, 0, task="svo") for s in range(3)]
    for r in svo:
        r["lengths"] = [{**row, "pair_accuracy": 1.0} for row in r["lengths"]]
    assert kazemnejad_order(svo, svo).word == "agrees"
    assert kazemnejad_order(svo, svo[:1]).word == "inconclusive"
    assert haviv(runs, []).word == "inconclusive"  # none learned: nothing measured against


def test_seed_cells_and_significance_lines() -> None:
    assert cell([0.9, 0.95, 1.0]) == "95.0 [82.6, 100.0]"  # t-interval 82.58 .. 107.42, clipped
    assert cell([0.5]) == "50.0" and cell([0.5, None]) == "—"
    results = sweep((90, 85, 95, 88, 92, 91), (10, 5, 0, 3, 7, 2))
    c = comparison(results, "copy", "alibi", "learned", "1.25x")
    assert c.differences == pytest.approx((0.8, 0.8, 0.95, 0.85, 0.85, 0.89))
    assert c.p_sign_flip == pytest.approx(2 / 64)
    lines = significance_lines(results, "copy")
    # 40 comparisons (10 pairs x 4 multiples); alibi's four: p = 2/64 each, Holm x 40 > 0.05
    assert lines[0].startswith("- copy at 1.25x: none significant after Holm over 40")
    assert "largest alibi - none +85.7 points" in lines[0]
    three = sweep((90, 85, 95), (10, 5, 0))
    assert "none significant" in significance_lines(three, "copy")[0]
    table = headline_table(results, "copy")
    assert "| alibi" in table and "90.2 [" in table


def test_two_models_of_one_seed_are_two_arms_never_two_seeds() -> None:
    """A grid over a scheme option (theta 500 and 10000, seed 0 each) once read as "rope, 2
    seeds" with a t-interval; an arm is the runs whose configs agree beyond seed and folder, and
    the table names what differs."""
    results = []
    for seed in (0, 1):
        for theta in (500.0, 10000.0):
            r = run("rope", seed, 40 if theta == 500.0 else 10)
            options = {"position": "rope", "options": {"rope": {"theta": theta}}}
            results.append(
                r | {"config": {**r["config"], "model": {**r["config"]["model"], **options}}}
            )
    arms = groups(results, "copy")
    assert list(arms) == ["rope {theta=500.0}", "rope {theta=10000.0}"]
    assert [[r["seed"] for r in runs] for runs in arms.values()] == [[0, 1], [0, 1]]
    table = headline_table(results, "copy")
    assert "| rope {theta=500.0}   |" in table and "| 40.0 " in table
    same = [run("rope", seed, 40) | {"run_dir": f"elsewhere/{seed}"} for seed in (0, 1)]
    assert list(groups(same, "copy")) == ["rope"]  # seeds and folders alone: one arm


def test_the_terminal_line_says_when_no_finding_was_measured() -> None:
    """A sweep of rope and alibi on copy measures none of the findings (each needs runs it
    lacks); its line said "decided: none. Inconclusive: none" as if they had been weighed."""
    from lab.reporting.findings import FINDINGS, decided_line

    only_two = [run(p, s, 50) for p in ("rope", "alibi") for s in range(3)]
    assert decided_line(only_two) == (
        f"Findings: none measured: the {len(FINDINGS)} findings need runs this sweep lacks "
        "(report.md names what each needs)."
    )
    line = decided_line(sweep((90, 80, 85), (0, 1, 2)))
    assert line.startswith("Findings at 3 seed(s): decided: ") and "Ruoss" in line
