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
it inserted, changed (old and new time), re-gapped or gave a new root.

The same sums per UTC day (``slot_days``, from the slots) answer everything that
needs no finer time: a whole-history summary, the session and project views.

Why these dimensions:
- 300 s divides a minute-aligned window of 5 minutes (``m0``..``m4`` count the
  requests in each calendar minute, for the busiest minute) and 10-minute windows
  (two slots), and every UTC offset in use is a multiple of 15 minutes, so local
  days and the prices' change dates (UTC midnights) start on slot bounds.
- ``long`` is the prompt's long-context level: how many of the price table's
  long-context thresholds its context exceeds (the ledger passes them; they
  are stored in ``slot_meta``, and a change rebuilds the slots). ``bucket`` the
  cache-expiry bucket of a main
  request (docs/figures.md), with 120 s split out for the generation speed.

This module imports nothing of the project: the ledger uses it, projections read
its tables.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

SLOT_SECONDS: Final = 300
SLOTS_PER_DAY: Final = 86_400 // SLOT_SECONDS
LONG_CONTEXT_TOKENS: Final = 200_000  # the thresholds before any are given: every tier in use
DEFAULT_THRESHOLDS: Final = (LONG_CONTEXT_TOKENS,)
MERGE_SLOTS: Final = 48  # refresh touched slots less than 4 hours apart in one statement
CONTEXT: Final = "(r.input + r.cache_read + r.cache_write_5m + r.cache_write_1h)"
# -1 not main; main: 0 first of its conversation, 1 gap <= 120 s, 2 <= 300 s, 3 <= 1 h, 4 > 1 h.
BUCKET: Final = (
    "CASE WHEN r.source != 0 THEN -1 WHEN r.gap IS NULL THEN 0 WHEN r.gap <= 120 THEN 1 "
    "WHEN r.gap <= 300 THEN 2 WHEN r.gap <= 3600 THEN 3 ELSE 4 END"
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
    """CREATE TABLE IF NOT EXISTS slots (
    slot INTEGER NOT NULL, key INTEGER NOT NULL, roots INTEGER NOT NULL,
    bucket INTEGER NOT NULL, sid INTEGER NOT NULL,
    n INTEGER NOT NULL, input INTEGER NOT NULL, output INTEGER NOT NULL,
    cache_read INTEGER NOT NULL, cache_write_5m INTEGER NOT NULL,
    cache_write_1h INTEGER NOT NULL, web_search INTEGER NOT NULL,
    gap_ms INTEGER, first REAL NOT NULL, last REAL NOT NULL,
    m0 INTEGER NOT NULL, m1 INTEGER NOT NULL, m2 INTEGER NOT NULL, m3 INTEGER NOT NULL,
    m4 INTEGER NOT NULL,
    PRIMARY KEY (slot, key, roots, bucket)) WITHOUT ROWID""",
    # The same sums per UTC day, from the slots: a report without a time range (or
    # by UTC day) groups a few thousand day rows a year instead of 100k slot rows.
    """CREATE TABLE IF NOT EXISTS slot_days (
    day INTEGER NOT NULL, key INTEGER NOT NULL, roots INTEGER NOT NULL,
    bucket INTEGER NOT NULL, sid INTEGER NOT NULL,
    n INTEGER NOT NULL, input INTEGER NOT NULL, output INTEGER NOT NULL,
    cache_read INTEGER NOT NULL, cache_write_5m INTEGER NOT NULL,
    cache_write_1h INTEGER NOT NULL, web_search INTEGER NOT NULL,
    gap_ms INTEGER, first REAL NOT NULL, last REAL NOT NULL,
    PRIMARY KEY (day, key, roots, bucket)) WITHOUT ROWID""",
    # Per UTC day, over every request: the most in one calendar minute and the most
    # sessions in one aligned 10-minute window (both windows lie inside a day).
    """CREATE TABLE IF NOT EXISTS slot_day_peaks (
    day INTEGER PRIMARY KEY, minute INTEGER NOT NULL, sessions INTEGER NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS slot_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)

_IN_RANGE: Final = (
    "r.ts >= ? AND r.ts < ? AND CAST(r.ts / 300 AS INTEGER) BETWEEN ? AND ?"
)
_KEY_COLUMNS: Final = "project, model, source, service_tier, inference_geo, speed"
_JOIN_KEY: Final = (
    "JOIN slot_sessions s ON s.session = r.session "
    "JOIN slot_keys k ON k.sid = s.id AND k.project = r.project AND k.model = r.model "
    "AND k.source = r.source AND k.service_tier = r.service_tier "
    "AND k.inference_geo = r.inference_geo AND k.speed = r.speed AND k.long = {level}"
)


def level_sql(thresholds: Sequence[int], context: str = CONTEXT) -> str:
    """SQL for the long-context level: how many of ``thresholds`` the context exceeds."""
    if not thresholds:
        return "0"
    return "(" + " + ".join(f"({context} > {int(t)})" for t in thresholds) + ")"


def stored_thresholds(db: sqlite3.Connection) -> tuple[int, ...]:
    """The long-context thresholds the slots were summed with."""
    try:
        row = db.execute("SELECT value FROM slot_meta WHERE name = 'thresholds'").fetchone()
    except sqlite3.OperationalError:  # a ledger from before slot_meta: the first default
        row = None
    return DEFAULT_THRESHOLDS if row is None else tuple(json.loads(row[0]))


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
    the index on ts.
    """
    for lo, hi in _runs(slots):
        refresh_range(db, lo, hi)


def refresh_range(db: sqlite3.Connection, lo: int, hi: int) -> None:
    """Sum every slot from ``lo`` to ``hi`` (inclusive) again; see :func:`refresh`."""
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
        "INSERT INTO slots SELECT CAST(r.ts / 300 AS INTEGER), k.id, r.roots, "
        f"{BUCKET}, k.sid, count(*), sum(r.input), sum(r.output), sum(r.cache_read), "
        f"sum(r.cache_write_5m), sum(r.cache_write_1h), sum(r.web_search), sum({GAP_MS}), "
        f"min(r.ts), max(r.ts), {MINUTES} FROM requests r {_JOIN_KEY.format(level=level)} "
        f"WHERE {_IN_RANGE} GROUP BY 1, 2, 3, 4", params)
    _refresh_days(db, lo // SLOTS_PER_DAY, hi // SLOTS_PER_DAY)


def add(db: sqlite3.Connection, ids: Sequence[int]) -> None:
    """Add newly inserted rows to their slots (inside the caller's transaction).

    A new row changes its slots' sums by exactly its own values (integer sums,
    minima, maxima), so a batch of appended rows costs its own size, not its
    slots' population; the caller refreshes instead any slot a changed row
    touches (and leaves that slot's new rows to the refresh).
    """
    if not ids:
        return
    level = level_sql(stored_thresholds(db))
    days: set[int] = set()
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
            "INSERT INTO slots SELECT CAST(r.ts / 300 AS INTEGER), k.id, r.roots, "
            f"{BUCKET}, k.sid, count(*), sum(r.input), sum(r.output), sum(r.cache_read), "
            f"sum(r.cache_write_5m), sum(r.cache_write_1h), sum(r.web_search), sum({GAP_MS}), "
            f"min(r.ts), max(r.ts), {MINUTES} FROM requests r {_JOIN_KEY.format(level=level)} "
            f"WHERE {where} GROUP BY 1, 2, 3, 4 ON CONFLICT (slot, key, roots, bucket) DO UPDATE "
            f"SET {_ADDED}", part)
        days.update(r[0] for r in db.execute(
            f"SELECT DISTINCT CAST(r.ts / 300 AS INTEGER) / {SLOTS_PER_DAY} FROM requests r "
            f"WHERE {where}", part))
    for day in sorted(days):
        _refresh_days(db, day, day)


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


