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
tokens for every run, whatever its own training length). Arms are compared at the seed level
(:func:`paired`): runs pair by seed, the per-seed difference in mean loss gets a t-interval and
the paired t and sign-flip tests, with Holm's correction over the report's table. Every run
scores the same held-out windows, so a seed's two checkpoints also pair window by window; that
Wilcoxon signed-rank p (:func:`wilcoxon_signed_rank`) describes those checkpoints only. The
budgets line names each arm's training tokens (:func:`budget_line`). Only runs of one
provenance are pooled or paired (:func:`consistent`): a run on another corpus than the parents',
or a child fine-tuned from a parent checkpoint that is no longer the parent's, is left out and
named.

Findings against Peng et al. 2023 ("YaRN: Efficient Context Window Extension of Large Language
Models", sec. 3 and table 1: NTK-aware, dynamic NTK and YaRN lower RoPE's perplexity past its
training length without fine-tuning) and Chen et al. 2023 ("Extending Context Window of Large
Language Models via Positional Interpolation": every claim of theirs the study measures,
:data:`CHEN_CLAIMS`), each claim a three-valued verdict on its seed-level interval
(:func:`lab.lm.findings.part`).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.common.files import atomic_write
from lab.common.outputs import STUDY_NAMES
from lab.evaluation.labels import scheme_label
from lab.lm.aggregate import row_at
from lab.lm.findings import LOSS_MARGIN, finding, part
from lab.lm.record import MIN_INTERVAL_WINDOWS
from lab.reporting.tables import format_table
from lab.stats.intervals import t_interval
from lab.stats.seed_stats import ALPHA, Paired, holm
from lab.stats.seed_stats import paired as seed_paired
from lab.stats.verdicts import Claim

Result = dict[str, Any]
KINDS = ("as trained", "zero-shot", "fine-tuned", "from scratch")
ZERO_SHOT_RULES = ("ntk", "dynamic", "yarn")
"""The rules Peng et al. 2023 say extend RoPE without fine-tuning."""
PENG = "Peng et al. 2023 (NTK/dynamic/YaRN lower RoPE's perplexity past L without fine-tuning)"
CHEN = "Chen et al. 2023 (position interpolation: beats no rule, needs fine-tuning, beats plain "
CHEN += "fine-tuning)"


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


def consistent(results: list[Result]) -> tuple[list[Result], list[str]]:
    """The records the report may pool and pair, and one line per record left out: a record
    whose corpus (``corpus.sha256``) is not the parents' (the one most of the parents' records
    have: the runs without a parent at ``L``), which scored other text; a zero-shot record of
    another checkpoint than its seed's parent as trained; and a fine-tuned record whose
    ``parent.sha256`` is not the checkpoint of its seed's parent here (the parent was retrained
    since the child was seeded from it). Records of no corpus (a synthetic task) have one
    corpus, ``None``."""
    if all(r.get("parent") for r in results):
        return results, []  # no parent at all: original_length says so
    original = original_length(results)
    parents = [r for r in results if not r.get("parent") and r["train_lengths"][1] == original]
    reference = Counter(_corpus(r) for r in parents).most_common(1)[0][0]
    kept, left_out = [], []
    for r in results:
        if _corpus(r) != reference:
            left_out.append(
                f"{_name(r, original)}: its corpus (sha256 {_short(_corpus(r))}) is not the "
                f"parents' (sha256 {_short(reference)}): it scored other windows"
            )
        else:
            kept.append(r)
    trained = {r["seed"]: _digest(r) for r in kept if role(r, original)[0] == "as trained"}
    paired_ok = []
    for r in kept:
        why = _other_checkpoint(r, role(r, original)[0], trained)
        if why:
            left_out.append(f"{_name(r, original)}: {why}")
        else:
            paired_ok.append(r)
    return paired_ok, left_out


def _other_checkpoint(result: Result, kind: str, trained: dict[int, str | None]) -> str | None:
    """Why ``result`` (of ``kind``) is not of its seed's parent checkpoint (``trained``: seed ->
    the sha256 of its as-trained record), or None."""
    seed = result["seed"]
    if kind == "fine-tuned":
        digest = result["parent"].get("sha256")
        if seed not in trained or digest != trained[seed]:
            return (
                f"fine-tuned from a checkpoint of sha256 {_short(digest)}, which no parent of "
                f"seed {seed} here is (the parent was retrained since)"
            )
    if kind == "zero-shot" and seed in trained and _digest(result) != trained[seed]:
        return (
            f"evaluated on a checkpoint of sha256 {_short(_digest(result))}, not its parent's "
            f"as trained ({_short(trained[seed])})"
        )
    return None


