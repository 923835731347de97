"""What a finished sweep leaves: the comparison report, ``sweep.json`` (the command line, wall
time, workers, machine), the TensorBoard mean runs, and the lines it prints (table, counts,
failures, paths)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path

from lab.common.files import atomic_write, file_sha256
from lab.common.machine import describe, machine_info
from lab.common.outputs import REWRITTEN, SWEEP_JSON, UNFINISHED, essential, is_ours
from lab.stats.verdicts import SMOKE_NOTE


def report(
    records: list[dict],
    out_dir: Path,
    seconds: float,
    workers: int = 1,
    smoke: bool = False,
    command: str | None = None,
    sweep_file: dict[str, str] | None = None,
) -> int:
    """Write the comparison report and ``sweep.json`` (:func:`write_timing`: ``command``, the
    sweep file, the wall time, workers, machine), print the table, the "where it fails" lines,
    which findings it could decide (none for a ``smoke`` sweep:
    :data:`lab.stats.verdicts.SMOKE_NOTE` instead) and where everything is.

    Returns:
        0, or 1 when a run failed or was stopped on its own (a signal sent to one worker), or
        a report file could not be written: such runs are named, never left out silently.
    """
    from lab.diagnostics.report import diagnosed, where_it_fails_lines
    from lab.lm.report import lm_summary_table
    from lab.reporting.findings import decided_line
    from lab.reporting.tables import summary_table

    results = result_records(records)
    timing = {"seconds": seconds, "workers": workers, "smoke": smoke, "command": command}
    timing["sweep_file"] = sweep_file
    paths, unwritten = _write(records, results, out_dir, timing)
    synthetic = [r for r in results if r.get("kind") != "lm"]
    lm = [r for r in results if r.get("kind") == "lm"]
    print()
    if synthetic:
        print(summary_table(synthetic, out_dir))
    if diagnosed(synthetic):
        print("\nWhere it fails (docs/diagnostics.md):", *where_it_fails_lines(synthetic), sep="\n")
    if synthetic:
        print(f"\n{SMOKE_NOTE.replace('**', '') if smoke else decided_line(synthetic)}")
    if lm:
        print(lm_summary_table(lm, out_dir))
    failed = _print_counts(records, seconds)
    for name, path in paths.items():
        print(f"{name}: {path}")
    if unwritten:
        print(unwritten, file=sys.stderr)
    print(*tensorboard_lines(out_dir, "tensorboard_means" in paths), sep="\n")
    return 1 if failed or unwritten else 0


def tensorboard_lines(out_dir: Path, means: bool) -> list[str]:
    """Where the sweep's TensorBoard runs are: the comparison in ``out_dir`` (the mean runs,
    when ``means`` says they were written, and the figures) with the link that opens it, and
    the runs' own, one task at a time, beside it (:func:`lab.common.events.place.runs_root`)."""
    from lab.common.checkpoint import EVENTS
    from lab.common.events.place import runs_root
    from lab.reporting.sweep_tensorboard import tensorboard_url

    lines = [f"TensorBoard: tensorboard --logdir {shlex.quote(str(out_dir))}"]
    if means:
        lines[0] += "   (the comparison: a run per scheme, mean over seeds, and the figures)"
        lines.append(f"  its charts, smoothing 0: {tensorboard_url()}")
    root = Path(runs_root(out_dir))
    if not os.path.relpath(root).startswith(".."):  # as the user named out_dir: runs/x-runs
        root = Path(os.path.relpath(root))
    tasks = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    tasks = [t for t in tasks if any((root / t).rglob(EVENTS))]
    if tasks:
        lines.append(
            f"  each run (every seed), one task at a time: tensorboard --logdir "
            f"{shlex.quote(str(root))}/TASK, TASK one of: {', '.join(tasks)}"
        )
        lines.append(
            f"  all of them at once: tensorboard --logdir {shlex.quote(str(root))} "
            "(read them in Time Series: Scalars selects no run past 40)"
        )
    return lines


