"""What machine a result came from: CPU model, GPU, torch build, BLAS and the kernel settings
that change floating-point rounding.

The same seeded run is bit-identical only on the same CPU model with the same torch build and
settings: MKL picks code paths by processor (``MKL_CBWR`` pins one), ATen picks vector kernels
by the CPU's capability (``ATEN_CPU_CAPABILITY`` caps it), and oneDNN by its ISA
(``ONEDNN_MAX_CPU_ISA``). Every results file records this dict so that a reader can tell
whether two results should agree bit for bit or only within the seed spread.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import torch

NUMERIC_SETTINGS = (
    "MKL_CBWR",
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "OPENBLAS_CORETYPE",
    "OMP_NUM_THREADS",
)
"""Environment variables that can change which kernels run, hence the rounding."""


def cpu_model() -> str:
    """The processor's marketing name, e.g. ``"AMD EPYC 9R14"`` or ``"Intel(R) Xeon(R)
    Processor"``; the architecture (``"x86_64"``) where the OS does not say."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.MULTILINE)
        if match:
            return match.group(1).strip()
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            )
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return platform.processor() or platform.machine()


def blas() -> str:
    """The BLAS torch was built with, e.g. ``"mkl"`` or ``"open"`` (``BLAS_INFO``), with
    MKL's version where the build names it."""
    config = torch.__config__.show()
    match = re.search(r"BLAS_INFO=([^,\s]+)", config)
    name = match.group(1) if match else "unknown"
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", config)
    return f"{name} {mkl.group(1)}" if mkl else name


def machine_info() -> dict[str, object]:
    """The machine and software a result was produced on, JSON-ready.

    Returns:
        ``cpu`` (model name), ``cpu_count``, ``cpu_capability`` (ATen's vector kernels:
        ``"AVX512"``, ``"AVX2"``, ``"DEFAULT"``...), ``gpu`` (name or None), ``torch``,
        ``blas``, ``python``, ``numeric_settings`` (the variables of :data:`NUMERIC_SETTINGS`
        that are set, with their values).
    """
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "blas": blas(),
        "python": platform.python_version(),
        "numeric_settings": {k: os.environ[k] for k in NUMERIC_SETTINGS if k in os.environ},
    }


def describe(info: dict[str, object]) -> str:
    """One line for reports, e.g. ``"2-core Intel(R) Xeon(R) Processor (AVX512), torch
    2.13.0+cpu, BLAS mkl 2024.2"`` plus the GPU and any numeric settings."""
    text = (
        f"{info['cpu_count']}-core {info['cpu']} ({info['cpu_capability']}), "
        f"torch {info['torch']}, BLAS {info['blas']}"
    )
    if info.get("gpu"):
        text += f", GPU {info['gpu']}"
    settings = info.get("numeric_settings") or {}
    if settings:
        text += ", " + " ".join(f"{k}={v}" for k, v in sorted(settings.items()))
    return text
