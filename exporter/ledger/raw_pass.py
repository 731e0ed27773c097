"""A raw first pass: every row into an empty ledger at once, derived state computed once at its end.

A first pass (a cold ``report``, a daemon's first start) brings every row at
once. The incremental path (:mod:`exporter.ledger.merge`) works out, per
batch, each touched file's chain, the gaps, the owners, the rollups and the
slots, and rewrites rows a later batch touches again. In a raw pass a batch
only stages its rows, provenance and chains (:mod:`exporter.ledger.staging`,
with the checkpoints and line counters); when the pass ends, the owners and
what later batches left stale are derived (:mod:`exporter.ledger.derive`),
then the slots, attribution day sums and rollups are summed from the rows.
The result is the same as the incremental path's, since both are functions
of the rows and appearances alone.

Indexes: the pass drops those its staging never reads. The reader indexes
are built at its end; the key's and ``WRITE_INDEXES`` by the first
incremental write (:func:`~exporter.ledger.staging.ensure_write_indexes`), so
a command that only reads after its pass never sorts them.

Kill -9 safety: :data:`~exporter.ledger.staging.RAW_PASS` is set in the meta
table in the transaction that begins the pass and cleared in the one that
ends it. An open that finds it set derives everything (:func:`finish`): the
ledger held no request before the pass, so its tables are the whole truth.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from exporter.ledger import attr_days, derive, merge, rollups, slot_bins, slot_sums, staging
from exporter.ledger import rows as stored_rows
from exporter.ledger.agent_limits import store as store_limits
from exporter.ledger.batch import Batch
from exporter.ledger.health import LedgerError
from exporter.ledger.reader_thread import ReaderThread
from exporter.ledger.schema import PASS_INDEXES, READER_INDEXES, index_name
from exporter.ledger.tx import Tx
from exporter.records import Appearance, Applied, Checkpoint, Parsed, RootLines, Rules
from exporter.sqlite import sqlite3

Transaction = Callable[[], Tx]


def begin(db: sqlite3.Connection, transaction: Transaction, *, raw: bool, drop: bool) -> None:
    """Start a pass: the reader indexes dropped (``drop``); a raw pass marked, its table made.

    A raw pass also drops the indexes its staging never reads, the key's among
    them, and keeps what it staged in a table of this connection's own instead.
    """
    if raw or drop:
        with transaction():
            if raw:
                staging.drop_pass_indexes(db)
                stored_rows.set_meta(db, staging.RAW_PASS, "1")
                attr_days.forget(db)  # its batches do not keep the sums
            if drop:
                for statement in READER_INDEXES:
                    db.execute(f"DROP INDEX IF EXISTS {index_name(statement)}")
    if raw:
        for statement in staging.STAGED_SCHEMA:
            db.execute(statement)


def end(db: sqlite3.Connection, transaction: Transaction, rules: Rules | None,
        clock: Callable[[], float], state: staging.Pass | None, *, raw: bool, drop: bool,
        failed: bool) -> None:
    """End a pass: a raw one derived (:func:`finish`), the dropped reader indexes built.

    After a ``failed`` pass an error here is swallowed (the pass's own is the
    one to see); the next open derives and builds what is missing.
    """
    try:
        if raw:
            with contextlib.suppress(sqlite3.Error):  # it goes with the connection anyway
                db.execute(f"DROP TABLE IF EXISTS temp.{staging.STAGED}")
            finish(db, transaction, rules, clock, state)
        if drop:
            with transaction():
                for statement in READER_INDEXES:
                    db.execute(statement)
    except LedgerError:
        if not failed:
            raise


def apply(db: sqlite3.Connection, transaction: Transaction, state: staging.Pass,
          parsed: Parsed, checkpoints: Sequence[Checkpoint], *, bytes_read: int,
          appearances: Sequence[Appearance], due: float, by_root: RootLines | None = None,
          ) -> Applied:
    """One batch of a raw pass: rows, provenance, checkpoints and counters only."""
    try:
        with transaction():
            batch = Batch()
            # Once per root, not per file (a month's batch holds a hundred files).
            bits = {root: merge.root_bit(db, root, batch, agent)
                    for root, agent in dict.fromkeys((a.root, a.agent) for a in appearances)}
            new, changed, new_keys = staging.stage(db, parsed, appearances, bits, state, due=due)
            store_limits(db, parsed)  # plan windows from the logs (Codex's rate_limits)
            merge.finish(db, batch, parsed, checkpoints, bytes_read=bytes_read,
                         new_keys=new_keys, appearances=appearances, by_root=by_root)
    except BaseException:
        state.broken = True  # its memory may not match what was rolled back
        raise
    out = batch.applied()
    out.new_count, out.upgraded_count = new, changed
    return out


def finish(db: sqlite3.Connection, transaction: Transaction, rules: Rules | None,
           clock: Callable[[], float], state: staging.Pass | None = None) -> None:
    """Everything a raw pass left to its end, from its rows, in two transactions.

    The first derives gaps and owners (and, while the owners are read, the
    indexes that depend on neither); the flag stays set, so a kill after it
    derives again (which leaves those rows as they are). The second builds
    the reader indexes, sums the slots, counts the rollups and clears the
    flag; the reads there that need only the committed rows run on the
    reader thread meanwhile. ``state``: what the pass's batches chained
    (none after a kill: everything is derived).
    """
    reader = ReaderThread(db)
    try:
        with transaction():
            derive.derive(db, reader, state, meanwhile=lambda: _indexes_apart_from_chains(db))
        with transaction():
            keys = reader.ask(slot_sums.key_rows, fresh=True)
            bins = reader.ask(slot_bins.day_bins)
            for statement in READER_INDEXES:  # built while the slot keys are read
                db.execute(statement)
            slot_sums.rebuild(db, lambda: reader.result(bins, db), lambda: reader.result(keys, db))
            attr_days.rebuild(db)
            if rules is not None:  # the rollup classes from the slots just summed
                rollups.rebuild(db, rules)
                rollups.settle_due(db, rules, Batch(), clock())
            else:
                stored_rows.set_meta(db, "rollups", "")  # rebuilt by the next writer with rules
            db.execute("DELETE FROM meta WHERE name = ?", (staging.RAW_PASS,))
    finally:
        reader.close()


def _indexes_apart_from_chains(db: sqlite3.Connection) -> None:
    """The indexes a raw pass's end builds that depend on neither gaps nor owners.

    The rows' time index (``PASS_INDEXES``: the slots read the rows' time span
    through it), and the reader indexes of other columns. Built again after a
    kill, each is the same again.
    """
    for statement in PASS_INDEXES:
        db.execute(statement)
    for statement in READER_INDEXES:
        if "session" not in statement and "gap" not in statement:
            db.execute(statement)
