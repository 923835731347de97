"""Data streams: the validation set (early stopping) never holds an evaluation sequence."""

import pytest
import torch

from data import build_task
from data.streams import evaluation_set, validation_set
from lab.common.config import load_config
from lab.training.run_logs import validation


def rows(batch) -> set[tuple[int, ...]]:
    return {tuple(row) for row in batch.tokens.tolist()}


@pytest.mark.parametrize(("name", "length"), [("copy", 2), ("copy", 4), ("svo", 3), ("svo", 12)])
def test_validation_and_evaluation_sets_are_disjoint(name: str, length: int) -> None:
    options = {"n_symbols": 4} if name == "copy" else None  # copy at length 2: 16 sequences
    task = build_task(name, options)
    held_out = 8 if (name, length) == ("copy", 2) else 256
    test = evaluation_set(task, 0, length, held_out)
    valid = validation_set(task, 0, length, 8 if held_out == 8 else 128, held_out)
    assert rows(valid).isdisjoint(rows(test))
    assert valid.tokens.shape[1] == test.tokens.shape[1]
    assert valid.answer_start == test.answer_start and valid.length == length
    # Deterministic, and another seed gives another set.
    assert torch.equal(
        valid.tokens, validation_set(task, 0, length, len(valid.tokens), held_out).tokens
    )
    assert not torch.equal(
        valid.tokens, validation_set(task, 1, length, len(valid.tokens), held_out).tokens
    )


def test_a_raw_draw_would_overlap_so_the_exclusion_matters() -> None:
    """Copy at length 2 over 4 symbols has 16 sequences: 8 evaluation rows and 8 independent
    draws share some, so only the exclusion keeps the sets apart."""
    task = build_task("copy", {"n_symbols": 4})
    test = rows(evaluation_set(task, 0, 2, 8))
    raw = rows(evaluation_set(task, 1, 2, 8))  # another stream's draw, no exclusion
    assert raw & test


def test_validation_set_fails_with_one_line_when_the_task_is_too_small() -> None:
    task = build_task("copy", {"n_symbols": 2})  # 4 sequences at length 2, all evaluation ones
    with pytest.raises(ValueError, match=r"at length 2 has too few distinct sequences") as error:
        validation_set(task, 0, 2, 4, 64)
    assert "\n" not in str(error.value)


def test_the_trainer_scores_on_the_validation_set() -> None:
    config = load_config(None, ["data.task=copy", "train.eval_samples=16", "eval.samples=64"])
    task = config.data.build_task()
    valid = validation(task, config, 6)
    assert torch.equal(valid.tokens, validation_set(task, 0, 6, 16, 64).tokens)
    assert rows(valid).isdisjoint(rows(evaluation_set(task, 0, 6, 64)))
