"""The landing page's cost after a month and after a year of history, alternating runs.

Usage: python3 -m bench.page [--mb 100] [--months 12] [--repeat 7]

Generates a heavy month ending now, ingests it with `report`, then copies the
ledger and adds ``months - 1`` earlier copies of that month's requests (new
ids, keys and sessions, times shifted by 30 days each) and rebuilds the slots:
the same recent 30 days over a year of history. Measures, in-process and
alternating between the two ledgers, the page's figures alone, the figures plus
rendering (a cache miss) and a cached request through the WSGI handler, priced
with the price table as shipped. Prints a Markdown
table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import exporter_cmd, machine
from exporter.ledger import slot_sums
from exporter.sqlite import sqlite3
from exporter.synth import GenOptions, generate

MONTH = 30 * 86_400


def build(root: Path, mb: int) -> tuple[Path, Path]:
    """A generated month ending about now under ``root/tree``, ingested into ``root/state``."""
    tree, state = root / "tree", root / "state"
    start = (datetime.now(UTC) - timedelta(days=29)).replace(microsecond=0)
    generate(tree, GenOptions(seed=42, sessions=40, requests_per_session=1200, start=start,
                              target_bytes=mb * 1_000_000))
    subprocess.run([*exporter_cmd("report", "--json", "--data-dir", str(tree),
                                  "--state-dir", str(state))],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return tree, state


def extend(src: Path, dst: Path, months: int) -> int:
    """Copy the ledger and prepend ``months - 1`` shifted copies of its requests; the row count."""
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / "ledger.sqlite3", dst / "ledger.sqlite3")
    db = sqlite3.connect(dst / "ledger.sqlite3", isolation_level=None)
    cols = [r[1] for r in db.execute("PRAGMA table_info(requests)")]
    top = db.execute("SELECT max(id) FROM requests").fetchone()[0]
    db.execute("BEGIN")
    for k in range(1, months):
        shifted = {"id": f"id + {k * top}", "key": f"key || '~{k}'", "ts": f"ts - {k * MONTH}",
                   "session": f"session || '~{k}'"}
        select = ", ".join(shifted.get(c, c) for c in cols)
        db.execute(f"INSERT INTO requests ({', '.join(cols)}) SELECT {select} FROM requests "
                   f"WHERE id <= {top}")
    slot_sums.rebuild(db)
    db.execute("COMMIT")
    n: int = db.execute("SELECT count(*) FROM requests").fetchone()[0]
    db.close()
    return n


def measure(tree: Path, state: Path) -> tuple[float, float, float, bool]:
    """Seconds of a first request, of the figures alone and of the next request.

    The first request is figures + HTML (the background rebuild's work). The
    last value says whether whole slots came from the slot sums. Priced with
    the price table as shipped: the ledger's slots are split by every
    long-context threshold in it.
    """
    from exporter.ingest.discover import projects_dirs
    from exporter.ledger.store import Ledger
    from exporter.projections.class_prices import ClassPrices
    from exporter.projections.facts import Facts
    from exporter.projections.periods import UTC_ZONE
    from exporter.projections.pricing import RateTable
    from exporter.serve import page, page_figures

    ledger = Ledger(state / "ledger.sqlite3")
    prices = ClassPrices.of(RateTable.load())
    source = page_figures.LedgerSource(ledger, projects_dirs([tree]), prices, UTC_ZONE,
                                       budgets={"day": 100.0, "month": 2000.0})
    handlers = page.routes(source, "bench", ttl=60.0)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        b"".join(handlers["/"]({"PATH_INFO": "/"}, lambda *a: None))
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    source()
    figures = time.perf_counter() - start
    slotted = Facts(source._base, prices).slotted  # a benchmark looks inside
    ledger.close()
    return times[0], figures, times[1], slotted


def main() -> None:
    """Build both ledgers, measure alternately, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--months", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-page-") as tmp:
        root = Path(tmp)
        tree, month_state = build(root, args.mb)
        year_state = root / "state-year"
        rows = {"month": sqlite3.connect(month_state / "ledger.sqlite3").execute(
            "SELECT count(*) FROM requests").fetchone()[0],
            "year": extend(month_state, year_state, args.months)}
        results: dict[str, list[tuple[float, float, float, bool]]] = {"month": [], "year": []}
        states = {"month": month_state, "year": year_state}
        for _ in range(args.repeat):  # alternate, so machine noise hits every case alike
            for history, runs in results.items():
                runs.append(measure(tree, states[history]))
    print(f"Machine: {machine()}\n")
    print(f"`python3 -m bench.page --mb {args.mb} --months {args.months} "
          f"--repeat {args.repeat}`, medians of {args.repeat} alternating runs:\n")
    print("| history | requests | figures from | page rebuilt (figures + HTML) | figures alone "
          "| request |")
    print("|---|---:|---|---:|---:|---:|")
    for history, runs in results.items():
        miss = statistics.median(r[0] for r in runs)
        alone = statistics.median(r[1] for r in runs)
        hit = statistics.median(r[2] for r in runs)
        where = "slot sums" if all(r[3] for r in runs) else "requests"
        print(f"| {history} | {rows[history]:,} | {where} | {miss * 1000:.0f} ms | "
              f"{alone * 1000:.0f} ms | {hit * 1000:.2f} ms |")
    ratio = (statistics.median(r[0] for r in results["year"])
             / statistics.median(r[0] for r in results["month"]))
    print(f"\npage rebuilt: year / month = {ratio:.2f}x")


if __name__ == "__main__":
    main()
