"""Findings and seed tables follow the numbers: hand-made runs with known results."""

from lab.reporting.aggregate import cell, comparison, headline_table, significance_lines
from lab.reporting.findings import haviv, press, ruoss

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


def sweep(alibi: tuple[int, int, int], others: tuple[int, int, int]) -> list[dict]:
    results = [run("alibi", s, alibi[s]) for s in range(3)]
    for position in ("none", "learned", "sinusoidal", "rope"):
        results += [run(position, s, others[s]) for s in range(3)]
    return results


def test_press_agrees_only_when_alibi_leads_by_half_and_significantly() -> None:
    agrees = press(sweep((90, 85, 95), (10, 5, 0)))
    assert "**agrees**" in agrees and "alibi 90.0%" in agrees and "lead 85.0 points" in agrees
    small_lead = press(sweep((40, 45, 35), (10, 5, 0)))
    assert "**mixed**" in small_lead  # significant, but less than 50 points
    assert "**disagrees**" in press(sweep((0, 0, 0), (10, 5, 0)))
    assert "not measured" in press([run("alibi", 0, 90)])


def test_ruoss_counts_schemes_that_fail_at_2x_after_learning() -> None:
    assert "**agrees**" in ruoss(sweep((90, 85, 95), (10, 5, 0)))  # every 2x is 0%
    results = sweep((90, 85, 95), (10, 5, 0))
    for r in results:
        if r["position"] == "rope":
            r["summary"]["at"]["2x"] = 0.6
    assert "**mixed**" in ruoss(results)


def test_haviv_reads_nope_in_distribution() -> None:
    assert "**agrees**" in haviv(sweep((90, 85, 95), (10, 5, 0)))
    low = [run("none", s, 0, in_dist=0.5) for s in range(3)]
    assert "**disagrees**" in haviv(low) and "50.0%" in haviv(low)


def test_seed_cells_and_significance_lines() -> None:
    assert cell([0.9, 0.95, 1.0]) == "95.0 [82.6, 100.0]"  # t-interval 82.58 .. 107.42, clipped
    assert cell([0.5]) == "50.0" and cell([0.5, None]) == "—"
    results = sweep((90, 85, 95), (10, 5, 0))
    c = comparison(results, "copy", "alibi", "learned", "1.25x")
    assert (c.only_a, c.only_b) == (80 + 80 + 95, 0) and c.significant
    lines = significance_lines(results, "copy")
    assert lines[0].startswith("- copy at 1.25x: alibi > none (")
    assert "learned > " not in lines[0]  # the four others are identical: no difference
    assert lines[1] == "- copy at 1.5x: no significant difference"
    table = headline_table(results, "copy")
    assert "| alibi" in table and "90.0 [" in table
