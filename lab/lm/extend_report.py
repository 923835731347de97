"""The extend-then-fine-tune comparison: zero-shot extension rules, fine-tuned children and a
model trained from scratch at the longer length, side by side, with paired tests.

Input: the ``eval.json`` dicts (LM records, ``kind: "lm"``) of an extend study
(:mod:`lab.lm.extend_study`). Each record's role is read from the record itself, so the
committed ``results.json`` alone rebuilds the report:

- ``fine-tuned``: it has a ``parent`` (``python train.py --extend``); its rule is its own
  ``model.options.rope.scaling`` (``none``: plain fine-tuning at the longer length).
- ``zero-shot``: a parent evaluated with ``eval.position_options`` (a rule applied without
  training).
- ``as trained``: a parent evaluated as it was trained.
- ``from scratch``: no parent, trained at a longer length than the parents.

Lengths are named by their multiple of the parents' training length ``L`` (``4x`` is ``4L``
tokens for every run, whatever its own training length). Every run scores the same held-out
windows at a length (the LM evaluation's contract), so two runs pair window by window: the
Wilcoxon signed-rank test on their per-window losses (:func:`wilcoxon_signed_rank`), per seed
and pooled over seeds; across two or more seeds the difference must also point the same way in
every seed to be called significant (as :attr:`lab.stats.intervals.Comparison.significant`), and
the perplexity ratio gets a 95% t-interval over seeds (:func:`lab.stats.intervals.t_interval`).

Findings against Peng et al. 2023 ("YaRN: Efficient Context Window Extension of Large Language
Models", sec. 3 and table 1: NTK-aware, dynamic NTK and YaRN lower RoPE's perplexity past its
training length without fine-tuning) and Chen et al. 2023 ("Extending Context Window of Large
Language Models via Positional Interpolation", sec. 3.2 and table 1: position interpolation
needs a short fine-tuning), each with its deciding numbers and a verdict.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.common.files import atomic_write
from lab.reporting.tables import format_table
from lab.stats.intervals import ALPHA, t_interval

Result = dict[str, Any]
KINDS = ("as trained", "zero-shot", "fine-tuned", "from scratch")
ZERO_SHOT_RULES = ("ntk", "dynamic", "yarn")
"""The rules Peng et al. 2023 say extend RoPE without fine-tuning."""
CLOSE = 1.10
"""Position interpolation "works without fine-tuning" when its zero-shot perplexity at the
longer length is within this factor of the parent's perplexity at ``L``."""
PENG = "Peng et al. 2023 (NTK/dynamic/YaRN lower RoPE's perplexity past L without fine-tuning)"
CHEN = "Chen et al. 2023 (position interpolation needs fine-tuning)"


def wilcoxon_signed_rank(a: list[float], b: list[float]) -> tuple[float, float]:
    """Two-sided Wilcoxon signed-rank test of paired samples ``a`` and ``b`` (Wilcoxon 1945),
    :func:`scipy.stats.wilcoxon` with ``method="approx"``: zero differences dropped, tied
    absolute differences sharing their mean rank, ``T = min(W+, W-)`` and the normal
    approximation's p-value without continuity correction. Per-window losses give hundreds of
    pairs, where the approximation is close to exact.

    Returns:
        ``(T, p)``; ``(0.0, 1.0)`` when every difference is zero.

    Raises:
        ValueError: ``a`` and ``b`` differ in length.
    """
    from scipy.stats import wilcoxon  # a slow import, only when a test is made

    if len(a) != len(b):
        raise ValueError(f"{len(a)} and {len(b)} values cannot be paired")
    if all(x == y for x, y in zip(a, b, strict=True)):
        return 0.0, 1.0
    test = wilcoxon(a, b, method="approx")
    return float(test.statistic), float(test.pvalue)


def original_length(results: list[Result]) -> int:
    """``L``: the shortest training length among the runs without a parent (the parents').

    Raises:
        ValueError: no such run.
    """
    lengths = [r["train_lengths"][1] for r in results if not r.get("parent")]
    if not lengths:
        raise ValueError("no run without a parent: the study's parents are missing")
    return min(lengths)


