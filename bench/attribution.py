"""Attribution views and /metrics start-up: the requests' GROUP BY against the day sums.

Usage: python3 -m bench.attribution LEDGER [--work DIR]

LEDGER: a ledger of the heavy month with attribution (``report --json`` over
``GenOptions(seed=42, sessions=40, requests_per_session=1200, attribution=True)``).
Its copy is the month; the year is that copy with its requests copied 11 more
times a month apart (new keys and sessions), opened once by this build (the
slots and the attribution day sums summed, timed). On both, in-process and best
of 3: a view's facts from the rows and from the day sums, and the families'
start-up from both (whole views: ``build``). Prints lines for docs/benchmarks.md "Attribution".
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from exporter.ledger import slots
from exporter.ledger.store import Ledger
from exporter.projections import attribution
from exporter.projections.attributed import Attributed, Names
from exporter.projections.class_prices import ClassPrices
from exporter.projections.periods import UTC_ZONE, Range
from exporter.projections.pricing import RateTable
from exporter.projections.selection import Selection
from exporter.projections.views import Options
from exporter.sqlite import sqlite3

MONTH_S = 30 * 86_400


def best(run: Callable[[], object], n: int = 3) -> float:
    """The fastest of ``n`` runs, seconds."""
    times = []
    for _ in range(n):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return min(times)


def make_year(month: Path, year: Path) -> None:
    """Copy the month's requests 11 more times a month apart; the slots then stale."""
    shutil.copy(month, year)
    con = sqlite3.connect(year)
    cols = [r[1] for r in con.execute("PRAGMA table_info(requests)") if r[1] != "id"]
    shifted = {"key": "key || '#' || ?1", "ts": f"ts + ?1 * {MONTH_S}",
               "session": "session || '#' || ?1"}
    select = ", ".join(shifted.get(c, c) for c in cols)
    for k in range(1, 12):
        con.execute(f"INSERT INTO requests ({', '.join(cols)}) SELECT {select} FROM requests "
                    "WHERE key NOT LIKE '%#%'", (k,))
    con.execute("UPDATE slot_meta SET value = '0' WHERE name = 'version'")
    con.commit()
    con.close()


def measure(path: Path) -> dict[str, float]:
    """Rows against day sums on one ledger (read-only connection)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)

    def read(sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return con.execute(sql, params).fetchall()

    pricing = RateTable.load()
    prices = ClassPrices.of(pricing)
    sel = Selection(read, "requests", Range(None, None, UTC_ZONE), slots=True, days=True,
                    slot_thresholds=slots.read_thresholds(read))
    rows = Selection(read, "requests", sel.range, slots=True, days=False,
                     slot_thresholds=sel.slot_thresholds)
    con.execute("CREATE TEMP VIEW everything AS SELECT * FROM requests")
    split = Options(breakdown=True)
    out = {
        "view rows": best(lambda: attribution.build("skill", rows, prices, Options())),
        "view days": best(lambda: attribution.build("skill", sel, prices, Options())),
        "effort rows": best(lambda: attribution.build("skill", rows, prices, split, "effort")),
        "effort days": best(lambda: attribution.build("skill", sel, prices, split, "effort")),
        "families days": best(lambda: Attributed(pricing, Names()).load(read, "requests")),
        # A view without its condition on roots: the requests' GROUP BY.
        "families rows": best(lambda: Attributed(pricing, Names()).load(read, "everything")),
        "table rows": float(read("SELECT count(*) FROM attr_days")[0][0]),
    }
    con.close()
    return out


def main() -> None:
    """Make the year, open both with this build, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ledger", type=Path)
    ap.add_argument("--work", type=Path)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-attribution-"))
    month, year = work / "month.sqlite3", work / "year.sqlite3"
    shutil.copy(args.ledger, month)
    make_year(month, year)
    for path in (month, year):
        began = time.perf_counter()
        Ledger(path).close()  # this build's layout: summed once when missing
        print(f"{path.name}: open {time.perf_counter() - began:.2f} s")
    for path in (month, year):
        figures = measure(path)
        print(path.name, ", ".join(f"{k} {v:.3f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
