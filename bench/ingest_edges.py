"""Cost of round 3's ingest checks on a generated month: rescans, appends, a touched file.

The checks measured: the running CRC-32 kept with every checkpoint (a cold
pass computes it over every byte; an append over its own bytes), the full
CRC check of a file whose size stayed and whose mtime moved, the walk that
follows symlinks (a stat per directory), the search for lone surrogate
escapes (two byte searches per batch) and the look for lines ahead of the
clock (only when a batch has a ``bad_timestamp``).

Usage: python3 -m bench.ingest_edges [--mb 300] [--repeat 7] [--appends 60]
Prints one JSON document: the cold pass's wall and CPU time (its parser
processes included), and the medians of this process's CPU time (ms) for
the rest.
Run it with ``PYTHONPATH`` at another checkout to measure that code the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import month_tree
from bench.load import _now_iso, _request_lines
from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _timed(fn: Any) -> float:
    """CPU seconds of this process for one call (steadier than wall time on a shared machine)."""
    started = time.process_time()
    fn()
    return time.process_time() - started


def _cpu_with_children() -> float:
    """CPU seconds of this process and of its children that have ended."""
    mine, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + kids.ru_utime + kids.ru_stime


def run(mb: int, repeat: int, appends: int) -> dict[str, Any]:
    """Copy the month, pass over it cold, then time rescans, appends and a touched file."""
    work = Path(tempfile.mkdtemp(prefix="bench-edges-"))
    try:
        tree = work / "tree"
        shutil.copytree(month_tree(mb) / "projects", tree / "projects")
        ledger = Ledger(work / "state" / "ledger.sqlite3")
        scanner = Scanner(ledger, [tree / "projects"], on_applied=lambda _applied: None)
        started, cpu = time.perf_counter(), _cpu_with_children()
        scanner.scan()  # parsed in worker processes (children, reaped by the pass's end)
        cold, cold_cpu = time.perf_counter() - started, _cpu_with_children() - cpu
        files = sorted(tree.rglob("*.jsonl"), key=lambda p: p.stat().st_size)
        rescans = [_timed(scanner.scan) for _ in range(repeat)]
        walks = [_timed(scanner.files) for _ in range(repeat)]
        live, payload = files[len(files) // 2], "log line with some text " * 80
        append_times = []
        for n in range(appends):
            with live.open("ab") as fh:
                fh.write(_request_lines(n, payload, _now_iso()))
            append_times.append(_timed(lambda: scanner.scan(paths=[str(live)])))
        big = files[-1]
        touches = []
        for _ in range(repeat):
            os.utime(big)  # same bytes, a new mtime: checked in full, not re-read
            touches.append(_timed(lambda: scanner.scan(paths=[str(big)])))
        ledger.close()
        return {
            "files": len(files), "mb": round(sum(f.stat().st_size for f in files) / 1e6, 1),
            "cold_pass_wall_ms": _ms(cold), "cold_pass_cpu_ms": _ms(cold_cpu),
            "rescan_unchanged_ms": _ms(statistics.median(rescans)),
            "walk_ms": _ms(statistics.median(walks)),
            "append_event_pass_ms": _ms(statistics.median(append_times)),
            "touched_file_mb": round(big.stat().st_size / 1e6, 1),
            "touched_file_pass_ms": _ms(statistics.median(touches)),
        }
    finally:
        shutil.rmtree(work)


def main() -> None:
    """Parse the flags, run, print JSON."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--appends", type=int, default=60)
    args = ap.parse_args()
    print(json.dumps(run(args.mb, args.repeat, args.appends), indent=2))


if __name__ == "__main__":
    main()
