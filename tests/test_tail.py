"""The file follower: checkpoints, incomplete lines, truncation and replacement."""

from __future__ import annotations

import os
from pathlib import Path

from exporter.ingest.tail import read_new


def test_incomplete_last_line_waits(tmp_path: Path) -> None:
    """Only complete lines are returned; the rest is read once its newline arrives."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a":1}\n{"b":')
    first = read_new(str(f), None)
    assert first is not None and first.data == b'{"a":1}\n'
    waiting = read_new(str(f), first.checkpoint)
    assert waiting is not None and waiting.data == b""
    with f.open("ab") as fh:
        fh.write(b"2}\n")
    second = read_new(str(f), first.checkpoint)
    assert second is not None and second.data == b'{"b":2}\n' and second.start == 8


def test_nothing_new_returns_none(tmp_path: Path) -> None:
    """A file read to its end gives None."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"{}\n")
    chunk = read_new(str(f), None)
    assert chunk is not None
    assert read_new(str(f), chunk.checkpoint) is None


def test_truncated_file_is_reread_from_start(tmp_path: Path) -> None:
    """A file shorter than its checkpoint restarts at byte 0."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a":1}\n{"a":2}\n')
    cp = read_new(str(f), None).checkpoint  # type: ignore[union-attr]
    f.write_bytes(b'{"c":3}\n')
    chunk = read_new(str(f), cp)
    assert chunk is not None and chunk.restarted and chunk.start == 0
    assert chunk.data == b'{"c":3}\n'


def test_replaced_file_same_size_is_detected_by_fingerprint(tmp_path: Path) -> None:
    """Different first bytes mean a new file even with the same inode and a larger size."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a":1}\n')
    cp = read_new(str(f), None).checkpoint  # type: ignore[union-attr]
    with f.open("r+b") as fh:
        fh.write(b'{"z":9}\n{"y":8}\n')
    chunk = read_new(str(f), cp)
    assert chunk is not None and chunk.restarted and chunk.data.startswith(b'{"z":9}')


def test_new_inode_is_read_from_start(tmp_path: Path) -> None:
    """A file replaced by rename (new inode) is read again from the start."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a":1}\n')
    cp = read_new(str(f), None).checkpoint  # type: ignore[union-attr]
    other = tmp_path / "b.tmp"
    other.write_bytes(b'{"a":1}\n{"a":2}\n')
    os.replace(other, f)
    chunk = read_new(str(f), cp)
    assert chunk is not None and chunk.start == 0 and chunk.data.count(b"\n") == 2


def test_long_file_comes_in_pieces_at_line_boundaries(tmp_path: Path) -> None:
    """A limit splits reading at newlines, and the pieces cover the file exactly."""
    f = tmp_path / "a.jsonl"
    lines = [b'{"n":%d,"pad":"%s"}\n' % (i, b"x" * (i % 50)) for i in range(500)]
    f.write_bytes(b"".join(lines))
    cp, got = None, b""
    while (chunk := read_new(str(f), cp, limit=1000)) is not None:
        assert chunk.data.endswith(b"\n")
        got += chunk.data
        cp = chunk.checkpoint
    assert got == b"".join(lines)


def test_line_longer_than_limit_is_read_whole(tmp_path: Path) -> None:
    """A single line larger than the limit is still returned complete."""
    f = tmp_path / "a.jsonl"
    big = b'{"x":"' + b"y" * 100_000 + b'"}\n'
    f.write_bytes(big)
    chunk = read_new(str(f), None, limit=1000)
    assert chunk is not None and chunk.data == big
