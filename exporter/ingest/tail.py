"""Tail stage: read the complete new lines of one transcript file.

A checkpoint remembers how far a file was read and what its first bytes
looked like. A file that shrank, changed inode, or whose first bytes differ
was truncated or replaced: it is read again from byte 0 (the ledger merges
by key, so a second reading adds nothing twice). An incomplete last line is
left for the next read.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from typing import BinaryIO, Final

from exporter.records import Checkpoint, Chunk

FINGERPRINT_BYTES: Final = 4096
READ_LIMIT: Final = 64 * 1024 * 1024  # one chunk at most; long files come in pieces


def fingerprint(head: bytes) -> str:
    """A short digest of a file's first bytes."""
    return hashlib.blake2b(head, digest_size=16).hexdigest()


def unchanged(st: os.stat_result, cp: Checkpoint | None) -> bool:
    """True when a stat says there is nothing new to read since ``cp``."""
    return (
        cp is not None
        and cp.dev == st.st_dev
        and cp.ino == st.st_ino
        and cp.size == st.st_size
        and cp.mtime_ns == st.st_mtime_ns
    )


def read_new(path: str, cp: Checkpoint | None, limit: int = READ_LIMIT) -> Chunk | None:
    """Read the complete lines after ``cp`` (at most about ``limit`` bytes).

    Returns None when nothing is new. Raises OSError when the file cannot be
    read; the caller decides how to report it.
    """
    # O_NONBLOCK: a FIFO named *.jsonl must not block the pass waiting for a writer.
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        start = _resume_offset(fh, st, cp)
        restarted = cp is not None and start == 0 and cp.offset > 0
        if start >= st.st_size and not restarted:
            return None
        fh.seek(start)
        data = _read_complete(fh, min(limit, max(0, st.st_size - start)))
        end = start + len(data)
        head = data[:FINGERPRINT_BYTES] if start == 0 else _head(fh, end)
    new_cp = Checkpoint(
        path=path,
        dev=st.st_dev,
        ino=st.st_ino,
        size=st.st_size,
        offset=end,
        fp_len=len(head),
        fingerprint=fingerprint(head),
        mtime_ns=st.st_mtime_ns,
    )
    return Chunk(path=path, data=data, start=start, checkpoint=new_cp, restarted=restarted)


def _resume_offset(fh: BinaryIO, st: os.stat_result, cp: Checkpoint | None) -> int:
    """Where to continue: the checkpoint's offset if the file is the same file."""
    if cp is None or cp.dev != st.st_dev or cp.ino != st.st_ino or st.st_size < cp.offset:
        return 0
    fh.seek(0)
    if fingerprint(fh.read(cp.fp_len)) != cp.fingerprint:
        return 0
    return cp.offset


def _read_complete(fh: BinaryIO, want: int) -> bytes:
    """Read about ``want`` bytes, cut after the last newline.

    A line longer than ``want`` is read on until its newline, so every call
    that has a complete line returns at least one.
    """
    data: bytes = fh.read(want)
    cut = data.rfind(b"\n")
    while cut < 0:
        more: bytes = fh.read(READ_LIMIT)
        if not more:
            return b""  # only an incomplete line so far
        base = len(data)
        data += more
        cut = more.find(b"\n")
        if cut >= 0:
            cut += base
    return data[: cut + 1]


def _head(fh: BinaryIO, end: int) -> bytes:
    """The first bytes of the file (at most up to ``end``), for the fingerprint."""
    fh.seek(0)
    head: bytes = fh.read(min(FINGERPRINT_BYTES, end))
    return head
