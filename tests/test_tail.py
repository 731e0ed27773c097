"""The file follower: checkpoints, partial lines, truncation, replacement, rewrites, long lines."""

from __future__ import annotations

import dataclasses
import os
import zlib
from pathlib import Path

from exporter.ingest.parse import parse_lines
from exporter.ingest.scan import read_files
from exporter.ingest.tail import FINGERPRINT_BYTES, REWRITTEN, fingerprint, read_new
from exporter.records import Checkpoint, Chunk, RejectReason
from tests.support.records import assistant, jsonl


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


# ---- in-place rewrites (issue 13, item 3) ----------------------------------------------
def _records(n: int, width: int = 100) -> list[bytes]:
    """``n`` distinct usage lines of about ``width`` bytes each."""
    return [jsonl(assistant(f"m{i:04d}", f"r{i:04d}", pad="x" * width)) for i in range(n)]


def _read_all(path: Path, cp: Checkpoint | None) -> tuple[list[Chunk], Checkpoint | None]:
    """Every chunk ``read_new`` hands out until nothing is new."""
    chunks = []
    while (chunk := read_new(str(path), cp)) is not None:
        chunks.append(chunk)
        cp = chunk.checkpoint
        if not chunk.data:
            break
    return chunks, cp


def test_lines_inserted_mid_file_are_a_rewrite_read_again(tmp_path: Path) -> None:
    """Lines inserted past the first 4 KiB (file not shrunk) restart the file at byte 0."""
    f = tmp_path / "a.jsonl"
    lines = _records(60)
    f.write_bytes(b"".join(lines))
    _, cp = _read_all(f, None)
    assert cp is not None and cp.offset > 3 * FINGERPRINT_BYTES
    edited = [*lines[:40], *_records(5, 30)[::-1], *lines[40:]]
    with f.open("r+b") as fh:  # in place: same inode, same first 4 KiB, grows
        fh.write(b"".join(edited))
    chunks, _ = _read_all(f, cp)
    assert chunks[0].restarted and chunks[0].reason == REWRITTEN and chunks[0].start == 0
    assert b"".join(c.data for c in chunks) == b"".join(edited)


def test_tokens_edited_in_place_are_read_again(tmp_path: Path) -> None:
    """Tokens raised in place (longer digits, file grown) are a rewrite, not an append."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"".join(_records(60)))
    _, cp = _read_all(f, None)
    assert cp is not None
    data = f.read_bytes()
    keep = data.index(b'"m0020"')  # past the first 4 KiB, as an editor of history would
    f.write_bytes(data[:keep] + data[keep:].replace(b'"output_tokens":10',
                                                    b'"output_tokens":1000'))
    chunk = read_new(str(f), cp)
    assert chunk is not None and chunk.restarted and chunk.reason == REWRITTEN
    assert parse_lines(chunk.data).requests["m0050\x1fr0050"].output == 1000


def test_same_size_edit_in_the_last_4kib_is_read_again(tmp_path: Path) -> None:
    """Digits swapped for as many digits near the offset: the tail digest sees them."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"".join(_records(60)))
    _, cp = _read_all(f, None)
    assert cp is not None
    data = f.read_bytes()
    at = data.index(b'"output_tokens":10', data.index(b'"m0058"'))
    with f.open("r+b") as fh:
        fh.seek(at)
        fh.write(b'"output_tokens":99')
    os.utime(f, ns=(cp.mtime_ns + 1_000_000, cp.mtime_ns + 1_000_000))  # coarse clocks
    chunk = read_new(str(f), cp)
    assert chunk is not None and chunk.restarted and chunk.reason == REWRITTEN
    assert parse_lines(chunk.data).requests["m0058\x1fr0058"].output == 99


def test_the_same_content_written_again_is_not_read_again(tmp_path: Path) -> None:
    """A copy of identical bytes over the file (new mtime) is not a rewrite: lines stay exact."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"".join(_records(60)))
    _, cp = _read_all(f, None)
    assert cp is not None
    f.write_bytes(f.read_bytes())
    os.utime(f, ns=(cp.mtime_ns + 1_000_000, cp.mtime_ns + 1_000_000))
    chunk = read_new(str(f), cp)
    assert chunk is None or (not chunk.restarted and chunk.data == b"")


def test_edit_just_before_the_offset_with_an_append_is_read_again(tmp_path: Path) -> None:
    """A changed byte in the last 4 KiB read, plus an append, is caught by the tail digest."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"".join(_records(60)))
    _, cp = _read_all(f, None)
    assert cp is not None
    data = bytearray(f.read_bytes())
    at = data.rindex(b'"output_tokens":10')
    data[at: at + 18] = b'"output_tokens":77'
    f.write_bytes(bytes(data) + _records(1)[0])
    chunk = read_new(str(f), cp)
    assert chunk is not None and chunk.restarted and chunk.reason == REWRITTEN


