"""Two results of the same sweep made on different machines (or under two settings of one
rule), compared: which runs are bit-identical, how far each cell moved (the machine's or the
setting's effect paired by seed, with its interval over seeds), and which seed-level
significance claims and findings hold on both.

Floating-point kernels round differently on different CPUs (MKL and ATen dispatch by
processor), so a seeded run is bit-identical only on the same CPU model, torch build and
settings (:mod:`lab.common.machine`); on another machine the rounding acts like a partial
reseed, and this module asks, per cell, whether the two machines are shown to agree within a
margin, shown to differ, or cannot be told apart at the seeds run. Usage::

    python sweep.py --compare A/results.json B/results.json --labels "AMD" "Intel" [--out F]
    python sweep.py --compare A.json B.json --kind setting --labels "met once" "held" [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from lab.common.files import atomic_write
from lab.common.outputs import output_file_in_place
from lab.evaluation.labels import flat_settings
from lab.evaluation.learned import is_learned, learned_only
from lab.reporting.aggregate import HEADLINE, family, groups, seed_values, tasks
from lab.reporting.findings import decided
from lab.stats.seed_stats import ALPHA, paired
from lab.stats.verdicts import Claim, decide

Result = dict[str, Any]
WHERE = ("in_dist", *HEADLINE)
"""The cells compared: in distribution and the headline multiples."""
SAME_WITHIN = 0.05
"""Margin (exact-match, 5 points) within which a cell counts as the same on both machines."""


def keyed(results: list[Result]) -> dict[tuple[str, str, int], Result]:
    """Each run of ``results`` by (arm, task, seed): the arm as the reports name it
    (:func:`lab.reporting.aggregate.groups`: the scheme, a hybrid's layout, an evaluation
    rule, settings that split one label), so a sweep of hybrids or of RoPE-scaling rules pairs
    run by run as its report does.

    Raises:
        ValueError: two runs with one key (one line naming it).
    """
    runs: dict[tuple[str, str, int], Result] = {}
    for task in tasks(results):
        for arm, every in groups(results, task).items():
            for result in every:
                key = (arm, task, result["seed"])
                if key in runs:
                    raise ValueError(f"holds the run {_name(key)} twice")
                runs[key] = result
    return runs


def identical(a: Result, b: Result) -> bool:
    """Same training length and the same right/wrong answer on every evaluation sequence."""
    answers = [[row["correct"] for row in r["lengths"]] for r in (a, b)]
    return a["train_steps"] == b["train_steps"] and answers[0] == answers[1]


def cell_shifts(a: list[Result], b: list[Result]) -> list[dict[str, Any]]:
    """Per (task, scheme, where): both means over the learned runs (as the report's tables,
    :mod:`lab.evaluation.learned`) and the machine's effect B - A paired by seed, with its 95%
    t-interval over the seeds learned on both (:func:`lab.stats.seed_stats.paired`) and a
    three-valued verdict on "the machines agree within :data:`SAME_WITHIN`": ``agrees`` when
    the interval lies within +-SAME_WITHIN, ``disagrees`` when it lies wholly outside,
    ``inconclusive`` otherwise (a wide interval decides nothing, whatever its mean).

    Returns:
        Rows with ``task``, ``scheme``, ``where``, ``mean_a``, ``mean_b``, ``shift``,
        ``low``, ``high`` (fractions, not percent; None with one seed), ``seeds`` and
        ``verdict``.
    """
    rows = []
    claim = Claim("within", SAME_WITHIN)
    for task in tasks(a):
        ga, gb = groups(learned_only(a), task), groups(learned_only(b), task)
        for scheme in ga:
            for where in WHERE:
                va = seed_values(ga[scheme], where)
                vb = seed_values(gb.get(scheme, []), where)
                c = paired(vb, va)
                if c is None:
                    continue
                v = decide(claim, c.mean, c.low, c.high, c.n, c.sd)
                rows.append(
                    {"task": task, "scheme": scheme, "where": where,
                     "mean_a": _mean(va, c.seeds), "mean_b": _mean(vb, c.seeds),
                     "shift": c.mean, "low": c.low, "high": c.high, "seeds": c.n,
                     "verdict": v.word}
                )  # fmt: skip
    return rows


def learned_differs(
    ka: dict[tuple[str, str, int], Result], kb: dict[tuple[str, str, int], Result]
) -> list[dict[str, Any]]:
    """The (task, arm) cells whose runs learned (:mod:`lab.evaluation.learned`) on one side but
    not the other: the cells compare only seeds learned on both, so without this list a
    setting that makes a scheme learn (or stop learning) would read as no effect.

    Returns:
        Rows with ``task``, ``scheme``, ``learned_a``, ``learned_b`` (seeds learned) and
        ``seeds``, one per cell where a seed is learned on one side only.
    """
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for key in sorted(ka):
        arm, task, _ = key
        row = rows.setdefault(
            (task, arm), {"task": task, "scheme": arm, "learned_a": 0, "learned_b": 0, "seeds": 0}
        )
        row["learned_a"] += is_learned(ka[key])
        row["learned_b"] += is_learned(kb[key])
        row["seeds"] += 1
        row["differs"] = row.get("differs", False) or is_learned(ka[key]) != is_learned(kb[key])
    return [
        {k: v for k, v in row.items() if k != "differs"} for row in rows.values() if row["differs"]
    ]


def _mean(values: dict[int, float], seeds: tuple[int, ...]) -> float:
    return sum(values[s] for s in seeds) / len(seeds)


def claims(results: list[Result]) -> set[str]:
    """The significance claims of a sweep, e.g. ``'copy at 1.25x: alibi > none'``: the pairs
    whose paired difference over seeds is significant after Holm's correction over the
    report's family (:func:`lab.reporting.aggregate.family`), as in the report."""
    found = set()
    for task, label, x, y, c, p in family(results):
        if p < ALPHA:
            winner, loser = (x, y) if c.mean > 0 else (y, x)
            found.add(f"{task} at {label}: {winner} > {loser}")
    return found


