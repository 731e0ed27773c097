"""A short, bounded run of bench/load.py: concurrent scrapers during a high line rate."""

from __future__ import annotations

from pathlib import Path

from bench.load import run


def test_scrapers_and_fast_appends_together(tmp_path: Path) -> None:
    """12 scrapers for 4 s while ~2000 lines/s are appended: no errors, totals exact.

    Latency figures are reported by `python3 -m bench.load` (docs/reliability.md),
    not asserted here: timing goals live in benchmarks.
    """
    figures = run(seconds=4.0, scrapers=12, rate=2000.0, files=3, work=tmp_path)
    assert figures["scrape_errors"] == 0, figures["error_samples"]
    assert figures["exact_totals"] is True
    assert figures["exit_code"] == 0
    assert figures["scrapes"] >= 100
    assert figures["lines_per_s"] >= 500  # the writer really kept up a load
    # The latency was measured at least once during the run (how many batches show up
    # while it lasts depends on the machine's speed: a timing figure, for bench.load).
    assert figures["visible_ms"]["samples"] >= 1
