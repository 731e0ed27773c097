"""One writer per ledger: a process lock beside the ledger file, and who holds it.

Only one process may write a ledger: two writers would read a transcript from
the same checkpoint and count its lines twice. ``serve`` never shares its
ledger; ``report`` and ``backfill`` read a serving one as it is, and wait for
one another.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.ledger.health import LedgerError


@dataclass(frozen=True, slots=True)
class Holder:
    """The process that holds a ledger's writer lock, as it described itself."""

    pid: int
    role: str  # serve, report, backfill
    roots: tuple[str, ...] = ()


class LedgerBusyError(LedgerError):
    """Another process writes this ledger."""

    def __init__(self, path: Path, holder: Holder | None) -> None:
        """Name the holder in the message when it is known."""
        self.holder = holder
        who = f"{holder.role} (pid {holder.pid})" if holder else "another process"
        super().__init__(f"{who} already writes the ledger {path}; one writer per state dir")


class WriterLock:
    """One writer per ledger: a POSIX record lock on ``<ledger>.lock``.

    POSIX (fcntl) locks belong to a process: the kernel drops them when it dies,
    even by kill -9, and a forked child (the parser workers) does not inherit
    them, so an orphaned worker can never keep the ledger locked. The file
    says who holds it, for the refusal message.
    """

    def __init__(self, fd: int, path: Path, created: bool) -> None:
        """Wrap a locked descriptor (use :meth:`acquire`)."""
        self._fd: int | None = fd
        self.path = path
        self._created = created

    @classmethod
    def acquire(cls, ledger: Path, role: str, roots: Sequence[str | Path] = (), *,
                wait: float = 0.0, monotonic: Callable[[], float] = time.monotonic) -> WriterLock:
        """Take the lock, waiting up to ``wait`` seconds; LedgerBusyError names the holder."""
        path = ledger.with_name(ledger.name + ".lock")
        try:
            ledger.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            created = not path.exists()
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise LedgerError(f"cannot open ledger {ledger}: {exc.strerror or exc}") from exc
        deadline = monotonic() + wait
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if monotonic() >= deadline:
                    holder = cls.holder(ledger)
                    os.close(fd)  # holds no lock of ours: closing releases nothing
                    raise LedgerBusyError(ledger, holder) from None
                time.sleep(0.1)  # bounded by ``wait``: another writer finishing its pass
        note = json.dumps({"pid": os.getpid(), "role": role,
                           "roots": [os.fspath(r) for r in roots]})
        os.ftruncate(fd, 0)
        os.pwrite(fd, note.encode(), 0)
        return cls(fd, path, created)

    @staticmethod
    def holder(ledger: Path) -> Holder | None:
        """Who holds the lock of ``ledger`` now, as its lock file says (None: unknown)."""
        try:
            data = json.loads(ledger.with_name(ledger.name + ".lock").read_text("utf-8"))
            return Holder(int(data["pid"]), str(data["role"]), tuple(data.get("roots", ())))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def release(self, *, remove: bool = False) -> None:
        """Give the lock up; ``remove`` also deletes a lock file this lock created."""
        if self._fd is None:
            return
        if remove and self._created:
            with contextlib.suppress(OSError):
                self.path.unlink()
        os.close(self._fd)  # closing drops the process's record lock
        self._fd = None
