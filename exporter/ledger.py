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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Final

from exporter.records import Checkpoint, LineResult, Parsed, Request, Source, merge

APPLICATION_ID: Final = 0x43434558  # "CCEX": marks the file as ours
SCHEMA_VERSION: Final = 1
_IN_CHUNK: Final = 500  # keys per "IN (…)" lookup, under SQLite's variable limit

_SCHEMA: Final = """
CREATE TABLE requests (
    key TEXT PRIMARY KEY, ts REAL NOT NULL, model TEXT NOT NULL, session TEXT NOT NULL,
    project TEXT NOT NULL, source INTEGER NOT NULL, input INTEGER NOT NULL,
    output INTEGER NOT NULL, cache_read INTEGER NOT NULL, cache_write_5m INTEGER NOT NULL,
    cache_write_1h INTEGER NOT NULL, service_tier TEXT NOT NULL, inference_geo TEXT NOT NULL,
    speed TEXT NOT NULL, recorded_cost_usd REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE files (
    path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, size INTEGER, offset INTEGER,
    fp_len INTEGER, fingerprint TEXT, mtime_ns INTEGER
);
CREATE TABLE counters (
    name TEXT NOT NULL, label TEXT NOT NULL, value INTEGER NOT NULL, PRIMARY KEY (name, label)
);
"""
_COLUMNS: Final = (
    "key, ts, model, session, project, source, input, output, cache_read, cache_write_5m, "
    "cache_write_1h, service_tier, inference_geo, speed, recorded_cost_usd"
)


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
        tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if tables and app_id != APPLICATION_ID:
            raise LedgerError(
                f"{self.path} is an SQLite file of another program (application_id {app_id});"
                " refusing to touch it: point --state-dir elsewhere"
            )
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise LedgerError(f"ledger {self.path} is corrupt ({check}); it was left untouched")
        db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode survives a process crash; a power cut may lose the
        # newest batches, but their checkpoints go with them, so they are re-read.
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA cache_size=-65536")  # 64 MiB: a year of rows stays in memory
        if not tables:
            db.execute("BEGIN IMMEDIATE")
            db.executescript(_SCHEMA)  # executescript commits the open transaction
            db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise LedgerError(
                f"ledger {self.path} has schema version {version}, this build knows "
                f"{SCHEMA_VERSION}; upgrade claude-code-exporter"
            )

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def checkpoints(self) -> dict[str, Checkpoint]:
        """Every file's checkpoint, by path."""
        rows = self._db.execute(
            "SELECT path, dev, ino, size, offset, fp_len, fingerprint, mtime_ns FROM files"
        )
        return {r[0]: Checkpoint(*r) for r in rows}

    def forget_files(self, paths: Iterable[str]) -> None:
        """Drop checkpoints of files that no longer exist (their rows stay)."""
        with self._transaction():
            self._db.executemany("DELETE FROM files WHERE path = ?", ((p,) for p in paths))

    def apply(
        self, parsed: Parsed, checkpoints: Sequence[Checkpoint], bytes_read: int
    ) -> Applied:
        """Merge one parsed batch, its checkpoints and its line counts atomically."""
        with self._transaction():
            old = self._rows(list(parsed.requests))
            applied = Applied()
            changed = []
            for key, req in parsed.requests.items():
                prev = old.get(key)
                merged = req if prev is None else merge(prev, req)
                if prev is None:
                    applied.new.append(merged)
                elif merged != prev:
                    applied.upgraded.append((prev, merged))
                if merged != prev:
                    changed.append(merged)
            changed.sort()  # key order: B-tree appends instead of random page splits
            self._db.executemany(
                f"INSERT OR REPLACE INTO requests ({_COLUMNS}) VALUES ({','.join('?' * 15)})",
                changed,
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?)",
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
        rows = self._db.execute("SELECT label, value FROM counters WHERE name = ?", (name,))
        return dict(rows.fetchall())

    def requests(self, since: float | None = None, until: float | None = None) -> list[Request]:
        """Every request with ``since <= ts < until``, in time order."""
        lo = float("-inf") if since is None else since
        hi = float("inf") if until is None else until
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM requests WHERE ts >= ? AND ts < ?", (lo, hi)
        ).fetchall()
        out = [_request(r) for r in rows]
        out.sort(key=_TIME_ORDER)  # faster in Python than ORDER BY on a text key
        return out

    def count(self) -> int:
        """Number of requests in the ledger."""
        n: int = self._db.execute("SELECT count(*) FROM requests").fetchone()[0]
        return n

    def _rows(self, keys: list[str]) -> dict[str, Request]:
        """The stored rows of some keys."""
        out: dict[str, Request] = {}
        for i in range(0, len(keys), _IN_CHUNK):
            part = keys[i : i + _IN_CHUNK]
            marks = ",".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM requests WHERE key IN ({marks})", part
            )
            out.update((r[0], _request(r)) for r in rows)
        return out

    def _transaction(self) -> _Tx:
        """A write transaction that turns SQLite failures into LedgerError."""
        return _Tx(self._db, self.path)


class _Tx:
    """BEGIN IMMEDIATE … COMMIT, rolled back on any exception."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db = db
        self._path = path

    def __enter__(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise LedgerError(f"ledger {self._path}: {exc}") from exc

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
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

