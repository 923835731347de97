"""Runtime settings: the training precision (bf16 autocast on any device), the thread count."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import TINY_RUN, tiny_config

import eval as eval_cli
import train as train_cli
from data.streams import training_batch
from lab.common.config import Config, ConfigError, load_config
from lab.common.runtime import compute_dtype
from lab.training.trainer import build_model, build_optimizer, train_step

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize(
    ("device", "precision", "dtype"),
    [
        (CPU, "auto", torch.float32),
        (CPU, "fp32", torch.float32),
        (CPU, "bf16", torch.bfloat16),
        (CUDA, "auto", torch.bfloat16),
        (CUDA, "fp32", torch.float32),
        (CUDA, "bf16", torch.bfloat16),
    ],
)
def test_compute_dtype_of_each_precision(device, precision, dtype) -> None:
    assert compute_dtype(device, precision) == dtype


def test_an_unknown_precision_names_the_allowed_ones() -> None:
    with pytest.raises(
        ConfigError, match="precision='fp16' is invalid; use one of auto, fp32, bf16"
    ):
        load_config(None, ["precision=fp16"])


@pytest.mark.parametrize(
    ("precision", "dtype"), [("auto", torch.float32), ("bf16", torch.bfloat16)]
)
def test_a_training_step_runs_in_its_precision_and_keeps_float32_weights(
    tmp_path: Path, precision: str, dtype: torch.dtype
) -> None:
    config = tiny_config(tmp_path, f"precision={precision}")
    model = build_model(config, CPU)
    optimizer = build_optimizer(model, config, CPU)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    task = config.data.build_task()
    batch = training_batch(task, 0, 0, 16, range(2, 5))
    before = model.blocks[0].attn.qkv.weight.detach().clone()
    logits, loss, grad_norm, _ = train_step(
        model, optimizer, scheduler, batch, 1.0, CPU, 0, precision
    )
    assert logits.dtype == dtype
    assert 0 < loss < 10 and grad_norm > 0
    weight = model.blocks[0].attn.qkv.weight
    assert weight.dtype == torch.float32 and not torch.equal(weight, before)


def test_the_default_is_one_thread_and_a_run_prints_its_count(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert Config().threads == 1  # degrades gracefully on a busy machine (README, "Threads")
    code = train_cli.main([*TINY_RUN, f"run_dir={tmp_path}", "threads=2", "train.steps=6"])
    assert code == 0
    first = capsys.readouterr().out.splitlines()[0]
    position = Config().model.position
    assert first == (
        f"{tmp_path}: {position} on copy, 2 CPU thread(s) (threads=N to change), precision auto"
    )
    assert torch.get_num_threads() == 2


def test_eval_runs_on_one_thread_by_default_and_checks_the_count(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert eval_cli.main(["--threads", "-1", str(tmp_path)]) == 2
    assert "threads=-1 is invalid" in capsys.readouterr().err
    torch.set_num_threads(2)
    eval_cli.main([str(tmp_path)])  # an empty folder: no run to evaluate, after the set-up
    assert torch.get_num_threads() == 1