def _digest(result: Result) -> str | None:
    return (result.get("checkpoint") or {}).get("sha256")


def _corpus(result: Result) -> str | None:
    return (result.get("corpus") or {}).get("sha256")


def _short(digest: str | None) -> str:
    return "none" if digest is None else digest[:12]


def _name(result: Result, original: int) -> str:
    """``'finetune-linear-seed0 (fine-tuned linear s=4, seed 0)'``."""
    name = (result.get("checkpoint") or {}).get("run") or result.get("run_dir") or "a run"
    kind, rule = role(result, original)
    return f"{name} ({kind}{f' {rule}' if rule else ''}, seed {result['seed']})"


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


def model_line(results: list[Result]) -> str:
    """``'Model: rope*2,none (d_model 64, 3 layers, 4 heads) on lm_tiny.'``: the parents'
    position scheme as every report names it (:func:`lab.evaluation.labels.scheme_label`: a
    hybrid layout or a sliding window shown as such), size and task; every distinct one when
    the records hold several."""
    models = []
    for result in results:
        model = result["config"]["model"]
        bare = {  # the evaluation rule aside
            **result,
            "position": model["position"],
            "config": {**result["config"], "eval": {}},
        }
        text = (
            f"{scheme_label(bare)} (d_model {model['d_model']}, {model['n_layers']} layers, "
            f"{model['n_heads']} heads) on {result['task']}"
        )
        if text not in models:
            models.append(text)
    return f"Model: {'; '.join(models)}."


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


def perplexity_cell(runs: dict[int, Result], length: int) -> str:
    """One seed: its perplexity with the bootstrap 95% interval over windows; several: the
    geometric mean over seeds with a 95% t-interval of the mean loss, exponentiated (so the
    interval stays positive); ``-`` when a seed lacks the length."""
    rows = [row_at(run, length) for run in runs.values()]
    if not rows or None in rows:
        return "-"
    if len(rows) == 1:
        row, low, high = rows[0], rows[0]["perplexity_low"], rows[0]["perplexity_high"]
        if low is None:  # too few windows for an interval
            return f"{row['perplexity']:.2f} [n/a: {row['windows']} window(s)]"
        return f"{row['perplexity']:.2f} [{low:.2f}, {high:.2f}]"
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


@dataclass(frozen=True)
class ArmTest:
    """Runs ``a`` against runs ``b`` at one length, paired by seed.

    Attributes:
        test: per-seed mean loss of ``a`` minus ``b`` (nats/token; negative: ``a`` is better),
            :func:`lab.stats.seed_stats.paired`: the seed-level evidence.
        a_perplexity, b_perplexity: mean over the shared seeds of each side's perplexity.
        window_p: per shared seed, the Wilcoxon signed-rank p of the two checkpoints' window
            losses (:func:`wilcoxon_signed_rank`): describes these runs, decides nothing.
    """

    test: Paired
    a_perplexity: float
    b_perplexity: float
    window_p: tuple[float, ...]


def _losses(runs: dict[int, Result], length: int) -> dict[int, float]:
    """Seed -> mean loss (nats/token) at ``length`` tokens of each run that supports it."""
    rows = {seed: row_at(run, length) for seed, run in runs.items()}
    return {seed: row["loss"] for seed, row in rows.items() if row is not None}


def paired(a: dict[int, Result], b: dict[int, Result], length: int) -> ArmTest | None:
    """Compare ``a`` and ``b`` (seed -> record) at ``length`` tokens; None when no seed has
    both sides there."""
    test = seed_paired(_losses(a, length), _losses(b, length))
    if test is None:
        return None
    rows = [(row_at(a[s], length), row_at(b[s], length)) for s in test.seeds]
    window_p = tuple(
        wilcoxon_signed_rank(ra["window_losses"], rb["window_losses"])[1]
        for ra, rb in rows
        if len(ra["window_losses"]) == len(rb["window_losses"]) >= MIN_INTERVAL_WINDOWS
    )
    a_ppl = sum(ra["perplexity"] for ra, _ in rows) / len(rows)
    b_ppl = sum(rb["perplexity"] for _, rb in rows) / len(rows)
    return ArmTest(test, a_ppl, b_ppl, window_p)


