"""Cost of a daemon's small passes as its files grow: one in-process pass per append.

Four session files grow by ten requests (three streaming lines and a tool
result each, as bench.load writes them) between passes; each pass reads the
named files and commits what is new, as the daemon's follower does. The cost of
a pass should follow the batch, not the history: the bench prints the median
pass time over the first and the last 50 passes, and the slowest.

Usage: python3 -m bench.passes [--passes 400] [--same-timestamp]
Prints one JSON document. CPU-bound and in-process: steadier than bench.load
on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.load import _now_iso, _request_lines
from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger
from exporter.projections.metrics import MetricsOptions
from exporter.projections.pricing import RateTable

PER_PASS = 10  # requests appended between two passes


def run(passes: int = 400, *, same_time: bool = False) -> dict[str, Any]:
    """Append and pass ``passes`` times; the pass times (ms)."""
    work = Path(tempfile.mkdtemp(prefix="bench-passes-"))
    try:
        live = work / "projects" / "-home-u-load"
        live.mkdir(parents=True)
        files = [live / f"load-{i}.jsonl" for i in range(4)]
        for f in files:
            f.touch()
        ledger = Ledger(work / "state" / "ledger.sqlite3",
                        rules=MetricsOptions().counting(RateTable.load()))
        scanner = Scanner(ledger, [work / "projects"], workers=1,
                          on_applied=lambda _applied: None)  # as the daemon: batches watched
        payload = "log line with some text " * 80
        named = [str(f) for f in files]
        times: list[float] = []
        n = 0
        for _ in range(passes):
            handles = [f.open("ab") for f in files]
            for _ in range(PER_PASS):
                handles[n % 4].write(_request_lines(n, payload, None if same_time else _now_iso()))
                n += 1
            for fh in handles:
                fh.close()
            started = time.perf_counter()
            scanner.scan(paths=named)
            times.append(time.perf_counter() - started)
        assert ledger.count() == n, "every appended request counted once"
        ledger.close()
        head, tail = times[:50], times[-50:]
        return {"passes": passes, "requests": n, "same_timestamp": same_time,
                "first_50_median_ms": round(statistics.median(head) * 1000, 1),
                "last_50_median_ms": round(statistics.median(tail) * 1000, 1),
                "max_ms": round(max(times) * 1000, 1)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    """Command line: run once and print the figures as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passes", type=int, default=400)
    ap.add_argument("--same-timestamp", action="store_true",
                    help="every request at one fixed time (bench.load's older workload)")
    args = ap.parse_args()
    print(json.dumps(run(args.passes, same_time=args.same_timestamp), indent=2))


if __name__ == "__main__":
    main()