def role(result: Result, original: int) -> tuple[str, str]:
    """``(kind, rule)`` of one record (see the module docstring); rule ``""`` when none."""
    config = result["config"]
    position = config["model"]["position"]
    options = config["model"]["options"].get(position, {})
    if result.get("parent"):
        return "fine-tuned", rule_name(options)
    at_eval = config["eval"].get("position_options") or {}
    if at_eval:
        return "zero-shot", rule_name({**options, **at_eval})
    if result["train_lengths"][1] > original:
        return "from scratch", ""
    return "as trained", ""


def rule_name(options: dict[str, Any]) -> str:
    """``"yarn s=4"`` from RoPE options; ``"none"`` for no scaling rule."""
    scaling = options.get("scaling", "none")
    if scaling == "none":
        return "none"
    return f"{scaling} s={float(options.get('scaling_factor', 1)):g}"


def grouped(results: list[Result]) -> tuple[int, dict[tuple[str, str], dict[int, Result]]]:
    """``(L, {(kind, rule): {seed: record}})`` in :data:`KINDS` order, then by rule."""
    original = original_length(results)
    groups: dict[tuple[str, str], dict[int, Result]] = {}
    for result in results:
        groups.setdefault(role(result, original), {})[result["seed"]] = result
    ordered = sorted(groups, key=lambda key: (KINDS.index(key[0]), key[1]))
    return original, {key: groups[key] for key in ordered}


def row_at(result: Result, length: int) -> dict[str, Any] | None:
    """The supported ``lengths`` row of ``result`` at ``length`` tokens, or None."""
    for row in result["lengths"]:
        if row["length"] == length and row["supported"] and row.get("window_losses"):
            return row
    return None


def perplexity_cell(runs: dict[int, Result], length: int) -> str:
    """One seed: its perplexity with the bootstrap 95% interval over windows; several: the
    geometric mean over seeds with a 95% t-interval of the mean loss, exponentiated (so the
    interval stays positive); ``-`` when a seed lacks the length."""
    rows = [row_at(run, length) for run in runs.values()]
    if not rows or None in rows:
        return "-"
    if len(rows) == 1:
        row = rows[0]
        return (
            f"{row['perplexity']:.2f} [{row['perplexity_low']:.2f}, {row['perplexity_high']:.2f}]"
        )
    interval = t_interval([math.log(row["perplexity"]) for row in rows])
    return (
        f"{math.exp(interval.mean):.2f} "
        f"[{math.exp(interval.low):.2f}, {math.exp(interval.high):.2f}]"
    )


