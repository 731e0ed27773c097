"""Backfill sizes: the file, its samples, promtool's time and the blocks, held vs dense anchors.

    python -m bench.backfill sparse   # 10 sessions spread over fourteen months
    python -m bench.backfill heavy    # the generated heavy month (bench.common.month_tree)

For each history it writes the file twice (anchors only near changes, the
default; anchors everywhere, the previous output), runs promtool once on each
file with ``--max-block-duration=744h``, times ``write_blocks`` (chunked, one
promtool run per block), and prints a Markdown row per variant. The dense
promtool run is skipped with ``--no-dense-promtool`` (it is the slow part).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import OUT, machine, month_tree
from exporter.ingest.discover import projects_dirs
from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger
from exporter.projections.backfill import BackfillOptions, write_blocks, write_history
from exporter.projections.metrics import MetricsOptions
from exporter.projections.pricing import RateTable
from exporter.synth import GenOptions, generate

SPARSE_FIRST = datetime(2025, 9, 27, tzinfo=UTC)
SPARSE_UNTIL = datetime(2026, 11, 27, tzinfo=UTC)


def sparse_trees(sessions: int = 10) -> list[Path]:
    """One generated session per tree, spread evenly from 2025-09-27 over fourteen months."""
    span = (SPARSE_UNTIL - SPARSE_FIRST) / sessions
    roots = []
    for i in range(sessions):
        root = OUT / f"sparse-{sessions}-{i}"
        if not (root / "truth.json").exists():
            generate(root, GenOptions(seed=100 + i, sessions=1,
                                      start=SPARSE_FIRST + i * span + timedelta(hours=9)))
        roots.append(root)
    return roots


def ledger_of(trees: list[Path], state: Path, pricing: RateTable) -> Ledger:
    """A ledger of ``trees`` (kept in ``state`` between runs)."""
    state.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(state / "ledger.sqlite3", rules=MetricsOptions().counting(pricing))
    Scanner(ledger, projects_dirs(trees), workers=1).scan()
    ledger.settle(force=True)
    return ledger


def du(path: Path) -> int:
    """Bytes under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def promtool_time(promtool: str, file: Path, blocks: Path) -> float:
    """Seconds promtool takes to turn ``file`` into blocks (744h, as docs/backfill.md says)."""
    start = time.perf_counter()
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                    "--max-block-duration=744h", str(file), str(blocks)], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def run(name: str, trees: list[Path], until: float | None, dense_promtool: bool) -> None:
    """Measure one history, both variants, and print the rows."""
    pricing = RateTable.load()
    promtool = shutil.which("promtool")
    ledger = ledger_of(trees, OUT / f"state-{name}", pricing)
    try:
        requests = ledger.requests()
    finally:
        ledger.close()
    now = until if until is not None else requests[-1].ts + 3600
    print(f"{name}: {len(requests)} requests, {machine()}")
    print("| variant | file | samples | write | promtool (744h) | blocks | --blocks (chunked) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for variant, hold in (("held anchors (default)", BackfillOptions().hold),
                          ("every anchor (before)", None)):
        opts = BackfillOptions(until=now, hold=hold, labels={"job": "claude-code"})
        with tempfile.TemporaryDirectory(prefix="bench-backfill-", dir=OUT) as tmp:
            file = Path(tmp) / "history.om"
            start = time.perf_counter()
            with file.open("w", encoding="utf-8") as out:
                stats = write_history(requests, pricing, MetricsOptions(), out, opts, now=now)
            wrote = time.perf_counter() - start
            size = file.stat().st_size
            prom = blocks = chunked = "—"
            if promtool and (hold is not None or dense_promtool):
                prom = f"{promtool_time(promtool, file, Path(tmp) / 'b1'):.1f} s"
                blocks = f"{du(Path(tmp) / 'b1') / 1e6:.1f} MB"
            file.unlink()
            if promtool and hold is not None:
                start = time.perf_counter()
                write_blocks(requests, pricing, MetricsOptions(), Path(tmp) / "b2", opts,
                             promtool=promtool, now=now, workdir=Path(tmp))
                chunked = f"{time.perf_counter() - start:.1f} s"
            print(f"| {variant} | {size / 1e6:.1f} MB | {stats.samples:,} | {wrote:.1f} s "
                  f"| {prom} | {blocks} | {chunked} |")
            sys.stdout.flush()


def main() -> None:
    """Parse the history to measure and print its rows."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("history", choices=["sparse", "heavy"])
    ap.add_argument("--no-dense-promtool", action="store_true")
    args = ap.parse_args()
    if args.history == "sparse":
        run("sparse", sparse_trees(), SPARSE_UNTIL.timestamp(), not args.no_dense_promtool)
    else:
        run("heavy", [month_tree()], None, not args.no_dense_promtool)


if __name__ == "__main__":
    main()
