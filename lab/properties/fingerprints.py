"""Score fingerprints of fresh schemes computed in a fresh Python process, to check that a
scheme's scores do not depend on anything of the process that computed them (determinism
across processes)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import model.position  # noqa: F401  (registers the schemes)
from lab.properties.measure import fingerprint
from lab.properties.probe import fresh_scheme, make_probe, probe_config


def fingerprints_here(names: list[str], span: int) -> dict[str, str]:
    """``{name: sha256}`` of fresh schemes, computed in this process (the child's job)."""
    result = {}
    for name in names:
        config = probe_config(name)
        result[name] = fingerprint(fresh_scheme(config), make_probe(config), span)
    return result


def fingerprints_elsewhere(names: list[str], span: int) -> dict[str, str]:
    """Fingerprints of fresh schemes computed by a new, spawned Python process (nothing of
    this one's state is inherited: no torch seed, no caches, no thread settings).

    Raises:
        RuntimeError: the child process failed; its error is in the message (one line).
    """
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        try:
            return pool.submit(fingerprints_here, names, span).result()
        except Exception as error:
            last = (str(error).strip().splitlines() or [type(error).__name__])[-1]
            raise RuntimeError(f"fingerprint process failed: {last}") from error