def verdicts(results: list[Result]) -> dict[str, str]:
    """Finding title -> its word (:func:`lab.reporting.findings.decided`)."""
    return {f.title: f.word for f in decided(results)}


PLACEHOLDERS = ("original_max_position",)
"""Scheme options a record may hold as null where another holds the value it was filled with
when the run's config was built (records written before the filling was saved)."""


def placeholder(key: str, a: str, b: str) -> bool:
    """``key`` differs only as a :data:`PLACEHOLDERS` option null in one record."""
    return key.rsplit(".", 1)[-1] in PLACEHOLDERS and "None" in (a, b)


def check_same_settings(ka: dict[Any, Result], kb: dict[Any, Result]) -> None:
    """Refuse two sweeps whose paired runs (same keys) were trained or evaluated with other
    settings: that is no machine's effect.

    Raises:
        ValueError: one line counting the runs that differ, naming the first and its keys.
    """
    differ = {}
    for key in sorted(ka):
        x, y = (flat_settings(r["config"]) for r in (ka[key], kb[key]))
        keys = sorted(  # a key one record lacks is a version's; a null is a setting
            k for k in x.keys() & y.keys() if x[k] != y[k] and not placeholder(k, x[k], y[k])
        )
        if keys:
            differ[key] = keys
    if differ:
        first = next(iter(differ))
        raise ValueError(
            f"{len(differ)} of {len(ka)} runs differ in settings between the sweeps (first "
            f"{_name(first)}: {', '.join(differ[first][:4])}): that is no machine's effect; "
            "compare the same sweep, or give --kind setting"
        )


def compare_sweeps(a: list[Result], b: list[Result], kind: str = "machine") -> dict[str, Any]:
    """Everything :func:`markdown` prints, JSON-ready; ``kind`` (:data:`KINDS`) is what the two
    sweeps differ in: for ``machine``, each pair of runs must have the same settings.

    Raises:
        ValueError: the two sweeps do not hold the same runs (arm, task, seed), or (kind
            ``machine``) a pair of runs was trained or evaluated with other settings, which
            would be read as the machine's effect; one line naming them.
    """
    ka, kb = keyed(a), keyed(b)
    if set(ka) != set(kb):
        raise ValueError(
            f"the sweeps hold different runs: only in the first {_names(set(ka) - set(kb))}; "
            f"only in the second {_names(set(kb) - set(ka))}"
        )
    if kind == "machine":
        check_same_settings(ka, kb)
    ca, cb = claims(a), claims(b)
    va, vb = verdicts(a), verdicts(b)
    return {
        "learned_differs": learned_differs(ka, kb),
        "runs": len(ka),
        "identical": sum(identical(ka[k], kb[k]) for k in ka),
        "cells": cell_shifts(a, b),
        "claims_both": sorted(ca & cb),
        "claims_a_only": sorted(ca - cb),
        "claims_b_only": sorted(cb - ca),
        "verdicts": {k: [va[k], vb.get(k)] for k in va},
    }


def _names(keys: set[tuple[str, str, int]]) -> str:
    """``'2 (none-copy-seed0, rope-copy-seed1)'``: how many runs, the first four named."""
    names = [_name(key) for key in sorted(keys)]
    more = f" and {len(names) - 4} more" if len(names) > 4 else ""
    return f"{len(names)} ({', '.join(names[:4])}{more})" if names else "0"