def words(arm: ArmTest, holm_p: float | None = None) -> str:
    """``'x0.69 (loss -0.371 nats [-0.52, -0.22] over 2 seeds, t p=0.02, sign-flip p=0.5,
    Holm p=1): not significant; per-checkpoint Wilcoxon p 1e-40, 2e-41'``."""
    t = arm.test
    span = "" if t.low is None else f" [{t.low:+.3f}, {t.high:+.3f}]"
    p_t = "-" if t.p_t is None else f"{t.p_t:.2g}"
    text = f"x{math.exp(t.mean):.2f} (loss {t.mean:+.3f} nats{span} over {t.n} seed(s), "
    text += f"t p={p_t}, sign-flip p={t.p_sign_flip:.2g}"
    if holm_p is not None:
        text += f", Holm p={holm_p:.2g}): "
        text += "significant" if holm_p < ALPHA else "not significant at the seed level"
    else:
        text += ")"
    windows = ", ".join(f"{p:.1e}" for p in arm.window_p)
    return text + (f"; per-checkpoint Wilcoxon p {windows}" if windows else "")


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
    """Markdown table of :func:`comparisons`: both perplexities and the seed-level test, with
    Holm's adjusted p over the table's comparisons."""
    found = comparisons(results)
    if not found:
        return "No paired test: the results hold no zero-shot, fine-tuned or from-scratch arm."
    measured = [arm for *_, arm in found if arm is not None]
    adjusted = iter(holm([arm.test.p_value for arm in measured]))
    rows = []
    for a, b, arm in found:
        if arm is None:
            rows.append([a, b, "-", "-", "not measured (no shared seed)"])
            continue
        shown = [f"{arm.a_perplexity:.2f}", f"{arm.b_perplexity:.2f}", words(arm, next(adjusted))]
        rows.append([a, b, *shown])
    return format_table(["A", "B", "perplexity A", "perplexity B", "A / B, paired by seed"], rows)


def _by_rule(results: list[Result], kind: str, rule: str) -> dict[int, Result]:
    """The runs of ``kind`` whose rule's name starts with ``rule`` (any factor), merged."""
    _, groups = grouped(results)
    runs: dict[int, Result] = {}
    for (found, name), seeds in groups.items():
        if found == kind and name.split()[0] == rule and not runs:
            runs = seeds
    return runs


def _claim_part(a: dict[int, Result], b: dict[int, Result], length: int, what: str, m: int):
    """The part "``b``'s loss minus ``a``'s at ``length`` > LOSS_MARGIN" (``a`` better by more
    than 5% perplexity) at level ``1 - 0.05 / m``, or None when no seed has both."""
    return part(_losses(b, length), _losses(a, length), Claim("greater", LOSS_MARGIN), m, what)


def peng_finding(results: list[Result]) -> str:
    """Zero-shot NTK, dynamic NTK and YaRN against RoPE as trained at the longer length: each
    rule's loss below as trained's by more than :data:`lab.lm.findings.LOSS_MARGIN`, per seed
    (Bonferroni over the rules measured)."""
    original, groups = grouped(results)
    length = target_length(results, original)
    trained = groups.get(("as trained", ""), {})
    rules = {rule: _by_rule(results, "zero-shot", rule) for rule in ZERO_SHOT_RULES}
    rules = {rule: runs for rule, runs in rules.items() if runs and _losses(runs, length)}
    needs = f"RoPE as trained and zero-shot ntk, dynamic or yarn at {length // original}x"
    parts = [
        _claim_part(runs, trained, length, f"as trained - {rule}", len(rules))
        for rule, runs in rules.items()
    ]
    claim = f"loss at {length // original}x ({length} tokens), claim: as trained minus the rule"
    return "- " + finding(PENG, parts, f"{claim} > {LOSS_MARGIN:.3f}", needs)


CHEN_CLAIMS = (
    (
        "as trained",
        "zero-shot linear",
        "zero-shot interpolation beats no rule past L",
        "Chen et al. report zero-shot interpolation at 16.10 where extrapolation exceeds 1000",
    ),
    (
        "zero-shot linear",
        "fine-tuned linear",
        "interpolation needs fine-tuning",
        "a short fine-tuning brings it back near the model's perplexity at L",
    ),
    (
        "fine-tuned none",
        "fine-tuned linear",
        "fine-tuning with interpolation beats plain fine-tuning",
        "table 1: interpolation fine-tuning below direct fine-tuning",
    ),
)
"""Chen et al. 2023's three claims the study measures: ``(worse arm, better arm, claim, the
paper's evidence)``; each agrees when the better arm's loss is lower by more than the margin."""