def rebuild(db: sqlite3.Connection) -> None:
    """Recompute every slot (after a migration or a first pass; in the caller's transaction).

    Every row is read, so the table is scanned in its own order (NOT INDEXED):
    walking the ``ts`` index would visit the rows in time order, one random
    page read each.
    """
    lo, hi = db.execute("SELECT min(ts), max(ts) FROM requests").fetchone()
    db.execute("DELETE FROM slots")
    db.execute("DELETE FROM slot_days")
    db.execute("DELETE FROM slot_day_peaks")
    if lo is None:
        return
    level = level_sql(stored_thresholds(db))
    db.execute("INSERT OR IGNORE INTO slot_sessions (session) "
               "SELECT DISTINCT r.session FROM requests r NOT INDEXED")
    db.execute(
        f"INSERT OR IGNORE INTO slot_keys (sid, {_KEY_COLUMNS}, long) "
        f"SELECT DISTINCT s.id, r.project, r.model, r.source, r.service_tier, "
        f"r.inference_geo, r.speed, {level} FROM requests r NOT INDEXED "
        f"JOIN slot_sessions s ON s.session = r.session")
    db.execute(
        "INSERT INTO slots SELECT CAST(r.ts / 300 AS INTEGER), k.id, r.roots, "
        f"{BUCKET}, k.sid, count(*), sum(r.input), sum(r.output), sum(r.cache_read), "
        f"sum(r.cache_write_5m), sum(r.cache_write_1h), sum(r.web_search), sum({GAP_MS}), "
        f"min(r.ts), max(r.ts), {MINUTES} FROM requests r NOT INDEXED "
        f"{_JOIN_KEY.format(level=level)} GROUP BY 1, 2, 3, 4")
    _refresh_days(db, slot_of(lo) // SLOTS_PER_DAY, slot_of(hi) // SLOTS_PER_DAY)


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
