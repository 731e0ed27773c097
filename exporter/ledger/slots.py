"""Usage slots: the ledger's requests summed per five minutes, kept with the rows.

A report over a year of history must not sort every request (SQLite sorts for
each GROUP BY: ~1-2 µs a row, seconds for 600k requests). So the ledger keeps,
in the same transaction as its rows, these sums per 5-minute UTC slot and *key*
(session, project and the request attributes that decide a price), per roots
bitmask and per gap bucket. A report then groups a few rows per slot instead of
every request, and reads single requests only at the edges of a time range.

Slots are recomputed from the ``requests`` rows, never adjusted by deltas:
:func:`refresh` deletes the slots it is given and sums them again, so it is
idempotent and cannot drift. The ledger calls it with the slots of every request
it inserted, changed (old and new time), re-gapped or gave a new root. (One
exception, inside one refresh: a 16-day block's value bins move by the change of
its recounted days' bins; see :func:`_refresh_hist`.)

The same sums per UTC day (``slot_days``, from the slots) answer everything that
needs no finer time: a whole-history summary, the session and project views; and
per 16-day block (``slot_blocks``, from the days; ``slot_class_blocks`` by price
class without session or project, ``slot_session_blocks`` by session) the whole
blocks of those.

Why these dimensions:
- 300 s divides a minute-aligned window of 5 minutes (``m0``..``m4`` count the
  requests in each calendar minute, for the busiest minute) and 10-minute windows
  (two slots), and every UTC offset in use is a multiple of 15 minutes, so local
  days and the prices' change dates (UTC midnights) start on slot bounds.
- ``long`` is the prompt's long-context level: how many of the price table's
  long-context thresholds its context exceeds (the ledger passes the price
  table's, :func:`ensure`; they are stored in ``slot_meta``, only grow, and a
  new one rebuilds the slots). ``bucket`` the cache-expiry bucket of a main
  request (docs/figures.md), with 120 s split out for the generation speed.

Exact percentiles over a time range (``slot_hist``): per UTC day (``span`` 0)
and per 16-day block (``span`` 1), the count of requests in each *bin* of the
prompt size, the output size and the main requests' gap (whole milliseconds).
A bin keeps a value's top :data:`HIST_BITS` bits (32 bins an octave, under
3.2 % wide; values under 64 exactly). A nearest-rank percentile sums the bins
of the range to find the bin holding the rank, then walks the ledger's
(value, ts) index inside that one bin: the work is the range's bins and one
bin's share of the history, not every request (docs/figures.md).

``slot_meta`` holds ``version`` (what the tables hold: another is rebuilt by
the next writer, :func:`ensure`) and ``thresholds``.

This module imports only the counting rules' constants (exporter.records): the
ledger uses it, projections read its tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

from exporter.records import ACTIVE_GAP_SECONDS, TTL_1H, TTL_5M, Source
from exporter.sqlite import sqlite3

SLOT_SECONDS: Final = 300
VERSION: Final = 5  # slot_meta 'version': 4 slot_hist, the blocks, day peaks; 5 attr_days
HIST_BITS: Final = 6  # a histogram bin keeps a value's top 6 bits (32 bins an octave)
BLOCK_DAYS: Final = 16  # days per block (slot_blocks, and span 1 of slot_hist)
HIST_BLOCK_DAYS: Final = BLOCK_DAYS
CONTEXT_HIST, OUTPUT_HIST, GAP_HIST = 0, 1, 2  # slot_hist measures
SLOTS_PER_DAY: Final = 86_400 // SLOT_SECONDS
LONG_CONTEXT_TOKENS: Final = 200_000  # the thresholds before any are given: every tier in use
DEFAULT_THRESHOLDS: Final = (LONG_CONTEXT_TOKENS,)
MERGE_SLOTS: Final = 48  # refresh touched slots less than 4 hours apart in one statement
CONTEXT: Final = "(r.input + r.cache_read + r.cache_write_5m + r.cache_write_1h)"
# The rows the value bins count: an advisor consultation is no request a conversation sent
# (docs/figures.md, Iterations), so it is in no context, output or gap distribution.
OWN: Final = f"r.source != {int(Source.ADVISOR)}"
# -1 not main; main: 0 first of its conversation, 1 gap <= 120 s, 2 <= 300 s, 3 <= 1 h, 4 > 1 h.
# Each bucket's inclusive upper bound, in whole seconds: the counting rules' own.
BUCKET_EDGES: Final = tuple(int(edge) for edge in (ACTIVE_GAP_SECONDS, TTL_5M, TTL_1H))
BUCKET: Final = (
    "CASE WHEN r.source != 0 THEN -1 WHEN r.gap IS NULL THEN 0 "
    + " ".join(f"WHEN r.gap <= {edge} THEN {i}" for i, edge in enumerate(BUCKET_EDGES, 1))
    + f" ELSE {len(BUCKET_EDGES) + 1} END"
)
# Gaps are whole milliseconds (the ledger rounds them): integer sums are exact in any order.
GAP_MS: Final = "CAST(round(r.gap * 1000) AS INTEGER)"
# What a slot row becomes when more rows are added to it (as ``sum``/``min``/``max`` would).
_ADDED: Final = ", ".join([
    *(f"{c} = {c} + excluded.{c}" for c in ("n", "input", "output", "cache_read",
                                             "cache_write_5m", "cache_write_1h", "web_search",
                                             "m0", "m1", "m2", "m3", "m4")),
    "gap_ms = CASE WHEN gap_ms IS NULL THEN excluded.gap_ms WHEN excluded.gap_ms IS NULL "
    "THEN gap_ms ELSE gap_ms + excluded.gap_ms END",
    "first = min(first, excluded.first)", "last = max(last, excluded.last)",
])
MINUTES: Final = ", ".join(
    f"sum(CAST(r.ts / 60 AS INTEGER) % 5 = {i})" for i in range(SLOT_SECONDS // 60)
)

# The columns of every table of sums (slots, days, blocks), after its time unit's column.
_SUMS: Final = """
    {unit} INTEGER NOT NULL, key INTEGER NOT NULL, roots INTEGER NOT NULL,
    bucket INTEGER NOT NULL, sid INTEGER NOT NULL,
    n INTEGER NOT NULL, input INTEGER NOT NULL, output INTEGER NOT NULL,
    cache_read INTEGER NOT NULL, cache_write_5m INTEGER NOT NULL,
    cache_write_1h INTEGER NOT NULL, web_search INTEGER NOT NULL,
    gap_ms INTEGER, first REAL NOT NULL, last REAL NOT NULL,"""

SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS slot_sessions (id INTEGER PRIMARY KEY, session TEXT NOT NULL "
    "UNIQUE)",
    # One key per session, project and price attributes: integers keep the slot rows
    # narrow and make every GROUP BY of a report sort integers, not text.
    """CREATE TABLE IF NOT EXISTS slot_keys (
    id INTEGER PRIMARY KEY, sid INTEGER NOT NULL, project TEXT NOT NULL, model TEXT NOT NULL,
    source INTEGER NOT NULL, service_tier TEXT NOT NULL, inference_geo TEXT NOT NULL,
    speed TEXT NOT NULL, long INTEGER NOT NULL,
    UNIQUE (sid, project, model, source, service_tier, inference_geo, speed, long))""",
    f"""CREATE TABLE IF NOT EXISTS slots ({_SUMS.format(unit="slot")}
    m0 INTEGER NOT NULL, m1 INTEGER NOT NULL, m2 INTEGER NOT NULL, m3 INTEGER NOT NULL,
    m4 INTEGER NOT NULL,
    PRIMARY KEY (slot, key, roots, bucket)) WITHOUT ROWID""",
    # The same sums per UTC day, from the slots: a report without a time range (or
    # by UTC day) groups a few thousand day rows a year instead of 100k slot rows.
    f"""CREATE TABLE IF NOT EXISTS slot_days ({_SUMS.format(unit="day")}
    PRIMARY KEY (day, key, roots, bucket)) WITHOUT ROWID""",
    # The same sums per 16-day block (``day / 16``), from the day sums: a report over
    # a year groups a third of the day rows (a key, a session's, rarely spans two days).
    f"""CREATE TABLE IF NOT EXISTS slot_blocks ({_SUMS.format(unit="block")}
    PRIMARY KEY (block, key, roots, bucket)) WITHOUT ROWID""",
    # Per block without the session and project: by price class (a year's summary reads
    # ~20 rows a block), and by session (its session figures: one row per session).
    """CREATE TABLE IF NOT EXISTS slot_classes (
    id INTEGER PRIMARY KEY, model TEXT NOT NULL, source INTEGER NOT NULL,
    service_tier TEXT NOT NULL, inference_geo TEXT NOT NULL, speed TEXT NOT NULL,
    long INTEGER NOT NULL,
    UNIQUE (model, source, service_tier, inference_geo, speed, long))""",
    """CREATE TABLE IF NOT EXISTS slot_class_blocks (
    block INTEGER NOT NULL, class INTEGER NOT NULL, roots INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    n INTEGER NOT NULL, input INTEGER NOT NULL, output INTEGER NOT NULL,
    cache_read INTEGER NOT NULL, cache_write_5m INTEGER NOT NULL,
    cache_write_1h INTEGER NOT NULL, web_search INTEGER NOT NULL,
    gap_ms INTEGER, first REAL NOT NULL, last REAL NOT NULL,
    PRIMARY KEY (block, class, roots, bucket)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS slot_session_blocks (
    block INTEGER NOT NULL, sid INTEGER NOT NULL, roots INTEGER NOT NULL,
    n INTEGER NOT NULL, output INTEGER NOT NULL, cache_read INTEGER NOT NULL,
    gaps INTEGER NOT NULL, first REAL NOT NULL, last REAL NOT NULL,
    PRIMARY KEY (block, sid, roots)) WITHOUT ROWID""",
    # Per UTC day, over every request: the most in one calendar minute and the most
    # sessions in one aligned 10-minute window (both windows lie inside a day).
    """CREATE TABLE IF NOT EXISTS slot_day_peaks (
    day INTEGER PRIMARY KEY, minute INTEGER NOT NULL, sessions INTEGER NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS slot_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # Requests per value bin, per UTC day (span 0) and 16-day block (span 1): see above.
    """CREATE TABLE IF NOT EXISTS slot_hist (
    measure INTEGER NOT NULL, span INTEGER NOT NULL, unit INTEGER NOT NULL,
    roots INTEGER NOT NULL, bin INTEGER NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (measure, span, unit, roots, bin)) WITHOUT ROWID""",
)

SLOT_SQL: Final = f"CAST(r.ts / {SLOT_SECONDS} AS INTEGER)"  # a request's slot (as slot_of)
_IN_RANGE: Final = f"r.ts >= ? AND r.ts < ? AND {SLOT_SQL} BETWEEN ? AND ?"
_KEY_COLUMNS: Final = "project, model, source, service_tier, inference_geo, speed"
_JOIN_KEY: Final = (
    "JOIN slot_sessions s ON s.session = r.session "
    "JOIN slot_keys k ON k.sid = s.id AND k.project = r.project AND k.model = r.model "
    "AND k.source = r.source AND k.service_tier = r.service_tier "
    "AND k.inference_geo = r.inference_geo AND k.speed = r.speed AND k.long = {level}"
)


# The first and last request's times: two lookups in the ``ts`` index (one min() and one
# max() in a single SELECT would scan every row: ~10 ms a month).
_TIME_SPAN: Final = "SELECT (SELECT min(ts) FROM requests), (SELECT max(ts) FROM requests)"


def bin_sql(value: str) -> str:
    """SQL for an integer's histogram bin: the value with all but its top bits cleared.

    Values under ``2**HIST_BITS`` (and negative ones) are their own bin. A
    binary tree of CASEs on the bit length: six comparisons a value, not fifty.
    """
    def tree(lo: int, hi: int) -> str:  # bit lengths lo..hi
        if lo == hi:
            return f"(({value} >> {lo - HIST_BITS}) << {lo - HIST_BITS})"
        mid = (lo + hi) // 2
        return f"CASE WHEN {value} < {1 << mid} THEN {tree(lo, mid)} ELSE {tree(mid + 1, hi)} END"

    return f"(CASE WHEN {value} < {1 << HIST_BITS} THEN {value} ELSE {tree(HIST_BITS + 1, 63)} END)"


def bin_bounds(lo: int) -> tuple[int, int]:
    """The values ``[lo, hi)`` of the bin that starts at ``lo`` (a value of ``bin_sql``)."""
    if lo < 1 << HIST_BITS:
        return lo, lo + 1
    return lo, lo + (1 << (lo.bit_length() - HIST_BITS))


def version(db: sqlite3.Connection) -> int:
    """What the slot tables hold (0: a ledger from before slot_meta's version)."""
    try:
        row = db.execute("SELECT value FROM slot_meta WHERE name = 'version'").fetchone()
    except sqlite3.OperationalError as exc:
        _missing_table(exc)
        row = None
    return 0 if row is None else int(row[0])


def ensure(db: sqlite3.Connection, wanted: Sequence[int] = ()) -> bool:
    """Bring the slots to this :data:`VERSION`, split by ``wanted`` thresholds as well.

    The split only grows (the stored thresholds plus ``wanted``): slots split by
    more thresholds still answer a price table using fewer, and two price tables
    cannot make the slots rebuild in turn. Inside the caller's transaction;
    returns whether a rebuild happened (seconds on a year of history).
    """
    create(db)
    stored = stored_thresholds(db)
    target = tuple(sorted({*stored, *(int(t) for t in wanted)}))
    if version(db) == VERSION and target == stored:
        return False
    db.execute("INSERT OR REPLACE INTO slot_meta VALUES ('thresholds', ?)", (json.dumps(target),))
    rebuild(db)
    return True


def _missing_table(exc: sqlite3.OperationalError) -> None:
    """Re-raise anything but a missing table (a ledger from before slot_meta).

    A full disk or an I/O error met by a read inside a write transaction (a
    spill of its cache) made SQLite roll the transaction back: swallowed, the
    caller's COMMIT said only "no transaction is active".
    """
    if "no such table" not in str(exc):
        raise exc


def needs_ensure(db: sqlite3.Connection, wanted: Sequence[int] = ()) -> bool:
    """Whether :func:`ensure` would rebuild (a cheap read, outside any transaction)."""
    return version(db) != VERSION or not {int(t) for t in wanted} <= set(stored_thresholds(db))


def level_sql(thresholds: Sequence[int], context: str = CONTEXT) -> str:
    """SQL for the long-context level: how many of ``thresholds`` the context exceeds."""
    if not thresholds:
        return "0"
    return "(" + " + ".join(f"({context} > {int(t)})" for t in thresholds) + ")"


def stored_thresholds(db: sqlite3.Connection) -> tuple[int, ...]:
    """The long-context thresholds the slots were summed with."""
    try:
        row = db.execute("SELECT value FROM slot_meta WHERE name = 'thresholds'").fetchone()
    except sqlite3.OperationalError as exc:  # a ledger from before slot_meta: the first default
        _missing_table(exc)
        row = None
    return DEFAULT_THRESHOLDS if row is None else tuple(json.loads(row[0]))


def read_thresholds(read: Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
                    ) -> tuple[int, ...]:
    """:func:`stored_thresholds` through a reader (``Ledger.read``)."""
    try:
        rows = read("SELECT value FROM slot_meta WHERE name = 'thresholds'", [])
    except sqlite3.OperationalError:
        rows = []
    return tuple(json.loads(rows[0][0])) if rows else DEFAULT_THRESHOLDS


def read_version(read: Callable[[str, Sequence[object]], list[tuple[Any, ...]]]) -> int:
    """:func:`version` through a reader (``Ledger.read``)."""
    try:
        rows = read("SELECT value FROM slot_meta WHERE name = 'version'", [])
    except sqlite3.OperationalError:
        rows = []
    return int(rows[0][0]) if rows else 0


def use_thresholds(db: sqlite3.Connection, wanted: Sequence[int]) -> bool:
    """Sum the slots by ``wanted`` (sorted) from now on; rebuild them if they change.

    Inside the caller's transaction; returns whether a rebuild happened.
    """
    target = tuple(sorted({int(t) for t in wanted}))
    if target == stored_thresholds(db):
        return False
    db.execute("INSERT OR REPLACE INTO slot_meta VALUES ('thresholds', ?)", (json.dumps(target),))
    rebuild(db)
    return True


def slot_of(ts: float) -> int:
    """The slot holding epoch ``ts`` (as SQL computes it: ``CAST(ts / 300 AS INTEGER)``)."""
    return int(ts / SLOT_SECONDS)


def create(db: sqlite3.Connection) -> None:
    """Create the tables (inside the caller's transaction); a no-op when they exist."""
    for statement in SCHEMA:
        db.execute(statement)


def refresh(db: sqlite3.Connection, slots: Iterable[int]) -> None:
    """Sum the given slots again from ``requests`` (inside the caller's transaction).

    Needs ``requests`` columns ts, session, project, model, source, service_tier,
    inference_geo, speed, the five token fields, web_search, gap and roots, and
    the index on ts. Near slots are merged into one range: a slot not asked for
    may be summed again too, and each touched day's value bins are counted whole
    (a batch's rows cost less through :func:`update`).
    """
    runs = list(_runs(slots))
    for lo, hi in runs:
        refresh_range(db, lo, hi, hist=False)
    # Each touched day's histograms once, however many runs fall in it.
    days = sorted({d for lo, hi in runs for d in range(lo // SLOTS_PER_DAY,
                                                        hi // SLOTS_PER_DAY + 1)})
    for lo_day, hi_day in _day_runs(days):
        _refresh_blocks(db, lo_day // BLOCK_DAYS, hi_day // BLOCK_DAYS)
        _refresh_hist(db, lo_day, hi_day)


def refresh_range(db: sqlite3.Connection, lo: int, hi: int, *, hist: bool = True) -> None:
    """Sum every slot from ``lo`` to ``hi`` (inclusive) again; see :func:`refresh`.

    ``hist``: and the value histograms of their days (:func:`refresh` does those once).
    """
    _sum_slots(db, lo, hi)
    _refresh_days(db, lo // SLOTS_PER_DAY, hi // SLOTS_PER_DAY)
    if hist:
        _refresh_blocks(db, lo // SLOTS_PER_DAY // BLOCK_DAYS, hi // SLOTS_PER_DAY // BLOCK_DAYS)
        _refresh_hist(db, lo // SLOTS_PER_DAY, hi // SLOTS_PER_DAY)


def _sum_slots(db: sqlite3.Connection, lo: int, hi: int) -> None:
    """Sum the slots ``lo`` to ``hi`` (inclusive) again from ``requests`` (not their days)."""
    level = level_sql(stored_thresholds(db))
    db.execute("DELETE FROM slots WHERE slot BETWEEN ? AND ?", (lo, hi))
    # Slack of a second around the range: the exact test is the CAST, as in slot_of.
    params = (lo * SLOT_SECONDS - 1.0, (hi + 1) * SLOT_SECONDS + 1.0, lo, hi)
    db.execute(
        "INSERT OR IGNORE INTO slot_sessions (session) "
        f"SELECT DISTINCT r.session FROM requests r WHERE {_IN_RANGE}", params)
    db.execute(
        f"INSERT OR IGNORE INTO slot_keys (sid, {_KEY_COLUMNS}, long) "
        f"SELECT DISTINCT s.id, r.project, r.model, r.source, r.service_tier, "
        f"r.inference_geo, r.speed, {level} FROM requests r "
        f"JOIN slot_sessions s ON s.session = r.session WHERE {_IN_RANGE}", params)
    db.execute(
        f"INSERT INTO slots SELECT {SLOT_SQL}, k.id, r.roots, "
        f"{BUCKET}, k.sid, count(*), sum(r.input), sum(r.output), sum(r.cache_read), "
        f"sum(r.cache_write_5m), sum(r.cache_write_1h), sum(r.web_search), sum({GAP_MS}), "
        f"min(r.ts), max(r.ts), {MINUTES} FROM requests r {_JOIN_KEY.format(level=level)} "
        f"WHERE {_IN_RANGE} GROUP BY 1, 2, 3, 4", params)


def _refresh_blocks(db: sqlite3.Connection, lo: int, hi: int) -> None:
    """Sum the blocks ``lo`` to ``hi`` (inclusive) again from their days' sums."""
    if version(db) < VERSION:
        return  # an old layout: the next writer's ensure() rebuilds everything
    db.execute("DELETE FROM slot_blocks WHERE block BETWEEN ? AND ?", (lo, hi))
    db.execute(
        f"INSERT INTO slot_blocks SELECT day / {BLOCK_DAYS}, key, roots, bucket, sid, "
        "sum(n), sum(input), sum(output), sum(cache_read), sum(cache_write_5m), "
        "sum(cache_write_1h), sum(web_search), sum(gap_ms), min(first), max(last) FROM slot_days "
        "WHERE day BETWEEN ? AND ? GROUP BY 1, 2, 3, 4",
        (lo * BLOCK_DAYS, (hi + 1) * BLOCK_DAYS - 1))
    classes = "model, source, service_tier, inference_geo, speed, long"
    db.execute(f"INSERT OR IGNORE INTO slot_classes ({classes}) SELECT DISTINCT "
               f"{', '.join('k.' + c for c in classes.split(', '))} FROM slot_blocks b "
               "JOIN slot_keys k ON k.id = b.key WHERE b.block BETWEEN ? AND ?", (lo, hi))
    same = " AND ".join(f"c.{c} = k.{c}" for c in classes.split(", "))
    db.execute("DELETE FROM slot_class_blocks WHERE block BETWEEN ? AND ?", (lo, hi))
    db.execute(
        "INSERT INTO slot_class_blocks SELECT b.block, c.id, b.roots, b.bucket, sum(b.n), "
        "sum(b.input), sum(b.output), sum(b.cache_read), sum(b.cache_write_5m), "
        "sum(b.cache_write_1h), sum(b.web_search), sum(b.gap_ms), min(b.first), max(b.last) "
        f"FROM slot_blocks b JOIN slot_keys k ON k.id = b.key JOIN slot_classes c ON {same} "
        "WHERE b.block BETWEEN ? AND ? GROUP BY 1, 2, 3, 4", (lo, hi))
    db.execute("DELETE FROM slot_session_blocks WHERE block BETWEEN ? AND ?", (lo, hi))
    db.execute(
        "INSERT INTO slot_session_blocks SELECT block, sid, roots, sum(n), sum(output), "
        "sum(cache_read), sum(CASE WHEN bucket > 0 THEN n ELSE 0 END), min(first), max(last) "
        "FROM slot_blocks WHERE block BETWEEN ? AND ? GROUP BY 1, 2, 3", (lo, hi))


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
    """Every day's bins, as :func:`rebuild` would count them (None: no request).

    Reads only ``requests``: another connection may count them while the one
    that rebuilds writes the other slot tables (see :func:`rebuild`).
    """
    lo, hi = db.execute(_TIME_SPAN).fetchone()
    if lo is None:
        return None
    lo_day, hi_day = slot_of(lo) // SLOTS_PER_DAY, slot_of(hi) // SLOTS_PER_DAY
    with_v, select, params = _day_bins_sql(lo_day, hi_day, every=True)
    return lo_day, hi_day, db.execute(with_v + select, params).fetchall()


def _refresh_hist(db: sqlite3.Connection, lo: int, hi: int,
                  bins: Callable[[], DayBins | None] | None = None) -> None:
    """Count the UTC days ``lo`` to ``hi`` again into bins, from their requests; then their blocks.

    A day is counted whole, in one pass over its requests (the ``ts`` index; a
    few thousand rows on a heavy day). Its block's bins change by the day's old
    and new counts (exact integers, in this transaction): a block is the sum of
    its days' bins by construction (:func:`rebuild`), so refreshing twice gives
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
    :func:`refresh` with ``bins``). Bins and SQL are those of :func:`_refresh_hist`.
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


def update(db: sqlite3.Connection, new: Sequence[int], changed: Iterable[int],
           moved: Sequence[BinRow]) -> None:
    """One batch of the ledger (inside its transaction): new rows, rewritten ones.

    ``new``: ids of inserted rows, added to their slots and value bins by their
    own values (integer sums, minima, maxima: a file growing by one line costs
    one line). ``changed``: slots a rewritten row was or is in, summed again from
    the rows after the adds (a sum covers more than asked for, near slots
    merged, and recounts whatever an add put there). ``moved``: each rewritten
    row's old version (sign -1) and new one (+1), for its bins. Then every
    touched day and block is summed once.
    """
    days = _add_rows(db, new)
    for lo, hi in _runs(changed):
        _sum_slots(db, lo, hi)
        days.update(range(lo // SLOTS_PER_DAY, hi // SLOTS_PER_DAY + 1))
    shift_bins(db, moved)
    for lo_day, hi_day in _day_runs(sorted(days)):
        _refresh_days(db, lo_day, hi_day)
        _refresh_blocks(db, lo_day // BLOCK_DAYS, hi_day // BLOCK_DAYS)


def _add_rows(db: sqlite3.Connection, ids: Sequence[int]) -> set[int]:
    """Add new rows to their slots and value bins; the UTC days they fall in (not summed)."""
    days: set[int] = set()
    if not ids:
        return days
    level = level_sql(stored_thresholds(db))
    for part in _chunks(sorted(ids)):
        marks = ",".join("?" * len(part))
        where = f"r.id IN ({marks})"
        db.execute(
            "INSERT OR IGNORE INTO slot_sessions (session) "
            f"SELECT DISTINCT r.session FROM requests r WHERE {where}", part)
        db.execute(
            f"INSERT OR IGNORE INTO slot_keys (sid, {_KEY_COLUMNS}, long) "
            f"SELECT DISTINCT s.id, r.project, r.model, r.source, r.service_tier, "
            f"r.inference_geo, r.speed, {level} FROM requests r "
            f"JOIN slot_sessions s ON s.session = r.session WHERE {where}", part)
        db.execute(
            f"INSERT INTO slots SELECT {SLOT_SQL}, k.id, r.roots, "
            f"{BUCKET}, k.sid, count(*), sum(r.input), sum(r.output), sum(r.cache_read), "
            f"sum(r.cache_write_5m), sum(r.cache_write_1h), sum(r.web_search), sum({GAP_MS}), "
            f"min(r.ts), max(r.ts), {MINUTES} FROM requests r {_JOIN_KEY.format(level=level)} "
            f"WHERE {where} GROUP BY 1, 2, 3, 4 ON CONFLICT (slot, key, roots, bucket) DO UPDATE "
            f"SET {_ADDED}", part)
        days.update(r[0] for r in db.execute(
            f"SELECT DISTINCT {SLOT_SQL} / {SLOTS_PER_DAY} FROM requests r "
            f"WHERE {where}", part))
        if version(db) >= VERSION:
            _add_hist(db, where, part)
    return days


def _add_hist(db: sqlite3.Connection, where: str, params: Sequence[int]) -> None:
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


def _chunks(items: Sequence[int], size: int = 500) -> Iterator[Sequence[int]]:
    """Slices of at most ``size`` items, for ``IN (…)`` lookups."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _refresh_days(db: sqlite3.Connection, lo: int, hi: int) -> None:
    """Sum the UTC days ``lo`` to ``hi`` again from their slots."""
    db.execute("DELETE FROM slot_days WHERE day BETWEEN ? AND ?", (lo, hi))
    db.execute(
        f"INSERT INTO slot_days SELECT slot / {SLOTS_PER_DAY}, key, roots, bucket, sid, "
        "sum(n), sum(input), sum(output), sum(cache_read), sum(cache_write_5m), "
        "sum(cache_write_1h), sum(web_search), sum(gap_ms), min(first), max(last) FROM slots "
        "WHERE slot BETWEEN ? AND ? GROUP BY 1, 2, 3, 4",
        (lo * SLOTS_PER_DAY, (hi + 1) * SLOTS_PER_DAY - 1))
    db.execute("DELETE FROM slot_day_peaks WHERE day BETWEEN ? AND ?", (lo, hi))
    minutes = ", ".join(f"sum(m{i})" for i in range(SLOT_SECONDS // 60))
    span = (lo * SLOTS_PER_DAY, (hi + 1) * SLOTS_PER_DAY - 1)
    db.execute(
        "INSERT INTO slot_day_peaks SELECT d, max(busy), max(sessions) FROM ("
        f"SELECT slot / {SLOTS_PER_DAY} AS d, max({minutes}) AS busy, 0 AS sessions "
        "FROM slots WHERE slot BETWEEN ? AND ? GROUP BY slot "
        f"UNION ALL SELECT w / {SLOTS_PER_DAY // 2}, 0, count(DISTINCT sid) FROM "
        "(SELECT slot / 2 AS w, sid FROM slots WHERE slot BETWEEN ? AND ?) GROUP BY w"
        ") GROUP BY d", (*span, *span))


def rebuild(db: sqlite3.Connection, bins: Callable[[], DayBins | None] | None = None,
            keys: Callable[[], KeyRows] | None = None) -> None:
    """Recompute every slot (migration, layout change, first pass; caller's transaction).

    Every row is read, so the table is scanned in its own order (NOT INDEXED):
    walking the ``ts`` index would visit the rows in time order, one random
    page read each. The tables then hold this :data:`VERSION`'s layout (stored
    in ``slot_meta``). ``bins`` and ``keys``, when given, are called for the
    day bins (:func:`day_bins`) and the slot keys (:func:`key_rows`), read on
    another connection from the same rows, when they are due, instead of
    counting them here.
    """
    create(db)
    db.execute("INSERT OR REPLACE INTO slot_meta VALUES ('version', ?)", (str(VERSION),))
    lo, hi = db.execute(_TIME_SPAN).fetchone()
    db.execute("DELETE FROM slots")
    db.execute("DELETE FROM slot_days")
    db.execute("DELETE FROM slot_day_peaks")
    db.execute("DELETE FROM slot_hist")
    db.execute("DELETE FROM slot_blocks")
    db.execute("DELETE FROM slot_class_blocks")
    db.execute("DELETE FROM slot_session_blocks")
    if lo is None:
        return
    thresholds = stored_thresholds(db)
    level = level_sql(thresholds)
    counted = keys() if keys is not None else None
    if counted is None or counted[0] != thresholds:
        counted = key_rows(db)
    _insert_keys(db, counted[1])
    db.execute(
        f"INSERT INTO slots SELECT {SLOT_SQL}, k.id, r.roots, "
        f"{BUCKET}, k.sid, count(*), sum(r.input), sum(r.output), sum(r.cache_read), "
        f"sum(r.cache_write_5m), sum(r.cache_write_1h), sum(r.web_search), sum({GAP_MS}), "
        f"min(r.ts), max(r.ts), {MINUTES} FROM requests r NOT INDEXED "
        f"{_JOIN_KEY.format(level=level)} GROUP BY 1, 2, 3, 4")
    lo_day, hi_day = slot_of(lo) // SLOTS_PER_DAY, slot_of(hi) // SLOTS_PER_DAY
    _refresh_days(db, lo_day, hi_day)
    _refresh_blocks(db, lo_day // BLOCK_DAYS, hi_day // BLOCK_DAYS)
    _refresh_hist(db, lo_day, hi_day, bins)


KeyRows = tuple[tuple[int, ...], list[tuple[Any, ...]]]
"""Every slot key of the requests: ``(thresholds, rows)``, each row ``(session, project,
model, source, service_tier, inference_geo, speed, long)``, ``long`` by those thresholds."""


def key_rows(db: sqlite3.Connection) -> KeyRows:
    """The slot key of every request, as :func:`rebuild` would insert them (distinct, sorted).

    Reads only ``requests`` and ``slot_meta``: another connection may read
    them while the one that rebuilds writes (see :func:`rebuild`).
    """
    thresholds = stored_thresholds(db)
    rows = db.execute(f"SELECT DISTINCT r.session, {_KEY_COLUMNS}, {level_sql(thresholds)} "
                      "FROM requests r NOT INDEXED").fetchall()
    return thresholds, sorted(rows)


def _insert_keys(db: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """Add the sessions and slot keys of ``rows`` (:data:`KeyRows`) that are not there yet."""
    db.executemany("INSERT OR IGNORE INTO slot_sessions (session) VALUES (?)",
                   [(session,) for session in sorted({row[0] for row in rows})])
    sids = dict(db.execute("SELECT session, id FROM slot_sessions"))
    db.executemany(f"INSERT OR IGNORE INTO slot_keys (sid, {_KEY_COLUMNS}, long) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [(sids[row[0]], *row[1:]) for row in rows])


def _day_runs(days: Sequence[int]) -> Iterator[tuple[int, int]]:
    """Runs of consecutive days (sorted, distinct) as inclusive ranges."""
    if not days:
        return
    start = prev = days[0]
    for d in days[1:]:
        if d != prev + 1:
            yield start, prev
            start = d
        prev = d
    yield start, prev


def _runs(slots: Iterable[int]) -> Iterator[tuple[int, int]]:
    """Ranges covering the slots, merging neighbours less than MERGE_SLOTS apart.

    A range's empty slots cost nothing to refresh; one statement per slot would.
    """
    ordered = sorted(set(slots))
    if not ordered:
        return
    start = prev = ordered[0]
    for s in ordered[1:]:
        if s - prev >= MERGE_SLOTS:
            yield start, prev
            start = s
        prev = s
    yield start, prev
