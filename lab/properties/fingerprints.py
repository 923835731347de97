"""Print the score fingerprints of fresh schemes as JSON; run in a new process by
:func:`lab.properties.measure.fingerprints_elsewhere` to check determinism across processes.

Usage: ``python -m lab.properties.fingerprints SPAN NAME [NAME ...]``.
"""

import json
import sys

import model.position  # noqa: F401  (registers the schemes)
from lab.properties.measure import fingerprint
from lab.properties.probe import fresh_scheme, make_probe, probe_config


def main(argv: list[str]) -> None:
    """Print ``{name: sha256}`` for every scheme named after the span."""
    span, names = int(argv[0]), argv[1:]
    result = {}
    for name in names:
        config = probe_config(name)
        result[name] = fingerprint(fresh_scheme(config), make_probe(config), span)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
