"""Reports across runs: per-run files, seed aggregates, significance, findings, figures, the README
block."""