def multiples(results: list[Result], original: int) -> list[int]:
    """The multiples of ``L`` (1, 2, 4, ...) at which any run has a supported length."""
    found = {row["length"] // original for r in results for row in r["lengths"]}
    found = {m for m in found if m >= 1 and any(row_at(r, m * original) for r in results)}
    return [m for m in (1, 2, 4, 8, 16, 32) if m in found]


def perplexity_table(results: list[Result]) -> str:
    """Markdown table: one row per (kind, rule), perplexity per multiple of ``L``."""
    original, groups = grouped(results)
    columns = multiples(results, original)
    rows = [
        [kind, rule or "-", str(len(runs)), *(perplexity_cell(runs, m * original) for m in columns)]
        for (kind, rule), runs in groups.items()
    ]
    heads = ["run", "rule", "seeds", *(f"{m}x ({m * original})" for m in columns)]
    return format_table(heads, rows)


@dataclass
class Paired:
    """Runs ``a`` against runs ``b`` on the same windows at one length, over their shared seeds.

    Attributes:
        a_perplexity, b_perplexity: mean over seeds of each side's perplexity.
        ratio: ``a_perplexity / b_perplexity`` per seed (below 1: ``a`` is better).
        p_value: Wilcoxon signed-rank p over every seed's window pairs, pooled.
        seed_p: the same test per seed.
        windows: window pairs, summed over seeds.
    """

    a_perplexity: float
    b_perplexity: float
    ratio: tuple[float, ...]
    p_value: float
    seed_p: tuple[float, ...]
    windows: int

    @property
    def same_sign(self) -> bool:
        """The ratio is on one side of 1 in every seed."""
        return all(r < 1 for r in self.ratio) or all(r > 1 for r in self.ratio)

    @property
    def significant(self) -> bool:
        """``p_value < ALPHA`` and (with several seeds) the same sign in every seed."""
        return self.p_value < ALPHA and self.same_sign

    @property
    def lower(self) -> bool:
        """``a`` has the significantly lower perplexity."""
        return self.significant and all(r < 1 for r in self.ratio)


def paired(a: dict[int, Result], b: dict[int, Result], length: int) -> Paired | None:
    """Compare ``a`` and ``b`` (seed -> record) at ``length`` tokens; None when no seed has
    both sides with the same windows there."""
    pairs = []
    for seed in sorted(set(a) & set(b)):
        row_a, row_b = row_at(a[seed], length), row_at(b[seed], length)
        if row_a and row_b and len(row_a["window_losses"]) == len(row_b["window_losses"]):
            pairs.append((row_a, row_b))
    if not pairs:
        return None
    pooled_a = [x for row_a, _ in pairs for x in row_a["window_losses"]]
    pooled_b = [x for _, row_b in pairs for x in row_b["window_losses"]]
    return Paired(
        sum(ra["perplexity"] for ra, _ in pairs) / len(pairs),
        sum(rb["perplexity"] for _, rb in pairs) / len(pairs),
        tuple(ra["perplexity"] / rb["perplexity"] for ra, rb in pairs),
        wilcoxon_signed_rank(pooled_a, pooled_b)[1],
        tuple(
            wilcoxon_signed_rank(ra["window_losses"], rb["window_losses"])[1] for ra, rb in pairs
        ),
        len(pooled_a),
    )


def words(test: Paired) -> str:
    """``'0.61x, Wilcoxon p=1.2e-40 over 256 windows, significant'``, with the t-interval of
    the ratio over seeds when there are several, and what a small p missed."""
    ratio = sum(test.ratio) / len(test.ratio)
    text = f"{ratio:.2f}x"
    if len(test.ratio) > 1:
        interval = t_interval(list(test.ratio))
        text += f" [{interval.low:.2f}, {interval.high:.2f}] over {len(test.ratio)} seeds"
    text += f", Wilcoxon p={test.p_value:.1e} over {test.windows} windows"
    if test.significant:
        seeds = ""
        if len(test.ratio) > 1 and interval.low <= 1 <= interval.high:
            seeds = f"; over {len(test.ratio)} seeds alone the interval includes 1"
        return f"{text}, significant over windows (p < {ALPHA}, one sign in every seed){seeds}"
    if test.p_value < ALPHA:
        return f"{text}, not significant: the ratio is not on one side of 1 in every seed"
    return f"{text}, not significant (needs p < {ALPHA})"


def comparisons(results: list[Result]) -> list[tuple[str, str, Paired | None]]:
    """The paired tests at the study's longer length (the fine-tuned runs' training length;
    4L when there are none): each zero-shot rule against RoPE as trained, each fine-tuned rule
    against the same rule zero-shot, against RoPE as trained, and against the from-scratch
    run. ``(a label, b label, test)`` in that order."""
    original, groups = grouped(results)
    length = target_length(results, original)
    found = []
    trained = groups.get(("as trained", ""), {})
    scratch = groups.get(("from scratch", ""), {})
    for (kind, rule), runs in groups.items():
        if kind == "zero-shot":
            found.append((f"zero-shot {rule}", "as trained", paired(runs, trained, length)))
    for (kind, rule), runs in groups.items():
        if kind != "fine-tuned":
            continue
        label = f"fine-tuned {rule}"
        zero = groups.get(("zero-shot", rule))
        if zero is not None:
            found.append((label, f"zero-shot {rule}", paired(runs, zero, length)))
        found.append((label, "as trained", paired(runs, trained, length)))
        if scratch:
            found.append((label, "from scratch", paired(runs, scratch, length)))
    return found


def target_length(results: list[Result], original: int) -> int:
    """The longer length of the study, in tokens: the fine-tuned (else from-scratch) runs'
    training length, else ``4 L``."""
    for kind in ("fine-tuned", "from scratch"):
        lengths = [r["train_lengths"][1] for r in results if role(r, original)[0] == kind]
        if lengths:
            return max(lengths)
    return 4 * original


def tests_table(results: list[Result]) -> str:
    """Markdown table of :func:`comparisons`: both perplexities, the ratio and the test."""
    rows = []
    for a, b, test in comparisons(results):
        if test is None:
            rows.append([a, b, "-", "-", "not measured (no shared seed or windows)"])
            continue
        rows.append([a, b, f"{test.a_perplexity:.2f}", f"{test.b_perplexity:.2f}", words(test)])
    return format_table(["A", "B", "perplexity A", "perplexity B", "A / B, paired test"], rows)


def _by_rule(results: list[Result], kind: str, rule: str) -> dict[int, Result]:
    """The runs of ``kind`` whose rule's name starts with ``rule`` (any factor), merged."""
    _, groups = grouped(results)
    runs: dict[int, Result] = {}
    for (found, name), seeds in groups.items():
        if found == kind and name.split()[0] == rule and not runs:
            runs = seeds
    return runs


def peng_finding(results: list[Result]) -> str:
    """Zero-shot NTK, dynamic NTK and YaRN against RoPE as trained at the longer length:
    agrees when every rule measured has a significantly lower perplexity, disagrees when none
    has, mixed otherwise."""
    original, groups = grouped(results)
    length = target_length(results, original)
    trained = groups.get(("as trained", ""), {})
    tests = {
        rule: paired(_by_rule(results, "zero-shot", rule), trained, length)
        for rule in ZERO_SHOT_RULES
    }
    tests = {rule: test for rule, test in tests.items() if test is not None}
    if not tests:
        return (
            f"- {PENG}: **not measured** (needs RoPE as trained and zero-shot ntk, dynamic or "
            f"yarn at {length // original}x)"
        )
    lower = [rule for rule, test in tests.items() if test.lower]
    verdict = "agrees" if len(lower) == len(tests) else ("disagrees" if not lower else "mixed")
    first = next(iter(tests.values()))
    parts = [f"{rule} {t.a_perplexity:.2f} ({words(t)})" for rule, t in tests.items()]
    return (
        f"- {PENG}: **{verdict}**. Perplexity at {length // original}x ({length} tokens): RoPE "
        f"as trained {first.b_perplexity:.2f}; " + "; ".join(parts)
    )


def chen_finding(results: list[Result]) -> str:
    """Position interpolation zero-shot against fine-tuned at the longer length: agrees when
    fine-tuning lowers its perplexity significantly and zero-shot PI is above :data:`CLOSE`
    times RoPE as trained at ``L``; disagrees when neither holds; mixed otherwise."""
    original, groups = grouped(results)
    length = target_length(results, original)
    zero = _by_rule(results, "zero-shot", "linear")
    tuned = _by_rule(results, "fine-tuned", "linear")
    test = paired(tuned, zero, length)
    trained = groups.get(("as trained", ""), {})
    at_l = [row_at(run, original) for run in trained.values()]
    if test is None or not at_l or None in at_l:
        return (
            f"- {CHEN}: **not measured** (needs RoPE as trained at 1x, and linear zero-shot "
            f"and fine-tuned at {length // original}x)"
        )
    base = sum(row["perplexity"] for row in at_l) / len(at_l)
    helps, fails_alone = test.lower, test.b_perplexity > CLOSE * base
    verdict = {2: "agrees", 1: "mixed", 0: "disagrees"}[helps + fails_alone]
    return (
        f"- {CHEN}: **{verdict}**. At {length // original}x ({length} tokens): position "
        f"interpolation zero-shot {test.b_perplexity:.2f}, fine-tuned {test.a_perplexity:.2f} "
        f"(fine-tuned / zero-shot {words(test)}); RoPE as trained at 1x {base:.2f} (zero-shot "
        f"PI {'above' if fails_alone else 'within'} {CLOSE:.2f}x of it)"
    )


def report_text(results: list[Result]) -> str:
    """The whole comparison as Markdown: the perplexity table, the paired tests, the findings."""
    original, _ = grouped(results)
    length = target_length(results, original)
    return "\n".join(
        [
            f"## Perplexity by length (L = {original} tokens)",
            "",
            "Held-out perplexity at multiples of the parents' training length L; one seed: "
            "its 95% bootstrap interval over windows; several: the geometric mean over seeds with "
            "a 95% t-interval of the mean loss, exponentiated.",
            "",
            perplexity_table(results),
            "",
            f"## Paired tests at {length // original}x ({length} tokens)",
            "",
            "Same held-out windows for every run; Wilcoxon signed-rank test on per-window "
            "losses, pooled over seeds; significant: p < 0.05 and, with several seeds, the "
            "same sign in every seed.",
            "",
            tests_table(results),
            "",
            "## Findings against the literature",
            "",
            peng_finding(results),
            chen_finding(results),
            "",
        ]
    )


CSV_FIELDS = ("run", "kind", "rule", "seed", "length", "multiple", "perplexity")
CSV_FIELDS += ("perplexity_low", "perplexity_high", "loss", "windows", "parent")


def results_csv(results: list[Result]) -> str:
    """One row per run and supported length: :data:`CSV_FIELDS`."""
    original, groups = grouped(results)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for (kind, rule), runs in groups.items():
        for seed, run in sorted(runs.items()):
            name = (run.get("checkpoint") or {}).get("run") or run.get("run_dir") or ""
            for row in run["lengths"]:
                if not row["supported"]:
                    continue
                writer.writerow(
                    [name, kind, rule, seed, row["length"], f"{row['length'] / original:g}"]
                    + [
                        f"{row[k]:.6g}"
                        for k in ("perplexity", "perplexity_low", "perplexity_high", "loss")
                    ]
                    + [row["windows"], (run.get("parent") or {}).get("run", "")]
                )
    return out.getvalue()


def write_extend_report(results: list[Result], out_dir: str | Path) -> dict[str, Path]:
    """Write ``extend_report.md`` and ``extend_results.csv`` into ``out_dir``; returns the
    paths by name."""
    out_dir = Path(out_dir)
    text = "# Extend, then fine-tune\n\n" + report_text(results)
    return {
        "report": atomic_write(out_dir / "extend_report.md", text),
        "csv": atomic_write(out_dir / "extend_results.csv", results_csv(results)),
    }


COMMAND = "python sweep.py --extend-study configs/lm_extend.yaml"


def lm_extend_page(folder: Path, publish: str, note: str = "") -> str:
    """``docs/results/lm-extend.md`` from the committed ``folder`` (``results.json``: the
    study's eval.json dicts; ``sweep.json`` when there is one), as the pages of
    :mod:`lab.reporting.pages` are made: title, the do-not-edit line naming ``publish``, the
    command, runs, seeds, wall time and machine, then :func:`report_text` and the files of
    ``folder`` among ``report.md``, ``results.csv``, ``results.json`` and ``sweep.json``;
    ``note`` (how the files were made, where they do not say) follows the provenance line."""
    results = json.loads((folder / "results.json").read_text())
    sweep_file = folder / "sweep.json"
    sweep = json.loads(sweep_file.read_text()) if sweep_file.is_file() else None
    seeds = ", ".join(str(s) for s in sorted({r["seed"] for r in results}))
    where = ""
    if sweep is not None:
        where = (
            f", in **{sweep['seconds'] / 60:.1f} min** with {sweep['workers']} worker(s) on "
            f"{sweep['machine']}"
        )
    names = ("report.md", "results.csv", "results.json", "sweep.json")
    names = [n for n in names if (folder / n).is_file()]
    return "\n".join(
        [
            "# Extend, then fine-tune: RoPE extension rules on text",
            "",
            f"<!-- generated by `{publish}`; do not edit -->",
            "",
            f"`{COMMAND}`: {len(results)} evaluations, seed(s) {seeds}{where}."
            + (f" {note}" if note else ""),
            "",
            report_text(results),
            "Files: " + ", ".join(f"[{n}]({folder.name}/{n})" for n in names) + ".",
            "",
        ]
    )
