"""Flags that hand a command line to another program: ``python sweep.py --publish ...`` runs
:mod:`lab.reporting.readme`, ``python bench.py --block-sweep ...`` runs
:mod:`lab.bench.block_sweep`, each through its ``main(argv) -> int``."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

Programs = dict[str, tuple[str, str]]
"""Flag -> (module with ``main(argv)``, ``"USAGE: what it does"``)."""


def hand_off(command: str, argv: list[str], programs: Programs) -> int | None:
    """Run the program a leading flag names, or refuse a flag given elsewhere.

    Args:
        command: the entry point, for messages (``"sweep.py"``).
        argv: its command line without the program name.
        programs: its flags (:data:`Programs`).

    Returns:
        The program's exit code when ``argv[0]`` is one of the flags; 2 after one ``error:``
        line when a flag stands elsewhere (its arguments would be read as the entry point's);
        None when no flag is given, so the entry point parses ``argv`` itself.
    """
    if argv and argv[0] in programs:
        return import_module(programs[argv[0]][0]).main(argv[1:])
    misplaced = [arg for arg in argv if arg in programs]
    if not misplaced:
        return None
    flag = misplaced[0]
    usage = programs[flag][1].split(":")[0]
    print(
        f"error: {flag} must be the first argument: python {command} {flag} {usage}",
        file=sys.stderr,
    )
    return 2


def list_programs(parser: argparse.ArgumentParser, programs: Programs) -> None:
    """Show the flags of ``programs`` in ``parser``'s ``--help``, in a group of their own (they
    are handled by :func:`hand_off` before ``parser`` reads the command line)."""
    group = parser.add_argument_group("other programs (the first argument; the rest is theirs)")
    for flag, (_, text) in programs.items():
        group.add_argument(flag, action="store_true", help=text)
