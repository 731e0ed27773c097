"""Ledger stage: the single source of truth, one SQLite row per request.

Rows are keyed by request key and merged by :func:`exporter.records.merge`
(per-field maximum, earliest time), which is idempotent: reading the same
line twice changes nothing. Each :meth:`Ledger.apply` is one transaction that
writes the merged rows, where they appeared (provenance), their gaps and
owning sessions, the rollups (metric sums per class and usage slots), the
files' checkpoints and the line counters together, so a kill -9 at any moment
leaves either all of a batch or none of it, and the next run re-reads exactly
what was not committed. Rows and provenance are never deleted: transcripts
that Claude Code cleans up stay counted, and stay in their roots' scope.

One process writes a ledger at a time (:class:`WriterLock`); others may read.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from exporter.ledger import attr_days as attribution_days
from exporter.ledger import bulk as ledger_bulk
from exporter.ledger import health as ledger_health
from exporter.ledger import slots
from exporter.ledger import wal as ledger_wal
from exporter.ledger.health import LedgerError as LedgerError  # noqa: PLC0414 (re-exported)
from exporter.ledger.schema import (
    LEGACY_FILE,
    MAX_ROOT_BITS,
    PAGE_SIZE,
    PASS_INDEXES,
    READER_INDEXES,
    V1_TABLES,
    WAL_CHECKPOINT_BYTES,
    create,
    has_index,
    index_name,
    migrate_v1,
    v1_provenance,
)
from exporter.ledger.tx import Tx
from exporter.records import (
    ALL_ROOTS,
    COUNT_SUMS,
    Appearance,
    Applied,
    Checkpoint,
    CountClass,
    CountRow,
    HistRow,
    HistSeries,
    LineResult,
    Parsed,
    Request,
    Rules,
    Source,
    gap_seconds,
    merge,
)
from exporter.sqlite import sqlite3

if TYPE_CHECKING:  # the lock module builds on this one
    from exporter.ledger.lock import Holder, WriterLock

APPLICATION_ID: Final = 0x43434558  # "CCEX": marks the file as ours
SCHEMA_VERSION: Final = 3  # 3: the attribution columns (ledger_schema.create)
_IN_CHUNK: Final = 500  # keys per "IN (…)" lookup, under SQLite's variable limit
_FIELDS: Final = Request._fields  # requests columns after ``id``, in Request order
_COLUMNS: Final = ", ".join(_FIELDS)
_SOURCES: Final = tuple(Source)
_TIME_ORDER: Final = attrgetter("ts", "key")
_GAP: Final = Request._fields.index("gap")
_SESSION: Final = Request._fields.index("session")


def _line_fields(req: Request) -> tuple[Any, ...]:
    """What lines can change in a request: not its gap nor its owner (the ledger's to set)."""
    return req[:_SESSION] + req[_SESSION + 1 : _GAP]

@dataclass(frozen=True, slots=True)
class Rollups:
    """Every stored rollup row (the state a projection starts from), and the roots' bits."""

    counts: list[CountRow]
    hists: list[HistRow]
    roots: dict[str, int]


class Ledger:
    """The request ledger in one SQLite file (WAL mode)."""

    def __init__(
        self, path: Path, *, rules: Rules | None = None, settle_seconds: float = 60.0,
        clock: Callable[[], float] = time.time, lock: WriterLock | None = None,
        readonly: bool = False, holder: Holder | None = None, check_above: int | None = None,
    ) -> None:
        """Open or create the ledger at ``path``; raise LedgerError if it is not ours.

        With ``rules`` every write keeps the metric rollups (rebuilt first if
        they were made under other rules); without, a write marks them stale.
        A request enters the histograms ``settle_seconds`` after its last
        change. ``lock`` (held by the caller) is released by :meth:`close`.
        ``readonly``: another process (``holder``) writes; this one only reads.
        ``check_above``: a file of more bytes not known sound is left to the caller to check.
        """
        self.path, self._check_above = path, check_above
        self.health = ledger_health.Health(path, clock)
        self._keeper = ledger_wal.Keeper(path, self.health, clock)
        self.holder = holder
        self.rules = rules
        self.settle_seconds = settle_seconds
        self.readonly = readonly
        self._clock = clock
        self._writer = lock
        self._lock = threading.RLock()  # one connection, used from the scan and HTTP threads
        self._views: dict[int, str] = {}
        # Inside a raw pass (bulk on an empty ledger): rows only, derive after (its memory).
        self._pass: ledger_bulk.Pass | None = None
        try:
            if readonly:
                self._db = sqlite3.connect(f"file:{path}?mode=rw", uri=True,
                                           isolation_level=None, check_same_thread=False)
                self._init_reader()
            else:
                # Token counts and project paths are private: owner-only directory and file
                # (SQLite gives its -wal and -shm files the database file's mode).
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600))
                self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
                self._init()
            _tighten(path)
        except BaseException as exc:
            # A refused file is left as it was found: closing the connection removes the
            # -wal and -shm files opening it made (the process may end without teardown).
            with contextlib.suppress(AttributeError, sqlite3.Error):
                self._db.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise ledger_health.refusal(path, exc) from exc
            if isinstance(exc, OSError):
                raise LedgerError(
                    f"cannot open ledger {path}: {exc.strerror or exc}") from exc
            raise

    # ------------------------------------------------------------- opening
    def _init(self) -> None:
        """Check the file is a ledger of ours (or empty), create or migrate the schema."""
        db = self._db
        version = self._check()
        if version == 0:  # no page written yet: the file's page size is still open
            db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # (and set for good by the WAL switch)
        self._wal()
        # NORMAL in WAL mode survives a process crash; a power cut may lose the
        # newest batches, but their checkpoints go with them, so they are re-read.
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA cache_size=-65536")  # 64 MiB: a year of rows stays in memory
        ledger_wal.configure(db)
        page = db.execute("PRAGMA page_size").fetchone()[0]
        db.execute(f"PRAGMA wal_autocheckpoint={max(1, WAL_CHECKPOINT_BYTES // page)}")
        if version < SCHEMA_VERSION:  # (a v2 ledger's cut-short pass is then derived below)
            with self._transaction():
                self._create_or_migrate()
        if version:
            if self._meta(ledger_bulk.RAW_PASS):
                self._derive()  # a raw pass was cut short: derive what it committed
            # (A raw pass's other indexes: its derive, just above, builds the time's; the
            # incremental path's own wait for its first write, ledger_bulk.rekey.)
            if not all(has_index(db, index_name(st)) for st in READER_INDEXES):
                with self._transaction():  # a bulk pass was cut short: build what it dropped
                    for statement in READER_INDEXES:
                        self._db.execute(statement)
        ledger_health.unstamp(self.path)  # the file changes now: its stamp no longer holds
        if self.rules is not None and self._meta("rollups") != self.rules.fingerprint:
            with self._transaction():
                self._rebuild_rollups(self.rules)
        # The report's slots and attribution day sums: this build's layout, split by every
        # long-context threshold of the price table (the rules know it), else rebuilt once.
        wanted = tuple(getattr(self.rules, "long_context_thresholds", ()))
        if slots.needs_ensure(db, wanted) or attribution_days.needs_ensure(db):
            with self._transaction():
                attribution_days.ensure(db, slots.ensure(db, wanted))

    def _wal(self, deadline_s: float = 10.0) -> None:
        """Switch to WAL mode, retrying while a twin process holds the file.

        The switch takes an exclusive lock without SQLite's busy wait, so a twin
        creating the same ledger at the same moment can make it fail.
        """
        end = time.monotonic() + deadline_s
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= end:
                    raise
                time.sleep(0.05)  # bounded by the deadline: the twin's switch is quick

    def _init_reader(self) -> None:
        """Check the file, and make the connection refuse every write."""
        if self._check() != SCHEMA_VERSION:
            raise LedgerError(f"ledger {self.path} is not yet upgraded by its writer")
        self._db.execute("PRAGMA query_only = ON")

    def _check(self) -> int:
        """The schema version of a file that is ours (0: empty); LedgerError otherwise."""
        db = self._db
        ledger_health.refuse_marked(self.path)  # refused before anything reads it
        # One read transaction: the header and the tables from the same moment (a twin
        # may commit a fresh schema, with its application id, in between two reads).
        db.execute("BEGIN")
        try:
            app_id = db.execute("PRAGMA application_id").fetchone()[0]
            tables = self._tables()
            version: int = db.execute("PRAGMA user_version").fetchone()[0]
        finally:  # (a read that failed, say on a full disk, ended it: its error is the one)
            if db.in_transaction:
                db.execute("COMMIT")
        # A v1 build killed between its schema commit and the header pragmas left
        # its tables without our id: recognise them as ours, not as a stranger's.
        half_made = app_id == 0 and tables == V1_TABLES
        if tables and app_id != APPLICATION_ID and not half_made:
            raise LedgerError(
                f"{self.path} is an SQLite file of another program (application_id {app_id});"
                " refusing to touch it: point --state-dir elsewhere")
        # quick_check reads every page (O(history)); skipped when the file is exactly as a
        # verified close left it, or a live writer checked it (exporter.ledger.health).
        ledger_health.check_at_open(db, self.health, later=self._check_above,
                                    trusted=self.readonly and self.holder is not None)
        if half_made:
            version = 1
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"ledger {self.path} has schema version {version}, this build knows "
                f"{SCHEMA_VERSION}; upgrade claude-code-exporter")
        return version

    def _tables(self) -> frozenset[str]:
        """Names of the tables in the file."""
        rows = self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return frozenset(r[0] for r in rows)

    def _create_or_migrate(self) -> None:
        """Inside a write transaction: create the schema, or bring a v1 ledger to v2."""
        db = self._db
        # Read again under the write lock: another process may have done it meanwhile.
        if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        tables = self._tables()
        v1 = tables >= V1_TABLES and "checkpoints" not in tables
        if v1:
            migrate_v1(db)
        create(db)
        if v1:
            v1_provenance(db)
            slots.rebuild(db)
        db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the database (and give up the writer lock, if this ledger holds one).

        A writer that closes the last connection (SQLite then folds the WAL in)
        stamps a verified file whose WAL frames all hold, so the next open can
        skip reading every page (exporter.ledger.health).
        """
        with self._lock:
            sound = not self.readonly and self.health.verified and self._keeper.verified()
            self._db.close()
            if sound:
                ledger_health.stamp_clean(self.path)
        if self._writer is not None:
            self._writer.release()
            self._writer = None

    @contextlib.contextmanager
    def bulk(self, expected_rows: int, *, raw: bool = False) -> Iterator[None]:
        """Around a pass expected to add ``expected_rows``: build reader indexes once after.

        When the new rows outnumber those held, the reader-only indexes are
        dropped first and built once after (sorting N rows beats N random
        inserts into five B-trees). A pass cut short leaves them to the next
        open, which builds them. A raw pass also drops the indexes only the
        incremental path reads (the key's unique index, the appearances' file
        index), which its first write builds (exporter.ledger.bulk.rekey).

        ``raw`` (the caller needs no per-batch :class:`Applied` rows or rollup
        increments): if the ledger holds no request, each :meth:`apply` only
        stores rows and provenance (and chains its own files), and owners,
        rollups, slots and what later batches left stale are derived once
        when the pass ends (exporter.ledger.bulk); a pass cut short is
        derived by the next open.
        """
        if self.readonly:
            yield
            return
        raw = raw and not self._db.execute("SELECT 1 FROM requests LIMIT 1").fetchone()
        # count(*) walks an index: only asked when the pass is big enough to matter.
        drop = expected_rows > 10_000 and (raw or expected_rows > self.count())
        self._begin_bulk(raw=raw, drop=drop)
        self._pass = ledger_bulk.Pass() if raw else None
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            state, self._pass = self._pass, None
            try:
                if raw:
                    with contextlib.suppress(sqlite3.Error):  # it goes with the connection anyway
                        self._db.execute(f"DROP TABLE IF EXISTS temp.{ledger_bulk.STAGED}")
                    self._derive(state)
                if drop:
                    with self._transaction():
                        for statement in READER_INDEXES:
                            self._db.execute(statement)
            except LedgerError:
                if not failed:
                    raise
                # The pass failed already (that error is the one to see); the next open
                # derives and builds what is missing.

    def _begin_bulk(self, *, raw: bool, drop: bool) -> None:
        """The start of :meth:`bulk`: the indexes it builds once after, dropped; a raw pass marked.

        A raw pass also drops the indexes its staging never reads
        (exporter.ledger.bulk.unkey), the key's among them, and keeps what it
        staged in a table of this connection's own instead.
        """
        if raw or drop:
            with self._transaction():
                if raw:
                    ledger_bulk.unkey(self._db)
                    self._set_meta(ledger_bulk.RAW_PASS, "1")
                    attribution_days.forget(self._db)  # its batches do not keep the sums
                if drop:
                    for statement in READER_INDEXES:
                        self._db.execute(f"DROP INDEX IF EXISTS {index_name(statement)}")
        if raw:
            for statement in ledger_bulk.STAGED_SCHEMA:
                self._db.execute(statement)

    @property
    def raw(self) -> bool:
        """Whether a raw pass is under way (see :meth:`bulk`): batches cost little to commit."""
        return self._pass is not None

    def _derive(self, state: ledger_bulk.Pass | None = None) -> None:
        """Everything a raw pass left to the end, from its rows, in two transactions.

        The first derives gaps and owners (and, while the owners are read, what
        depends on neither); the flag stays set, so a kill after it derives
        again (which leaves those rows as they are). The second builds the
        reader indexes (not the key's: see :meth:`apply`), sums the slots,
        counts the rollups (from the slots' day sums) and clears the flag;
        the reads there that need only the committed rows (the slot keys, the
        slots' day bins) run on a second connection while this one builds the
        indexes and writes the other slot tables. ``state``: what the pass's
        batches chained (none after a kill: everything is derived).
        """
        db = self._db
        rules = self.rules
        beside = ledger_bulk.Beside(db)
        try:
            with self._transaction():
                ledger_bulk.derive(db, beside, state, meanwhile=self._unowned)
            with self._transaction():
                keys = beside.ask(slots.key_rows, fresh=True)
                bins = beside.ask(slots.day_bins)
                # The reader indexes, if the pass dropped them (see bulk): built first,
                # while the slot keys are read beside.
                for statement in READER_INDEXES:
                    db.execute(statement)
                slots.rebuild(db, lambda: beside.result(bins, db),
                              lambda: beside.result(keys, db))
                attribution_days.rebuild(db)
                if rules is not None:  # the rollup classes from the slots just summed
                    self._rebuild_rollups(rules)
                    self._settle_due(rules, _Batch(), force=False)
                else:
                    self._set_meta("rollups", "")  # stale: rebuilt by the next writer with rules
                db.execute("DELETE FROM meta WHERE name = ?", (ledger_bulk.RAW_PASS,))
        finally:
            beside.close()

    def _unowned(self) -> None:
        """What a raw pass's end writes that depends on neither gaps nor owners.

        Done while the owners are read beside (:func:`ledger_bulk.derive`):
        the rows' time index the pass dropped (``PASS_INDEXES``: the slots read
        the rows' time span through it), and the reader indexes of other columns.
        Built again after a kill, each is the same again. (Every row waits to
        settle since its batch: each batch of the pass marks its new rows, in
        the transaction that stores them.)
        """
        for statement in PASS_INDEXES:
            self._db.execute(statement)
        for statement in READER_INDEXES:
            if "session" not in statement and "gap" not in statement:
                self._db.execute(statement)

    # --------------------------------------------------------- checkpoints
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

    # --------------------------------------------------------------- apply
    def apply(
        self, parsed: Parsed, checkpoints: Sequence[Checkpoint], bytes_read: int,
        appearances: Sequence[Appearance] = (),
    ) -> Applied:
        """Merge one parsed batch, its provenance, checkpoints and line counts atomically.

        Everything a row depends on (merge, roots, gap, owner) is computed
        first, then each row is written once: a row inserted and then updated
        three times would cost four passes over seven indexes. The indexes
        only this path reads (a row by its key, appearances by their file)
        are built here if a raw pass left them unbuilt.
        """
        if self._pass is not None:
            return self._apply_raw(parsed, checkpoints, bytes_read, appearances)
        with self._transaction():
            ledger_bulk.rekey(self._db)
            batch = self._merge(parsed)
            self._provenance(appearances, batch)
            self._chains(batch)
            self._owners(batch)
            self._write_rows(batch)
            if self.rules is not None:
                self._roll(self.rules, batch)
                self._settle_due(self.rules, batch, force=False)
            elif batch.ids:
                self._set_meta("rollups", "")  # stale: rebuilt by the next writer with rules
            # The report's slots (and attribution day sums): appended rows by their own values,
            # rewritten rows' slots (session-days) summed again, each touched day summed once.
            touched = {slots.slot_of(ts) for ts in batch.slot_times}
            slots.update(self._db, batch.new_ids, touched, [
                *(_bin_row(known, batch.before[rid], -1) for rid, known in batch.changed.items()),
                *(_bin_row(batch.rows[rid], batch.masks[rid], 1) for rid in batch.changed)])
            attribution_days.update(self._db, batch.new_ids, [(r.session, r.ts) for rid, known in
                                    batch.changed.items() for r in (known, batch.rows[rid])])
            self._finish_batch(batch, parsed, checkpoints, bytes_read, sum(  # lines: not parts
                batch.rows[rid].source is not Source.ADVISOR for rid in batch.new_ids))
        return batch.applied()

    def _apply_raw(
        self, parsed: Parsed, checkpoints: Sequence[Checkpoint], bytes_read: int,
        appearances: Sequence[Appearance],
    ) -> Applied:
        """:meth:`apply` inside a raw pass: rows, provenance, checkpoints and counters only."""
        state = self._pass
        assert state is not None
        try:
            with self._transaction():
                batch = _Batch()
                # Once per root, not per file (a month's batch holds a hundred files).
                bits = {root: self._root_bit(root, batch)
                        for root in dict.fromkeys(app.root for app in appearances)}
                added, changed, parts = ledger_bulk.stage(self._db, parsed, appearances, bits,
                                                          state, due=self._due())
                self._finish_batch(batch, parsed, checkpoints, bytes_read, added - parts)
        except BaseException:
            state.broken = True  # its memory may not match what was rolled back
            raise
        out = batch.applied()
        out.new_count, out.upgraded_count = added, changed
        return out

    def _finish_batch(self, batch: _Batch, parsed: Parsed, checkpoints: Sequence[Checkpoint],
                      bytes_read: int, added: int) -> None:
        """Inside the batch's transaction: its checkpoints and line counters."""
        self._db.executemany(
            "INSERT OR REPLACE INTO checkpoints VALUES (?,?,?,?,?,?,?,?)",
            [
                (c.path, c.dev, c.ino, c.size, c.offset, c.fp_len, c.fingerprint, c.mtime_ns)
                for c in checkpoints
            ],
        )
        counts = parsed.counts
        batch.lines = {
            LineResult.USAGE: added, LineResult.DUPLICATE: counts.usage_lines - added,
            LineResult.OTHER: counts.other,
            LineResult.REJECTED: sum(counts.rejected.values()),
        }
        batch.rejected, batch.iterations = dict(counts.rejected), dict(counts.iterations)
        batch.mended, batch.bytes_read = dict(counts.mended), bytes_read
        self._count_lines(batch)

    def _merge(self, parsed: Parsed) -> _Batch:
        """Merge the batch's requests with the stored rows, in memory; assign new ids."""
        old = self._rows(list(parsed.requests))
        out = _Batch()
        next_id = int(self._db.execute("SELECT coalesce(max(id), 0) FROM requests")
                      .fetchone()[0]) + 1
        for key, req in parsed.requests.items():
            prev = old.get(key)
            if prev is None:
                rid, next_id = next_id, next_id + 1
                out.ids[key] = rid
                out.rows[rid] = req._replace(gap=None)
                out.masks[rid] = 0
                out.new_ids.append(rid)
                continue
            rid, known, mask = prev
            out.ids[key] = rid
            out.known[rid] = known
            out.masks[rid] = out.before[rid] = mask
            merged = merge(known, req)._replace(gap=known.gap, session=known.session)
            out.rows[rid] = merged
            if merged != known and (merged.ts, merged.source) != (known.ts, known.source):
                out.moved.add(rid)  # its place in the conversation changed
        return out

    def _provenance(self, appearances: Sequence[Appearance], batch: _Batch) -> None:
        """Files, roots bits and sessions' last times of the batch's appearances (in memory)."""
        db = self._db
        for app in appearances:
            bit = self._root_bit(app.root, batch)
            known = db.execute("SELECT id, session FROM files WHERE path = ?",
                               (app.path,)).fetchone()
            if known is None:
                fid = int(db.execute(
                    "INSERT INTO files (path, root, session) VALUES "
                    "(?, (SELECT id FROM roots WHERE path = ?), ?) RETURNING id",
                    (app.path, app.root, app.session)).fetchone()[0])
                batch.fresh_files.add(fid)
            else:
                fid = int(known[0])
                if app.session < known[1]:
                    db.execute("UPDATE files SET session = ? WHERE id = ?", (app.session, fid))
            batch.file_session[fid] = min(app.session, known[1]) if known else app.session
            ids = [batch.ids[k] for k in app.keys if k in batch.ids]
            for rid in ids:
                batch.masks[rid] |= bit
                batch.seen.setdefault(rid, set()).add(fid)
            if ids:
                batch.files.add(fid)
                latest = max(batch.rows[rid].ts for rid in ids)
                batch.sessions[app.session] = max(batch.sessions.get(app.session, latest), latest)
        for session, last in batch.sessions.items():
            before = db.total_changes
            db.execute("INSERT INTO sessions VALUES (?, ?) ON CONFLICT (session) DO UPDATE "
                       "SET last_ts = excluded.last_ts WHERE excluded.last_ts > last_ts",
                       (session, last))
            if db.total_changes != before:
                batch.grown.add(session)
        for part in _chunks(sorted(batch.moved)):  # a moved row re-chains every file holding it
            marks = ",".join("?" * len(part))
            batch.files.update(r[0] for r in db.execute(
                f"SELECT file FROM appearances WHERE request IN ({marks})", part))

    def _root_bit(self, root: str, batch: _Batch) -> int:
        """The bit of a transcript root in ``requests.roots`` (created on first use)."""
        db = self._db
        db.execute("INSERT OR IGNORE INTO roots (path) VALUES (?)", (root,))
        rid = int(db.execute("SELECT id FROM roots WHERE path = ?", (root,)).fetchone()[0])
        bit = 1 << (min(rid, MAX_ROOT_BITS) - 1)
        batch.roots[root] = bit
        return bit

    def _chains(self, batch: _Batch) -> None:
        """Each touched file's main chain, the appearances' predecessors, and the gaps.

        The gap of a main request is the time since the latest earlier main
        request, (ts, key) order, of any file holding it: a function of the
        appearances alone, so file, scan and id order cannot change it.

        Only the part of a chain from the batch's earliest change on is read
        and recomputed (a file growing by one line costs one line): a change
        is a request new to the file, or one whose time or source moved (at
        its old and its new place).
        """
        db = self._db
        legacy = db.execute("SELECT id FROM files WHERE path = ?", (LEGACY_FILE,)).fetchone()
        # The legacy pseudo-file is no conversation: its predecessors were fixed at migration.
        files = batch.files - {legacy[0] if legacy else -1}
        rows = batch.rows
        holders: dict[int, set[int]] = {}  # stored files of the batch's stored rows
        stored = sorted(rid for rid in {*batch.seen, *batch.moved} if rid in batch.known)
        for part in _chunks(stored):
            marks = ",".join("?" * len(part))
            for rid, fid in db.execute(
                    f"SELECT request, file FROM appearances WHERE request IN ({marks})", part):
                holders.setdefault(rid, set()).add(fid)
        points: dict[int, list[tuple[float, str]]] = {}  # per file: where its chain changed
        fresh: dict[int, list[int]] = {}  # per file: requests new to it
        for rid, fids in batch.seen.items():
            for fid in fids - holders.get(rid, set()):
                batch.new_appearances.append((rid, fid))
                fresh.setdefault(fid, []).append(rid)
                points.setdefault(fid, []).append((rows[rid].ts, rows[rid].key))
        for rid in batch.moved:
            was, now = batch.known[rid], rows[rid]
            for fid in holders.get(rid, set()):
                points.setdefault(fid, []).extend(((was.ts, was.key), (now.ts, now.key)))
        changed: set[int] = set(batch.moved) | set(batch.new_ids)
        for fid in files:
            if fid in points:
                self._rechain(fid, min(points[fid]), fresh.get(fid, []), batch, changed)
        self._gaps(batch, changed)

    def _rechain(self, fid: int, lo: tuple[float, str], fresh: list[int], batch: _Batch,
                 changed: set[int]) -> None:
        """Recompute one file's predecessors from ``lo`` (ts, key) on.

        Members before ``lo`` neither moved nor are new, so their stored values
        are current: the latest main one among them seeds the chain.
        """
        db = self._db
        ts0, key0 = lo
        seed = db.execute(
            "SELECT r.ts FROM appearances a JOIN requests r ON r.id = a.request "
            "WHERE a.file = ? AND r.source = 0 AND (r.ts < ? OR (r.ts = ? AND r.key < ?)) "
            "ORDER BY r.ts DESC, r.key DESC LIMIT 1", (fid, ts0, ts0, key0)).fetchone()
        members: dict[int, tuple[float, str, int, float | None]] = {
            rid: (ts, key, source, prev) for rid, prev, ts, key, source in db.execute(
                "SELECT a.request, a.prev, r.ts, r.key, r.source FROM appearances a "
                "JOIN requests r ON r.id = a.request WHERE a.file = ? "
                "AND (r.ts > ? OR (r.ts = ? AND r.key >= ?))", (fid, ts0, ts0, key0))}
        for rid in fresh:
            members.setdefault(rid, (0.0, "", 0, None))
        rows = batch.rows
        order = []
        for rid, stored in members.items():
            row = rows.get(rid)
            # The batch's values win over the stored ones.
            ts, key, source = (row.ts, row.key, int(row.source)) if row else stored[:3]
            prev = stored[3]
            if source == Source.MAIN:
                order.append((ts, key, rid, prev))
            elif prev is not None:
                batch.prevs[(rid, fid)] = None
                changed.add(rid)
        order.sort()
        last: float | None = seed[0] if seed else None
        for ts, _key, rid, prev in order:
            if last != prev:
                batch.prevs[(rid, fid)] = last
                changed.add(rid)
            last = ts

    def _gaps(self, batch: _Batch, rids: set[int]) -> None:
        """The gaps of requests whose chains moved: from the max predecessor over their files."""
        prevs: dict[int, list[float | None]] = {}
        for (rid, _fid), prev in batch.prevs.items():
            prevs.setdefault(rid, []).append(prev)
        stored = [rid for rid in rids if rid in batch.known or rid not in batch.rows]
        for part in _chunks(sorted(stored)):  # their other files' predecessors, as stored
            marks = ",".join("?" * len(part))
            for rid, fid, prev in self._db.execute(
                f"SELECT request, file, prev FROM appearances WHERE request IN ({marks})", part
            ):
                if (rid, fid) not in batch.prevs:
                    prevs.setdefault(rid, []).append(prev)
        missing = [rid for rid in rids if rid not in batch.rows]
        for rid, row in self._rows_by_id(missing).items():
            batch.rows[rid] = batch.known[rid] = row
            batch.ids[row.key] = rid
            batch.masks.setdefault(rid, batch.before.setdefault(rid, self._mask_of(rid)))
        for rid in rids:
            row = batch.rows[rid]
            found = [p for p in prevs.get(rid, ()) if p is not None]
            gap = (gap_seconds(row.ts, max(found))
                   if row.source is Source.MAIN and found else None)
            if gap != row.gap:
                batch.rows[rid] = row._replace(gap=gap)

    def _owners(self, batch: _Batch) -> None:
        """Give each request held by several sessions its original conversation's id.

        The owner is, of the sessions whose files hold the request, the one
        whose last request is earliest (ties: the smaller id): the conversation
        a resume copied from, not the copy. It depends on the sessions' last
        times only, so it is the same in any file, scan or id order.
        """
        db = self._db
        sessions: dict[int, set[str]] = {}
        for rid, fids in batch.seen.items():
            sessions[rid] = {batch.file_session[f] for f in fids}
        shared: set[int] = {rid for rid in batch.known}  # they may have other, stored files
        for session in batch.grown:  # a session grew: its shared requests may change hands
            shared.update(r[0] for r in db.execute(
                "SELECT a.request FROM files f JOIN appearances a ON a.file = f.id "
                "WHERE f.session = ? AND EXISTS (SELECT 1 FROM appearances b "
                "JOIN files g ON g.id = b.file WHERE b.request = a.request "
                "AND g.session != f.session AND g.path != ?)", (session, LEGACY_FILE)))
        for part in _chunks(sorted(shared)):
            marks = ",".join("?" * len(part))
            for rid, session in db.execute(
                "SELECT a.request, f.session FROM appearances a JOIN files f ON f.id = a.file "
                f"WHERE a.request IN ({marks}) AND f.path != ?", (*part, LEGACY_FILE),
            ):
                sessions.setdefault(rid, set()).add(session)
        several = {rid: s for rid, s in sessions.items() if len(s) > 1}
        names = sorted({s for ss in several.values() for s in ss})
        last: dict[str, float] = {}
        for part in _chunks(names):
            marks = ",".join("?" * len(part))
            last.update(db.execute(
                f"SELECT session, last_ts FROM sessions WHERE session IN ({marks})", part))
        missing = [rid for rid in several if rid not in batch.rows]
        for rid, row in self._rows_by_id(missing).items():
            batch.rows[rid] = batch.known[rid] = row
            batch.ids[row.key] = rid
            batch.masks.setdefault(rid, batch.before.setdefault(rid, self._mask_of(rid)))
        for rid, ss in sessions.items():
            owner = (min(ss, key=lambda s: (last.get(s, 0.0), s)) if len(ss) > 1
                     else next(iter(ss)))
            row = batch.rows[rid]
            if owner != row.session:
                batch.rows[rid] = row._replace(session=owner)

    def _write_rows(self, batch: _Batch) -> None:
        """Write every new and changed row once, and the new or moved appearances."""
        db = self._db
        inserts = []
        for rid in batch.new_ids:
            row = batch.rows[rid]
            inserts.append((rid, *row, row.context, batch.masks[rid]))
        updates = []
        for rid, known in batch.known.items():
            row = batch.rows[rid]
            mask = batch.masks[rid]
            if row != known or mask != batch.before[rid]:
                updates.append((*row[1:], row.context, mask, rid))
                batch.slot_times.update((known.ts, row.ts))
                batch.changed[rid] = known
        db.executemany(
            f"INSERT INTO requests (id, {_COLUMNS}, context, roots) "
            f"VALUES ({','.join('?' * (len(_FIELDS) + 3))})", inserts)
        db.executemany(
            f"UPDATE requests SET {', '.join(f'{c} = ?' for c in _FIELDS[1:])}, context = ?, "
            "roots = ? WHERE id = ?", updates)
        fresh = set(batch.new_appearances)
        db.executemany("INSERT OR IGNORE INTO appearances (request, file, prev) VALUES (?, ?, ?)",
                       [(rid, fid, batch.prevs.get((rid, fid))) for rid, fid in fresh])
        db.executemany("UPDATE appearances SET prev = ? WHERE request = ? AND file = ?",
                       [(prev, rid, fid) for (rid, fid), prev in batch.prevs.items()
                        if (rid, fid) not in fresh])
        batch.new = [batch.rows[rid] for rid in batch.new_ids]
        batch.upgraded = [(known, batch.rows[rid]) for rid, known in batch.changed.items()
                          if _line_fields(batch.rows[rid]) != _line_fields(known)]

    def _rows_by_id(self, ids: Sequence[int]) -> dict[int, Request]:
        """Stored rows by id (requests the batch did not carry but whose gap or owner moved)."""
        out: dict[int, Request] = {}
        for part in _chunks(sorted(ids)):
            marks = ",".join("?" * len(part))
            out.update((r[0], _request(r[1:])) for r in self._db.execute(
                f"SELECT id, {_COLUMNS} FROM requests WHERE id IN ({marks})", part))
        return out

    def _mask_of(self, rid: int) -> int:
        """The stored roots bitmask of one request."""
        row = self._db.execute("SELECT roots FROM requests WHERE id = ?", (rid,)).fetchone()
        return int(row[0]) if row else 0

    # ---------------------------------------------------------------- rollups
    def _roll(self, rules: Rules, batch: _Batch) -> None:
        """Add the batch's increments to the counter rollups; mark new rows unsettled."""
        ids = batch.ids
        adds: dict[tuple[int, CountClass], list[Any]] = {}

        def add(mask: int, cls: CountClass, ts: float, sums: tuple[int, ...],
                sign: int = 1) -> None:
            acc = adds.get((mask, cls))
            if acc is None:
                adds[(mask, cls)] = [ts, ts, *(sign * v for v in sums)]
            else:
                acc[0], acc[1] = min(acc[0], ts), max(acc[1], ts)
                for i, v in enumerate(sums, 2):
                    acc[i] += sign * v

        due = self._due()
        waiting: list[tuple[int, float]] = []
        for req in batch.new:
            rid = ids[req.key]
            add(batch.masks[rid], rules.klass(req), req.ts, rules.sums(req))
            waiting.append((rid, due))
        changed: set[int] = set()
        for old, new in batch.upgraded:
            rid = ids[new.key]
            changed.add(rid)
            cls = rules.klass(new)
            before, after = batch.before.get(rid, 0), batch.masks[rid]
            if before == after:  # the growth lands where the request counts now
                add(after, cls, new.ts, tuple(
                    n - o for n, o in zip(rules.sums(new, 0), rules.sums(old, 0), strict=True)))
            else:  # seen under a new root as well: the whole request moves to its new bitmask
                add(before, cls, old.ts, rules.sums(old), -1)  # one class for both halves
                add(after, cls, new.ts, rules.sums(new))
            waiting.append((rid, due))
        for rid, known in batch.known.items():
            before, after = batch.before.get(rid, 0), batch.masks[rid]
            if rid not in changed and before != after:
                cls = rules.klass(batch.rows[rid])
                add(before, cls, known.ts, rules.sums(known), -1)
                add(after, cls, known.ts, rules.sums(known))
        if batch.upgraded:
            settled = self._settled([ids[new.key] for _, new in batch.upgraded])
            batch.late = len(settled)
            waiting = [(rid, d) for rid, d in waiting if rid not in settled]
            if settled:
                self._count("late_updates", "", len(settled))
        self._db.executemany("INSERT OR REPLACE INTO unsettled VALUES (?, ?)", waiting)
        rows = [(mask, cls, acc[0], acc[1], tuple(acc[2:])) for (mask, cls), acc in adds.items()]
        self._write_counts(rows)
        batch.counts = rows

    def _write_counts(self, rows: Sequence[CountRow]) -> None:
        """Add counter increments to the stored rollups."""
        dims = ", ".join(CountClass._fields)
        sums = ", ".join(COUNT_SUMS)
        marks = ",".join("?" * (3 + len(CountClass._fields) + len(COUNT_SUMS)))
        self._db.executemany(
            f"INSERT INTO rollup_counts (roots, {dims}, first_ts, last_ts, {sums}) "
            f"VALUES ({marks}) ON CONFLICT (roots, {dims}) DO UPDATE SET "
            "first_ts = min(first_ts, excluded.first_ts), "
            "last_ts = max(last_ts, excluded.last_ts), "
            f"{', '.join(f'{c} = {c} + excluded.{c}' for c in COUNT_SUMS)}",
            [(mask, *cls, first, last, *values) for mask, cls, first, last, values in rows])

    def _write_hists(self, rows: Sequence[HistRow]) -> None:
        """Add histogram increments to the stored rollups."""
        self._db.executemany(
            "INSERT INTO rollup_hist VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT "
            "(roots, name, model, source, arch, bucket) DO UPDATE SET value = value + "
            "excluded.value",
            [(mask, *series, bucket, value) for mask, series, bucket, value in rows])

    def _settled(self, ids: Sequence[int]) -> set[int]:
        """Which of ``ids`` are already in the histograms."""
        waiting: set[int] = set()
        for part in _chunks(ids):
            marks = ",".join("?" * len(part))
            waiting.update(r[0] for r in self._db.execute(
                f"SELECT request FROM unsettled WHERE request IN ({marks})", part))
        return set(ids) - waiting

    def settle(self, *, force: bool = False) -> Applied:
        """Enter requests quiet for ``settle_seconds`` (all: ``force``) into the histograms."""
        batch = _Batch()
        if self.rules is None or self.readonly:
            return batch.applied()
        due = "" if force else " WHERE due <= ?"
        params = () if force else (self._clock(),)
        if not self.read(f"SELECT 1 FROM unsettled{due} LIMIT 1", params):
            return batch.applied()  # nothing due: no write transaction (this runs every second)
        with self._transaction():
            self._settle_due(self.rules, batch, force=force)
        return batch.applied()

    def _due(self) -> float:
        """When a request changed now enters the histograms (``settle_seconds`` of quiet)."""
        return self._clock() + self.settle_seconds

    def pending(self) -> int:
        """Requests counted but not yet in the histograms."""
        n: int = self.read("SELECT count(*) FROM unsettled")[0][0]
        return n

    def _settle_due(self, rules: Rules, batch: _Batch, *, force: bool) -> None:
        """Inside a transaction: move due requests into the histogram rollups.

        Observations count under the roots the request had when it settled.
        """
        db = self._db
        where = "" if force else "WHERE due <= ?"
        due = [r[0] for r in db.execute(f"SELECT request FROM unsettled {where}",
                                         () if force else (self._clock(),))]
        acc: dict[tuple[int, HistSeries, int], float] = {}
        for part in _chunks(due):
            marks = ",".join("?" * len(part))
            for row in db.execute(
                f"SELECT roots, {_COLUMNS} FROM requests WHERE id IN ({marks})", part
            ):
                _observe(rules, row[0], _request(row[1:]), acc)
            db.execute(f"DELETE FROM unsettled WHERE request IN ({marks})", part)
        hists = [(mask, series, bucket, value) for (mask, series, bucket), value in acc.items()]
        self._write_hists(hists)
        batch.hists.extend(hists)

    def _rebuild_rollups(self, rules: Rules) -> None:
        """Inside a transaction: count every row again under ``rules`` (new rules, or stale)."""
        db = self._db
        db.execute("DELETE FROM rollup_counts")
        db.execute("DELETE FROM rollup_hist")
        hists: dict[tuple[int, HistSeries, int], float] = {}
        last = 0
        while True:  # settled rows in id pages: a year of rows never sits in memory at once
            rows = db.execute(f"SELECT id, roots, {_COLUMNS} FROM requests WHERE id > ? AND "
                              "id NOT IN (SELECT request FROM unsettled) ORDER BY id LIMIT 20000",
                              (last,)).fetchall()
            if not rows:
                break
            last = rows[-1][0]
            for row in rows:
                _observe(rules, row[1], _request(row[2:]), hists)
        self._write_counts(ledger_bulk.count_classes(db, rules))
        self._write_hists([(m, s, b, v) for (m, s, b), v in hists.items()])
        self._set_meta("rollups", rules.fingerprint)

    def rollups(self) -> Rollups:
        """Every stored rollup row: O(classes x root sets + series x buckets)."""
        dims = ", ".join(CountClass._fields)
        counts: list[CountRow] = [
            (r[0], CountClass(*r[1:10]), r[10], r[11], tuple(r[12:]))
            for r in self.read(f"SELECT roots, {dims}, first_ts, last_ts, "
                               f"{', '.join(COUNT_SUMS)} FROM rollup_counts ORDER BY first_ts")
        ]
        hists: list[HistRow] = [
            (r[0], HistSeries(*r[1:5]), r[5], r[6])
            for r in self.read("SELECT roots, name, model, source, arch, bucket, value "
                               "FROM rollup_hist")
        ]
        return Rollups(counts, hists, self.root_bits())

    def root_bits(self) -> dict[str, int]:
        """Every transcript root the ledger knows, with its bit in ``requests.roots``."""
        return {path: 1 << (min(rid, MAX_ROOT_BITS) - 1)
                for rid, path in self.read("SELECT id, path FROM roots")}

    # ----------------------------------------------------------------- meta
    def _meta(self, name: str) -> str | None:
        """One value of the meta table."""
        rows = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchall()
        return str(rows[0][0]) if rows else None

    def _set_meta(self, name: str, value: str) -> None:
        """Set one value of the meta table (inside a transaction)."""
        self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, value))

    def _count_lines(self, applied: _Batch) -> None:
        """Add one batch's line classification (and lines mended) to the persistent counters."""
        rows = [*(("lines", result, n) for result, n in applied.lines.items()),
                ("bytes_read", "", applied.bytes_read),
                *(("mended", kind, n) for kind, n in applied.mended.items()),
                *(("rejected", reason, n) for reason, n in applied.rejected.items()),
                *(("iterations", kind, n) for kind, n in applied.iterations.items())]
        for name, label, n in (row for row in rows if row[2]):
            self._count(name, label, n)

    def _count(self, name: str, label: str, n: int) -> None:
        """Add to one persistent counter."""
        self._db.execute(
            "INSERT INTO counters VALUES (?,?,?) "
            "ON CONFLICT (name, label) DO UPDATE SET value = value + excluded.value",
            (name, label, n))

    def counters(self, name: str) -> dict[str, int]:
        """One family of persistent counters (``lines``, ``rejected``, ``bytes_read``, …)."""
        return dict(self.read("SELECT label, value FROM counters WHERE name = ?", (name,)))

    # ---------------------------------------------------------------- reading
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

    def mask(self, roots: Sequence[str | Path] | None) -> int | None:
        """The ``requests.roots`` bits of the roots at or below ``roots`` (None: everything)."""
        if roots is None:
            return None
        wanted = [os.path.abspath(os.fspath(r)).rstrip("/") or "/" for r in roots]
        mask = 0
        for path, bit in self.root_bits().items():
            if any(path == w or path.startswith(w.rstrip("/") + "/") for w in wanted):
                mask |= bit
        return mask

    def scope_filter(self, roots: Sequence[str | Path] | None, column: str = "roots") -> str | None:
        """An SQL condition on a roots bitmask ``column``: in scope of ``roots`` (None: all).

        A request is in scope when a file holding it was found under (or at)
        one of the roots, also after the file was deleted; v1 requests, whose
        files were never recorded, are in every scope.
        """
        mask = self.mask(roots)
        if mask is None:
            return None
        every = 0
        for bit in self.root_bits().values():
            every |= bit
        if mask and mask == every:
            return None
        return f"({column} & {mask}) != 0" if mask else f"{column} = {ALL_ROOTS}"

    def scope(self, roots: Sequence[str | Path] | None) -> str:
        """The name of a TEMP VIEW of ``requests`` in the scope of ``roots`` (see scope_filter).

        The view has exactly the columns of ``requests``; the plain table when
        the scope is everything.
        """
        condition = self.scope_filter(roots)
        if condition is None:
            return "requests"
        mask = self.mask(roots) or 0
        with self._lock:
            name = self._views.get(mask)
            if name is None:
                name = f"scope_{len(self._views) + 1}"
                # A TEMP view is this connection's own: creating it writes nothing shared,
                # so a reader (query_only) may create one too.
                self._db.execute("PRAGMA query_only = OFF")
                try:
                    self._db.execute(f"CREATE TEMP VIEW {name} AS SELECT * FROM main.requests "
                                     f"WHERE {condition}")
                finally:
                    if self.readonly:
                        self._db.execute("PRAGMA query_only = ON")
                self._views[mask] = name
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
                    if not self.readonly:
                        self._db.execute("PRAGMA query_only = OFF")
            except sqlite3.Error as exc:
                self.health.note(exc)
                raise LedgerError(f"ledger {self.path}: {exc}") from exc

    def _rows(self, keys: list[str]) -> dict[str, tuple[int, Request, int]]:
        """The stored rows (id, request, roots bitmask) of some keys."""
        out: dict[str, tuple[int, Request, int]] = {}
        for part in _chunks(keys):
            marks = ",".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT id, roots, {_COLUMNS} FROM requests WHERE key IN ({marks})", part
            )
            out.update((r[2], (r[0], _request(r[2:]), r[1])) for r in rows)
        return out

    def _transaction(self) -> Tx:
        """A write transaction that turns SQLite failures into LedgerError."""
        if self.readonly:
            raise LedgerError(f"ledger {self.path} is open read-only (another process writes it)")
        return Tx(self._db, self.health, self._lock)

    def live(self) -> None:
        """From now on this writer folds the WAL in itself, verified (:meth:`tend`)."""
        with self._lock:
            self._db.execute("PRAGMA wal_autocheckpoint=0")

    def tend(self, *, verify: bool = False, force: bool = False) -> None:
        """A live writer's upkeep, once a tick: the WAL verified, folded in, cut back."""
        with self._lock:
            self._keeper.tend(self._db, verify=verify, force=force)


