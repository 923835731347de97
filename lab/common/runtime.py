"""Where and how a run executes: device choice, CPU threads, seeding, mixed precision."""

import contextlib
import random
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from lab.common.signals import STOP_SIGNALS


def parse_device(name: str) -> torch.device:
    """Check the spelling of a device name (``auto`` is returned as ``cpu``; see
    :func:`resolve_device`) without asking whether this machine has it.

    Raises:
        ValueError: not ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` (one line).
    """
    try:
        device = torch.device("cpu" if name == "auto" else name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device={name!r} is not a device; use auto, cpu, cuda, cuda:N or mps")
    return device


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
    device = parse_device(name)
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available()
        and (device.index is None or device.index < torch.cuda.device_count()),
        "mps": torch.backends.mps.is_available(),
    }
    if not available[device.type]:
        raise ValueError(f"device={name!r} is not available on this machine; use auto or cpu")
    return device


MAX_THREADS = 1024
"""Most CPU ``threads`` (a run's ``threads``, the ``--threads`` of every command): more than any
machine this lab runs on has cores; ``torch.set_num_threads`` takes any count."""


def configure_threads(threads: int) -> None:
    """Use ``threads`` CPU threads for PyTorch ops; 0 keeps PyTorch's default.

    Raises:
        ValueError: a negative count, or one above :data:`MAX_THREADS`.
    """
    if not 0 <= threads <= MAX_THREADS:
        raise ValueError(
            f"threads={threads} is invalid; it must be >= 0 (0 = PyTorch default) and "
            f"<= {MAX_THREADS}"
        )
    if threads:
        torch.set_num_threads(threads)


def cpu_threads(threads: int) -> int:
    """The CPU threads a run with setting ``threads`` uses (0: PyTorch's default)."""
    return threads or torch.get_num_threads()


def seed_everything(seed: int) -> None:
    """Seed Python's and PyTorch's global generators (all devices) with ``seed``.

    Data never uses a global generator: tasks draw from explicit ``numpy.random.Generator``s
    (see :func:`data.streams.data_rng`).
    """
    random.seed(seed)
    torch.manual_seed(seed)


def capture_rng() -> dict[str, Any]:
    """Python and PyTorch generator states (data streams need none: see data.streams)."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Undo :func:`capture_rng`."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


PRECISIONS = ("auto", "fp32", "bf16")
"""Values of ``precision``: the dtype of a training step's matrix multiplies."""


def check_precision(precision: str) -> None:
    """Raises ValueError (one line naming the allowed values) unless ``precision`` is one of
    :data:`PRECISIONS`."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is invalid; use one of {', '.join(PRECISIONS)}")


def compute_dtype(device: torch.device, precision: str) -> torch.dtype:
    """The dtype of matrix multiplies under ``precision`` on ``device``: ``auto`` is bf16 on
    CUDA and float32 elsewhere; ``fp32`` float32; ``bf16`` bf16 on any device (on CPU it pays
    off only for matrix multiplies large enough to outweigh the casts, see the README's
    "Precision").

    Raises:
        ValueError: an unknown ``precision`` (one line naming the allowed ones).
    """
    check_precision(precision)
    bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    return torch.bfloat16 if bf16 else torch.float32


def autocast(device: torch.device, precision: str = "auto") -> contextlib.AbstractContextManager:
    """Autocast to :func:`compute_dtype` (no autocast where that is float32).

    Raises:
        ValueError: an unknown ``precision``.
    """
    dtype = compute_dtype(device, precision)
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


@dataclass
class Interrupt:
    """Set by :func:`deferred_interrupt` when a stop signal arrives.

    Attributes:
        signum: the first stop signal received (``SIGINT`` or ``SIGTERM``), or None.
        shielded: inside :meth:`shield`: every signal, the second one included, is only recorded.
    """

    signum: int | None = None
    shielded: bool = False

    @property
    def requested(self) -> bool:
        """A stop signal has arrived."""
        return self.signum is not None

    @contextlib.contextmanager
    def shield(self) -> Iterator[None]:
        """Defer every stop signal until the block ends, so that a save (or the final writes of
        a finished run) always completes as a whole."""
        outer = self.shielded
        self.shielded = True
        try:
            yield
        finally:
            self.shielded = outer


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[Interrupt]:
    """Turn the :data:`STOP_SIGNALS` into a flag that the training loop checks between steps.

    An interrupt in the middle of an optimizer step would leave weights and step counter out of
    step; with this, the loop finishes the step, saves, then stops. A second signal raises
    ``KeyboardInterrupt`` at once (an escape from a step that hangs), except inside
    :meth:`Interrupt.shield`. Outside the main thread it does nothing (Python delivers signals
    to the main thread only).
    """
    flag = Interrupt()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, frame: object) -> None:
        if flag.requested and not flag.shielded:
            raise KeyboardInterrupt
        flag.signum = flag.signum or signum

    with handling_stop_signals(handler):
        yield flag


@contextlib.contextmanager
def handling_stop_signals(handler: Callable[[int, object], None]) -> Iterator[None]:
    """Install ``handler`` for every one of :data:`STOP_SIGNALS` while inside (main thread
    only); the previous handlers come back on exit, however the block ends."""
    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, action in previous.items():
            signal.signal(s, action)
