"""The requests table seen from Python: its columns, a row as a Request, lookups, meta, counters.

Every part of the ledger that reads or writes rows shares these helpers; none
opens a transaction (the caller's :class:`exporter.ledger.tx.Tx` holds one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from exporter.ledger.schema import MAX_ROOT_BITS
from exporter.records import Request, Source
from exporter.sqlite import sqlite3

IN_CHUNK: Final = 500  # keys per "IN (…)" lookup, under SQLite's variable limit
FIELDS: Final = Request._fields  # requests columns after ``id``, in Request order
COLUMNS: Final = ", ".join(FIELDS)
IN_JSON: Final = "(SELECT value FROM json_each(?))"  # a list passed as one JSON parameter
_SOURCES: Final = tuple(Source)


def request_of(row: Sequence[Any]) -> Request:
    """A Request from a row in ``COLUMNS`` order (its source stored as an integer)."""
    key, ts, model, session, project, source, *rest = row
    return Request(key, ts, model, session, project, _SOURCES[source], *rest)


def chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    """Slices of at most ``IN_CHUNK`` items, for ``IN (…)`` lookups."""
    for i in range(0, len(items), IN_CHUNK):
        yield items[i : i + IN_CHUNK]


def by_key(db: sqlite3.Connection, keys: list[str]) -> dict[str, tuple[int, Request, int]]:
    """The stored rows (id, request, roots bitmask) of some keys."""
    out: dict[str, tuple[int, Request, int]] = {}
    for part in chunks(keys):
        marks = ",".join("?" * len(part))
        rows = db.execute(
            f"SELECT id, roots, {COLUMNS} FROM requests WHERE key IN ({marks})", part)
        out.update((r[2], (r[0], request_of(r[2:]), r[1])) for r in rows)
    return out


def by_id(db: sqlite3.Connection, ids: Sequence[int]) -> dict[int, Request]:
    """Stored rows by id."""
    out: dict[int, Request] = {}
    for part in chunks(sorted(ids)):
        marks = ",".join("?" * len(part))
        out.update((r[0], request_of(r[1:])) for r in db.execute(
            f"SELECT id, {COLUMNS} FROM requests WHERE id IN ({marks})", part))
    return out


def roots_mask(db: sqlite3.Connection, rid: int) -> int:
    """The stored roots bitmask of one request."""
    row = db.execute("SELECT roots FROM requests WHERE id = ?", (rid,)).fetchone()
    return int(row[0]) if row else 0


def root_bit(db: sqlite3.Connection, root: str, agent: str = "claude") -> int:
    """The bit of a transcript root in ``requests.roots`` (the root is added on first use).

    ``agent`` is whose logs the root holds; a root first counted by its line
    counters alone (:mod:`exporter.ledger.root_counts`) gets it here.
    """
    db.execute("INSERT INTO roots (path, agent) VALUES (?, ?) ON CONFLICT (path) DO UPDATE "
               "SET agent = excluded.agent WHERE agent != excluded.agent", (root, agent))
    rid = int(db.execute("SELECT id FROM roots WHERE path = ?", (root,)).fetchone()[0])
    return 1 << (min(rid, MAX_ROOT_BITS) - 1)


def meta(db: sqlite3.Connection, name: str) -> str | None:
    """One value of the meta table."""
    rows = db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchall()
    return str(rows[0][0]) if rows else None


def set_meta(db: sqlite3.Connection, name: str, value: str) -> None:
    """Set one value of the meta table."""
    db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, value))


def add_to_counter(db: sqlite3.Connection, name: str, label: str, n: int) -> None:
    """Add to one persistent counter."""
    db.execute(
        "INSERT INTO counters VALUES (?,?,?) "
        "ON CONFLICT (name, label) DO UPDATE SET value = value + excluded.value",
        (name, label, n))
