"""Where and how a run executes: device choice, CPU threads, seeding, mixed precision."""

import contextlib
import random
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import torch


def resolve_device(name: str) -> torch.device:
    """Turn ``auto | cpu | cuda | cuda:N | mps`` into an available :class:`torch.device`.

    ``auto`` picks CUDA, then Apple MPS, then the CPU.

    Raises:
        ValueError: an unknown name, or a device this machine does not have.
    """
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(
            f"device={name!r} is not a device; use auto, cpu, cuda, cuda:N or mps"
        ) from None
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available()
        and (device.index is None or device.index < torch.cuda.device_count()),
        "mps": torch.backends.mps.is_available(),
    }
    if not available.get(device.type, False):
        raise ValueError(f"device={name!r} is not available on this machine; use auto or cpu")
    return device


def configure_threads(threads: int) -> None:
    """Use ``threads`` CPU threads for PyTorch ops; 0 keeps PyTorch's default.

    Raises:
        ValueError: a negative count.
    """
    if threads < 0:
        raise ValueError(f"threads={threads} is invalid; it must be >= 0 (0 = PyTorch default)")
    if threads:
        torch.set_num_threads(threads)


def seed_everything(seed: int) -> None:
    """Seed Python's and PyTorch's global generators (all devices) with ``seed``.

    Data never uses a global generator: tasks draw from explicit ``numpy.random.Generator``s
    (see :func:`lab.batches.data_rng`).
    """
    random.seed(seed)
    torch.manual_seed(seed)


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA; a no-op elsewhere (CPU and MPS train in float32)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass
class Interrupt:
    """Set by :func:`deferred_interrupt` when Ctrl-C arrives."""

    requested: bool = False


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[Interrupt]:
    """Turn Ctrl-C (SIGINT) into a flag that the training loop checks between steps.

    An interrupt in the middle of an optimizer step would leave weights and step counter out of
    step; with this, the loop finishes the step, then raises ``KeyboardInterrupt`` itself. A
    second Ctrl-C interrupts at once. Outside the main thread it does nothing.
    """
    flag = Interrupt()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, frame: object) -> None:
        if flag.requested:
            raise KeyboardInterrupt
        flag.requested = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)
