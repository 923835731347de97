"""Every file the project writes into a run, sweep or study folder.

The writers take their file names from here (the trainer, ``eval.json`` and a run's passkey
heatmap, the cross-run reports of both kinds, ``sweep.json``, the extend study's report), and so
does ``--overwrite`` (:func:`lab.common.checkpoint.run_files`), which deletes a file only when
its content proves it the project's (:func:`is_ours`): a user's ``report.md``, a PNG not drawn
by matplotlib or a JSON file named ``eval.json`` that is no evaluation stays.
"""

from __future__ import annotations

import json
from pathlib import Path

CHECKPOINT_NAME = "checkpoint.pt"
CONFIG_NAME = "config.yaml"
EVENTS = "events.out.tfevents.*"
EVAL_NAME = "eval.json"
HEATMAP_NAME = "passkey.png"
"""A run's passkey heatmap, beside its ``eval.json`` (:mod:`lab.lm.passkey_figure`)."""
SWEEP_JSON = "sweep.json"
"""A sweep's (or study's) timing and provenance (:func:`lab.sweeps.summary.write_timing`)."""

PNG = (b"\x89PNG\r\n\x1a\n", b"tEXtSoftware\x00Matplotlib")
"""How a figure the project drew begins, and what its first 4 KiB hold."""
PASSKEY_FIGURE = "passkey_grid.png"
ATTENTION_FIGURE = "attention_vs_length.png"
SYNTHETIC_REPORT_NAMES = (
    "results.csv",
    "results.json",
    "report.md",
    "accuracy_vs_length.png",
    "learning_speed.png",
    "order_sensitivity.png",
    PASSKEY_FIGURE,
    ATTENTION_FIGURE,
)
"""The synthetic runs' cross-run report (:func:`lab.reporting.report.write_synthetic_reports`;
the passkey heatmaps only when a run holds a passkey grid, the attention figure only when a run
holds diagnostics)."""
LM_REPORT_NAMES = (
    "lm_results.csv",
    "lm_results.json",
    "lm_report.md",
    "perplexity_vs_length.png",
    "loss_vs_position.png",
)
"""The language-model runs' cross-run report (:func:`lab.lm.report.write_lm_reports`)."""
STUDY_NAMES = ("extend_report.md", "extend_results.csv", "results.json", "perplexity_vs_length.png")
"""The extend study's report (:func:`lab.lm.extend_report.write_extend_report`)."""

REPORT_FILES: dict[str, tuple[bytes, bytes]] = {
    "report.md": (b"# Evaluation report\n", b""),
    "results.csv": (b"run,position,task,seed,length,", b""),
    "results.json": (b"[", b'"schema_version"'),
    "lm_report.md": (b"# Language-model report\n", b""),
    "lm_results.csv": (b"position,task,seed,length,label,", b""),
    "lm_results.json": (b"[", b'"kind": "lm"'),
    **{name: PNG for name in (*SYNTHETIC_REPORT_NAMES, *LM_REPORT_NAMES) if name.endswith(".png")},
}
"""Every report file ``eval.py RUN`` writes into a run folder (:data:`SYNTHETIC_REPORT_NAMES`,
:data:`LM_REPORT_NAMES`) -> how it begins and what its first 4 KiB hold when the project wrote
it."""
EVALUATION_FILES: dict[str, tuple[bytes, bytes]] = {HEATMAP_NAME: PNG}
"""Files an evaluation writes beside its ``eval.json`` (in a run folder or
``RUN/evaluations/LABEL``) -> their beginning and a needle, as :data:`REPORT_FILES`."""
EVAL_ENVELOPE = {"schema_version": int, "run_dir": str, "config": dict, "lengths": list}
"""Fields every ``eval.json`` the project wrote holds, of every schema version and both kinds
(synthetic and language-model), -> their types."""


def is_ours(path: str | Path) -> bool:
    """``path`` is a regular file (not a link) that the project wrote, by its content: an
    ``eval.json`` parses to an object with :data:`EVAL_ENVELOPE`; a file of
    :data:`REPORT_FILES` or :data:`EVALUATION_FILES` begins as listed there. Any other name:
    False (the callers match the names they write by name, e.g. the trainer's)."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return False
    envelope = {EVAL_NAME: EVAL_ENVELOPE}.get(path.name)
    if envelope is not None:
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and all(
            isinstance(data.get(key), kind) and not isinstance(data.get(key), bool)
            for key, kind in envelope.items()
        )
    signature = REPORT_FILES.get(path.name) or EVALUATION_FILES.get(path.name)
    if signature is None:
        return False
    start, needle = signature
    try:
        with path.open("rb") as file:
            head = file.read(4096)
    except OSError:
        return False
    return head.startswith(start) and needle in head
