"""Whether a ledger file can be trusted: its checks, its corruption mark, its clean-close stamp.

A ledger is *verified* when a check read it whole (``PRAGMA quick_check``) or
a stamp says it is exactly as a verified close left it. A corruption seen
anywhere (SQLite's "database disk image is malformed", a WAL frame whose
checksum does not hold, a failed check) marks it *corrupt*: a file beside it
(``<ledger>.corrupt``) says why, every later open refuses it with the way to
recover (``claude-code-exporter rebuild``), and no close stamps it clean.

The stamp is written only over a file a check vouched for and that nothing
since found wrong; the next open then skips the O(history) check. An open
that cannot skip it checks at once, unless the file is large and the caller
(``serve``) checks it while serving (:func:`check_in_background`).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from exporter.sqlite import sqlite3

# SQLite's primary result codes for a damaged file: SQLITE_CORRUPT, SQLITE_NOTADB.
_CORRUPT_CODES: Final = frozenset({11, 26})
# A file up to this size is checked at open by every command (one read of the whole file); a
# larger one, by ``serve``, while it serves (docs/reliability.md).
CHECK_AT_OPEN_BYTES: Final = 16 * 1024 * 1024
FULL_BELOW_BYTES: Final = 1024 * 1024  # a state dir with less free is called full


class LedgerError(Exception):
    """The ledger file cannot be used (foreign, corrupt, unwritable, disk full)."""


def is_corrupt(exc: BaseException) -> bool:
    """Whether an SQLite error says the file is damaged (not busy, full or read-only)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _CORRUPT_CODES
    text = str(exc)
    return "malformed" in text or "not a database" in text


def corrupt_marker(path: Path) -> Path:
    """The file beside the ledger that says it is corrupt, and why."""
    return path.with_name(path.name + ".corrupt")


def clean_marker(path: Path) -> Path:
    """Where a verified clean close records the ledger file's identity."""
    return path.with_name(path.name + ".clean")


def recovery(path: Path, reason: str) -> str:
    """The one message that says a ledger is corrupt and how to get a sound one back."""
    return (f"ledger {path} is corrupt ({reason}); nothing more is written to it. "
            f"To recover: stop serve, then run `claude-code-exporter rebuild --state-dir "
            f"{path.parent}` with the same --data-dir options: it moves the corrupt files "
            f"aside (kept beside it, named {path.name}.corrupt-<time>) and reads again every "
            "transcript still on disk. Requests whose transcripts Claude Code has already "
            "deleted, and status-line samples, are not in the rebuilt ledger.")