@dataclass(slots=True)
class _Batch:
    """What the ledger works out while it applies one batch; :meth:`applied` is the result."""

    new: list[Request] = field(default_factory=list)
    upgraded: list[tuple[Request, Request]] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    iterations: dict[str, int] = field(default_factory=dict)
    mended: dict[str, int] = field(default_factory=dict)
    bytes_read: int = 0
    counts: list[CountRow] = field(default_factory=list)
    hists: list[HistRow] = field(default_factory=list)
    late: int = 0
    roots: dict[str, int] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)
    new_ids: list[int] = field(default_factory=list)
    rows: dict[int, Request] = field(default_factory=dict)  # every touched row, as it will be
    known: dict[int, Request] = field(default_factory=dict)  # stored rows before the batch
    changed: dict[int, Request] = field(default_factory=dict)  # rows rewritten (old values)
    before: dict[int, int] = field(default_factory=dict)  # stored roots bitmasks
    masks: dict[int, int] = field(default_factory=dict)  # roots bitmasks after the batch
    moved: set[int] = field(default_factory=set)  # time or source changed
    seen: dict[int, set[int]] = field(default_factory=dict)  # files each row appeared in now
    files: set[int] = field(default_factory=set)  # whose chains must be recomputed
    fresh_files: set[int] = field(default_factory=set)  # files this batch created
    file_session: dict[int, str] = field(default_factory=dict)
    new_appearances: list[tuple[int, int]] = field(default_factory=list)
    prevs: dict[tuple[int, int], float | None] = field(default_factory=dict)  # to write
    sessions: dict[str, float] = field(default_factory=dict)  # latest ts seen per session
    grown: set[str] = field(default_factory=set)  # sessions whose last time moved
    slot_times: set[float] = field(default_factory=set)  # times of changed rows (old and new)

    def applied(self) -> Applied:
        """The public result."""
        return Applied(self.new, self.upgraded, self.lines, self.rejected, self.bytes_read,
                       self.counts, self.hists, self.late, self.roots, len(self.new),
                       len(self.upgraded), self.iterations, self.mended)