def _name(key: tuple[str, str, int]) -> str:
    """``'none-copy-seed0'``: a run's (arm, task, seed) as one name."""
    arm, task, seed = key
    return f"{arm}-{task}-seed{seed}"


KINDS = {
    "machine": ("# The same sweep on two machines: ", "the machine's effect", "machines"),
    "setting": ("# The same sweep under two settings: ", "the setting's effect", "settings"),
}
"""What two compared sweeps differ in -> the page's title, what ``B - A`` measures, and what
"both" are (:func:`markdown`)."""


def markdown(
    comparison_: dict[str, Any], label_a: str, label_b: str, note: str = "", kind: str = "machine"
) -> str:
    """The comparison as a Markdown page; ``note`` (how both sweeps were made) under the title;
    ``kind`` (:data:`KINDS`) names what the two sweeps differ in.

    Raises:
        ValueError: no cell to compare (no run learned in both sweeps).
    """
    title, effect, both = KINDS[kind]
    c, cells = comparison_, comparison_["cells"]
    if not cells:
        raise ValueError(f"no cell holds learned runs in both sweeps ({', '.join(WHERE)})")
    counts = {w: sum(row["verdict"] == w for row in cells) for w in WORDS}
    worst = max(cells, key=lambda row: abs(row["shift"]))
    shifts = sorted(abs(row["shift"]) for row in cells)
    lines = [
        f"{title}{label_a} (A) and {label_b} (B)",
        "",
        *([note, ""] if note else []),
        f"- Bit-identical runs (same steps, same answer on every sequence): "
        f"**{c['identical']} of {c['runs']}**.",
        f"- Cells (task, scheme, in distribution and {', '.join(HEADLINE)}), {effect} "
        f"B - A paired by seed with its 95% t-interval: the same within "
        f"+-{100 * SAME_WITHIN:.0f} points (interval inside) **{counts['agrees']}**, different "
        f"(interval wholly outside) **{counts['disagrees']}**, inconclusive (interval too wide "
        f"at these seeds) **{counts['inconclusive']}**, of {len(cells)}; median shift "
        f"{100 * shifts[len(shifts) // 2]:.1f} points, largest {worst['task']} "
        f"{worst['scheme']} at {worst['where']}: {100 * worst['mean_a']:.1f}% -> "
        f"{100 * worst['mean_b']:.1f}% ({_span(worst)}).",
        *learned_line(c.get("learned_differs") or [], both),
        f"- Significance claims (seed level, Holm) on both {both}: {len(c['claims_both'])}; "
        f"on A only: {len(c['claims_a_only'])}; on B only: {len(c['claims_b_only'])}.",
        "",
        "## Findings against the literature",
        "",
        "| finding | A | B | same |",
        "|---|---|---|---|",
    ]
    for name, (x, y) in c["verdicts"].items():
        lines.append(f"| {name} | {x} | {y} | {'yes' if x == y else '**no**'} |")
    lines += learned_section(c.get("learned_differs") or [], both, effect)
    lines += ["", f"## Significance claims that hold on one {both[:-1]} only", ""]
    lines += [f"- {claim} (A only)" for claim in c["claims_a_only"]]
    lines += [f"- {claim} (B only)" for claim in c["claims_b_only"]]
    if not c["claims_a_only"] and not c["claims_b_only"]:
        lines.append("None.")
    lines += ["", f"## Cells not shown to be the same on both {both}", ""]
    lines += ["| task | scheme | where | A | B | B - A [95% t] | seeds | verdict |"]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for row in cells:
        if row["verdict"] != "agrees":
            lines.append(
                f"| {row['task']} | {row['scheme']} | {row['where']} | {100 * row['mean_a']:.1f} "
                f"| {100 * row['mean_b']:.1f} | {_span(row)} | {row['seeds']} | "
                f"{row['verdict']} |"
            )
    return "\n".join(lines) + "\n"


def learned_section(rows: list[dict[str, Any]], both: str, effect: str) -> list[str]:
    """The "Runs learned on one ... only" section of :func:`markdown` (none: no section)."""
    if not rows:
        return []
    return [
        "",
        f"## Runs learned on one {both[:-1]} only",
        "",
        "Left out of the cells above, which pair only seeds learned on both: "
        f"{effect} on whether a run learns at all.",
        "",
        "| task | scheme | seeds | learned in A | learned in B |",
        "|---|---|---|---|---|",
        *(
            f"| {r['task']} | {r['scheme']} | {r['seeds']} | {r['learned_a']} | {r['learned_b']} |"
            for r in rows
        ),
    ]