def _write(
    records: list[dict], results: list[dict], out_dir: Path, timing: dict
) -> tuple[dict[str, Path], str | None]:
    """Write the report files, ``sweep.json`` (``timing``: the keywords of
    :func:`write_timing`) and the TensorBoard mean runs of ``results`` (of the synthetic runs:
    a language-model run's curves are in its own folder).

    Returns:
        ``(paths, unwritten)``: what was written, by name, and the one-line error of what could
        not be (a folder or link planted in ``out_dir`` since the sweep began), else None.
    """
    from lab.reporting.report import write_reports
    from lab.reporting.sweep_tensorboard import write_sweep_tensorboard

    paths, unwritten = {}, None
    try:
        paths = write_reports(results, out_dir, timing["smoke"]) if results else {}
    except (OSError, ValueError) as error:
        unwritten = f"error: the report was not written: {error}"
    synthetic = [r for r in results if r.get("kind") != "lm"]
    if results and not unwritten:
        paths["timing"] = write_timing(records, out_dir, **timing, files=list(paths.values()))
    if synthetic and not unwritten:
        try:
            paths["tensorboard_means"] = write_sweep_tensorboard(synthetic, out_dir)
        except (OSError, ValueError) as error:
            unwritten = f"error: the TensorBoard mean runs were not written: {error}"
    return paths, unwritten


def _print_counts(records: list[dict], seconds: float) -> bool:
    """Print the runs by status and name each failed or interrupted one (on stderr).

    Returns:
        Whether any run failed or was interrupted.
    """
    failed = [r for r in records if r["status"] == "failed"]
    stopped = [r for r in records if r["status"] == "interrupted"]
    count = {s: sum(r["status"] == s for r in records) for s in ("trained", "evaluated", "skipped")}
    print(
        f"\n{count['trained']} run(s) trained, {count['evaluated']} only re-evaluated, "
        f"{count['skipped']} skipped (already finished), {len(failed)} failed, "
        f"{len(stopped)} interrupted, in {seconds / 60:.1f} min"
    )
    for record in failed:
        print(f"FAILED {record['name']}: {record['error']}", file=sys.stderr)
    for record in stopped:
        print(
            f"INTERRUPTED {record['name']}: its worker was stopped; a checkpoint was saved and "
            "the same command resumes it",
            file=sys.stderr,
        )
    return bool(failed or stopped)


def result_records(records: list[dict]) -> list[dict]:
    """The evaluation records of a sweep's or study's run records, in order: a run's
    ``results`` (one per evaluation) or its one ``result``; a run without any gives none. What
    ``results.json`` holds, and what ``sweep.json``'s ``results`` counts."""
    return [x for r in records for x in r.get("results") or [r.get("result")] if x is not None]


def record_counts(results: list[dict]) -> dict[str, int]:
    """How many of ``results`` are exact-match records (``synthetic``: a sweep's
    ``results.json``) and language-model ones (``lm``: its ``lm_results.json``, or a study's
    ``results.json``); publishing checks a results file's records against them
    (:func:`lab.reporting.readme.check_runs_counted`), so a record dropped is never missed."""
    lm = sum(r.get("kind") == "lm" for r in results)
    return {"synthetic": len(results) - lm, "lm": lm}


def write_timing(
    records: list[dict],
    out_dir: Path,
    seconds: float,
    workers: int,
    smoke: bool = False,
    command: str | None = None,
    files: Iterable[Path] = (),
    sweep_file: dict[str, str] | None = None,
) -> Path:
    """Write ``OUT_DIR/sweep.json``: the command line that made the sweep (``command``, e.g.
    ``python sweep.py --config configs/lm_quick.yaml``; null when not given), the sweep
    file's path and SHA-256 (``sweep_file``), wall time, workers, runs by status, evaluation
    records (``results``: :func:`record_counts`), the SHA-256 of each report file this pass
    wrote (``files``: publishing checks them and ``sweep_file``), the machine, and ``"smoke":
    true`` for a smoke sweep.

    A pass that skipped every run (a re-run of a finished sweep) keeps the ``sweep.json``
    already there, when the project wrote it for the same command (:func:`same_command`): its
    wall time stays the one of the pass that trained; only the digests of the reports it
    rewrote are new (and a mark of ``eval.py`` having rewritten them is dropped). A pass that
    trained nothing but re-evaluated (its own command or another's eval.* values) keeps the
    training pass's time and machine too (:func:`training_pass`), adds its own under
    ``reevaluated`` and names the training's command (``trained_by``). A stopped pass writes
    its counts too, so the pass that goes on adds its time (:func:`unfinished_pass`).
    Another command's pass that skipped every run writes its own counts, which publishing
    refuses as no result (:func:`lab.reporting.readme.check_complete`). A pass where a run
    failed or was stopped always writes its counts, so the reports it rewrote without that
    run are never published as the whole sweep.
    """
    path = out_dir / SWEEP_JSON
    digests = {Path(f).name: file_sha256(f) for f in files}
    statuses = {r["status"] for r in records}
    if records and statuses == {"skipped"} and same_command(path, command):
        kept = {k: v for k, v in json.loads(path.read_text()).items() if k != REWRITTEN}
        return atomic_write(path, json.dumps(kept | {"files": digests}, indent=2) + "\n")
    earlier = unfinished_pass(path, command)
    trained = reevaluation_of(path, statuses, earlier)
    info = machine_info()
    timing = {
        "command": command,
        "seconds": round(seconds + (earlier["seconds"] if earlier else 0), 1),
        "workers": workers,
        "runs": {s: sum(r["status"] == s for r in records) for s in statuses},
        "results": record_counts(result_records(records)),
        "files": digests,
        "sweep_file": sweep_file,
        "machine": describe(info),
        "machine_info": info,
    }
    if trained:  # the time and machine of the training, and this pass's beside them
        before = (trained.get("reevaluated") or {}).get("seconds", 0) if earlier else 0
        timing |= {k: trained[k] for k in TRAINING_KEYS if k in trained}
        timing["reevaluated"] = {"seconds": round(seconds + before, 1), "machine": describe(info)}
        timing["trained_by"] = trained.get("trained_by", trained.get("command"))
    elif earlier:
        timing["passes"] = earlier.get("passes", 1) + 1
    if smoke:
        timing["smoke"] = True
    return atomic_write(path, json.dumps(timing, indent=2) + "\n")


