"""Why a scheme fails past its training length: attention statistics, solver-guided alignment
and failure modes, measured at every evaluated length (docs/diagnostics.md)."""
