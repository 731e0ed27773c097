"""The ledger's write-ahead log: bounded, and verified before it is folded into the file.

SQLite checks a WAL frame's checksum only when it rebuilds its index after a
crash; a running writer copies whatever the frames hold into the database at
a checkpoint. A frame damaged on disk while ``serve`` runs would so become
part of the file unseen, and a clean close would stamp it. So the live
writer folds the WAL in itself (no automatic checkpoint): first it verifies
the checksum chain of every frame the WAL holds (:func:`broken_frame`), then
it checkpoints; a broken chain marks the ledger corrupt and nothing is
folded in. A close does the same check before it may stamp the file.

The bound: ``journal_size_limit`` makes SQLite cut the file back to
:data:`JOURNAL_LIMIT` when it starts it again after a checkpoint; the live
writer tries a checkpoint at a tick when the WAL is over
:data:`WAL_CHECKPOINT_BYTES`, a TRUNCATE one (the file emptied) when it is
over the limit. A reader holding a snapshot pins the frames after it (a
checkpoint cannot pass it), so the WAL grows while it reads; within
:data:`RETRY_SECONDS` and a tick of its letting go the WAL is under the
limit again.
"""

from __future__ import annotations

import array
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from exporter.ledger.health import Health
from exporter.ledger.schema import WAL_CHECKPOINT_BYTES
from exporter.sqlite import sqlite3

# What SQLite leaves of the WAL after a checkpoint reset (it keeps the file, for reuse).
JOURNAL_LIMIT: Final = 2 * WAL_CHECKPOINT_BYTES
RETRY_SECONDS: Final = 2.0  # between fold-ins a reader blocks (each verifies the WAL first)
_MAGIC_LE, _MAGIC_BE = 0x377F0682, 0x377F0683
_WAL_HEADER, _FRAME_HEADER = 32, 24
_MX_FRAME_AT: Final = 16  # the wal-index header's mxFrame, in the -shm file (native order)
_MASK: Final = 0xFFFFFFFF


def configure(db: sqlite3.Connection) -> None:
    """The WAL's bound on a writer's connection."""
    db.execute(f"PRAGMA journal_size_limit={JOURNAL_LIMIT}")


def wal_path(path: Path) -> Path:
    """The ledger's WAL file."""
    return path.with_name(path.name + "-wal")


def committed_frames(path: Path) -> int:
    """How many WAL frames the ledger's committed state holds (the -shm's mxFrame; 0: none)."""
    try:
        with open(path.with_name(path.name + "-shm"), "rb") as fh:
            head = fh.read(_MX_FRAME_AT + 4)
    except OSError:
        return 0
    if len(head) < _MX_FRAME_AT + 4:
        return 0
    return int(struct.unpack_from("=I", head, _MX_FRAME_AT)[0])


def broken_frame(path: Path, frames: int) -> str | None:
    """Verify the checksum chain of the WAL's first ``frames`` frames; what is wrong, or None.

    Called by the one writer, under its lock: no frame is added meanwhile.
    """
    if frames <= 0:
        return None
    try:
        with open(wal_path(path), "rb") as fh:
            return _verify(fh.read(_WAL_HEADER), fh, frames)
    except OSError as exc:
        return f"WAL unreadable: {exc.strerror or exc}"


def _verify(header: bytes, fh: object, frames: int) -> str | None:
    """The chain check of :func:`broken_frame` over an open WAL file."""
    if len(header) < _WAL_HEADER:
        return "WAL header cut short"
    magic, _version, page, _seq, salt1, salt2, c0, c1 = struct.unpack(">8I", header)
    if magic not in (_MAGIC_LE, _MAGIC_BE):
        return "WAL header damaged (magic)"
    swap = (magic == _MAGIC_BE) != (sys.byteorder == "big")
    if _checksum(header[:24], 0, 0, swap) != (c0, c1):
        return "WAL header damaged (checksum)"
    read = getattr(fh, "read")  # noqa: B009 (a binary file, typed loosely for the caller)
    s0, s1 = c0, c1
    for n in range(1, frames + 1):
        frame = read(_FRAME_HEADER + page)
        if len(frame) < _FRAME_HEADER + page:
            return f"WAL frame {n} of {frames} missing"
        _pgno, _size, f1, f2, k0, k1 = struct.unpack_from(">6I", frame)
        s0, s1 = _checksum(frame[:8], s0, s1, swap)
        s0, s1 = _checksum(frame[_FRAME_HEADER:], s0, s1, swap)
        if (f1, f2) != (salt1, salt2) or (s0, s1) != (k0, k1):
            return f"WAL frame {n} of {frames} fails its checksum"
    return None