TRAINING_KEYS = ("seconds", "workers", "machine", "machine_info", "passes")
"""What a re-evaluating pass keeps of the pass that trained the runs (:func:`write_timing`)."""


def reevaluation_of(path: Path, statuses: set[str], earlier: dict | None) -> dict | None:
    """The ``sweep.json`` whose training time a pass of ``statuses`` keeps, when that pass
    re-evaluates runs (or was stopped doing so) and trains none, and does not go on with a
    stopped training (``earlier`` without ``trained_by``: its time adds up instead); else None
    (:func:`training_pass`)."""
    evaluating = statuses & {"evaluated", "cancelled", "interrupted"}
    if not evaluating or statuses & {"trained", "failed"}:
        return None
    if earlier is not None and not earlier.get("trained_by"):
        return None
    return training_pass(path)


def training_pass(path: Path) -> dict | None:
    """The ``sweep.json`` at ``path`` when the project wrote it for a pass that trained the
    runs, or for one that kept such a pass's time (``trained_by``: a re-evaluation, finished
    or stopped): a pass that only re-evaluates them, under its own command or another's
    eval.* values, keeps that time and machine; else None."""
    if not is_ours(path):
        return None
    earlier = json.loads(path.read_text())
    runs = earlier.get("runs") or {}
    return earlier if runs.get("trained") or earlier.get("trained_by") else None


def same_command(path: Path, command: str | None) -> bool:
    """``path`` is a ``sweep.json`` the project wrote for ``command`` (how it ran aside,
    :func:`lab.common.outputs.essential`: a sweep folder moved or copied, run with other
    workers or retrained with ``--overwrite`` is the same sweep): a pass of that command that
    skipped every run keeps it (and its wall time)."""
    if not is_ours(path):
        return False
    saved = json.loads(path.read_text()).get("command")
    return (
        saved == command or None not in (saved, command) and essential(saved) == essential(command)
    )


def unfinished_pass(path: Path, command: str | None) -> dict | None:
    """The ``sweep.json`` at ``path`` when the project wrote it for a pass of ``command`` that
    did not finish (a run of it :data:`UNFINISHED`): the pass being written goes on with it, so
    its seconds (and ``passes``) carry over, and a sweep stopped and resumed states the time
    of every pass, not the last one's; else None."""
    if not is_ours(path):
        return None
    earlier = json.loads(path.read_text())
    runs = earlier.get("runs") or {}
    if earlier.get("command") != command or not any(runs.get(s) for s in UNFINISHED):
        return None
    return earlier


def mark_rewritten(out_dir: Path, command: str) -> None:
    """Record in ``out_dir``'s ``sweep.json`` (when the project wrote one there) that
    ``command`` rewrote the folder's reports, perhaps under other evaluation settings than the
    sweep's command names; nothing when there is none."""
    path = out_dir / SWEEP_JSON
    if is_ours(path):
        timing = json.loads(path.read_text())
        atomic_write(path, json.dumps(timing | {REWRITTEN: command}, indent=2) + "\n")
