"""Opening a ledger file: is it ours, its schema created or migrated, WAL mode, owner-only modes.

A writer's open also finishes what an earlier process left undone: a raw pass
cut short is derived, dropped reader indexes are built, rollups made under
other counting rules are counted again, and slots of another layout summed
again (each in its own transaction).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from exporter.ledger import attr_days, health, raw_pass, rollups, slot_sums, staging, wal
from exporter.ledger import rows as stored_rows
from exporter.ledger.health import Health, LedgerError
from exporter.ledger.schema import (
    PAGE_SIZE,
    READER_INDEXES,
    V1_TABLES,
    WAL_CHECKPOINT_BYTES,
    attribute_counters,
    create,
    has_index,
    index_name,
    migrate_v1,
    v1_provenance,
)
from exporter.ledger.tx import Tx
from exporter.records import Rules
from exporter.sqlite import sqlite3

APPLICATION_ID: Final = 0x43434558  # "CCEX": marks the file as ours
SCHEMA_VERSION: Final = 6  # 3: the attribution columns (schema.create); 4: root_counters;
# 5: a second agent's logs (requests.reasoning and context_window,
# checkpoints.carry, roots.agent); 6: requests.indexed (exporter.ledger.unindexed)


def open_file(path: Path, file_health: Health, lock: threading.RLock, *, readonly: bool,
              trusted: bool, check_above: int | None, rules: Rules | None,
              clock: Callable[[], float]) -> sqlite3.Connection:
    """A connection to the ledger at ``path``, checked and ready; LedgerError if it is not ours.

    ``readonly``: another process writes; this connection refuses every write.
    ``trusted``: that writer checked the file. ``check_above``: a file of more
    bytes not known sound is left to the caller to check (exporter.ledger.health).
    """
    db: sqlite3.Connection | None = None
    try:
        if readonly:
            db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, isolation_level=None,
                                 check_same_thread=False)
            if _check(db, path, file_health, check_above, trusted=trusted) != SCHEMA_VERSION:
                raise LedgerError(f"ledger {path} is not yet upgraded by its writer")
            db.execute("PRAGMA query_only = ON")
        else:
            # Token counts and project paths are private: owner-only directory and file
            # (SQLite gives its -wal and -shm files the database file's mode).
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600))
            db = writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            _prepare_writer(writer, path, file_health, lambda: Tx(writer, file_health, lock),
                            check_above=check_above, rules=rules, clock=clock)
        _tighten(path)
        return db
    except BaseException as exc:
        # A refused file is left as it was found: closing the connection removes the
        # -wal and -shm files opening it made (the process may end without teardown).
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
        if isinstance(exc, sqlite3.DatabaseError):
            raise health.refusal(path, exc) from exc
        if isinstance(exc, OSError):
            raise LedgerError(f"cannot open ledger {path}: {exc.strerror or exc}") from exc
        raise


def _prepare_writer(db: sqlite3.Connection, path: Path, file_health: Health,
                    transaction: raw_pass.Transaction, *, check_above: int | None,
                    rules: Rules | None, clock: Callable[[], float]) -> None:
    """Check the file is a ledger of ours (or empty), create or migrate it, finish what is left."""
    version = _check(db, path, file_health, check_above, trusted=False)
    if version == 0:  # no page written yet: the file's page size is still open
        db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # (and set for good by the WAL switch)
    else:
        _repage(db, path)
    _wal(db)
    # NORMAL in WAL mode survives a process crash; a power cut may lose the
    # newest batches, but their checkpoints go with them, so they are re-read.
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA cache_size=-65536")  # 64 MiB: a year of rows stays in memory
    wal.configure(db)
    page = db.execute("PRAGMA page_size").fetchone()[0]
    db.execute(f"PRAGMA wal_autocheckpoint={max(1, WAL_CHECKPOINT_BYTES // page)}")
    if version < SCHEMA_VERSION:  # (a v2 ledger's cut-short pass is then derived below)
        with transaction():
            _create_or_migrate(db)
    if version:
        if stored_rows.meta(db, staging.RAW_PASS):
            raw_pass.finish(db, transaction, rules, clock)  # a raw pass was cut short
        if not all(has_index(db, index_name(st)) for st in READER_INDEXES):
            with transaction():  # a pass was cut short: build what it dropped
                for statement in READER_INDEXES:
                    db.execute(statement)
    health.unstamp(path)  # the file changes now: its stamp no longer holds
    if rules is not None and stored_rows.meta(db, "rollups") != rules.fingerprint:
        with transaction():
            rollups.rebuild(db, rules)
    # The report's slots and attribution day sums: this build's layout, split by every
    # long-context threshold of the price table (the rules know it), else rebuilt once.
    wanted = tuple(getattr(rules, "long_context_thresholds", ()))
    if slot_sums.needs_ensure(db, wanted) or attr_days.needs_ensure(db):
        with transaction():
            attr_days.ensure(db, slot_sums.ensure(db, wanted))


# A meta row naming why a rewrite into PAGE_SIZE pages failed: it is not tried again.
REPAGE_FAILED: Final = "repage_failed"


def _repage(db: sqlite3.Connection, path: Path) -> None:
    """Rewrite a ledger made with other pages (16 KiB, before v6) into PAGE_SIZE ones, once.

    A live commit costs its page size per b-tree it touches (schema.PAGE_SIZE):
    an older ledger would keep paying 16 KiB. ``VACUUM`` copies the file (0.15 s
    for a month's 30 MB here); it needs the WAL folded in and no other
    connection, so a reader open now puts it off to the next open, as does
    less free space than twice the file's size. A failed rewrite leaves the
    file as it was, noted in meta so that later opens do not pay for it again.
    """
    if db.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE:
        return
    try:
        if stored_rows.meta(db, REPAGE_FAILED) is not None:
            return
        if shutil.disk_usage(path.parent).free < 2 * path.stat().st_size:
            return  # no room for the copy now: a later open, with room, does it
        if db.execute("PRAGMA journal_mode=DELETE").fetchone()[0] != "delete":
            return  # another connection holds the WAL: the next open tries again
        db.execute(f"PRAGMA page_size={PAGE_SIZE}")
        db.execute("VACUUM")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return  # a reader was in the file: the next open tries again
        with contextlib.suppress(sqlite3.Error):
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (REPAGE_FAILED, str(exc)))
    except (sqlite3.DatabaseError, OSError):
        return  # a damaged file is the health check's to report; an unreadable stat, no rewrite


def _wal(db: sqlite3.Connection, deadline_s: float = 10.0) -> None:
    """Switch to WAL mode, retrying while a twin process holds the file.

    The switch takes an exclusive lock without SQLite's busy wait, so a twin
    creating the same ledger at the same moment can make it fail.
    """
    end = time.monotonic() + deadline_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= end:
                raise
            time.sleep(0.05)  # bounded by the deadline: the twin's switch is quick


def _check(db: sqlite3.Connection, path: Path, file_health: Health, check_above: int | None, *,
           trusted: bool) -> int:
    """The schema version of a file that is ours (0: empty); LedgerError otherwise."""
    health.refuse_marked(path)  # refused before anything reads it
    # One read transaction: the header and the tables from the same moment (a twin
    # may commit a fresh schema, with its application id, in between two reads).
    db.execute("BEGIN")
    try:
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        tables = _tables(db)
        version: int = db.execute("PRAGMA user_version").fetchone()[0]
    finally:  # (a read that failed, say on a full disk, ended it: its error is the one)
        if db.in_transaction:
            db.execute("COMMIT")
    # A v1 build killed between its schema commit and the header pragmas left
    # its tables without our id: recognise them as ours, not as a stranger's.
    half_made = app_id == 0 and tables == V1_TABLES
    if tables and app_id != APPLICATION_ID and not half_made:
        raise LedgerError(
            f"{path} is an SQLite file of another program (application_id {app_id});"
            " refusing to touch it: point --state-dir elsewhere")
    # quick_check reads every page (O(history)); skipped when the file is exactly as a
    # verified close left it, or a live writer checked it (exporter.ledger.health).
    health.check_at_open(db, file_health, later=check_above, trusted=trusted)
    if half_made:
        version = 1
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"ledger {path} has schema version {version}, this build knows "
            f"{SCHEMA_VERSION}; upgrade claude-code-exporter")
    return version


def _tables(db: sqlite3.Connection) -> frozenset[str]:
    """Names of the tables in the file (a schema whose text is not UTF-8 is a damaged one)."""
    try:
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    except UnicodeDecodeError as exc:  # scribbled bytes where the schema's names were
        raise sqlite3.DatabaseError(
            f"database disk image is malformed (a table name is not UTF-8: {exc.reason})"
        ) from exc
    return frozenset(r[0] for r in rows)


def _create_or_migrate(db: sqlite3.Connection) -> None:
    """Inside a write transaction: create the schema, or bring a v1 ledger to v2."""
    # Read again under the write lock: another process may have done it meanwhile.
    if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
        return
    tables = _tables(db)
    v1 = tables >= V1_TABLES and "checkpoints" not in tables
    if v1:
        migrate_v1(db)
    create(db)
    if "counters" in tables and "root_counters" not in tables:
        attribute_counters(db)  # v1 to v3: the counts kept for all roots at once
    if v1:
        v1_provenance(db)
        slot_sums.rebuild(db)
    db.execute(f"PRAGMA application_id={APPLICATION_ID}")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


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
