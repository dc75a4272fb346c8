"""Benchmarks; results land in bench/results/."""
