"""Smoke tests: a sweep file with ``smoke: true`` (``configs/quick.yaml``,
``configs/lm_quick.yaml``, ``configs/suite_quick.yaml``) checks that the pipeline runs end to
end on models trained too briefly to answer anything, so its reports carry this note in place
of their significance tests and findings against the literature."""

SMOKE_NOTE = (
    "**Smoke test** (`smoke: true` in its sweep file): short training and small evaluation "
    "sets check that the pipeline runs end to end. Its models are undertrained, so this report "
    "tests no differences between schemes and gives no findings against the literature."
)
"""The line a smoke sweep's reports and console output carry instead of verdicts."""
