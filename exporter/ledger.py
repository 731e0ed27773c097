"""Ledger stage: the single source of truth, one SQLite row per request.

Rows are keyed by request key and merged by :func:`exporter.records.merge`
(per-field maximum, earliest time), which is idempotent: reading the same
line twice changes nothing. Each :meth:`Ledger.apply` is one transaction that
writes the merged rows, the files' checkpoints and the line counters
together, so a kill -9 at any moment leaves either all of a batch or none of
it, and the next run re-reads exactly what was not committed. Rows are never
deleted: transcripts that Claude Code cleans up stay counted.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Final

from exporter.records import (
    Appearance,
    Checkpoint,
    LineResult,
    Parsed,
    Request,
    Source,
    gap_seconds,
    merge,
)

APPLICATION_ID: Final = 0x43434558  # "CCEX": marks the file as ours
SCHEMA_VERSION: Final = 2
_IN_CHUNK: Final = 500  # keys per "IN (…)" lookup, under SQLite's variable limit
LEGACY_FILE: Final = ""  # the file of v1 requests, whose provenance was never recorded

# One statement per item: they run inside one transaction with the header pragmas,
# so a kill at any point leaves either no schema or all of it (executescript would
# commit first). IF NOT EXISTS: a second process creating the same fresh ledger
# at the same moment finds the work done instead of failing.
_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, ts REAL NOT NULL, model TEXT NOT NULL,
    session TEXT NOT NULL, project TEXT NOT NULL, source INTEGER NOT NULL,
    input INTEGER NOT NULL, output INTEGER NOT NULL, cache_read INTEGER NOT NULL,
    cache_write_5m INTEGER NOT NULL, cache_write_1h INTEGER NOT NULL,
    service_tier TEXT NOT NULL, inference_geo TEXT NOT NULL, speed TEXT NOT NULL,
    recorded_cost_usd REAL NOT NULL, web_search INTEGER NOT NULL DEFAULT 0, gap REAL)""",
    "CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts)",
    "CREATE INDEX IF NOT EXISTS requests_session_ts ON requests (session, ts)",
    """CREATE TABLE IF NOT EXISTS checkpoints (
    path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, size INTEGER, offset INTEGER,
    fp_len INTEGER, fingerprint TEXT, mtime_ns INTEGER)""",
    "CREATE TABLE IF NOT EXISTS roots (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE)",
    """CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, root INTEGER, session TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS sessions (
    session TEXT PRIMARY KEY, last_ts REAL NOT NULL) WITHOUT ROWID""",
    # prev: ts of the latest earlier main request of the same file (None: none, or not main)
    """CREATE TABLE IF NOT EXISTS appearances (
    request INTEGER NOT NULL, file INTEGER NOT NULL, prev REAL,
    PRIMARY KEY (request, file)) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS appearances_file ON appearances (file)",
    """CREATE TABLE IF NOT EXISTS counters (
    name TEXT NOT NULL, label TEXT NOT NULL, value INTEGER NOT NULL, PRIMARY KEY (name, label))""",
)
_V1_TABLES: Final = frozenset({"requests", "files", "counters"})
_FIELDS: Final = Request._fields  # the requests columns after ``id``, in Request order
_COLUMNS: Final = ", ".join(_FIELDS)


class LedgerError(Exception):
    """The ledger file cannot be used (foreign, corrupt, unwritable, disk full)."""


@dataclass(slots=True)
class Applied:
    """What one batch changed: new rows, upgraded rows (with their old values)."""

    new: list[Request] = field(default_factory=list)
    upgraded: list[tuple[Request, Request]] = field(default_factory=list)  # (old, new)
    lines: dict[str, int] = field(default_factory=dict)  # by result label
    rejected: dict[str, int] = field(default_factory=dict)  # by reason
    bytes_read: int = 0


class Ledger:
    """The request ledger in one SQLite file (WAL mode)."""

    def __init__(self, path: Path) -> None:
        """Open or create the ledger at ``path``; raise LedgerError if it is not ours."""
        self.path = path
        self._lock = threading.RLock()  # one connection, used from the scan and HTTP threads
        self._views: dict[tuple[str, ...], str] = {}
        try:
            # Token counts and project paths are private: owner-only directory and file
            # (SQLite gives its -wal and -shm files the database file's mode).
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600))
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._init()
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot use ledger {path}: {exc}") from exc
        except OSError as exc:
            raise LedgerError(f"cannot open ledger {path}: {exc.strerror or exc}") from exc

    def _init(self) -> None:
        """Check the file is a ledger of ours (or empty), create the schema if new."""
        db = self._db
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        tables = self._tables()
        # A v1 build killed between its schema commit and the header pragmas left
        # its tables without our id: recognise them as ours, not as a stranger's.
        half_made = app_id == 0 and tables == _V1_TABLES
        if tables and app_id != APPLICATION_ID and not half_made:
            raise LedgerError(
                f"{self.path} is an SQLite file of another program (application_id {app_id});"
                " refusing to touch it: point --state-dir elsewhere"
            )
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise LedgerError(f"ledger {self.path} is corrupt ({check}); it was left untouched")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if half_made:
            version = 1
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"ledger {self.path} has schema version {version}, this build knows "
                f"{SCHEMA_VERSION}; upgrade claude-code-exporter"
            )
        db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode survives a process crash; a power cut may lose the
        # newest batches, but their checkpoints go with them, so they are re-read.
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA cache_size=-65536")  # 64 MiB: a year of rows stays in memory
        if version < SCHEMA_VERSION:
            with self._transaction():
                self._create_or_migrate()

    def _tables(self) -> frozenset[str]:
        """Names of the tables in the file."""
        rows = self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return frozenset(r[0] for r in rows)

    def _create_or_migrate(self) -> None:
        """Inside a write transaction: create the schema, or bring a v1 ledger to v2."""
        db = self._db
        # Read again under the write lock: another process may have done it meanwhile.
        version = db.execute("PRAGMA user_version").fetchone()[0]
        tables = self._tables()
        if version == SCHEMA_VERSION:
            return
        if tables >= _V1_TABLES and "checkpoints" not in tables:
            _migrate_v1(db)
        for statement in _SCHEMA:
            db.execute(statement)
        db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def checkpoints(self) -> dict[str, Checkpoint]:
        """Every file's checkpoint, by path."""
        rows = self.read(
            "SELECT path, dev, ino, size, offset, fp_len, fingerprint, mtime_ns FROM checkpoints"
        )
        return {r[0]: Checkpoint(*r) for r in rows}

    def forget_files(self, paths: Iterable[str]) -> None:
        """Drop checkpoints of files that no longer exist (their rows and provenance stay)."""
        with self._transaction():
            self._db.executemany("DELETE FROM checkpoints WHERE path = ?", ((p,) for p in paths))

    def apply(
        self, parsed: Parsed, checkpoints: Sequence[Checkpoint], bytes_read: int,
        appearances: Sequence[Appearance] = (),
    ) -> Applied:
        """Merge one parsed batch, its provenance, checkpoints and line counts atomically."""
        with self._transaction():
            applied = self._merge_rows(parsed)
            touched = self._provenance(appearances, applied)
            self._regap(touched, applied)
            self._db.executemany(
                "INSERT OR REPLACE INTO checkpoints VALUES (?,?,?,?,?,?,?,?)",
                [
                    (c.path, c.dev, c.ino, c.size, c.offset, c.fp_len, c.fingerprint, c.mtime_ns)
                    for c in checkpoints
                ],
            )
            counts = parsed.counts
            applied.lines = {
                LineResult.USAGE: len(applied.new),
                LineResult.DUPLICATE: counts.usage_lines - len(applied.new),
                LineResult.OTHER: counts.other,
                LineResult.REJECTED: sum(counts.rejected.values()),
            }
            applied.rejected = dict(counts.rejected)
            applied.bytes_read = bytes_read
            self._count_lines(applied)
        return applied

    def _merge_rows(self, parsed: Parsed) -> _Merged:
        """Insert new requests and upgrade known ones; remember every id."""
        db = self._db
        old = self._rows(list(parsed.requests))
        out = _Merged()
        next_id = int(db.execute("SELECT coalesce(max(id), 0) FROM requests").fetchone()[0]) + 1
        inserts: list[tuple[Any, ...]] = []
        updates: list[tuple[Any, ...]] = []
        for key, req in parsed.requests.items():
            prev = old.get(key)
            if prev is None:
                merged = req._replace(gap=None)
                out.ids[key] = next_id
                out.ts[key] = merged.ts
                inserts.append((next_id, *merged))
                out.new.append(merged)
                next_id += 1
                continue
            rid, known = prev
            out.ids[key] = rid
            merged = merge(known, req)._replace(gap=known.gap)
            out.ts[key] = merged.ts
            if merged != known:
                out.upgraded.append((known, merged))
                updates.append((*merged[1:], rid))
                if (merged.ts, merged.source) != (known.ts, known.source):
                    out.moved.add(rid)  # its place in the conversation changed
        db.executemany(
            f"INSERT INTO requests (id, {_COLUMNS}) VALUES ({','.join('?' * (len(_FIELDS) + 1))})",
            inserts,
        )
        db.executemany(
            f"UPDATE requests SET {', '.join(f'{c} = ?' for c in _FIELDS[1:])} WHERE id = ?",
            updates,
        )
        return out

    def _provenance(self, appearances: Sequence[Appearance], merged: _Merged) -> set[int]:
        """Record where the batch's requests appeared; return the files whose chains changed."""
        db = self._db
        touched: set[int] = set()
        for app in appearances:
            db.execute("INSERT OR IGNORE INTO roots (path) VALUES (?)", (app.root,))
            db.execute(
                "INSERT INTO files (path, root, session) "
                "VALUES (?, (SELECT id FROM roots WHERE path = ?), ?) "
                "ON CONFLICT (path) DO UPDATE SET session = min(session, excluded.session)",
                (app.path, app.root, app.session),
            )
            fid = int(db.execute("SELECT id FROM files WHERE path = ?", (app.path,)).fetchone()[0])
            before = db.total_changes
            db.executemany(
                "INSERT OR IGNORE INTO appearances (request, file) VALUES (?, ?)",
                [(merged.ids[k], fid) for k in app.keys if k in merged.ids],
            )
            if db.total_changes != before:
                touched.add(fid)
            times = [merged.ts[k] for k in app.keys if k in merged.ts]
            if times:
                db.execute(
                    "INSERT INTO sessions VALUES (?, ?) ON CONFLICT (session) "
                    "DO UPDATE SET last_ts = max(last_ts, excluded.last_ts)",
                    (app.session, max(times)),
                )
        for rid in merged.moved:
            touched.update(r[0] for r in db.execute(
                "SELECT file FROM appearances WHERE request = ?", (rid,)))
        return touched

    def _regap(self, files: set[int], merged: _Merged) -> None:
        """Recompute the chains of some files, then the gaps of requests whose chain moved.

        The gap of a main request is the time since the latest earlier main
        request, (ts, key) order, of any file holding it: a function of the
        appearances alone, so file, scan and id order cannot change it.
        """
        db = self._db
        dirty: set[int] = set(merged.moved)
        legacy = db.execute("SELECT id FROM files WHERE path = ?", (LEGACY_FILE,)).fetchone()
        # The legacy pseudo-file is no conversation: its predecessors were fixed at migration.
        files.discard(legacy[0] if legacy else -1)
        for fid in sorted(files):
            rows = db.execute(
                "SELECT a.request, a.prev, r.source, r.ts FROM appearances a "
                "JOIN requests r ON r.id = a.request WHERE a.file = ? ORDER BY r.ts, r.key",
                (fid,),
            ).fetchall()
            last: float | None = None
            changes: list[tuple[float | None, int, int]] = []
            for rid, prev, source, ts in rows:
                want = None
                if source == Source.MAIN:
                    want, last = last, ts
                if want != prev:
                    changes.append((want, rid, fid))
                    dirty.add(rid)
            db.executemany("UPDATE appearances SET prev = ? WHERE request = ? AND file = ?",
                           changes)
        if not dirty:
            return
        gaps: list[tuple[float | None, int]] = []
        for part in _chunks(sorted(dirty)):
            marks = ",".join("?" * len(part))
            for rid, ts, source, prev in db.execute(
                f"SELECT r.id, r.ts, r.source, max(a.prev) FROM requests r "
                f"LEFT JOIN appearances a ON a.request = r.id WHERE r.id IN ({marks}) "
                "GROUP BY r.id", part,
            ):
                main = source == Source.MAIN and prev is not None
                gaps.append((gap_seconds(ts, prev) if main else None, rid))
        db.executemany("UPDATE requests SET gap = ? WHERE id = ?", gaps)
        merged.refresh_gaps(dict((rid, gap) for gap, rid in gaps))

    def _count_lines(self, applied: Applied) -> None:
        """Add one batch's line classification to the persistent counters."""
        rows = [
            *(("lines", result, n) for result, n in applied.lines.items()),
            ("bytes_read", "", applied.bytes_read),
            *(("rejected", reason, n) for reason, n in applied.rejected.items()),
        ]
        self._db.executemany(
            "INSERT INTO counters VALUES (?,?,?) "
            "ON CONFLICT (name, label) DO UPDATE SET value = value + excluded.value",
            [r for r in rows if r[2]],
        )

    def counters(self, name: str) -> dict[str, int]:
        """One family of persistent counters (``lines``, ``rejected``, ``bytes_read``)."""
        return dict(self.read("SELECT label, value FROM counters WHERE name = ?", (name,)))

    def requests(
        self, since: float | None = None, until: float | None = None, *, view: str = "requests"
    ) -> list[Request]:
        """Every request with ``since <= ts < until`` (of a :meth:`scope` view), in time order."""
        lo = float("-inf") if since is None else since
        hi = float("inf") if until is None else until
        rows = self.read(f"SELECT {_COLUMNS} FROM {view} WHERE ts >= ? AND ts < ?", (lo, hi))
        out = [_request(r) for r in rows]
        out.sort(key=_TIME_ORDER)  # faster in Python than ORDER BY on a text key
        return out

    def count(self) -> int:
        """Number of requests in the ledger."""
        n: int = self.read("SELECT count(*) FROM requests")[0][0]
        return n

    def scope(self, roots: Sequence[str | Path] | None) -> str:
        """The name of a TEMP VIEW of ``requests`` that appeared under one of ``roots``.

        A request is in the view when a file holding it lies below (or is) one
        of the roots, also after the file was deleted; requests of a v1 ledger,
        whose files were never recorded, are in every view. ``None``: every
        request. The view has exactly the columns of ``requests``.
        """
        if roots is None:
            return "requests"
        wanted = tuple(sorted({os.path.abspath(os.fspath(r)) for r in roots}))
        with self._lock:
            name = self._views.get(wanted)
            if name is not None:
                return name
            name = f"scope_{len(self._views) + 1}"
            tests = [f"f.path = {_literal(LEGACY_FILE)}"]
            for root in wanted:
                prefix = root.rstrip("/") + "/"
                tests.append(f"f.path = {_literal(root)}")
                tests.append(f"substr(f.path, 1, {len(prefix)}) = {_literal(prefix)}")
            self._db.execute(
                f"CREATE TEMP VIEW {name} AS SELECT * FROM main.requests WHERE id IN ("
                "SELECT a.request FROM main.appearances a JOIN main.files f ON f.id = a.file "
                f"WHERE {' OR '.join(tests)})"
            )
            self._views[wanted] = name
            return name

    def read(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Run one read-only query on the ledger's connection; all rows.

        ``query_only`` makes SQLite refuse any statement that would write, so a
        projection cannot change the ledger by mistake.
        """
        with self._lock:
            try:
                self._db.execute("PRAGMA query_only = ON")
                try:
                    return self._db.execute(sql, params).fetchall()
                finally:
                    self._db.execute("PRAGMA query_only = OFF")
            except sqlite3.Error as exc:
                raise LedgerError(f"ledger {self.path}: {exc}") from exc

    def _rows(self, keys: list[str]) -> dict[str, tuple[int, Request]]:
        """The stored rows (id, request) of some keys."""
        out: dict[str, tuple[int, Request]] = {}
        for part in _chunks(keys):
            marks = ",".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT id, {_COLUMNS} FROM requests WHERE key IN ({marks})", part
            )
            out.update((r[1], (r[0], _request(r[1:]))) for r in rows)
        return out

    def _transaction(self) -> _Tx:
        """A write transaction that turns SQLite failures into LedgerError."""
        return _Tx(self._db, self.path, self._lock)


@dataclass(slots=True)
class _Merged(Applied):
    """Applied, plus what the ledger needs while it finishes the batch."""

    ids: dict[str, int] = field(default_factory=dict)
    ts: dict[str, float] = field(default_factory=dict)  # each batch key's merged time
    moved: set[int] = field(default_factory=set)

    def refresh_gaps(self, gaps: Mapping[int, float | None]) -> None:
        """Give the batch's requests the gaps just computed."""
        ids = self.ids

        def fresh(req: Request) -> Request:
            rid = ids[req.key]
            return req._replace(gap=gaps[rid]) if rid in gaps else req

        self.new = [fresh(r) for r in self.new]
        self.upgraded = [(old, fresh(new)) for old, new in self.upgraded]


def _migrate_v1(db: sqlite3.Connection) -> None:
    """Bring v1 tables to v2 in place (inside the caller's transaction), losing nothing.

    v1 never recorded where a request was read, so its requests get one
    appearance in a pseudo-file (:data:`LEGACY_FILE`) that every scope shows, and
    its gaps (per session, as v1 counted them) are kept as the chain of that file.
    """
    db.execute("ALTER TABLE files RENAME TO checkpoints")
    db.execute("ALTER TABLE requests RENAME TO requests_v1")
    db.execute(_SCHEMA[0])
    v1 = ("key, ts, model, session, project, source, input, output, cache_read, "
          "cache_write_5m, cache_write_1h, service_tier, inference_geo, speed, recorded_cost_usd")
    # Time order gives ids the order new rows get: appends to the id B-tree.
    db.execute(f"INSERT INTO requests ({v1}) SELECT {v1} FROM requests_v1 ORDER BY ts, key")
    db.execute("DROP TABLE requests_v1")
    for statement in _SCHEMA[1:]:
        db.execute(statement)
    db.execute("INSERT INTO files (path, root, session) VALUES (?, NULL, '')", (LEGACY_FILE,))
    db.execute(
        "INSERT INTO appearances (request, file, prev) SELECT id, "
        "(SELECT id FROM files WHERE path = ?), NULL FROM requests", (LEGACY_FILE,)
    )
    # v1's gaps: each main request after its session's previous one, (ts, key) order,
    # kept as the legacy appearances' predecessors (that pseudo-file has no chain).
    db.execute(
        "UPDATE appearances SET prev = p.prev FROM (SELECT id, lag(ts) OVER "
        "(PARTITION BY session ORDER BY ts, key) AS prev FROM requests WHERE source = 0) AS p "
        "WHERE appearances.request = p.id"
    )
    rows = db.execute(
        "SELECT r.id, r.ts, a.prev FROM requests r JOIN appearances a ON a.request = r.id "
        "WHERE a.prev IS NOT NULL"
    ).fetchall()
    db.executemany("UPDATE requests SET gap = ? WHERE id = ?",
                   [(gap_seconds(ts, prev), rid) for rid, ts, prev in rows])
    db.execute("INSERT INTO sessions SELECT session, max(ts) FROM requests GROUP BY session")


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    """Slices of at most ``_IN_CHUNK`` items, for ``IN (…)`` lookups."""
    for i in range(0, len(items), _IN_CHUNK):
        yield items[i : i + _IN_CHUNK]


def _literal(text: str) -> str:
    """An SQL string literal (a TEMP VIEW cannot take parameters)."""
    return "'" + text.replace("'", "''") + "'"


class _Tx:
    """BEGIN IMMEDIATE … COMMIT, rolled back on any exception, under the ledger's lock."""

    def __init__(self, db: sqlite3.Connection, path: Path, lock: threading.RLock) -> None:
        self._db = db
        self._path = path
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._lock.release()
            raise LedgerError(f"ledger {self._path}: {exc}") from exc

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        try:
            self._finish(kind, exc)
        finally:
            self._lock.release()

    def _finish(self, kind: type[BaseException] | None, exc: BaseException | None) -> None:
        """Commit, or roll back and translate the failure."""
        if kind is None:
            try:
                self._db.execute("COMMIT")
                return
            except sqlite3.Error as err:
                self._rollback()
                raise LedgerError(f"ledger {self._path}: {err}") from err
        self._rollback()
        if isinstance(exc, sqlite3.Error):
            raise LedgerError(f"ledger {self._path}: {exc}") from exc

    def _rollback(self) -> None:
        """Roll back what is left: after a full disk or an I/O error SQLite may already have."""
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # the failure reported is the one that matters
                self._db.execute("ROLLBACK")


_SOURCES: Final = tuple(Source)
_TIME_ORDER: Final = attrgetter("ts", "key")


def _request(row: Sequence[Any]) -> Request:
    """A Request from a row in ``_COLUMNS`` order."""
    key, ts, model, session, project, source, *rest = row
    return Request(key, ts, model, session, project, _SOURCES[source], *rest)

