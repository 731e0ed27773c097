"""The ledger for one command: its writer, or a reader beside ``serve`` (one writer per ledger)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from exporter.ledger.lock import LedgerBusyError, WriterLock
from exporter.ledger.store import Ledger, LedgerError
from exporter.records import Rules


def open_ledger(path: Path, role: str, roots: Sequence[str | Path] = (), *,
                rules: Rules | None = None, settle_seconds: float = 60.0,
                wait: float = 600.0, monotonic: Callable[[], float] = time.monotonic) -> Ledger:
    """The ledger for one command: its writer, or a reader when ``serve`` writes it.

    ``serve`` never shares: a second one gets LedgerBusyError naming the first.
    ``report`` and ``backfill`` beside a running ``serve`` read its ledger as it
    is (serve ingests within a pass, so nothing is missed, and one writer means
    no two processes can read a file from the same checkpoint and count its
    lines twice); beside another report they wait for it, up to ``wait`` seconds.
    """
    deadline = monotonic() + (0.0 if role == "serve" else wait)
    while True:
        try:
            lock = WriterLock.acquire(path, role, roots)
            break
        except LedgerBusyError as busy:
            if busy.holder is not None and busy.holder.role == "serve" and role != "serve":
                return Ledger(path, rules=rules, readonly=True, holder=busy.holder)
            if monotonic() >= deadline:
                raise
            time.sleep(0.1)  # bounded by ``wait``: another report finishing its pass
    try:
        return Ledger(path, rules=rules, settle_seconds=settle_seconds, lock=lock)
    except LedgerError:
        lock.release(remove=True)  # a refused file gets no lock file beside it
        raise