def _checksum(data: bytes, s0: int, s1: int, swap: bool) -> tuple[int, int]:
    """SQLite's WAL checksum of ``data`` (a multiple of 8 bytes), continuing from (s0, s1)."""
    words = array.array("I", data)
    if swap:
        words.byteswap()
    pairs = iter(words)
    for x in pairs:
        y = next(pairs)
        s0 = (s0 + x + s1) & _MASK
        s1 = (s1 + y + s0) & _MASK
    return s0, s1


class Keeper:
    """One live writer's WAL upkeep: what it verified last, and when to try a fold-in again."""

    def __init__(self, path: Path, health: Health, clock: Callable[[], float]) -> None:
        """Nothing verified yet; ``clock`` times the retries (seconds)."""
        self.path, self.health, self._clock = path, health, clock
        self._sound: tuple[int, int, int] | None = None  # (frames, size, mtime) verified whole
        self._retry_at = 0.0  # a fold-in a reader blocked: not tried again before this
        self._folded = -1  # the committed frames the last whole PASSIVE fold-in left

    def verified(self) -> bool:
        """Whether every committed frame holds (unchanged since the last verification: skipped).

        A frame written over on disk changes the file's modification time.
        """
        wal = wal_path(self.path)
        try:
            st = os.stat(wal)
        except FileNotFoundError:
            return True
        except OSError as exc:
            self.health.mark(f"WAL unreadable: {exc.strerror or exc}")
            return False
        frames = committed_frames(self.path)
        seen = (frames, st.st_size, st.st_mtime_ns)
        if seen == self._sound:
            return True
        problem = broken_frame(self.path, frames)
        if problem is not None:
            self.health.mark(problem)
            return False
        self._sound = seen
        return True

    def tend(self, db: sqlite3.Connection, *, verify: bool = False, force: bool = False) -> None:
        """Verify the WAL (``verify``, or before a fold-in); fold it in when large, or ``force``.

        It never waits for a reader (no busy timeout meanwhile): a reader
        pinning the WAL costs one try, and the next comes :data:`RETRY_SECONDS`
        later.
        """
        try:
            size = os.stat(wal_path(self.path)).st_size
        except OSError:
            return
        now, frames = self._clock(), committed_frames(self.path)
        # The frames since the WAL started again, not the file's size: the file keeps its
        # size when it starts again (up to JOURNAL_LIMIT), and frames already folded in
        # stay counted until the next commit starts it again.
        grown = frames * (_page_size(db) + _FRAME_HEADER) >= WAL_CHECKPOINT_BYTES
        fold = frames > 0 and frames != self._folded and (
            force or ((grown or size > JOURNAL_LIMIT) and now >= self._retry_at))
        if self.health.corrupt is not None or not (fold or verify) or not self.verified():
            return
        if not fold:
            return
        # PASSIVE keeps the file for the next frames (rewriting the same blocks); a WAL
        # grown past its bound (a reader pinned it) is emptied: TRUNCATE.
        mode = "TRUNCATE" if size > JOURNAL_LIMIT else "PASSIVE"
        wait = db.execute("PRAGMA busy_timeout").fetchone()[0]
        try:
            db.execute("PRAGMA busy_timeout=0")  # a reader's snapshot: try later, never wait
            busy, log, done = db.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        except sqlite3.Error as exc:
            self.health.note(exc)
            return
        finally:
            db.execute(f"PRAGMA busy_timeout={int(wait)}")
        whole = not busy and done >= log
        self._retry_at = 0.0 if whole else now + RETRY_SECONDS
        self._folded = frames if whole and mode == "PASSIVE" else -1


def _page_size(db: sqlite3.Connection) -> int:
    """The file's page size (a WAL frame holds one page)."""
    return int(db.execute("PRAGMA page_size").fetchone()[0])
