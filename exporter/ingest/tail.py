"""Tail stage: read the complete new lines of one transcript file.

A checkpoint remembers how far a file was read and what it looked like: the
digest of its first bytes and of the bytes just before the offset. A file
that shrank, changed inode, or whose remembered bytes differ was truncated,
replaced or rewritten in place (an insertion or a longer or shorter edit
anywhere before the offset shifts the bytes before it). Such a file is read
again from byte 0 (the ledger merges by key, so a second reading adds
nothing twice), and the chunk says why. A file rewritten with the same
content is not read again (its line counters stay exact).

The checkpoint also keeps a running CRC-32 of every byte before the offset,
extended over each read's bytes as they are read (zlib, ~2 GB/s: appends pay
only for their own bytes). A file whose size is unchanged but whose mtime
moved is checked against it in full: an edit of the same length anywhere
before the offset is seen (a rewrite that also changes the size is seen by
the windows above). A file with no CRC yet (a checkpoint from before it, or a
read that skipped an over-long line) gets one computed from its start once.

An incomplete last line is left for the next read, and the checkpoint notes
how far it is known to run without a newline, so a line that grows slowly is
searched once, not once per read. A line longer than ``max_line`` bytes is
skipped without ever being held in memory, and counted.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import os
import stat
import zlib
from dataclasses import dataclass
from typing import Final

from exporter.ingest.discover import fs_path
from exporter.ingest.parse import MAX_LINE_BYTES
from exporter.records import Checkpoint, Chunk

FINGERPRINT_BYTES: Final = 4096
TAIL_BYTES: Final = 4096  # checked before the offset: edits, insertions and cuts shift them
READ_LIMIT: Final = 64 * 1024 * 1024  # one chunk at most; long files come in pieces
SCAN_BLOCK: Final = 1024 * 1024  # newline search step over a long line: bounded memory

# Restart reasons (Chunk.reason), logged and counted by the scanner.
TRUNCATED: Final = "truncated"
REPLACED: Final = "replaced"  # another inode, or other first bytes
REWRITTEN: Final = "rewritten"  # same inode and first bytes, other bytes before the offset


def fingerprint(head: bytes) -> str:
    """A short digest of some bytes of a file."""
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


@dataclass(frozen=True, slots=True)
class _Marks:
    """What a checkpoint's ``fingerprint`` text holds.

    ``3:<head>:<tail>:<probe>:<crc>``: digests of the first ``fp_len`` bytes
    and of the ``min(TAIL_BYTES, offset)`` bytes before the offset, the file
    position up to which the line at the offset is known to have no newline,
    and the CRC-32 of all bytes before the offset (empty: not known). A ``2:``
    text lacks the CRC; a bare digest is from before the tail check (head
    only). Packed into the one text column so that the ledger schema needs no
    change.
    """

    head: str
    tail: str | None = None
    probe: int = 0
    crc: int | None = None

    def text(self) -> str:
        """The fingerprint text of these marks."""
        crc = "" if self.crc is None else str(self.crc)
        return f"3:{self.head}:{self.tail or ''}:{self.probe}:{crc}"

    @classmethod
    def parse(cls, text: str) -> _Marks:
        """Marks from a stored fingerprint text (any form)."""
        parts = text.split(":")
        if len(parts) == 5 and parts[0] == "3" and parts[3].isdigit():
            crc = int(parts[4]) if parts[4].isdigit() else None
            return cls(parts[1], parts[2] or None, int(parts[3]), crc)
        if len(parts) == 4 and parts[0] == "2" and parts[3].isdigit():
            return cls(parts[1], parts[2] or None, int(parts[3]))
        return cls(text)


def read_new(
    path: str, cp: Checkpoint | None, limit: int = READ_LIMIT, *,
    max_line: int = MAX_LINE_BYTES,
) -> Chunk | None:
    """Read the complete lines after ``cp`` (at most about ``limit`` bytes).

    ``path`` is a path key (see ``discover.path_key``). Returns None when
    nothing is new. Lines longer than ``max_line`` bytes are skipped and
    counted in ``Chunk.too_long``. Raises OSError when the file cannot be
    read; the caller decides how to report it.
    """
    # O_NONBLOCK: a FIFO named *.jsonl must not block the pass waiting for a writer.
    fd = os.open(fs_path(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        start, probe, reason, crc = _resume(fh, st, cp)
        restarted = cp is not None and start == 0 and cp.offset > 0
        if start >= st.st_size and not restarted:
            if cp is None or cp.mtime_ns == st.st_mtime_ns:
                return None
            # Touched, and its bytes checked: remember the mtime, or each pass checks again
            # (and a checkpoint from before the CRC gets one).
            marks = _Marks.parse(cp.fingerprint)
            if marks.crc is None:
                marks = dataclasses.replace(marks, crc=crc_upto(fh, start))
            return Chunk(path=path, data=b"", start=start, checkpoint=dataclasses.replace(
                cp, size=st.st_size, mtime_ns=st.st_mtime_ns, fingerprint=marks.text()))
        data, begin, end, probe, too_long = _read_lines(fh, st.st_size, start, probe,
                                                         limit=limit, max_line=max_line)
        head = data[:FINGERPRINT_BYTES] if begin == 0 else _span(
            fh, 0, min(FINGERPRINT_BYTES, end))
        # The running CRC goes on over the bytes just read; a gap (a skipped line) or no
        # CRC yet: computed from the start, once.
        crc = zlib.crc32(data, crc) if crc is not None and begin == start else crc_upto(fh, end)
        marks = _Marks(fingerprint(head), _tail_digest(fh, end), max(probe, end), crc)
    new_cp = Checkpoint(
        path=path,
        dev=st.st_dev,
        ino=st.st_ino,
        size=st.st_size,
        offset=end,
        fp_len=len(head),
        fingerprint=marks.text(),
        mtime_ns=st.st_mtime_ns,
    )
    return Chunk(path=path, data=data, start=begin, checkpoint=new_cp, restarted=restarted,
                 too_long=too_long, reason=reason if restarted else "")


def cut_chunk(chunk: Chunk, at: int, before: Checkpoint | None) -> Chunk:
    """``chunk`` up to the line start ``at`` (a file position inside it), to be read on from there.

    The new checkpoint's ``size`` is ``at``: no file size equals it while
    lines follow, so every later pass reads on from ``at`` although the file
    may not change again. ``before`` is the checkpoint the chunk was read
    from: its running CRC goes on over the bytes kept, when the chunk follows
    it directly (else the next read computes the CRC from the start).
    """
    data = chunk.data[: at - chunk.start]
    old = chunk.checkpoint
    crc: int | None = None
    if chunk.restarted or before is None:
        crc = zlib.crc32(data) if chunk.start == 0 else None
    elif chunk.start == before.offset:
        base = _Marks.parse(before.fingerprint).crc
        crc = None if base is None else zlib.crc32(data, base)
    with open(os.open(fs_path(chunk.path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as fh:
        tail = _tail_digest(fh, at)
    marks = _Marks(_Marks.parse(old.fingerprint).head, tail, at, crc)
    cp = dataclasses.replace(old, size=at, offset=at, fingerprint=marks.text())
    return dataclasses.replace(chunk, data=data, checkpoint=cp)


def _resume(
    fh: io.BufferedReader, st: os.stat_result, cp: Checkpoint | None,
) -> tuple[int, int, str, int | None]:
    """(offset, probe, restart reason, CRC-32 before the offset): where to continue."""
    if cp is None:
        return 0, 0, "", 0
    marks = _Marks.parse(cp.fingerprint)
    reason = _changed(fh, st, cp, marks)
    if reason:
        return 0, 0, reason, 0
    return cp.offset, max(marks.probe, cp.offset), "", marks.crc


def _changed(fh: io.BufferedReader, st: os.stat_result, cp: Checkpoint, marks: _Marks) -> str:
    """Why the file is not the one ``cp`` was taken of any more ("" if it is)."""
    if cp.dev != st.st_dev or cp.ino != st.st_ino:
        return REPLACED
    if st.st_size < cp.offset:
        return TRUNCATED
    if fingerprint(_span(fh, 0, cp.fp_len)) != marks.head:
        return REPLACED
    if marks.tail is not None and _tail_digest(fh, cp.offset) != marks.tail:
        return REWRITTEN
    # Same size, mtime moved: a same-length edit, or a touch. Only these pay a full read.
    if st.st_size == cp.size and st.st_mtime_ns != cp.mtime_ns and marks.crc is not None \
            and crc_upto(fh, cp.offset) != marks.crc:
        return REWRITTEN
    return ""


def _read_lines(
    fh: io.BufferedReader, size: int, pos: int, probe: int, *, limit: int, max_line: int,
) -> tuple[bytes, int, int, int, int]:
    """(data, where it begins, where it ends, probe, lines skipped as too long).

    ``probe`` > ``pos`` says the line at ``pos`` has no newline before
    ``probe``. Memory stays below ``max(limit, max_line)`` plus one block
    whatever the file holds, and every call makes progress or returns.
    """
    too_long = 0
    while True:
        want = min(limit, size - pos)
        if probe > pos:  # inside a line already known to be long: find its end first
            newline = _find_newline(fh, probe, size)
            if newline < 0:
                return b"", pos, pos, size, too_long  # still no newline: wait, unread
            if newline - pos > max_line:
                too_long += 1
                pos = probe = newline + 1
                continue
            want = max(want, newline + 1 - pos)  # the line fits: read it whole
        fh.seek(pos)
        data: bytes = fh.read(want)
        cut = data.rfind(b"\n")
        if cut >= 0:  # and what was read after the cut holds no newline either
            return data[: cut + 1], pos, pos + cut + 1, pos + len(data), too_long
        probe = pos + len(data)
        if probe >= size or not data:
            return b"", pos, pos, probe, too_long  # only an incomplete line so far


def _find_newline(fh: io.BufferedReader, start: int, end: int) -> int:
    """The position of the first newline in ``[start, end)``, or -1; one block in memory."""
    fh.seek(start)
    pos = start
    block = bytearray(SCAN_BLOCK)  # reused: no allocation per block
    view = memoryview(block)
    while pos < end:
        got = fh.readinto(view[: min(SCAN_BLOCK, end - pos)])
        if not got:
            return -1
        found = block.find(b"\n", 0, got)
        if found >= 0:
            return pos + found
        pos += got
    return -1


def crc_upto(fh: io.BufferedReader, end: int) -> int:
    """The CRC-32 of the file's first ``end`` bytes, read one block at a time."""
    fh.seek(0)
    crc, pos = 0, 0
    block = bytearray(SCAN_BLOCK)
    view = memoryview(block)
    while pos < end:
        got = fh.readinto(view[: min(SCAN_BLOCK, end - pos)])
        if not got:
            break
        crc = zlib.crc32(view[:got], crc)
        pos += got
    return crc


def _tail_digest(fh: io.BufferedReader, offset: int) -> str | None:
    """The digest of the bytes just before ``offset`` (None at the start of the file)."""
    if offset <= 0:
        return None
    return fingerprint(_span(fh, max(0, offset - TAIL_BYTES), offset))


def _span(fh: io.BufferedReader, start: int, end: int) -> bytes:
    """The file's bytes in ``[start, end)`` (fewer if it is shorter)."""
    fh.seek(start)
    data: bytes = fh.read(max(0, end - start))
    return data
