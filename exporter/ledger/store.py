"""The request ledger: one SQLite row per request, the single source of truth.

:class:`Ledger` is the pipeline's door to the ledger file (the plan tables
have their own connections, :mod:`exporter.ledger.connections`); each of its
jobs is a module of its own:

- :mod:`~exporter.ledger.opening`: is the file ours, its schema, WAL mode;
- :mod:`~exporter.ledger.merge`: one incremental batch (with
  :mod:`~exporter.ledger.chains` for gaps and owners and
  :mod:`~exporter.ledger.rollups` for the metric sums);
- :mod:`~exporter.ledger.raw_pass`: a first pass into an empty ledger;
- :mod:`~exporter.ledger.scopes`: which requests a set of roots holds.

Each :meth:`Ledger.apply` is one transaction that writes the merged rows,
their provenance, gaps, owners, rollups, slots, the files' checkpoints and
the line counters together, so a kill -9 at any moment leaves either all of
a batch or none of it, and the next run re-reads exactly what was not
committed. Rows and provenance are never deleted: transcripts that Claude
Code cleans up stay counted, and stay in their roots' scope.

One process writes a ledger at a time (:mod:`exporter.ledger.lock`); others may read.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from exporter.ledger import (
    health,
    merge,
    opening,
    raw_pass,
    rollups,
    root_counts,
    scopes,
    staging,
    wal,
)
from exporter.ledger.batch import Batch
from exporter.ledger.health import LedgerError as LedgerError  # noqa: PLC0414 (re-exported)
from exporter.ledger.rollups import Rollups
from exporter.ledger.rows import COLUMNS, request_of
from exporter.ledger.schema import MAX_ROOT_BITS
from exporter.ledger.tx import Tx
from exporter.records import Appearance, Applied, Checkpoint, Parsed, Request, RootLines, Rules
from exporter.sqlite import sqlite3

if TYPE_CHECKING:
    from exporter.ledger.lock import Holder, WriterLock

_TIME_ORDER: Final = attrgetter("ts", "key")


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
        self.path = path
        self.health = health.Health(path, clock)
        self._keeper = wal.Keeper(path, self.health, clock)
        self.holder, self.rules, self.readonly = holder, rules, readonly
        self.settle_seconds = settle_seconds
        self._clock = clock
        self._writer = lock
        self._lock = threading.RLock()  # one connection, used from the scan and HTTP threads
        self._views: dict[int, str] = {}
        self._pass: staging.Pass | None = None  # inside a raw pass (see bulk)
        self._db = opening.open_file(
            path, self.health, self._lock, readonly=readonly, trusted=holder is not None,
            check_above=check_above, rules=rules, clock=clock)

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
                health.stamp_clean(self.path)
        if self._writer is not None:
            self._writer.release()
            self._writer = None

    # --------------------------------------------------------------- writing
    @contextlib.contextmanager
    def bulk(self, expected_rows: int, *, raw: bool = False) -> Iterator[None]:
        """Around a pass expected to add ``expected_rows``: build reader indexes once after.

        When the new rows outnumber those held, the reader-only indexes are
        dropped first and built once after. ``raw`` (the caller needs no
        per-batch :class:`Applied` rows or rollup increments): if the ledger
        holds no request, the pass is a raw one (:mod:`exporter.ledger.raw_pass`).
        """
        if self.readonly:
            yield
            return
        raw = raw and not self._db.execute("SELECT 1 FROM requests LIMIT 1").fetchone()
        # count(*) walks an index: only asked when the pass is big enough to matter.
        drop = expected_rows > 10_000 and (raw or expected_rows > self.count())
        raw_pass.begin(self._db, self._transaction, raw=raw, drop=drop)
        self._pass = staging.Pass() if raw else None
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            state, self._pass = self._pass, None
            raw_pass.end(self._db, self._transaction, self.rules, self._clock, state,
                         raw=raw, drop=drop, failed=failed)

    @property
    def raw(self) -> bool:
        """Whether a raw pass is under way (see :meth:`bulk`): batches cost little to commit."""
        return self._pass is not None

    def apply(
        self, parsed: Parsed, checkpoints: Sequence[Checkpoint], bytes_read: int,
        appearances: Sequence[Appearance] = (), by_root: RootLines | None = None,
    ) -> Applied:
        """Merge one parsed batch, its provenance, checkpoints and line counts atomically.

        ``by_root``: the batch's line counts split by transcript root (kept
        per root too, for scoped reports); without, they are in no root's scope.
        """
        if self._pass is not None:
            return raw_pass.apply(self._db, self._transaction, self._pass, parsed, checkpoints,
                                  bytes_read=bytes_read, appearances=appearances,
                                  due=self._clock() + self.settle_seconds, by_root=by_root)
        with self._transaction():
            return merge.apply(self._db, parsed, checkpoints, bytes_read, appearances,
                               rules=self.rules, clock=self._clock,
                               settle_seconds=self.settle_seconds, by_root=by_root)

    def settle(self, *, force: bool = False) -> Applied:
        """Enter requests quiet for ``settle_seconds`` (all: ``force``) into the histograms."""
        batch = Batch()
        if self.rules is None or self.readonly:
            return batch.applied()
        due = "" if force else " WHERE due <= ?"
        params = () if force else (self._clock(),)
        if not self.read(f"SELECT 1 FROM unsettled{due} LIMIT 1", params):
            return batch.applied()  # nothing due: no write transaction (this runs every second)
        with self._transaction():
            rollups.settle_due(self._db, self.rules, batch, None if force else self._clock())
        return batch.applied()

    def forget_files(self, paths: Iterable[str]) -> None:
        """Drop checkpoints of files that no longer exist (their rows and provenance stay)."""
        with self._transaction():
            self._db.executemany("DELETE FROM checkpoints WHERE path = ?", ((p,) for p in paths))

    def live(self) -> None:
        """From now on this writer folds the WAL in itself, verified (:meth:`tend`)."""
        with self._lock:
            self._db.execute("PRAGMA wal_autocheckpoint=0")

    def tend(self, *, verify: bool = False, force: bool = False) -> None:
        """A live writer's upkeep, once a tick: the WAL verified, folded in, cut back."""
        with self._lock:
            self._keeper.tend(self._db, verify=verify, force=force)

    def _transaction(self) -> Tx:
        """A write transaction that turns SQLite failures into LedgerError."""
        if self.readonly:
            raise LedgerError(f"ledger {self.path} is open read-only (another process writes it)")
        return Tx(self._db, self.health, self._lock)

    # --------------------------------------------------------------- reading
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

    def checkpoints(self) -> dict[str, Checkpoint]:
        """Every file's checkpoint, by path."""
        rows = self.read(
            "SELECT path, dev, ino, size, offset, fp_len, fingerprint, mtime_ns, carry "
            "FROM checkpoints")
        return {r[0]: Checkpoint(*r) for r in rows}

    def requests(
        self, since: float | None = None, until: float | None = None, *, view: str = "requests"
    ) -> list[Request]:
        """Every request with ``since <= ts < until`` (of a :meth:`scope` view), in time order."""
        lo = float("-inf") if since is None else since
        hi = float("inf") if until is None else until
        out = [request_of(r) for r in
               self.read(f"SELECT {COLUMNS} FROM {view} WHERE ts >= ? AND ts < ?", (lo, hi))]
        out.sort(key=_TIME_ORDER)  # faster in Python than ORDER BY on a text key
        return out

    def count(self) -> int:
        """Number of requests in the ledger."""
        n: int = self.read("SELECT count(*) FROM requests")[0][0]
        return n

    def pending(self) -> int:
        """Requests counted but not yet in the histograms."""
        n: int = self.read("SELECT count(*) FROM unsettled")[0][0]
        return n

    def counters(self, name: str, roots: Sequence[str | Path] | None = None) -> dict[str, int]:
        """One family of persistent counters (``lines``, ``rejected``, ``bytes_read``, …).

        ``roots``: only the lines of files under those roots (None: every line
        counted, also those a v3 ledger kept for several roots at once).
        """
        bits = self.root_bits()
        if roots is not None and scopes.condition(bits, roots) is not None:
            return root_counts.read(self.read, name, scopes.root_ids(self.root_ids(), roots))
        return dict(self.read("SELECT label, value FROM counters WHERE name = ?", (name,)))

    def rollups(self) -> Rollups:
        """Every stored rollup row: O(classes x root sets + series x buckets)."""
        return rollups.read(self.read, self.root_bits())

    def root_ids(self) -> dict[str, int]:
        """Every transcript root the ledger knows, with its id."""
        return {path: rid for rid, path in self.read("SELECT id, path FROM roots")}

    def root_agents(self) -> dict[str, str]:
        """Every root the ledger knows, with whose logs it holds (``claude``, ``codex``)."""
        return dict(self.read("SELECT path, agent FROM roots"))

    def root_bits(self) -> dict[str, int]:
        """Every transcript root the ledger knows, with its bit in ``requests.roots``."""
        return {path: 1 << (min(rid, MAX_ROOT_BITS) - 1)
                for rid, path in self.read("SELECT id, path FROM roots")}

    def mask(self, roots: Sequence[str | Path] | None) -> int | None:
        """The ``requests.roots`` bits of the roots at or below ``roots`` (None: everything)."""
        return scopes.mask(self.root_bits(), roots)

    def scope_filter(self, roots: Sequence[str | Path] | None, column: str = "roots") -> str | None:
        """An SQL condition on a roots bitmask ``column``: in scope of ``roots`` (None: all)."""
        return scopes.condition(self.root_bits(), roots, column)

    def scope(self, roots: Sequence[str | Path] | None) -> str:
        """The name of a TEMP VIEW of ``requests`` in the scope of ``roots`` (see scope_filter).

        The view has exactly the columns of ``requests``; the plain table when
        the scope is everything.
        """
        bits = self.root_bits()
        condition = scopes.condition(bits, roots)
        if condition is None:
            return "requests"
        mask = scopes.mask(bits, roots) or 0
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
