"""Reads on a second connection of the ledger's file, on a thread, while the first one writes."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, Final

from exporter.sqlite import sqlite3

_MISSING: Final = object()
_STOP: Final = object()


class ReaderThread(threading.Thread):
    """Reads on a second connection of the ledger's file, while the caller's connection writes.

    SQLite runs the two on two cores (Python's driver releases the GIL while a
    statement steps). A read sees what was committed when it was asked for
    with ``fresh`` (a new snapshot), or the snapshot of the read before. The
    caller asks only for reads of tables its own transaction has not changed
    (nor will before it takes the result), so they give what they would on its
    connection. The writes stay on the caller's connection, in its
    transaction, so a kill still leaves nothing half-done. A read the thread
    could not do (an in-memory ledger, an error) is done on the caller's
    connection when its result is taken. One thread and one connection serve
    every read, so their memory is reused rather than held twice.
    """

    def __init__(self, db: sqlite3.Connection) -> None:
        """Start the thread (its connection opens with the first read)."""
        super().__init__(name="ledger-reader", daemon=True)
        self._path = next((row[2] for row in db.execute("PRAGMA database_list")
                           if row[1] == "main"), "")
        self._asked: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._reads: list[Callable[[sqlite3.Connection], Any]] = []
        self._values: list[Any] = []
        self._done: list[threading.Event] = []
        self._failed = threading.Event()
        self.start()

    def ask(self, read: Callable[[sqlite3.Connection], Any], *, fresh: bool = False) -> int:
        """Queue a read (``fresh``: in a new snapshot); its number for :meth:`result`."""
        self._reads.append(read)
        self._values.append(_MISSING)
        self._done.append(threading.Event())
        if self._failed.is_set() or not self._path:
            self._done[-1].set()  # the caller's connection does it
        else:
            self._asked.put((len(self._reads) - 1, fresh))
        return len(self._reads) - 1

    def result(self, i: int, db: sqlite3.Connection) -> Any:
        """The ``i``-th read's result: from the thread, or done now on ``db``."""
        self._done[i].wait()
        value = self._values[i]
        return self._reads[i](db) if value is _MISSING else value

    def close(self) -> None:
        """End the thread once the reads asked for are done (their results stay)."""
        self._asked.put(_STOP)
        self.join()

    def run(self) -> None:
        """In the thread: each read in turn, its result published as soon as it is known."""
        reader: sqlite3.Connection | None = None
        try:
            while (item := self._asked.get()) is not _STOP:
                i, fresh = item
                if reader is None:
                    reader = sqlite3.connect(self._path, timeout=5.0, isolation_level=None,
                                             check_same_thread=False)
                    reader.execute("PRAGMA query_only = ON")
                    # The reads scan their tables once: a small cache keeps the peak memory
                    # down (the file's pages are in the OS's cache anyway) and bounds each
                    # sort's memory (SQLite spills a larger one to a temporary file).
                    reader.execute("PRAGMA cache_size=-4096")
                if fresh and reader.in_transaction:
                    reader.execute("COMMIT")
                if not reader.in_transaction:
                    reader.execute("BEGIN")  # one snapshot until a fresh read
                self._values[i] = self._reads[i](reader)
                self._done[i].set()
        except Exception:  # the caller's connection does what is left (and meets any error)
            self._failed.set()
        finally:
            if reader is not None:
                reader.close()
            for done in self._done:
                done.set()