def _observe(rules: Rules, mask: int, req: Request,
             acc: dict[tuple[int, HistSeries, int], float]) -> None:
    """Fold one settled request's histogram observations into ``acc``."""
    for series, bucket, value in rules.observations(req):
        acc[(mask, series, bucket)] = acc.get((mask, series, bucket), 0) + 1
        acc[(mask, series, -1)] = acc.get((mask, series, -1), 0) + value


def _tighten(path: Path) -> None:
    """Make an existing state directory 0700 and the ledger's files 0600 (ours only).

    A directory shared by design (sticky, like /tmp) or owned by someone else
    is left alone.
    """
    uid = os.geteuid()
    with contextlib.suppress(OSError):
        st = path.parent.stat()
        if st.st_uid == uid and not st.st_mode & stat.S_ISVTX and st.st_mode & 0o077:
            os.chmod(path.parent, stat.S_IMODE(st.st_mode) & 0o700)
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm", f"{path.name}.lock",
                 f"{path.name}.clean"):
        with contextlib.suppress(OSError):
            st = (path.parent / name).stat()
            if st.st_uid == uid and st.st_mode & 0o077:
                os.chmod(path.parent / name, stat.S_IMODE(st.st_mode) & 0o600)


def _bin_row(row: Request, roots: int, sign: int) -> slots.BinRow:
    """What :func:`slots.shift_bins` needs of one version of a row."""
    return (row.ts, roots, row.input, row.cache_read, row.cache_write_5m, row.cache_write_1h,
            row.output, row.gap, int(row.source), sign)


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    """Slices of at most ``_IN_CHUNK`` items, for ``IN (…)`` lookups."""
    for i in range(0, len(items), _IN_CHUNK):
        yield items[i : i + _IN_CHUNK]


def _request(row: Sequence[Any]) -> Request:
    """A Request from a row in ``_COLUMNS`` order."""
    key, ts, model, session, project, source, *rest = row
    return Request(key, ts, model, session, project, _SOURCES[source], *rest)
