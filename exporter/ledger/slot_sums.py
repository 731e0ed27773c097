"""Keeping the usage slots summed with the rows, in the ledger's transactions.

Slots are recomputed from the ``requests`` rows, never adjusted by deltas:
:func:`refresh` deletes the slots it is given and sums them again, so it is
idempotent and cannot drift. A batch's new rows are added by their own values
(:func:`update`); a first pass, a migration or a new long-context split sums
everything again (:func:`rebuild`). Days, blocks and day peaks are summed
from the slots; the value bins are :mod:`exporter.ledger.slot_bins`'. The
layout is :mod:`exporter.ledger.slots`'.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

from exporter.ledger.schema import create_slot_tables
from exporter.ledger.slot_bins import BinRow, DayBins, add_bins, refresh_bins, shift_bins
from exporter.ledger.slots import (
    BLOCK_DAYS,
    BUCKET,
    GAP_MS,
    SLOT_SECONDS,
    SLOT_SQL,
    SLOTS_PER_DAY,
    TIME_SPAN,
    VERSION,
    level_sql,
    slot_of,
    stored_thresholds,
    version,
)
from exporter.sqlite import sqlite3

MERGE_SLOTS: Final = 48  # refresh touched slots less than 4 hours apart in one statement
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
_IN_RANGE: Final = f"r.ts >= ? AND r.ts < ? AND {SLOT_SQL} BETWEEN ? AND ?"
_KEY_COLUMNS: Final = "project, model, source, service_tier, inference_geo, speed"
_JOIN_KEY: Final = (
    "JOIN slot_sessions s ON s.session = r.session "
    "JOIN slot_keys k ON k.sid = s.id AND k.project = r.project AND k.model = r.model "
    "AND k.source = r.source AND k.service_tier = r.service_tier "
    "AND k.inference_geo = r.inference_geo AND k.speed = r.speed AND k.long = {level}"
)


def ensure(db: sqlite3.Connection, wanted: Sequence[int] = ()) -> bool:
    """Bring the slots to this :data:`VERSION`, split by ``wanted`` thresholds as well.

    The split only grows (the stored thresholds plus ``wanted``): slots split by
    more thresholds still answer a price table using fewer, and two price tables
    cannot make the slots rebuild in turn. Inside the caller's transaction;
    returns whether a rebuild happened (seconds on a year of history).
    """
    create_slot_tables(db)
    stored = stored_thresholds(db)
    target = tuple(sorted({*stored, *(int(t) for t in wanted)}))
    if version(db) == VERSION and target == stored:
        return False
    db.execute("INSERT OR REPLACE INTO slot_meta VALUES ('thresholds', ?)", (json.dumps(target),))
    rebuild(db)
    return True


def needs_ensure(db: sqlite3.Connection, wanted: Sequence[int] = ()) -> bool:
    """Whether :func:`ensure` would rebuild (a cheap read, outside any transaction)."""
    return version(db) != VERSION or not {int(t) for t in wanted} <= set(stored_thresholds(db))


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
        _refresh_range(db, lo, hi, hist=False)
    # Each touched day's histograms once, however many runs fall in it.
    days = sorted({d for lo, hi in runs for d in range(lo // SLOTS_PER_DAY,
                                                        hi // SLOTS_PER_DAY + 1)})
    for lo_day, hi_day in _day_runs(days):
        _refresh_blocks(db, lo_day // BLOCK_DAYS, hi_day // BLOCK_DAYS)
        refresh_bins(db, lo_day, hi_day)


def _refresh_range(db: sqlite3.Connection, lo: int, hi: int, *, hist: bool = True) -> None:
    """Sum every slot from ``lo`` to ``hi`` (inclusive) again; see :func:`refresh`.

    ``hist``: and the value histograms of their days (:func:`refresh` does those once).
    """
    _sum_slots(db, lo, hi)
    _refresh_days(db, lo // SLOTS_PER_DAY, hi // SLOTS_PER_DAY)
    if hist:
        _refresh_blocks(db, lo // SLOTS_PER_DAY // BLOCK_DAYS, hi // SLOTS_PER_DAY // BLOCK_DAYS)
        refresh_bins(db, lo // SLOTS_PER_DAY, hi // SLOTS_PER_DAY)


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
            add_bins(db, where, part)
    return days


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
    create_slot_tables(db)
    db.execute("INSERT OR REPLACE INTO slot_meta VALUES ('version', ?)", (str(VERSION),))
    lo, hi = db.execute(TIME_SPAN).fetchone()
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
    refresh_bins(db, lo_day, hi_day, bins)


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
