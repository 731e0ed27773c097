"""Benchmarks: run as modules, e.g. `python3 -m bench.cold_scan`."""
