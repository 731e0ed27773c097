"""``claude-code-exporter rebuild``: a corrupt ledger moved aside, so a new one can be read.

The corrupt files are kept, whole, in a directory beside the ledger
(``<ledger>.corrupt-<UTC time>``), never deleted: a later salvage (SQLite's
``.recover``) can still use them. The new ledger holds what the transcripts
still on disk say; requests whose transcripts Claude Code has deleted, and
status-line samples no longer in the spool, are only in the old file.
"""

from __future__ import annotations

import time
from pathlib import Path

from exporter.ledger.health import LedgerError, marked, quick_check
from exporter.ledger.lock import WriterLock

# The ledger's own files; the lock file stays (it is held while they move).
_SUFFIXES = ("", "-wal", "-shm", ".clean", ".corrupt")


def move_aside(path: Path, now: float) -> Path:
    """Move the ledger's files into a new directory beside it, under its writer lock; that dir.

    A running ``serve`` holds the lock: LedgerBusyError names it, and nothing moves.
    A ledger neither marked corrupt nor failing ``quick_check`` is refused.
    """
    lock = WriterLock.acquire(path, "rebuild")
    try:
        if path.exists() and marked(path) is None and quick_check(path) is None:
            raise LedgerError(f"ledger {path} is not marked corrupt and reads as sound: nothing "
                              "to rebuild (a rebuild would drop the requests whose transcripts "
                              "are gone)")
        when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        aside = path.with_name(f"{path.name}.corrupt-{when}")
        aside.mkdir(mode=0o700)
        for suffix in _SUFFIXES:
            source = path.with_name(path.name + suffix)
            if source.exists():
                source.rename(aside / source.name)
        return aside
    finally:
        lock.release()