def test_plain_append_is_not_a_rewrite(tmp_path: Path) -> None:
    """An append continues at the offset, whatever its size."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"".join(_records(60)))
    _, cp = _read_all(f, None)
    assert cp is not None
    extra = b"".join(_records(3, 5000))
    with f.open("ab") as fh:
        fh.write(extra)
    chunk = read_new(str(f), cp)
    assert chunk is not None and not chunk.restarted and chunk.data == extra


def test_checkpoint_of_the_previous_format_still_resumes(tmp_path: Path) -> None:
    """A checkpoint holding only a head digest (older ledgers) continues at its offset."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a":1}\n')
    cp = read_new(str(f), None).checkpoint  # type: ignore[union-attr]
    old = dataclasses.replace(cp, fingerprint=fingerprint(f.read_bytes()))
    with f.open("ab") as fh:
        fh.write(b'{"b":2}\n')
    chunk = read_new(str(f), old)
    assert chunk is not None and not chunk.restarted and chunk.data == b'{"b":2}\n'
    # Today's form, with the running CRC of the whole file computed once (it had none).
    assert chunk.checkpoint.fingerprint.endswith(f":{zlib.crc32(f.read_bytes())}")
    assert chunk.checkpoint.fingerprint.startswith("3:")


# ---- over-long lines (issue 13, item 8) ------------------------------------------------
def test_line_over_the_limit_is_skipped_unread_and_counted(tmp_path: Path) -> None:
    """A line longer than max_line and than one read is skipped, never buffered, and counted."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a":1}\n' + b"x" * 5000 + b'\n{"b":2}\n')
    chunk = read_new(str(f), None, limit=8, max_line=4096)
    assert chunk is not None and chunk.data == b'{"a":1}\n'
    rest = read_new(str(f), chunk.checkpoint, limit=1000, max_line=4096)
    assert rest is not None and rest.too_long == 1 and rest.data == b'{"b":2}\n'
    assert rest.checkpoint.offset == f.stat().st_size
    whole = read_new(str(f), None)  # under the default limit the line is an ordinary one
    assert whole is not None and whole.too_long == 0 and whole.data == f.read_bytes()


def test_read_files_counts_every_over_long_line_as_too_long(tmp_path: Path) -> None:
    """Long lines skipped by the tail and long lines inside a chunk are both ``too_long``."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(jsonl(assistant("a")) + b"x" * 5000 + b"\n" + jsonl(assistant("b"))
                  + b"y" * 9000)
    with f.open("ab") as fh:
        fh.write(b"\n" + jsonl(assistant("c")))
    batch = read_files([(str(f), None)], max_line_bytes=4096)
    assert batch.parsed.counts.rejected == {RejectReason.TOO_LONG: 2}
    assert sorted(batch.parsed.requests) == ["a\x1freq_1", "b\x1freq_1", "c\x1freq_1"]


def test_unterminated_long_line_is_searched_once_not_per_read(tmp_path: Path) -> None:
    """A 200 MB line without a newline growing by 2 kB: each read scans only the new bytes."""
    f = tmp_path / "a.jsonl"
    with f.open("wb") as fh:
        fh.write(b'{"a":1}\n')
        fh.truncate(200 * 1024 * 1024)  # sparse: NUL bytes, no newline, no disk
    first = read_new(str(f), None)
    assert first is not None and first.data == b'{"a":1}\n'
    cp = first.checkpoint
    with f.open("ab") as fh:
        fh.write(b"y" * 2048)
    second = read_new(str(f), cp)  # the rest of the line is searched, once
    assert second is not None and second.data == b""
    cp = second.checkpoint
    for _ in range(3):
        with f.open("ab") as fh:
            fh.write(b"y" * 2048)
        before = _rchar()
        chunk = read_new(str(f), cp)
        assert _rchar() - before < 64 * 1024, "the whole line was read again"
        assert chunk is not None and chunk.data == b"" and chunk.checkpoint.offset == 8
        cp = chunk.checkpoint
    with f.open("ab") as fh:
        fh.write(b'\n{"b":2}\n')
    chunk = read_new(str(f), cp)
    assert chunk is not None and chunk.too_long == 1 and chunk.data == b'{"b":2}\n'


def _rchar() -> int:
    """Bytes this process has read through system calls so far (/proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_a_touched_file_with_an_older_checkpoint_gets_its_crc_and_new_mtime(
    tmp_path: Path,
) -> None:
    """A touch of a file read before the CRC existed: nothing re-read, the CRC and mtime kept."""
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a":1}\n')
    cp = read_new(str(f), None).checkpoint  # type: ignore[union-attr]
    head, tail = cp.fingerprint.split(":")[1:3]
    old = dataclasses.replace(cp, fingerprint=f"2:{head}:{tail}:8")
    os.utime(f, ns=(cp.mtime_ns + 10**9, cp.mtime_ns + 10**9))
    chunk = read_new(str(f), old)
    assert chunk is not None and chunk.data == b"" and not chunk.restarted
    assert chunk.checkpoint.mtime_ns == cp.mtime_ns + 10**9
    assert chunk.checkpoint.fingerprint == f"3:{head}:{tail}:8:{zlib.crc32(f.read_bytes())}"
    assert read_new(str(f), chunk.checkpoint) is None
