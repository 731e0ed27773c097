"""The ledger's write-ahead log: bounded, and verified before it is folded into the file.

SQLite checks a WAL frame's checksum only when it rebuilds its index after a
crash; a running writer copies whatever the frames hold into the database at
a checkpoint. A frame damaged on disk while ``serve`` runs would so become
part of the file unseen, and a clean close would stamp it. So the live
writer folds the WAL in itself (no automatic checkpoint): first it verifies
the checksum chain of every frame the WAL holds (:func:`broken_frame`), then
it checkpoints; a broken chain marks the ledger corrupt and nothing is
folded in. A close does the same check before it may stamp the file.

The bound: ``journal_size_limit`` makes SQLite cut the file back after a
checkpoint, and the live writer's checkpoints are TRUNCATE ones, tried every
tick while the WAL is over :data:`WAL_CHECKPOINT_BYTES`. A reader holding a
snapshot pins the frames after it (a checkpoint cannot pass it), so the WAL
grows while it reads; within a tick of its letting go the WAL is empty again.
"""

from __future__ import annotations

import array
import os
import struct
import sys
from pathlib import Path
from typing import Final

from exporter.ledger_health import Health
from exporter.ledger_schema import WAL_CHECKPOINT_BYTES
from exporter.sqlite import sqlite3

# What SQLite leaves of the WAL after a checkpoint reset (it keeps the file, for reuse).
JOURNAL_LIMIT: Final = 2 * WAL_CHECKPOINT_BYTES
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


def verified(path: Path, health: Health) -> bool:
    """Whether every committed WAL frame holds (a broken one marks the ledger corrupt)."""
    problem = broken_frame(path, committed_frames(path))
    if problem is not None:
        health.mark(problem)
        return False
    return True


def fold_in(db: sqlite3.Connection, path: Path, health: Health, *, verify: bool = False,
            force: bool = False) -> None:
    """The live writer's upkeep: verify the WAL (``verify``, or before a fold-in), fold it in.

    It is folded in when it is large, or with ``force``. TRUNCATE: the WAL
    is emptied when no reader pins it; SQLite's busy handler is not used (the
    writer's connection has none), so a pinned WAL costs one try and the next
    tick tries again.
    """
    try:
        size = os.stat(wal_path(path)).st_size
    except OSError:
        return
    fold = bool(size) and (force or size >= WAL_CHECKPOINT_BYTES)
    if health.corrupt is not None or not (fold or verify) or not verified(path, health):
        return
    if fold:
        try:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            health.note(exc)
