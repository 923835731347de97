"""Throughput, model FLOP utilisation (MFU) and evaluation memory, per position scheme.

All times are medians over repeated measurements after warm-up. MFU is achieved model FLOP/s
over the machine's own matrix-multiply peak, measured in the same process with the same
threads and dtype, so the ratio is comparable across machines.

Model FLOPs per token follow Kaplan et al. 2020 (§2.1) and the PaLM paper (Chowdhery et al.
2022, appendix B): ``6 N + 12 L T D`` for a training step (forward + backward) and
``2 N + 4 L T D`` for a forward pass, where ``N`` counts the weights of every matrix multiply
(including the output projection), ``L`` layers, ``T`` sequence length, ``D`` model width. The
attention term counts the full ``T x T`` score matrix, as PaLM does, although causal kernels
skip about half of it.
"""

from __future__ import annotations

import contextlib
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from lab.bench.baselines import Baseline
from lab.common.config import MAX_BATCH_TOKENS
from lab.common.runtime import MAX_THREADS, autocast, compute_dtype
from model import ModelConfig, Transformer
from model.position import available_schemes

STANDARD_LENGTH = 64
STANDARD = ModelConfig(
    vocab_size=64,
    d_model=128,
    n_layers=4,
    n_heads=4,
    d_ff=512,
    options={"learned": {"max_positions": STANDARD_LENGTH}},
)
"""The benchmark's standard configuration (trained at ``STANDARD_LENGTH`` tokens)."""
ABLATION = ModelConfig(
    vocab_size=42,
    d_model=64,
    n_layers=3,
    n_heads=4,
    d_ff=256,
    options={"learned": {"max_positions": 256}},
)
"""The size of the default ablation's models."""


@dataclass
class TrainSpeed:
    """Training throughput of one model: tokens/s, step time (ms) and MFU (0..1)."""

    name: str
    tokens_per_s: float
    step_ms: float
    mfu: float


