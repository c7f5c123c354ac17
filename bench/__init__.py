"""Benchmarks: each workload measures ours and a baseline in the same run."""
