"""Pieces of benchmark/bench_serving.py: datasets, the HTTP client, the runner, metrics, plots."""
