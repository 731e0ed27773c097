"""The ledger's write transaction: BEGIN IMMEDIATE … COMMIT, and what its failures mean.

Every SQLite failure becomes a LedgerError naming the file; one that says
the file is damaged also marks the ledger corrupt (exporter.ledger.health).
"""

from __future__ import annotations

import contextlib
import threading

from exporter.ledger.health import Health, LedgerError
from exporter.sqlite import sqlite3


class Tx:
    """BEGIN IMMEDIATE … COMMIT, rolled back on any exception, under the ledger's lock."""

    def __init__(self, db: sqlite3.Connection, health: Health, lock: threading.RLock) -> None:
        """A transaction on ``db`` (entered with ``with``)."""
        self._db = db
        self._health = health
        self._lock = lock

    def __enter__(self) -> None:
        """Take the lock and begin; a corrupt ledger takes no more writes."""
        self._lock.acquire()
        try:
            if self._health.corrupt is not None:
                raise LedgerError(self._health.message())
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._lock.release()
            raise self._error(exc) from exc
        except BaseException:
            self._lock.release()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        """Commit, or roll back; release the lock either way."""
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
                raise self._error(err) from err
        self._rollback()
        if isinstance(exc, sqlite3.Error):
            raise self._error(exc) from exc

    def _error(self, exc: sqlite3.Error) -> LedgerError:
        """The LedgerError for an SQLite failure (marking the ledger corrupt if it says so)."""
        self._health.note(exc)
        if self._health.corrupt is not None:
            return LedgerError(self._health.message())
        return LedgerError(f"ledger {self._health.path}: {exc}")

    def _rollback(self) -> None:
        """Roll back what is left: after a full disk or an I/O error SQLite may already have."""
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # the failure reported is the one that matters
                self._db.execute("ROLLBACK")
