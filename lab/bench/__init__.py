"""Benchmarks: throughput, MFU and memory per scheme, peer baselines, the blocked path's block
size."""
