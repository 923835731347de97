"""lab.evaluation.size: parameter counts rebuilt from a run's saved config."""

from __future__ import annotations

import json
from pathlib import Path

from lab.evaluation.size import parameter_count, parameters_cell

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "results" / "ablation" / "results.json"


def runs() -> dict[str, dict]:
    return {(r["position"], r["task"]): r for r in json.loads(COMMITTED.read_text())}


def test_a_learned_table_adds_max_positions_times_d_model() -> None:
    by = runs()
    none, learned = by["none", "copy"], by["learned", "copy"]
    model = learned["config"]["model"]
    rows = model["options"]["learned"]["max_positions"]
    assert parameter_count(learned) - parameter_count(none) == rows * model["d_model"] == 16384
    # a scheme without weights of its own (a fixed bias, a rotation) adds none
    for scheme in ("sinusoidal", "rope", "alibi"):
        assert parameter_count(by[scheme, "copy"]) == parameter_count(none) == 150528


def test_the_cell_shows_one_count_a_range_or_a_dash() -> None:
    by = runs()
    assert parameters_cell([by["none", "copy"], by["rope", "copy"]]) == "150,528"
    assert parameters_cell([by["none", "copy"], by["learned", "copy"]]) == "150,528-166,912"
    assert parameters_cell([{"config": {"eval": {}}}, {}]) == "—"
    assert parameter_count({"config": {"model": {"d_model": "wide"}}}) is None