def learned_line(rows: list[dict[str, Any]], both: str) -> list[str]:
    """The summary bullet naming the cells whose runs learned on one side only (none: no
    bullet)."""
    if not rows:
        return []
    named = ", ".join(
        f"{r['task']} {r['scheme']} ({r['learned_a']} -> {r['learned_b']} of {r['seeds']})"
        for r in rows[:4]
    )
    more = f" and {len(rows) - 4} more" if len(rows) > 4 else ""
    return [
        f"- **Learned on one {both[:-1]} only** (seeds learned A -> B; not in the cells): "
        f"{named}{more}."
    ]


WORDS = ("agrees", "disagrees", "inconclusive")


def _span(row: dict[str, Any]) -> str:
    if row["low"] is None:
        return f"{100 * row['shift']:+.1f} points, one seed"
    return f"{100 * row['shift']:+.1f} [{100 * row['low']:+.1f}, {100 * row['high']:+.1f}] points"


TITLES = tuple(title.encode() for title, _, _ in KINDS.values())
"""How a comparison page begins: ``--out`` replaces only a file that begins so."""


def read_results(path: Path) -> list[Result]:
    """A sweep's ``results.json``: the list of its ``eval.json`` dicts.

    Raises:
        ValueError: the file cannot be read, is not JSON, holds no results, is not such a
            list (a seed that is not a whole number: ``true`` is no seed 1), holds
            language-model runs (no exact-match to compare), or holds one run (arm, task,
            seed: :func:`keyed`) twice (one line naming it).
    """
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as error:
        problem = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{path} is not a readable JSON file ({problem})") from None
    keys = {"position", "task", "seed", "lengths", "summary", "train_steps", "config"}
    if not isinstance(results, list) or not all(
        isinstance(r, dict)
        and keys <= set(r)
        and isinstance(r["position"], str)
        and isinstance(r["task"], str)
        and isinstance(r["seed"], int)
        and not isinstance(r["seed"], bool)
        for r in results
    ):
        raise ValueError(f"{path} is not a sweep's results.json (a list of eval.json results)")
    if not results:
        raise ValueError(f"{path} holds no results (an empty list); give a finished sweep's")
    if any(r.get("kind") == "lm" for r in results):
        raise ValueError(
            f"{path} holds language-model runs (kind lm); --compare compares the exact-match "
            "of synthetic sweeps' results.json"
        )
    try:
        keyed(results)
    except ValueError as error:
        raise ValueError(f"{path} {error}; a run is one seed, counted once") from None
    return results


def main(argv: list[str] | None = None) -> int:
    """CLI of ``python sweep.py --compare``: print (and with ``--out`` write) the comparison
    page; 2 and one line on stderr naming the file for a file that is not a sweep's
    ``results.json``, two sweeps that cannot be compared, or an ``--out`` that cannot be
    written (a folder, say)."""
    parser = argparse.ArgumentParser(
        prog="python sweep.py --compare", description=__doc__.splitlines()[0]
    )
    parser.add_argument("results", nargs=2, type=Path, help="two results.json files")
    parser.add_argument("--labels", nargs=2, default=["A", "B"], help="the two sweeps' names")
    parser.add_argument(
        "--kind", choices=tuple(KINDS), default="machine",
        help="what the two sweeps differ in: the machine (default) or a setting",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="write the Markdown page here")
    parser.add_argument("--note", default="", help="how both sweeps were made (under the title)")
    args = parser.parse_args(argv)
    try:
        if args.out is not None and args.out.is_dir():
            raise ValueError(
                f"--out {args.out} is a folder; give the file for the Markdown page, e.g. "
                f"--out {args.out / 'cross_machine.md'}"
            )
        if args.out is not None:  # checked before the work: a file in an existing folder
            output_file_in_place(str(args.out), ours=lambda text: text.startswith(TITLES))
        a, b = (read_results(p) for p in args.results)
        a_path, b_path = args.results
        if os.path.samefile(a_path, b_path):  # both read: each exists
            raise ValueError(
                f"{a_path} and {b_path} are one file: a sweep compared with itself says "
                "nothing of two machines or settings; give the other sweep's results.json"
            )
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        page = markdown(compare_sweeps(a, b, args.kind), *args.labels, args.note, args.kind)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        a_path, b_path = args.results
        why = f"a result lacks the field {error}" if isinstance(error, KeyError) else str(error)
        why = why.splitlines()[0] if why else type(error).__name__
        print(f"error: cannot compare {a_path} with {b_path}: {why}", file=sys.stderr)
        return 2
    if args.out:
        try:
            atomic_write(args.out, page)
        except OSError as error:
            print(f"error: cannot write --out {args.out}: {error}", file=sys.stderr)
            return 2
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