@dataclass
class EvalSpeed:
    """Forward-only throughput and peak resident memory growth (MiB) of one model at one
    length."""

    name: str
    length: int
    batch: int
    tokens_per_s: float
    peak_mib: float


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls after ``warmup`` calls."""
    return interleaved_seconds([fn], repeats, warmup)[0]


def interleaved_seconds(
    fns: list[Callable[[], object]],
    repeats: int,
    warmup: int,
    warmed: Callable[[int], None] = lambda i: None,
    settle: int = 0,
) -> list[float]:
    """Median wall time of each ``fn()``, timed in ``repeats`` rounds of one call each (in a
    shuffled order, the same for every run), after ``warmup`` calls of each; with ``settle``,
    that many untimed calls of a function come right before each of its timed ones.

    Rounds put every function under the same conditions: a machine whose speed drifts (other
    processes, clocks, a growing allocator) slows all of them alike, where timing them one
    after another charged the drift to whichever ran at a bad moment (measured: the first
    model timed on a 2-core VM ran 0.85x the same model timed later). The order changes from
    round to round because a call can slow the next one (measured: at 4096 tokens, in a fixed
    order, the models timed right after those that allocate gigabytes ran 0.75x). Shuffling
    spreads that cost but a median of a few rounds can still catch it (a RoPE pass at 4096
    tokens read 0.75x NoPE in a shuffled run of 20 models, 0.96x for xPos, its same
    attention); ``settle`` calls absorb what the previous function left in the caches and the
    allocator, so a timed call sees its own steady state. ``warmed(i)`` is called once
    ``fns[i]`` is warmed up.
    """
    for i, fn in enumerate(fns):
        for _ in range(warmup):
            fn()
        warmed(i)
    times: list[list[float]] = [[] for _ in fns]
    order = random.Random(0)
    for _ in range(repeats):
        for i in order.sample(range(len(fns)), len(fns)):
            for _ in range(settle):
                fns[i]()
            start = time.perf_counter()
            fns[i]()
            times[i].append(time.perf_counter() - start)
    return [statistics.median(spent) for spent in times]


def matmul_peak_flops(device: torch.device, dtype: torch.dtype = torch.float32) -> float:
    """The best FLOP/s of a square matrix multiply on ``device``: sizes 256..2048 on a CPU,
    1024..8192 on a GPU (whose peak needs large products)."""
    best = 0.0
    sizes = (256, 512, 1024, 2048) if device.type == "cpu" else (1024, 2048, 4096, 8192)
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        seconds = median_seconds(lambda a=a, b=b: _sync(device, a @ b), repeats=7, warmup=2)
        best = max(best, 2 * n**3 / seconds)
    return best


def matmul_params(model: torch.nn.Module) -> int:
    """Weights that take part in a matrix multiply: every ``Linear`` (and Hugging Face
    ``Conv1D``) weight; embedding lookups are excluded."""
    return sum(
        m.weight.numel()
        for m in model.modules()
        if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D"
    )


def flops_per_token(
    model: torch.nn.Module, config: ModelConfig, seq_len: int, training: bool
) -> float:
    """``6N + 12LTD`` (training) or ``2N + 4LTD`` (forward), see the module docstring."""
    n = matmul_params(model)
    attention = config.n_layers * seq_len * config.d_model
    return 6 * n + 12 * attention if training else 2 * n + 4 * attention


def training_step(
    model: torch.nn.Module,
    vocab_size: int,
    batch: int,
    seq_len: int,
    device: torch.device,
    precision: str = "auto",
    compile: bool = False,
) -> Callable[[], None]:
    """One forward + backward + AdamW step (fused on CUDA) on fixed random tokens, next-token
    loss on all tokens, the forward pass in ``precision`` (:func:`lab.common.runtime.autocast`) and
    through ``torch.compile`` if ``compile`` (it compiles on the first call).

    Args:
        model: any module mapping token ids ``(B, T)`` to logits ``(B, T, V)``, on ``device``.
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cuda")
    forward = torch.compile(model) if compile else model
    idx = torch.randint(0, vocab_size, (batch, seq_len + 1), device=device)  # (B, T + 1)

    def step() -> None:
        with autocast(device, precision):
            logits = forward(idx[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), idx[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        _sync(device, loss)

    return step


def eval_pass(
    model: torch.nn.Module,
    vocab_size: int,
    length: int,
    batch_tokens: int,
    device: torch.device,
    precision: str = "auto",
    compile: bool = False,
) -> tuple[int, Callable[[], None]]:
    """A forward pass (inference mode) over ``batch_tokens // length`` rows (at least one) of
    ``length`` random tokens, in ``precision``, through ``torch.compile`` if ``compile``.

    Returns:
        ``(rows, run)``.
    """
    model = model.eval()
    forward = torch.compile(model) if compile else model
    rows = max(1, batch_tokens // length)
    idx = torch.randint(0, vocab_size, (rows, length), device=device)  # (B, T)

    @torch.inference_mode()
    def run() -> None:
        with autocast(device, precision):
            _sync(device, forward(idx))

    return rows, run


def eval_speed(
    config: ModelConfig,
    length: int,
    batch_tokens: int,
    device: torch.device,
    repeats: int,
    precision: str = "auto",
) -> EvalSpeed:
    """Forward throughput of this project's :class:`Transformer` for ``config`` at ``length``
    (:func:`eval_pass`, median of ``repeats`` after one warm-up), and its memory growth.

    Peak memory is how far the process's peak resident set rises above its size before these
    forward passes (CPU; on Linux the peak is reset first through ``/proc/self/clear_refs``,
    elsewhere the figure only counts growth past the process's earlier peak), or the growth of
    ``torch.cuda.max_memory_allocated`` (CUDA). Linux reads its resident-set counters from
    per-CPU caches, so the CPU figure is approximate by a few hundred KiB; growth below that
    reads as 0, never as negative. Run it in a fresh process for a figure that earlier models
    in the same process cannot lower.
    """
    torch.manual_seed(0)
    model = Transformer(config).to(device)
    rows, run = eval_pass(model, config.vocab_size, length, batch_tokens, device, precision)
    peak_mib = memory_growth_mib(device, run)  # also the warm-up
    seconds = median_seconds(run, repeats=repeats, warmup=0)
    return EvalSpeed(config.position, length, rows, rows * length / seconds, peak_mib)


@dataclass(frozen=True)
class Entry:
    """One model of a benchmark run: its row label, the scheme of ours it is or matches (or
    None), whether it is a peer's, and ``build(max_length)``, which returns a fresh model that
    accepts ``max_length`` tokens."""

    name: str
    position: str | None
    baseline: bool
    build: Callable[[int], torch.nn.Module]


def our_model(config: ModelConfig, position: str) -> Callable[[int], torch.nn.Module]:
    """``build(max_length)`` for this project's model with ``position`` at ``config``'s size,
    seeded with 0; a learned table gets at least ``max_length`` rows."""

    def build(max_length: int) -> torch.nn.Module:
        values = {**asdict(config), "position": position}
        if position == "learned":
            learned = config.options.get("learned", {})
            rows = max(learned.get("max_positions", 0), max_length)
            values["options"] = {**config.options, "learned": {**learned, "max_positions": rows}}
        torch.manual_seed(0)
        return Transformer(ModelConfig(**values))

    return build


def run_benchmark(
    config: ModelConfig,
    batch: int,
    seq_len: int,
    eval_lengths: list[int],
    batch_tokens: int,
    device: torch.device,
    repeats: int = 20,
    baselines: list[Baseline] | None = None,
    precision: str = "auto",
    compile: bool = False,
    schemes: list[str] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> dict:
    """Training and evaluation figures for ``schemes`` (default: every registered scheme;
    ``none``, the reference of ``vs_none``, is always included) at ``config``'s size, and for
    ``baselines`` (peer models of the same size; with ``schemes``, those that match one of
    them) in the same run.

    Training runs in ``precision`` (:func:`lab.common.runtime.autocast`); MFU is then measured
    against the matrix-multiply peak of that dtype. ``compile`` passes every model, ours and
    the baselines', through ``torch.compile``. Every row of ``train`` and ``eval`` names its
    ``position`` (our scheme, or the scheme a baseline matches, or None) and whether it is a
    ``baseline``. ``progress`` receives a line per model as it is measured. Training is timed
    in ``repeats`` interleaved rounds, evaluation at each length in ``max(5, repeats // 2)``.

    Raises:
        ValueError: an unknown scheme in ``schemes`` (one line naming the known ones).
    """
    entries = _entries(config, schemes, baselines)
    peak = matmul_peak_flops(device, compute_dtype(device, precision))
    train, evals = _timed_rows(
        entries,
        config,
        batch,
        seq_len,
        eval_lengths,
        batch_tokens,
        device,
        peak,
        repeats,
        precision,
        compile,
        progress,
    )
    return {
        **environment(device),
        "model": asdict(config),
        "batch": batch,
        "seq_len": seq_len,
        "precision": precision,
        "compile": compile,
        "timing": TIMING,
        "repeats": repeats,
        "eval_repeats": max(5, repeats // 2),
        "batch_tokens": batch_tokens,
        "matmul_peak_gflops": peak / 1e9,
        "train": train,
        "eval": evals,
    }


TIMING = (
    "interleaved rounds, shuffled order, medians; evaluation: an untimed pass before each timed one"
)
"""How :func:`run_benchmark` times, as its results say."""


def environment(device: torch.device) -> dict[str, Any]:
    """Where a benchmark ran: ``device``, ``device_name``, ``threads``, ``torch``, ``python``."""
    return {
        "device": str(device),
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
    }


def _entries(
    config: ModelConfig, schemes: list[str] | None, baselines: list[Baseline] | None
) -> list[Entry]:
    """The models :func:`run_benchmark` times: ``none`` and ``schemes`` (default: every
    registered scheme) in registration order, then the ``baselines`` (with ``schemes``, those
    that match one of them).

    Raises:
        ValueError: an unknown scheme in ``schemes`` (one line naming the known ones).
    """
    check_schemes(schemes or [])
    known = available_schemes()
    positions = [name for name in known if name == "none" or name in (schemes or known)]
    # with a subset of schemes, only the baselines that match one of them
    baselines = [b for b in baselines or [] if not schemes or b.position in positions]
    entries = [Entry(p, p, False, our_model(config, p)) for p in positions]
    return entries + [Entry(b.name, b.position, True, b.build) for b in baselines]


def _timed_rows(
    entries: list[Entry],
    config: ModelConfig,
    batch: int,
    seq_len: int,
    eval_lengths: list[int],
    batch_tokens: int,
    device: torch.device,
    peak: float,
    repeats: int,
    precision: str,
    compile: bool,
    progress: Callable[[str], None],
) -> tuple[list[dict], list[dict]]:
    """``(training rows, evaluation rows)`` of every entry (:func:`training_rows`, each with
    its ``vs_none``: its tokens/s over our ``none``'s; then :func:`eval_rows` at each length in
    turn, ``max(5, repeats // 2)`` rounds)."""
    # every model of one class shares the code of its forward; dynamo compiles it for each
    # instance and, past its recompile_limit (8), would run the rest eagerly with only a
    # warning: each phase starts from empty caches with room for all, and a miss is an error
    limit = torch._dynamo.config.patch(
        recompile_limit=4 * len(entries), fail_on_recompile_limit_hit=True
    )
    with limit if compile else contextlib.nullcontext():
        train = training_rows(
            entries, config, batch, seq_len, device, peak, repeats, precision, compile, progress
        )
        evals = []
        eval_repeats = max(5, repeats // 2)
        for length in eval_lengths:
            evals += eval_rows(
                entries,
                config,
                length,
                batch_tokens,
                device,
                eval_repeats,
                precision,
                compile,
                progress,
            )
    nope = next(t["tokens_per_s"] for t in train if t["position"] == "none" and not t["baseline"])
    return [{**t, "vs_none": t["tokens_per_s"] / nope} for t in train], evals


def training_rows(
    entries: list[Entry],
    config: ModelConfig,
    batch: int,
    seq_len: int,
    device: torch.device,
    peak: float,
    repeats: int,
    precision: str,
    compile: bool,
    progress: Callable[[str], None],
) -> list[dict]:
    """:class:`TrainSpeed` of every entry (as dicts, with ``position`` and ``baseline``), the
    steps of all timed in interleaved rounds (:func:`interleaved_seconds`, 3 warm-up steps)."""
    torch.compiler.reset()  # a compiled run: this phase's models alone fill dynamo's caches
    models = [e.build(seq_len).to(device) for e in entries]
    steps = [
        training_step(m, config.vocab_size, batch, seq_len, device, precision, compile)
        for m in models
    ]
    seconds = interleaved_seconds(
        steps, repeats, 3, lambda i: progress(f"train {entries[i].name}: warmed up")
    )
    rows = []
    for entry, model, spent in zip(entries, models, seconds, strict=True):
        tokens_per_s = batch * seq_len / spent
        mfu = tokens_per_s * flops_per_token(model, config, seq_len, training=True) / peak
        speed = TrainSpeed(entry.name, tokens_per_s, 1000 * spent, mfu)
        rows.append({**asdict(speed), "position": entry.position, "baseline": entry.baseline})
        progress(f"train {entry.name}: {tokens_per_s:,.0f} tok/s, MFU {mfu:.1%}")
    return rows


def eval_rows(
    entries: list[Entry],
    config: ModelConfig,
    length: int,
    batch_tokens: int,
    device: torch.device,
    repeats: int,
    precision: str,
    compile: bool,
    progress: Callable[[str], None],
) -> list[dict]:
    """:class:`EvalSpeed` of every entry at ``length`` (as dicts, with ``position`` and
    ``baseline``). Each model's first pass, alone, gives its peak memory (see
    :func:`eval_speed`) and warms it up; then the passes of all are timed in interleaved
    rounds (:func:`interleaved_seconds`), each timed pass right after an untimed one of the
    same model."""
    torch.compiler.reset()  # as in training_rows
    runs, peaks = [], []
    for entry in entries:
        model = entry.build(length).to(device)
        rows, run = eval_pass(
            model, config.vocab_size, length, batch_tokens, device, precision, compile
        )
        peaks.append(memory_growth_mib(device, run))  # also the warm-up
        runs.append(run)
        progress(f"eval {entry.name} at {length}: warmed up")
    seconds = interleaved_seconds(runs, repeats, warmup=0, settle=1)
    result = []
    for entry, spent, peak_mib in zip(entries, seconds, peaks, strict=True):
        speed = EvalSpeed(entry.name, length, rows, rows * length / spent, peak_mib)
        result.append({**asdict(speed), "position": entry.position, "baseline": entry.baseline})
        progress(f"eval {entry.name} at {length}: {speed.tokens_per_s:,.0f} tok/s")
    return result


MAX_LENGTH = 16384
"""Longest ``--lengths`` value, in tokens: 4 times the longest sequence a run may use
(``lab.common.config.MAX_TOKENS``); at 16,384 one layer's ``(H=4, T, T)`` float32 scores, which CoPE
and x-transformers' T5 build whole, take 4 GiB of a 24 GiB laptop."""

MAX_REPEATS = 1000
"""Most ``--repeats`` (50 times the default)."""

LIMITS = {
    "--repeats": MAX_REPEATS,
    "--batch": MAX_BATCH_TOKENS // STANDARD_LENGTH,  # rows of 64 tokens
    "--lengths": MAX_LENGTH,
    "--batch-tokens": MAX_BATCH_TOKENS,
    "--threads": MAX_THREADS,
}
"""Largest value of each numeric flag (``--threads`` may also be 0, the others start at 1)."""


def check_counts(counts: dict[str, list[int]]) -> None:
    """Raise ValueError (one line naming the flag, the value and the range) unless every value of
    each flag in ``counts`` lies in ``[1, LIMITS[flag]]`` (``[0, ...]`` for ``--threads``)."""
    for flag, values in counts.items():
        low = 0 if flag == "--threads" else 1
        bad = [v for v in values if not low <= v <= LIMITS[flag]]
        if bad:
            raise ValueError(
                f"{flag}={bad[0]} is invalid; it must be >= {low} and <= {LIMITS[flag]}"
            )


def check_schemes(schemes: list[str], label: str = "scheme") -> None:
    """Raises ValueError (one line, ``label`` first, naming the registered schemes) unless
    every name in ``schemes`` is a registered scheme."""
    known = available_schemes()
    unknown = [name for name in schemes if name not in known]
    if unknown:
        raise ValueError(f"{label} {unknown[0]!r} is unknown; use {', '.join(known)}")


def device_name(device: torch.device) -> str:
    """The accelerator's product name (``torch.cuda.get_device_name``), or the device type."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def ours_vs_theirs(result: dict) -> list[dict]:
    """Per baseline with a matching scheme: our tokens/s over theirs, measured in the same run,
    for training and for evaluation at each benchmarked length.

    Returns:
        ``[{"baseline": NAME, "position": SCHEME, "train": RATIO, "eval": {LENGTH: RATIO}}]``.
    """
    speeds = {(e["name"], e["length"]): e["tokens_per_s"] for e in result["eval"]}
    trained = {t["name"]: t["tokens_per_s"] for t in result["train"]}
    lengths = sorted({e["length"] for e in result["eval"]})
    rows = []
    for theirs in result["train"]:
        if not theirs["baseline"] or theirs["position"] not in trained:
            continue  # no matching scheme, or ours was not benchmarked
        name, position = theirs["name"], theirs["position"]
        rows.append(
            {
                "baseline": name,
                "position": position,
                "train": trained[position] / trained[name],
                "eval": {n: speeds[position, n] / speeds[name, n] for n in lengths},
            }
        )
    return rows


def _sync(device: torch.device, value: object) -> object:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return value


def memory_growth_mib(device: torch.device, fn: Callable[[], object]) -> float:
    """How far one call of ``fn`` raises peak memory (MiB, never negative; see
    :func:`eval_speed` for what is counted on each device)."""
    before = reset_peak_memory(device)
    fn()
    return max(0, peak_memory(device) - before) / 2**20


def reset_peak_memory(device: torch.device) -> int:
    """Reset the peak-memory counter where possible; return the current usage in bytes.

    CUDA: allocator statistics. CPU on Linux: the process's peak resident set is reset to its
    current size through ``/proc/self/clear_refs``; elsewhere it cannot be reset.
    """
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # Linux: peak RSS := current RSS
    return peak_memory(device)


def peak_memory(device: torch.device) -> int:
    """Peak bytes since :func:`reset_peak_memory` (CUDA allocations, or the CPU resident set)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux
