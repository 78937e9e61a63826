"""Benchmarks: commands that measure side by side in one run and report ratios."""
