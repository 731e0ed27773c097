"""Warm `report` views against the summary on a generated heavy month, alternating runs.

Usage: python3 -m bench.report_views [--mb 300] [--repeat 5] [--year 12]

Prints a Markdown table for docs/benchmarks.md: each command run as a process
(wall, CPU, peak RSS; runs alternate so machine noise hits all alike), and the
figures alone in-process (the SQL and folding, without start-up and ingest).
``--year N`` then repeats it on the month's ledger with its requests copied N
times, a month apart (new keys and sessions, slots rebuilt): the report's side
of a year of history without generating a year (bench.year does that whole).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import Run, exporter_cmd, machine, measure, month_tree, tree_size

VIEWS = ("", "daily", "weekly", "monthly", "session", "project", "blocks")


def run_alone(cmd: list[str]) -> Run:
    """Measure one run; its peak RSS from GNU time when there is one.

    ``ru_maxrss`` of children is the largest child so far, here the cold ingest,
    so each warm run's own peak comes from ``/usr/bin/time -f %M`` instead.
    """
    gnu_time = shutil.which("time") or "/usr/bin/time"
    if not Path(gnu_time).exists():
        return measure(cmd)
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([gnu_time, "-f", "peak-rss-kb %M", *cmd], check=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rss = next(int(line.split()[1]) for line in proc.stderr.splitlines()[::-1]
               if line.startswith("peak-rss-kb"))
    return Run(wall, cpu, rss / 1024)


def _median(runs: list[Run]) -> Run:
    return Run(statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs),
               max(r.rss_mb for r in runs))


def in_process(tree: Path, state: Path, repeat: int) -> dict[str, float]:
    """Median seconds of the figures alone (no start-up, no ingest) per view."""
    from exporter.cli import report_command as report_cli
    from exporter.ingest.discover import projects_dirs
    from exporter.ledger.store import Ledger
    from exporter.projections import figures, views
    from exporter.projections.class_prices import ClassPrices
    from exporter.projections.periods import UTC_ZONE, Range
    from exporter.projections.pricing import RateTable

    ledger = Ledger(state / "ledger.sqlite3")
    prices = ClassPrices.of(RateTable.load())
    args = argparse.Namespace(project=[], model=[], source=[])
    sel = report_cli.selection(ledger, projects_dirs([tree]), args, Range(None, None, UTC_ZONE))
    out: dict[str, list[float]] = {v: [] for v in VIEWS}
    for _ in range(repeat):
        for view in VIEWS:
            start = time.perf_counter()
            if view:
                views.build(view, sel, prices, views.Options())
            else:
                figures.summary(sel, prices, kv_bytes_per_token={"mla": 70_272},
                                upload_bytes_per_token=4.0, lines={}, rejected={})
            out[view].append(time.perf_counter() - start)
    ledger.close()
    return {v: statistics.median(t) for v, t in out.items()}


def replicate(ledger: Path, times: int) -> int:
    """Copy the ledger's requests ``times`` times, a month apart; rebuild the slots."""
    from exporter.ledger import slot_sums
    from exporter.sqlite import sqlite3

    db = sqlite3.connect(ledger, isolation_level=None)
    try:
        cols = [r[1] for r in db.execute("PRAGMA table_info(requests)")]
        rest = ", ".join(c for c in cols if c not in ("id", "key", "ts", "session"))
        top = int(db.execute("SELECT max(id) FROM requests").fetchone()[0])
        db.execute("BEGIN")
        for m in range(1, times):
            db.execute(
                f"INSERT INTO requests (id, key, ts, session, {rest}) SELECT id + {m * top}, "
                f"key || '~{m}', ts + {m * 31 * 86400}, session || '~{m}', {rest} "
                f"FROM requests WHERE id <= {top}")
        slot_sums.rebuild(db)
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # as a ledger at rest, not mid-burst
        return int(db.execute("SELECT count(*) FROM requests").fetchone()[0])
    finally:
        db.close()


def measure_views(tree: Path, state: Path, repeat: int) -> tuple[dict[str, Run], dict[str, float]]:
    """Alternating warm runs of every view as processes, then the figures alone."""
    base = ("report", "--json", "--data-dir", str(tree), "--state-dir", str(state))
    runs: dict[str, list[Run]] = {v: [] for v in VIEWS}
    for _ in range(repeat):
        for view in VIEWS:  # alternating: every view sees the same noise
            runs[view].append(run_alone(exporter_cmd(*base, *((view,) if view else ()))))
    return {v: _median(r) for v, r in runs.items()}, in_process(tree, state, repeat)


def table(title: str, runs: dict[str, Run], figures_only: dict[str, float]) -> None:
    """One Markdown table of the runs."""
    summary = runs[""]
    print(f"{title}\n")
    print("| command | wall s | CPU s | peak RSS MB | figures alone s | wall vs summary |")
    print("|---|---:|---:|---:|---:|---:|")
    for view in VIEWS:
        r = runs[view]
        name = f"report {view} --json" if view else "report --json (summary)"
        print(f"| {name} | {r.wall:.2f} | {r.cpu:.2f} | {r.rss_mb:.0f} | "
              f"{figures_only[view]:.3f} | {r.wall / summary.wall:.2f}× |")
    print()


def main() -> None:
    """Generate (once), ingest once, then alternate warm runs of every view."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--year", type=int, default=0, help="also on the ledger copied N times")
    args = ap.parse_args()
    tree = month_tree(args.mb)
    size, files = tree_size(tree)
    state = Path(tempfile.mkdtemp(prefix="bench-views-"))
    try:
        cold = measure(exporter_cmd("report", "--json", "--data-dir", str(tree), "--state-dir",
                                    str(state)))
        month = measure_views(tree, state, args.repeat)
        year = None
        if args.year > 1:
            requests = replicate(state / "ledger.sqlite3", args.year)
            year = (requests, measure_views(tree, state, args.repeat))
    finally:
        shutil.rmtree(state)
    print(f"Machine: {machine()}")
    print(f"Tree: {size / 1e6:.0f} MB in {files} files (seed 42); cold ingest {cold.wall:.2f} s;"
          f" median of {args.repeat} alternating warm runs\n")
    table("One heavy month:", *month)
    if year is not None:
        table(f"Its requests copied {args.year}× a month apart ({year[0]:,} requests):", *year[1])


if __name__ == "__main__":
    main()
