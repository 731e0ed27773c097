"""The usage slots' value bins (``slot_hist``): requests per bin of prompt size, output, gap.

Per UTC day (``span`` 0) and 16-day block (``span`` 1), kept with the rows
like the slots (:mod:`exporter.ledger.slot_sums`); the layout, and why, is in
:mod:`exporter.ledger.slots`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from exporter.ledger.slots import (
    CONTEXT,
    CONTEXT_HIST,
    GAP_HIST,
    GAP_MS,
    HIST_BLOCK_DAYS,
    OUTPUT_HIST,
    OWN,
    SLOTS_PER_DAY,
    TIME_SPAN,
    VERSION,
    bin_sql,
    slot_of,
    version,
)
from exporter.sqlite import sqlite3

DayBins = tuple[int, int, list[tuple[int, ...]]]
"""The ``slot_hist`` day rows (span 0) of the UTC days ``lo`` to ``hi``: ``(lo, hi, rows)``."""


def _day_bins_sql(lo: int, hi: int, *, every: bool = False,
                  ) -> tuple[str, str, tuple[float, float, int, int]]:
    """The day bins of days ``lo`` to ``hi`` from their requests: (WITH clause, SELECT, params).

    ``every``: the days hold every row (a scan in table order beats the ``ts`` index).
    """
    gap = f"CASE WHEN r.source = 0 AND r.gap IS NOT NULL THEN {GAP_MS} END"
    return (
        f"WITH v AS MATERIALIZED (SELECT CAST(r.ts / 86400 AS INTEGER) AS d, r.roots AS ro, "
        f"{CONTEXT} AS c, r.output AS o, {gap} AS g FROM requests r "
        f"{'NOT INDEXED ' if every else ''}"
        f"WHERE r.ts >= ? AND r.ts < ? AND CAST(r.ts / 86400 AS INTEGER) BETWEEN ? AND ? "
        f"AND {OWN}) ",
        f"SELECT {CONTEXT_HIST}, 0, d, ro, {bin_sql('c')}, count(*) FROM v "
        f"GROUP BY 3, 4, 5 UNION ALL SELECT {OUTPUT_HIST}, 0, d, ro, {bin_sql('o')}, count(*) "
        f"FROM v GROUP BY 3, 4, 5 UNION ALL SELECT {GAP_HIST}, 0, d, ro, {bin_sql('g')}, "
        "count(*) FROM v WHERE g IS NOT NULL GROUP BY 3, 4, 5",
        (lo * 86_400 - 1.0, (hi + 1) * 86_400 + 1.0, lo, hi))


def day_bins(db: sqlite3.Connection) -> DayBins | None:
    """Every day's bins, as ``slot_sums.rebuild`` would count them (None: no request).

    Reads only ``requests``: another connection may count them while the one
    that rebuilds writes the other slot tables (see ``slot_sums.rebuild``).
    """
    lo, hi = db.execute(TIME_SPAN).fetchone()
    if lo is None:
        return None
    lo_day, hi_day = slot_of(lo) // SLOTS_PER_DAY, slot_of(hi) // SLOTS_PER_DAY
    with_v, select, params = _day_bins_sql(lo_day, hi_day, every=True)
    return lo_day, hi_day, db.execute(with_v + select, params).fetchall()


def refresh_bins(db: sqlite3.Connection, lo: int, hi: int,
                  bins: Callable[[], DayBins | None] | None = None) -> None:
    """Count the UTC days ``lo`` to ``hi`` again into bins, from their requests; then their blocks.

    A day is counted whole, in one pass over its requests (the ``ts`` index; a
    few thousand rows on a heavy day). Its block's bins change by the day's old
    and new counts (exact integers, in this transaction): a block is the sum of
    its days' bins by construction (``slot_sums.rebuild``), so refreshing twice gives
    the same rows, and the work is the touched days', not 16 days'. ``bins``
    gives the days' rows counted elsewhere (:func:`day_bins` on the same rows).
    """
    if version(db) < VERSION:
        return  # an old layout: the next writer's ensure() rebuilds everything
    days = (lo, hi)
    b_lo, b_hi = lo // HIST_BLOCK_DAYS, hi // HIST_BLOCK_DAYS
    of_days = (f"SELECT measure, unit / {HIST_BLOCK_DAYS} AS blk, roots, bin, sum(n) AS n "
               "FROM slot_hist WHERE measure IN (0, 1, 2) AND span = 0 AND unit BETWEEN ? AND ? "
               "GROUP BY 1, 2, 3, 4")
    db.execute(f"UPDATE slot_hist AS b SET n = b.n - d.n FROM ({of_days}) AS d "
               "WHERE b.measure = d.measure AND b.span = 1 AND b.unit = d.blk "
               "AND b.roots = d.roots AND b.bin = d.bin", days)
    db.execute("DELETE FROM slot_hist WHERE measure IN (0, 1, 2) AND span = 0 "
               "AND unit BETWEEN ? AND ?", days)
    counted = bins() if bins is not None else None
    if counted is not None and counted[:2] == days:
        db.executemany("INSERT INTO slot_hist VALUES (?, ?, ?, ?, ?, ?)", counted[2])
    else:
        with_v, select, params = _day_bins_sql(lo, hi)
        db.execute(f"{with_v}INSERT INTO slot_hist {select}", params)
    db.execute(f"INSERT INTO slot_hist SELECT measure, 1, blk, roots, bin, n FROM ({of_days}) "
               "WHERE 1 ON CONFLICT (measure, span, unit, roots, bin) DO UPDATE "
               "SET n = n + excluded.n", days)
    db.execute("DELETE FROM slot_hist WHERE measure IN (0, 1, 2) AND span = 1 "
               "AND unit BETWEEN ? AND ? AND n = 0", (b_lo, b_hi))


BinRow = tuple[float, int, int, int, int, int, int, "float | None", int, int]
"""(ts, roots, input, cache_read, cache_write_5m, cache_write_1h, output, gap, source, sign)."""


def shift_bins(db: sqlite3.Connection, rows: Sequence[BinRow]) -> None:
    """Move rewritten rows' value bins: each old version out (sign -1), each new one in (+1).

    Exact where the bins were the requests' counts before the rewrite, and cheap:
    the work is the changed rows', not their days' (a day is recounted whole by
    ``slot_sums.refresh``). Bins and SQL are those of :func:`refresh_bins`.
    """
    if not rows or version(db) < VERSION:
        return
    gap = f"CASE WHEN r.source = 0 AND r.gap IS NOT NULL THEN {GAP_MS} END"
    emptied: list[tuple[int, ...]] = []
    for i in range(0, len(rows), 500):
        part = rows[i : i + 500]
        values = ",".join(["(?,?,?,?,?,?,?,?,?,?)"] * len(part))
        params = [v for row in part for v in row]
        for span, unit in ((0, "d"), (1, f"d / {HIST_BLOCK_DAYS}")):
            emptied.extend(tuple(r[:5]) for r in db.execute(
                "WITH r (ts, roots, input, cache_read, cache_write_5m, cache_write_1h, output, "
                f"gap, source, sign) AS (VALUES {values}), "
                "v AS MATERIALIZED (SELECT CAST(r.ts / 86400 AS INTEGER) AS d, r.roots AS ro, "
                f"{CONTEXT} AS c, r.output AS o, {gap} AS g, r.sign AS s FROM r WHERE {OWN}) "
                "INSERT INTO slot_hist SELECT * FROM ("
                f"SELECT {CONTEXT_HIST}, {span}, {unit}, ro, {bin_sql('c')}, sum(s) FROM v "
                f"GROUP BY 3, 4, 5 UNION ALL SELECT {OUTPUT_HIST}, {span}, {unit}, ro, "
                f"{bin_sql('o')}, sum(s) FROM v GROUP BY 3, 4, 5 UNION ALL SELECT {GAP_HIST}, "
                f"{span}, {unit}, ro, {bin_sql('g')}, sum(s) FROM v WHERE g IS NOT NULL "
                "GROUP BY 3, 4, 5) WHERE 1 ON CONFLICT (measure, span, unit, roots, bin) "
                "DO UPDATE SET n = n + excluded.n RETURNING measure, span, unit, roots, bin, n",
                params) if r[5] == 0)
    db.executemany("DELETE FROM slot_hist WHERE measure = ? AND span = ? AND unit = ? "
                   "AND roots = ? AND bin = ? AND n = 0", emptied)


def add_bins(db: sqlite3.Connection, where: str, params: Sequence[int]) -> None:
    """Count new rows into their days' and blocks' value bins (they were in none: exact)."""
    gap = f"CASE WHEN r.source = 0 AND r.gap IS NOT NULL THEN {GAP_MS} END"
    for span, unit in ((0, "d"), (1, f"d / {HIST_BLOCK_DAYS}")):
        db.execute(
            f"WITH v AS MATERIALIZED (SELECT CAST(r.ts / 86400 AS INTEGER) AS d, "
            f"r.roots AS ro, {CONTEXT} AS c, r.output AS o, {gap} AS g FROM requests r "
            f"WHERE ({where}) AND {OWN}) INSERT INTO slot_hist SELECT * FROM ("
            f"SELECT {CONTEXT_HIST}, {span}, {unit}, ro, {bin_sql('c')}, count(*) FROM v "
            f"GROUP BY 3, 4, 5 UNION ALL SELECT {OUTPUT_HIST}, {span}, {unit}, ro, "
            f"{bin_sql('o')}, count(*) FROM v GROUP BY 3, 4, 5 UNION ALL SELECT {GAP_HIST}, "
            f"{span}, {unit}, ro, {bin_sql('g')}, count(*) FROM v WHERE g IS NOT NULL "
            "GROUP BY 3, 4, 5) WHERE 1 ON CONFLICT (measure, span, unit, roots, bin) "
            "DO UPDATE SET n = n + excluded.n", params)