def chen_finding(results: list[Result]) -> str:
    """Chen et al. 2023, every claim the study measures (:data:`CHEN_CLAIMS`), each with its
    seed-level verdict (Bonferroni over the three) beside the paper's evidence."""
    original, groups = grouped(results)
    length = target_length(results, original)
    arms = {
        "as trained": groups.get(("as trained", ""), {}),
        "zero-shot linear": _by_rule(results, "zero-shot", "linear"),
        "fine-tuned linear": _by_rule(results, "fine-tuned", "linear"),
        "fine-tuned none": _by_rule(results, "fine-tuned", "none"),
    }
    parts = []
    for worse, better, claim, paper in CHEN_CLAIMS:
        found = _claim_part(arms[better], arms[worse], length, f"{worse} - {better}", 3)
        parts.append(None if found is None else (found[0], f"{claim} ({paper}): {found[1]}"))
    at = f"{length // original}x"
    needs = f"RoPE as trained, linear zero-shot and fine-tuned, and plain fine-tuning at {at}"
    claim = f"loss at {at} ({length} tokens), each claim: difference > {LOSS_MARGIN:.3f}"
    return "- " + finding(CHEN, parts, claim, needs)


def report_text(results: list[Result]) -> str:
    """The whole comparison as Markdown: the perplexity table, the paired tests, the findings,
    of the records :func:`consistent` keeps, then the records it left out and why."""
    results, left_out = consistent(results)
    original, _ = grouped(results)
    length = target_length(results, original)
    left = [
        "## Left out",
        "",
        "Never pooled or paired with the others (another corpus, or a parent since retrained):",
        "",
        *(f"- {line}" for line in left_out),
        "",
    ]
    return "\n".join(
        [
            model_line(results),
            "",
            f"## Perplexity by length (L = {original} tokens)",
            "",
            "Held-out perplexity at multiples of the parents' training length L; one seed: "
            "its 95% bootstrap interval over windows (none below "
            f"{MIN_INTERVAL_WINDOWS} windows); several: the geometric mean over seeds with "
            "a 95% t-interval of the mean loss, exponentiated.",
            "",
            perplexity_table(results),
            "",
            f"## Paired tests at {length // original}x ({length} tokens)",
            "",
            "The seed is the unit of evidence: runs pair by seed, and the per-seed difference "
            "in mean loss (nats/token; x: the perplexity ratio) gets a 95% t-interval, the "
            "paired t-test and the exact sign-flip test; significant when both reject after "
            "Holm's correction over the table (below 6 seeds the sign-flip test cannot "
            "reject). Every run scores the same held-out windows, so each seed's two "
            "checkpoints also pair window by window: that Wilcoxon p describes those runs "
            "only. Budgets: " + budget_line(results) + ".",
            "",
            tests_table(results),
            "",
            "## Findings against the literature",
            "",
            peng_finding(results),
            chen_finding(results),
            "",
            *(left if left_out else []),
        ]
    )


def budget_line(results: list[Result]) -> str:
    """The training tokens of each kind of arm (steps x batch x training length, the mean over
    its runs, a fine-tuned run's parent included), e.g. ``'from scratch 2,457,600 tokens,
    fine-tuned 2,457,600 (parent + fine-tuning)'``; unequal budgets are named."""
    original, groups = grouped(results)
    tokens: dict[str, list[int]] = {}
    parents = {r["seed"]: r for r in results if role(r, original)[0] == "as trained"}
    for (kind, _), runs in groups.items():
        if kind not in ("fine-tuned", "from scratch"):
            continue
        for seed, run in runs.items():
            own = _tokens(run)
            if kind == "fine-tuned":
                own = None if seed not in parents or own is None else own + _tokens(parents[seed])
            if own is not None:
                tokens.setdefault(kind, []).append(own)
    means = {kind: round(sum(v) / len(v)) for kind, v in tokens.items()}
    if not means:
        return "not recorded (no fine-tuned or from-scratch run records its steps and batch)"
    text = ", ".join(f"{kind} {value:,} tokens" for kind, value in means.items())
    if len(set(means.values())) > 1:
        return text + " (UNEQUAL: the from-scratch comparison is not at an equal budget)"
    return text + " (equal)"


def _tokens(result: Result) -> int | None:
    """Training tokens of one run, or None when its record lacks the train section."""
    train = result["config"].get("train")
    if not train:
        return None
    steps = result.get("train_steps") or train["steps"]
    return steps * train["batch_size"] * result["train_lengths"][1]


