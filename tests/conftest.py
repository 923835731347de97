"""Shared fixtures: a seeded factory for tiny float32 transformers, and the tiny training run.

The tiny run (a few hundred milliseconds) is a 2-layer, 32-wide model on ``copy`` at lengths
2..4 for 20 steps, with dropout so that resuming must restore the torch generator.
"""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

import lab.training.trainer
from lab.common.config import Config, EvalConfig, load_config
from lab.evaluation.evaluate import evaluate_run
from lab.training.trainer import TrainResult, train
from model import ModelConfig, Transformer

STEPS, CHECKPOINT_EVERY = 20, 5
TINY_RUN = [
    "data.task=copy",
    "data.train_min_length=2",
    "data.train_max_length=4",
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.d_ff=64",
    "model.dropout=0.1",
    f"train.steps={STEPS}",
    "train.warmup_steps=5",
    "train.batch_size=16",
    "train.eval_every=10",
    "train.eval_samples=16",
    f"train.checkpoint_every={CHECKPOINT_EVERY}",
    "train.log_every=5",
    "train.progress=false",
    "device=cpu",
    "threads=1",
]
# threads=1: on a shared 2-core machine threads=2 measured 118 s for this run against 13 s with
# one thread (OpenMP workers spin when another process holds a core); results differ slightly
# between thread counts, so the run is pinned to one.


def tiny_config(run_dir: Path, *overrides: str) -> Config:
    """The tiny run's config into ``run_dir``, with ``overrides`` applied last."""
    return load_config(None, [*TINY_RUN, f"run_dir={run_dir}", *overrides])


def interrupt_at(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """Make the training loop raise KeyboardInterrupt when it fetches the batch of ``step``
    (after ``step`` completed steps), as Ctrl-C would."""
    real = lab.training.trainer.training_batch

    def batch_or_interrupt(task, seed, index, *args):
        if index == step:
            raise KeyboardInterrupt
        return real(task, seed, index, *args)

    monkeypatch.setattr(lab.training.trainer, "training_batch", batch_or_interrupt)


@pytest.fixture(autouse=True)
def keep_torch_threads() -> Iterator[None]:
    """``threads=N`` sets PyTorch's process-wide thread count; give other tests theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Config, TrainResult]:
    """The tiny run trained for all its steps without interruption (do not write into it)."""
    threads = torch.get_num_threads()
    config = tiny_config(tmp_path_factory.mktemp("straight"))
    result = train(config)
    torch.set_num_threads(threads)
    return config, result


TINY = dict(vocab_size=16, d_model=32, n_layers=2, n_heads=4, d_ff=64)
"""Hyperparameters of the tiny test model; override any field per test."""


def strengthen(model: Transformer) -> Transformer:
    """Re-initialise every matrix with std ``1/sqrt(fan_in)`` (in place).

    GPT-2's std 0.02 makes queries and keys so small that attention is almost uniform, so
    position effects that act inside attention (RoPE) barely reach the logits. With unit-scale
    weights the scores are O(1) and every scheme's effect on the logits is O(1), which makes
    "changes the output" assertions robust. LayerNorm gains and biases are left alone.
    """
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, p.shape[-1] ** -0.5)
    return model


@pytest.fixture
def make_model() -> Iterator[Callable[..., Transformer]]:
    """``make_model(position, causal=True, strong=False, seed=0, max_positions=64, **overrides)``.

    Returns a float32 model in eval mode, built after ``torch.manual_seed(seed)``;
    ``max_positions`` sets a learned table's rows (``model.options.learned.max_positions``), and
    ``options`` in ``overrides`` other schemes' options.

    Tests that use it run on one intra-op thread (restored afterwards): the tiny matmuls gain
    nothing from threads, and on a busy 2-core machine OpenMP's thread barriers made the suite
    over 20x slower (measured 10 s vs 250 s with two threads at load average 7).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def build(
        position: str,
        causal: bool = True,
        strong: bool = False,
        seed: int = 0,
        max_positions: int = 64,
        **overrides,
    ) -> Transformer:
        torch.manual_seed(seed)
        options = {"learned": {"max_positions": max_positions}, **overrides.pop("options", {})}
        values = {**TINY, "position": position, "causal": causal, "options": options}
        config = ModelConfig(**{**values, **overrides})
        model = Transformer(config).eval()
        return strengthen(model) if strong else model

    try:
        yield build
    finally:
        torch.set_num_threads(threads)


SHORT = ["train.steps=6", "train.eval_every=6", "train.log_every=1"]
"""Overrides that make a :func:`tiny_config` run finish in 6 steps with one evaluation."""
FAST_EVAL = EvalConfig(samples=8, probe_samples=8, lengths=[2, 4])
"""The smallest evaluation that still scores every kind of figure."""
SWEEP_TINY = [
    "task=copy",
    "data.train_min_length=2",
    "data.train_max_length=3",
    "model.d_model=32",
    "model.n_layers=1",
    "model.d_ff=64",
    "train.steps=6",
    "train.warmup_steps=1",
    "train.eval_every=6",
    "train.eval_samples=8",
    "train.progress=false",
    "eval.samples=8",
    "eval.probe_samples=8",
    "threads=1",
]
"""Grid overrides that make every run of a sweep a few seconds long."""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 6-step tiny run with its eval.json (do not write into it)."""
    run = tmp_path_factory.mktemp("runs") / "run"
    train(tiny_config(run, *SHORT))
    evaluate_run(run, FAST_EVAL, device="cpu")
    return run


def one_error_line(capsys: pytest.CaptureFixture) -> str:
    """The command's stderr, asserted to be one ``error:`` line without a traceback."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


def crash_at(patch: pytest.MonkeyPatch, index: int) -> None:
    """Make training batch ``index`` raise ``RuntimeError("killed")``: the process dies there
    without saving, as ``kill -9`` leaves it."""
    real = lab.training.trainer.training_batch

    def batch(task, seed, i, *args):
        if i == index:
            raise RuntimeError("killed")
        return real(task, seed, i, *args)

    patch.setattr(lab.training.trainer, "training_batch", batch)