def marked(path: Path) -> str | None:
    """The reason a ledger was marked corrupt (None: it was not)."""
    try:
        data = json.loads(corrupt_marker(path).read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return "marked corrupt"
    reason = data.get("reason") if isinstance(data, dict) else None
    return reason if isinstance(reason, str) else "marked corrupt"


class Health:
    """What one open ledger knows of its file's soundness; shared by the threads that use it."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        """Unverified and not known corrupt, until the open's check says otherwise."""
        self.path = path
        self.verified = False  # a check, or the stamp of one, vouches for the file
        self.corrupt: str | None = None  # why the file cannot be trusted, once it is known
        self._clock = clock
        self._lock = threading.Lock()

    def note(self, exc: BaseException) -> None:
        """Mark the ledger corrupt if ``exc`` says so (any other error leaves it as it is)."""
        if is_corrupt(exc):
            self.mark(str(exc))

    def mark(self, reason: str) -> None:
        """Record the first corruption found, in memory and beside the file (for every process)."""
        with self._lock:
            if self.corrupt is not None:
                return
            self.corrupt = reason
            self.verified = False
        with contextlib.suppress(OSError):  # a full disk: this process still knows, and says so
            _write_atomic(corrupt_marker(self.path),
                          {"reason": reason, "at": round(self._clock(), 3)})

    def adopt(self) -> None:
        """Take up a mark another process (a report reading beside) left (one stat)."""
        if self.corrupt is None and corrupt_marker(self.path).exists():
            reason = marked(self.path)
            with self._lock:
                self.corrupt, self.verified = reason or "marked corrupt", False

    def passed(self) -> None:
        """A check read the whole file and found it sound."""
        with self._lock:
            if self.corrupt is None:
                self.verified = True

    def message(self) -> str | None:
        """The corruption and how to recover (None: none known)."""
        return None if self.corrupt is None else recovery(self.path, self.corrupt)


def check_at_open(db: sqlite3.Connection, health: Health, *, trusted: bool,
                  later: int | None) -> None:
    """The open's check of ``health.path``: refuse a marked file; check it, or say it is not.

    ``trusted``: a running writer checked the file and holds it. ``later``: a
    file of more bytes is left unverified, for :func:`check_in_background`.
    """
    path = health.path
    if trusted or known_clean(path):
        health.verified = True
        return
    if later is not None and path.stat().st_size > later:
        return  # the caller checks it while it serves
    check = db.execute("PRAGMA quick_check").fetchone()[0]
    if check != "ok":
        raise LedgerError(f"ledger {path} is corrupt ({check}); it was left untouched. "
                          + recovery(path, check).split("; ", 1)[1])
    health.verified = True


def refuse_marked(path: Path) -> None:
    """Refuse a ledger marked corrupt, with the way to recover (before anything reads it)."""
    reason = marked(path)
    if reason is not None:
        raise LedgerError(recovery(path, reason))


def refusal(path: Path, exc: sqlite3.DatabaseError) -> LedgerError:
    """Why an open failed; for a damaged file, also how to recover (the file left untouched)."""
    if is_corrupt(exc):
        return LedgerError(f"cannot use ledger {path}: {exc}; it was left untouched. "
                           + recovery(path, str(exc)).split("; ", 1)[1])
    return LedgerError(f"cannot use ledger {path}: {exc}{_disk_full(path)}")


def _disk_full(path: Path) -> str:
    """Why an open's read or write failed, when the disk under the ledger is (nearly) full.

    Opening needs room for the WAL's index (32 KiB) before anything is read:
    without it SQLite says only "disk I/O error".
    """
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return ""
    free = st.f_bavail * st.f_frsize
    if free >= FULL_BELOW_BYTES:
        return ""
    return f" (disk full: {free} bytes free on the file system of {path.parent})"


def quick_check(path: Path) -> str | None:
    """Read the whole file on a connection of its own: None if sound, else what is wrong."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, isolation_level=None,
                             check_same_thread=False)
    except sqlite3.Error as exc:
        return None if not is_corrupt(exc) else str(exc)
    try:
        db.execute("PRAGMA query_only = ON")
        rows = db.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.Error as exc:
        return str(exc) if is_corrupt(exc) else None  # busy or gone: not a verdict either way
    finally:
        db.close()
    found = [str(r[0]) for r in rows]
    return None if found == ["ok"] else "; ".join(found)


def check_in_background(health: Health, done: Callable[[], None] | None = None) -> threading.Thread:
    """Check an unverified ledger on a thread of its own, while its writer goes on serving.

    The check reads a snapshot (the writer commits beside it); a failure marks
    the ledger corrupt. ``done`` is called when the check ends either way.
    """
    def run() -> None:
        try:
            reason = quick_check(health.path)
            if reason is None:
                health.passed()
            else:
                health.mark(f"quick_check: {reason}")
        finally:
            if done is not None:
                done()

    thread = threading.Thread(target=run, name="ledger-check", daemon=True)
    thread.start()
    return thread


def known_clean(path: Path) -> bool:
    """True if the file is unchanged since a verified clean close stamped it."""
    try:
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size:
            return False
        stamp = json.loads(clean_marker(path).read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return bool(stamp == _identity(path))


def unstamp(path: Path) -> None:
    """The file is about to change: its clean-close stamp no longer describes it."""
    with contextlib.suppress(FileNotFoundError):
        clean_marker(path).unlink()


def stamp_clean(path: Path) -> None:
    """Stamp a closed, verified file, if SQLite folded its WAL in (nothing else changes it)."""
    with contextlib.suppress(OSError):
        if not path.with_name(path.name + "-wal").exists():
            _write_atomic(clean_marker(path), _identity(path))


def _identity(path: Path) -> dict[str, int]:
    """The identity of a file: inode, size, modification time (ns)."""
    st = path.stat()
    return {"ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _write_atomic(target: Path, data: object) -> None:
    """Write JSON beside ``target`` and move it in place (owner-only)."""
    part = target.with_name(target.name + ".part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out)
    part.replace(target)
