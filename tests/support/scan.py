"""Scanning transcript trees into ledgers: a counting ledger, a scanner, totals, a killed pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from exporter.ingest.discover import projects_dirs
from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger
from exporter.projections.metrics import MetricsOptions
from exporter.projections.pricing import RateTable
from exporter.records import Request

# totals() of ../shared/fixtures/real, the real transcripts every pass must count exactly
REAL_TOTALS = (529, 3_084, 117_289, 43_960_831, 937_099, 394_137)


def counting_ledger(path: Path) -> Ledger:
    """A ledger keeping rollups by the default counting rules."""
    return Ledger(path, rules=MetricsOptions().counting(RateTable.load()))


def scanner(tree: Path, state: Path, **kw: Any) -> Scanner[Ledger]:
    """A scanner over one tree with its ledger in ``state``."""
    return Scanner(Ledger(state / "ledger.sqlite3"), projects_dirs([tree]), **kw)


def ingest(tree: Path, state: Path) -> Ledger:
    """Scan a generated tree into a fresh ledger (rollups kept, everything settled)."""
    ledger = counting_ledger(state / "ledger.sqlite3")
    Scanner(ledger, projects_dirs([tree]), workers=1).scan()
    ledger.settle(force=True)
    return ledger


def totals(reqs: list[Request]) -> tuple[int, ...]:
    """(requests, input, output, cache read, 5m writes, 1h writes)."""
    return (
        len(reqs),
        sum(r.input for r in reqs),
        sum(r.output for r in reqs),
        sum(r.cache_read for r in reqs),
        sum(r.cache_write_5m for r in reqs),
        sum(r.cache_write_1h for r in reqs),
    )


def killed_pass(tree: Path, state: Path, kill_after: int) -> None:
    """Run a raw pass in a child process and SIGKILL it after ``kill_after`` batches."""
    code = f"""
import os, signal
from pathlib import Path
from exporter.ingest.scan import Scanner
from tests.support.scan import counting_ledger
calls = 0
def progress(done, total):
    global calls
    calls += 1
    if calls == {kill_after}:
        os.kill(os.getpid(), signal.SIGKILL)  # a crash between two committed batches
Scanner(counting_ledger(Path({str(state / 'l.db')!r})), [Path({str(tree / 'projects')!r})],
        workers=1, batch_bytes=1).scan(progress=progress)
raise SystemExit("the pass was not killed")
"""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          timeout=120, check=False)
    assert proc.returncode == -9, proc.stderr.decode()
