"""Benchmarks: `python -m benchmarks.run_all` runs them all and prints the table of docs/benchmarks.md."""