CSV_FIELDS = ("run", "kind", "rule", "seed", "length", "multiple", "perplexity")
CSV_FIELDS += ("perplexity_low", "perplexity_high", "loss", "windows", "parent")


def results_csv(results: list[Result]) -> str:
    """One row per run and supported length: :data:`CSV_FIELDS`; an empty cell where a figure
    is null (an interval from too few windows)."""
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
                        "" if row[k] is None else f"{row[k]:.6g}"  # too few windows: no interval
                        for k in ("perplexity", "perplexity_low", "perplexity_high", "loss")
                    ]
                    + [row["windows"], (run.get("parent") or {}).get("run", "")]
                )
    return out.getvalue()


REPORT_NAME, CSV_NAME, _, FIGURE_NAME = STUDY_NAMES
"""File name of the study's figure (:mod:`lab.lm.extend_figure`) in its folder and in
``docs/results/lm-extend/``."""
FIGURE_LINE = "![perplexity against evaluation length, every arm]({link})"
"""The Markdown line that shows the study's figure."""


def write_extend_report(results: list[Result], out_dir: str | Path) -> dict[str, Path]:
    """Write ``extend_report.md``, ``extend_results.csv`` and the figure
    (:func:`lab.lm.figures.write_extend_figure`, ``perplexity_vs_length.png``, shown at
    the top of the report) into ``out_dir``; returns the paths by name (``"figure"`` absent
    when no arm has a length to draw)."""
    from lab.lm.figures import write_extend_figure  # matplotlib: a slow import

    out_dir = Path(out_dir)
    paths = {}
    kept, _ = consistent(results)
    with contextlib.suppress(ValueError):  # no arm has a length to draw; the tables say why
        paths["figure"] = write_extend_figure(*grouped(kept), out_dir / FIGURE_NAME)
    text = "# Extend, then fine-tune\n\n"
    if "figure" in paths:
        text += FIGURE_LINE.format(link=FIGURE_NAME) + "\n\n"
    text += report_text(results)
    paths["report"] = atomic_write(out_dir / REPORT_NAME, text)
    paths["csv"] = atomic_write(out_dir / CSV_NAME, results_csv(kept))
    return paths


def write_no_parent_report(out_dir: str | Path, parents: dict[str, str]) -> Path:
    """Write ``extend_report.md`` saying that no parent finished, so nothing is compared
    (``parents``: each parent's name -> why it did not finish), and an ``extend_results.csv``
    of its header alone (no figure); returns the report's path."""
    out_dir = Path(out_dir)
    lines = ["# Extend, then fine-tune", "", NO_PARENT + ":", ""]
    lines += [f"- {name}: {why}" for name, why in parents.items()]
    atomic_write(out_dir / "extend_results.csv", ",".join(CSV_FIELDS) + "\n")
    return atomic_write(out_dir / "extend_report.md", "\n".join([*lines, ""]))


NO_PARENT = (
    "No parent finished, so there is nothing to compare (every arm is measured against them)"
)
"""The first line of a study's report when none of its parents finished."""

COMMAND = "python sweep.py --extend-study configs/lm_extend.yaml"


def lm_extend_page(
    folder: Path, publish: str, note: str = "", command: str = f"`{COMMAND}`"
) -> str:
    """``docs/results/lm-extend.md`` from the committed ``folder`` (``results.json``: the
    study's eval.json dicts; ``sweep.json`` when there is one), as the pages of
    :mod:`lab.reporting.pages` are made: title, the do-not-edit line naming ``publish``, the
    command, runs, seeds, wall time and machine, the figure (:data:`FIGURE_NAME`, when
    ``folder`` has it), then :func:`report_text` and the files of ``folder`` among
    ``report.md``, ``results.csv``, ``results.json`` and ``sweep.json``;
    ``note`` (how the files were made, where they do not say) follows the provenance line,
    which begins with ``command`` (the recorded one, in backticks, or why there is none)."""
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
    shown = FIGURE_LINE.format(link=f"{folder.name}/{FIGURE_NAME}")
    figure = [shown, ""] if (folder / FIGURE_NAME).is_file() else []
    return "\n".join(
        [
            "# Extend, then fine-tune: RoPE extension rules on text",
            "",
            f"<!-- generated by `{publish}`; do not edit -->",
            "",
            f"{command}: {len(results)} evaluations, seed(s) {seeds}{where}."
            + (f" {note}" if note else ""),
            "",
            *figure,
            report_text(results),
            "Files: " + ", ".join(f"[{n}]({folder.name}/{n})" for n in names) + ".",
            "",
        ]
    )
