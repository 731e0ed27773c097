"""Attribution day sums: the requests summed per UTC day, kind and value, kept with the rows.

The attribution views (`report skill|plugin|mcp|agent`) and the start-up of
the ``claude_code_attributed_*`` families need sums per skill, plugin, MCP
server, agent and effort value, split by price class. Grouping the requests
for them sorts every request (seconds on a year of history); so the ledger
keeps, in the same transaction as its rows, the table ``attr_days``: per UTC
day, *kind* (:data:`KINDS`: 0-3 the views' columns, every request in each,
``''`` for none; 4 effort, requests with one only; 5-8 the views' columns
again split by effort, which only ``--breakdown-by effort`` reads: the others
read a quarter of the rows), value, effort, slot key (exporter.ledger.slots:
session, project and the price attributes, long-context level by the slots'
thresholds) and roots bitmask (the scope), the request count, token sums and
the first and last request's time. A report or a start-up then reads a few
rows per day, not every request.

Kept like the slots' day sums: a batch's new rows are added by their own
values (:func:`update`); a rewritten row's session-day, old and new, is summed
again from its requests (the ``(session, ts)`` index: a session's day, not the
history); a first pass, a migration or a new long-context split sums
everything again (:func:`rebuild`). A day row is always the sum of its
requests, so a reader gets the same figures from it as from the requests.

``slot_meta`` row ``attr_days`` says what the table holds: ``[VERSION,
thresholds]``. A reader uses the table only when that matches the slots'
layout and thresholds (:func:`current`), else the requests. A raw first pass
clears it (:func:`forget`) until its end sums the table again; a build that
does not know the table resets the slots' version (exporter.ledger.slots
:data:`~exporter.ledger.slots.VERSION` 5 came with this table), so the next writer
that knows it sums it again (:func:`ensure`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from exporter.ledger import slots
from exporter.ledger.schema import ATTR_DAYS_META, ATTR_DAYS_TABLE, create_slot_tables
from exporter.records import ATTRIBUTION
from exporter.sqlite import sqlite3

VERSION: Final = 1
META: Final = ATTR_DAYS_META  # its row in slot_meta
KINDS: Final = ATTRIBUTION  # skill, plugin, mcp_server, agent, effort: kind is the index
EFFORT: Final = KINDS.index("effort")
PAIRS: Final = len(KINDS)  # kind PAIRS + i: kind i's value and the effort, for --breakdown-by
DAY_SQL: Final = f"(CAST(r.ts / {slots.SLOT_SECONDS} AS INTEGER) / {slots.SLOTS_PER_DAY})"
"""A request's UTC day as its slot's (exporter.ledger.slots): the same day on either side."""
SUMS: Final = ("n", "input", "output", "cache_read", "cache_write_5m", "cache_write_1h",
               "web_search")
_JOIN_KEY: Final = (
    "JOIN slot_sessions s ON s.session = r.session "
    "JOIN slot_keys k ON k.sid = s.id AND k.project = r.project AND k.model = r.model "
    "AND k.source = r.source AND k.service_tier = r.service_tier "
    "AND k.inference_geo = r.inference_geo AND k.speed = r.speed AND k.long = {level}")
_ADDED: Final = ", ".join([*(f"{c} = {c} + excluded.{c}" for c in SUMS),
                           "first = min(first, excluded.first)",
                           "last = max(last, excluded.last)"])
_GROUP_SUMS: Final = ("sum(n), sum(i), sum(o), sum(cr), sum(w5), sum(w1), sum(ws), min(f), max(l) "
                "FROM g")

Reader = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]


def create(db: sqlite3.Connection) -> None:
    """Create the table (inside the caller's transaction); a no-op when it exists."""
    db.execute(ATTR_DAYS_TABLE)


def _meta(thresholds: Sequence[int]) -> str:
    """The ``slot_meta`` value of a table summed with the slots' ``thresholds``."""
    return json.dumps([VERSION, sorted(int(t) for t in thresholds)])


def _stored(read: Reader) -> str | None:
    """The table's ``slot_meta`` value (None: never summed, or cleared)."""
    try:
        rows = read("SELECT value FROM slot_meta WHERE name = ?", [META])
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        return None
    return str(rows[0][0]) if rows else None


def current(read: Reader) -> bool:
    """Whether the table holds every request, by the slots' layout (a reader's check)."""
    if slots.read_version(read) != slots.VERSION:
        return False
    return _stored(read) == _meta(slots.read_thresholds(read))


def _db_reader(db: sqlite3.Connection) -> Reader:
    """A :data:`Reader` on a connection."""
    return lambda sql, params: db.execute(sql, params).fetchall()


def needs_ensure(db: sqlite3.Connection) -> bool:
    """Whether :func:`ensure` would sum the table (a cheap read, outside any transaction)."""
    return not current(_db_reader(db))


def ensure(db: sqlite3.Connection, rebuilt: bool = False) -> bool:
    """Sum the table once if it is not this layout's (after ``slot_sums.ensure``, same transaction).

    ``rebuilt``: the slots were just summed again (their keys may be new):
    the table is too. Returns whether it was summed.
    """
    if not rebuilt and current(_db_reader(db)):
        return False
    rebuild(db, keys=True)
    return True


def forget(db: sqlite3.Connection) -> None:
    """Mark the table stale (a raw pass begins: its batches do not keep it)."""
    db.execute("DELETE FROM slot_meta WHERE name = ?", (META,))


def rebuild(db: sqlite3.Connection, *, keys: bool = False) -> None:
    """Sum every request again (caller's transaction, after the slots' own rebuild or ensure).

    ``keys``: add the slot keys first (a migration: the slots may predate a
    row's key); a first pass's slots have just added every one. One GROUP BY
    over the requests in table order (NOT INDEXED), then one per kind over
    its result.
    """
    create_slot_tables(db)
    create(db)
    db.execute("DELETE FROM attr_days")
    level = slots.level_sql(slots.stored_thresholds(db))
    if keys:
        db.execute("INSERT OR IGNORE INTO slot_sessions (session) "
                   "SELECT DISTINCT session FROM requests NOT INDEXED")
        db.execute(
            "INSERT OR IGNORE INTO slot_keys (sid, project, model, source, service_tier, "
            f"inference_geo, speed, long) SELECT DISTINCT s.id, r.project, r.model, r.source, "
            f"r.service_tier, r.inference_geo, r.speed, {level} FROM requests r NOT INDEXED "
            "JOIN slot_sessions s ON s.session = r.session")
    _insert(db, "requests r NOT INDEXED", "1", (), level)
    db.execute("INSERT OR REPLACE INTO slot_meta VALUES (?, ?)",
               (META, _meta(slots.stored_thresholds(db))))


def _insert(db: sqlite3.Connection, source: str, where: str, params: Sequence[object],
            level: str) -> None:
    """Add the sums of ``source``'s rows that match ``where`` to the table.

    The rows are grouped once by day, key, roots and all five values, then
    that (much smaller) result once per kind. Their slot keys must exist.
    """
    group = (f"WITH g AS MATERIALIZED (SELECT {DAY_SQL} AS d, k.id AS key, r.roots AS ro, "
             "r.skill AS a0, r.plugin AS a1, r.mcp_server AS a2, r.agent AS a3, r.effort AS e, "
             "count(*) AS n, sum(r.input) AS i, sum(r.output) AS o, sum(r.cache_read) AS cr, "
             "sum(r.cache_write_5m) AS w5, sum(r.cache_write_1h) AS w1, "
             "sum(r.web_search) AS ws, min(r.ts) AS f, max(r.ts) AS l "
             f"FROM {source} {_JOIN_KEY.format(level=level)} WHERE {where} "
             "GROUP BY 1, 2, 3, 4, 5, 6, 7, 8) ")
    parts = [f"SELECT d, {i}, a{i}, '', key, ro, {_GROUP_SUMS} GROUP BY 1, 3, 5, 6"
             for i in range(EFFORT)]
    parts.append(f"SELECT d, {EFFORT}, e, '', key, ro, {_GROUP_SUMS} WHERE e != '' "
                 "GROUP BY 1, 3, 5, 6")
    parts.extend(f"SELECT d, {PAIRS + i}, a{i}, e, key, ro, {_GROUP_SUMS} GROUP BY 1, 3, 4, 5, 6"
                 for i in range(EFFORT))
    db.execute(f"{group}INSERT INTO attr_days SELECT * FROM ({' UNION ALL '.join(parts)}) "
               "WHERE 1 ON CONFLICT (day, kind, value, effort, key, roots) "
               f"DO UPDATE SET {_ADDED}", params)


def update(db: sqlite3.Connection, new: Sequence[int],
           changed: Iterable[tuple[str, float]]) -> None:
    """One batch of the ledger (inside its transaction, after ``slot_sums.update``).

    ``new``: ids of inserted rows, added by their own values. ``changed``:
    the ``(session, ts)`` of each rewritten row's old and new version; each
    such session-day is summed again from its rows (after the adds).
    """
    if _stored(_db_reader(db)) is None:
        return  # stale (a raw pass) or never summed: the next ensure or rebuild sums it
    level = slots.level_sql(slots.stored_thresholds(db))
    ids = sorted(new)
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        _insert(db, "requests r", f"r.id IN ({','.join('?' * len(part))})", part, level)
    days = sorted({(session, slots.slot_of(ts) // slots.SLOTS_PER_DAY)
                   for session, ts in changed})
    for session, day in days:
        db.execute("DELETE FROM attr_days WHERE day = ? AND key IN (SELECT k.id FROM slot_keys k "
                   "JOIN slot_sessions s ON s.id = k.sid WHERE s.session = ?)", (day, session))
        # A second of slack around the day; the exact test is the slot's day.
        _insert(db, "requests r", f"r.session = ? AND r.ts >= ? AND r.ts < ? AND {DAY_SQL} = ?",
                (session, day * 86_400 - 1.0, (day + 1) * 86_400 + 1.0, day), level)
