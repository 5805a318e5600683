"""Benchmarks: each prints its figures and ratios against an in-process baseline."""
