"""Sweeps: expanding a grid, running each run in its own worker process or as a cluster job."""
