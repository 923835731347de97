"""Statistics: intervals of one figure, seed-level comparisons between schemes, and the
three-valued verdicts decided by intervals."""
