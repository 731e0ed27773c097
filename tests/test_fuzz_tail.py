"""Property tests of the file follower: lines split across reads anywhere, rewrites, huge lines.

Whatever the write pattern (byte by byte, random chunk sizes, a 12 MB line in
pieces, CRLF, invalid UTF-8, NUL bytes), reading with ``read_new`` between
appends yields every complete line exactly once, in order, and the parse of
those pieces equals a one-shot parse of the whole file. Truncations and
replacements that the checkpoint can detect are re-read, never skipped.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.ingest.parse import parse_lines
from exporter.ingest.tail import read_new
from exporter.records import Checkpoint, Parsed, Request, merge
from tests.support.paths import REAL
from tests.support.records import assistant, jsonl

# HARDENING_FUZZ_EXAMPLES scales a long run; CI uses the fixed, derandomized default.
FUZZ = settings(derandomize=True, deadline=None,
                max_examples=int(os.environ.get("HARDENING_FUZZ_EXAMPLES", "300")) * 2 // 5,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@contextmanager
def scratch() -> Iterator[Path]:
    """A fresh transcript path in a temporary directory (hypothesis reuses no fixture)."""
    with tempfile.TemporaryDirectory(prefix="fuzz-tail-") as tmp:
        yield Path(tmp) / "s.jsonl"


class Reader:
    """Follows one file the way the scanner does and parses what it gets."""

    def __init__(self, path: Path, limit: int | None = None) -> None:
        self.path, self.limit = path, limit
        self.cp: Checkpoint | None = None
        self.parsed = Parsed()
        self.data = b""
        self.reads = 0
        self.restarts = 0

    def read(self) -> None:
        """Read until nothing complete is left, checking every chunk's invariants."""
        while True:
            kwargs = {} if self.limit is None else {"limit": self.limit}
            chunk = read_new(str(self.path), self.cp, **kwargs)
            self.reads += 1
            if chunk is None:
                return
            assert chunk.data == b"" or chunk.data.endswith(b"\n")
            if chunk.restarted:
                self.restarts += 1
                assert chunk.start == 0
            elif self.cp is not None:
                assert chunk.start == self.cp.offset  # no gap, no overlap
            assert chunk.checkpoint.offset == chunk.start + len(chunk.data)
            self.data = self.data[: chunk.start] + chunk.data if chunk.restarted else \
                self.data + chunk.data
            parse_lines(chunk.data, into=self.parsed)
            self.cp = chunk.checkpoint
            if not chunk.data:
                return


def complete_part(data: bytes) -> bytes:
    """The bytes of ``data`` up to and including its last newline."""
    return data[: data.rfind(b"\n") + 1]


def same_parse(a: Parsed, b: Parsed) -> None:
    """Two parses agree on requests and on every line count."""
    assert a.requests == b.requests
    assert (a.counts.usage_lines, a.counts.other, a.counts.rejected) == (
        b.counts.usage_lines, b.counts.other, b.counts.rejected)


def _usage_line(i: int) -> bytes:
    return jsonl(assistant(f"m{i % 7}", f"r{i % 5}", ts=f"2026-10-01T12:00:{i % 60:02d}Z",
                           usage={"input_tokens": i, "output_tokens": 3 * i}))


line_payloads = st.one_of(
    st.integers(0, 500).map(_usage_line),
    st.integers(0, 500).map(lambda i: _usage_line(i).replace(b"\n", b"\r\n")),
    st.integers(0, 500).map(lambda i: _usage_line(i).replace(b'"hi"', b'"h\xff\x00i"')),
    st.binary(max_size=80).map(lambda b: b.replace(b"\n", b"") + b"\n"),
    st.sampled_from([b"\n", b"\r\n", b"\x00\n", b"{\n", b'{"type":"user"}\n', b"[1,2]\n"]),
)
files = st.tuples(st.lists(line_payloads, max_size=25), st.binary(max_size=40))


@FUZZ
@given(files, st.lists(st.integers(1, 400), min_size=1, max_size=60), st.booleans())
def test_random_chunk_appends_equal_a_one_shot_parse(
    content: tuple[list[bytes], bytes], sizes: list[int], small_limit: bool
) -> None:
    """Appending in random chunk sizes with reads between gives the one-shot parse."""
    lines, tail = content
    data = b"".join(lines) + tail.replace(b"\n", b"")  # may end inside a line
    with scratch() as path:
        path.write_bytes(b"")
        reader = Reader(path, limit=64 if small_limit else None)
        pos, k = 0, 0
        while pos < len(data):
            step = sizes[k % len(sizes)]
            with path.open("ab") as fh:
                fh.write(data[pos : pos + step])
            pos, k = pos + step, k + 1
            reader.read()
        reader.read()
        assert reader.data == complete_part(data)
        assert reader.restarts == 0
        same_parse(reader.parsed, parse_lines(complete_part(data)))
        assert reader.parsed.counts.total == len(lines)


@cache
def _sample() -> bytes:
    """About 6 KB of transcript: real lines (one with usage) when present, else generated."""
    files = sorted(REAL.glob("projects/*/*.jsonl"))
    lines = [ln + b"\n" for f in files[:1] for ln in f.read_bytes().split(b"\n") if ln]
    usage = [ln for ln in lines if b'"usage"' in ln and len(ln) < 4000][:1]
    rest = [ln for ln in lines if b'"usage"' not in ln and len(ln) < 1500][:4]
    picked = usage + rest if usage else [_usage_line(i) for i in range(12)]
    return b"".join(picked) + picked[0].replace(b"\n", b"\r\n")


def test_byte_by_byte_append_reads_every_line_once() -> None:
    """A file written one byte at a time, read after each byte, gives the one-shot parse."""
    data = _sample()
    with scratch() as path:
        path.write_bytes(b"")
        reader = Reader(path)
        with path.open("ab", buffering=0) as fh:
            for i in range(len(data)):
                fh.write(data[i : i + 1])
                reader.read()
        assert reader.data == data
        same_parse(reader.parsed, parse_lines(data))
        assert reader.parsed.requests


def test_every_split_offset_gives_the_one_shot_parse() -> None:
    """Two writes split at every byte offset, read in between, always parse the same."""
    data = _sample()
    whole = parse_lines(data)
    with scratch() as path:
        for cut in range(len(data) + 1):
            path.write_bytes(data[:cut])
            reader = Reader(path)
            reader.read()
            with path.open("ab") as fh:
                fh.write(data[cut:])
            reader.read()
            assert reader.data == data, cut
            same_parse(reader.parsed, whole)


def test_twelve_megabyte_line_in_random_pieces() -> None:
    """A 12 MB usage line written in 40 random pieces is read once, complete, when it ends."""
    big = assistant("huge", "rq", usage={"input_tokens": 9, "output_tokens": 99})
    big["message"]["content"] = [{"type": "text", "text": "z" * 12_000_000}]
    data = jsonl(assistant("a")) + jsonl(big) + jsonl(assistant("b"))
    rng = random.Random(12)
    cuts = sorted(rng.sample(range(1, len(data)), 39))
    with scratch() as path:
        path.write_bytes(b"")
        for limit in (None, 4096):
            path.write_bytes(b"")
            reader = Reader(path, limit)
            for lo, hi in zip([0, *cuts], [*cuts, len(data)], strict=True):
                with path.open("ab") as fh:
                    fh.write(data[lo:hi])
                reader.read()
            assert reader.data == data
            req = reader.parsed.requests["huge\x1frq"]
            assert (req.input, req.output) == (9, 99)
            assert reader.parsed.counts.total == 3


# Operations on one file: append lines, rewrite it in place (same inode, new first line),
# replace it by rename (new inode), truncate it below what was read, or read.
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.integers(0, 300), min_size=1, max_size=5)),
        st.tuples(st.just("rewrite"), st.lists(st.integers(0, 300), max_size=5)),
        st.tuples(st.just("rename"), st.lists(st.integers(0, 300), max_size=5)),
        st.tuples(st.just("truncate"), st.integers(0, 100)),
        st.tuples(st.just("read"), st.just([])),
    ),
    min_size=1, max_size=25,
)


def _version_header(n: int) -> bytes:
    """A first line unique to each rewrite, so the fingerprint always sees the change."""
    return b'{"type":"summary","rewrite":%d,"pad":"%s"}\n' % (n, b"." * (n % 13))


@FUZZ
@given(ops)
def test_rewrites_and_truncations_are_reread_never_skipped(steps: list[tuple[str, object]]
                                                           ) -> None:
    """Every request in the file at any read is in the result: restarts lose nothing."""
    with scratch() as path:
        content = _version_header(0)
        path.write_bytes(content)
        reader = Reader(path)
        want: dict[str, Request] = {}
        rewrites = 0

        def read() -> None:
            reader.read()
            for key, req in parse_lines(complete_part(content)).requests.items():
                want[key] = req if key not in want else merge(want[key], req)

        for op, arg in steps:
            if op == "append":
                assert isinstance(arg, list)
                content += b"".join(_usage_line(i) for i in arg)
                with path.open("ab") as fh:
                    fh.write(b"".join(_usage_line(i) for i in arg))
            elif op in ("rewrite", "rename"):
                assert isinstance(arg, list)
                rewrites += 1
                content = _version_header(rewrites) + b"".join(_usage_line(i) for i in arg)
                if op == "rewrite":
                    path.write_bytes(content)
                else:
                    tmp = path.with_suffix(".tmp")
                    tmp.write_bytes(content)
                    os.replace(tmp, path)
            elif op == "truncate":
                assert isinstance(arg, int)
                done = reader.cp.offset if reader.cp else 0
                if done:
                    content = content[: min(arg, done - 1)]  # strictly below the checkpoint
                    with path.open("r+b") as rw:
                        rw.truncate(len(content))
            else:
                read()
        read()
        assert reader.parsed.requests == want
        assert reader.data == complete_part(content)


@FUZZ
@given(st.lists(st.integers(0, 300), min_size=1, max_size=30),
       st.lists(st.integers(1, 120), min_size=1, max_size=40), st.integers(8, 100),
       st.sampled_from([16, 64, 1 << 20]))
def test_over_long_lines_are_skipped_exactly_whatever_the_appends(
    lengths: list[int], sizes: list[int], max_line: int, limit: int,
) -> None:
    """Lines over max_line, written in random pieces, are each counted once as too long.

    The other lines come back exactly once, in order, whatever the read size;
    no returned line is longer than one read.
    """
    lines = [b"%d:" % i + b"x" * n + b"\n" for i, n in enumerate(lengths)]
    data = b"".join(lines) + b"y" * (lengths[0] % 7)  # may end inside a line
    kept = b"".join(ln for ln in lines if len(ln) - 1 <= max_line)
    skipped = sum(1 for ln in lines if len(ln) - 1 > max_line)
    with scratch() as path:
        path.write_bytes(b"")
        cp: Checkpoint | None = None
        got, too_long, pos, k = b"", 0, 0, 0
        while True:
            if pos < len(data):
                with path.open("ab") as fh:
                    fh.write(data[pos : pos + sizes[k % len(sizes)]])
                pos, k = pos + sizes[k % len(sizes)], k + 1
            while (chunk := read_new(str(path), cp, limit, max_line=max_line)) is not None:
                assert not chunk.restarted
                got += chunk.data
                too_long += chunk.too_long
                cp = chunk.checkpoint
                if not chunk.data:
                    break
            if pos >= len(data):
                break
    # A long line that fits in one read comes back whole, for the parser to reject.
    returned = got.splitlines(keepends=True)
    assert b"".join(ln for ln in returned if len(ln) - 1 <= max_line) == kept
    assert too_long + sum(1 for ln in returned if len(ln) - 1 > max_line) == skipped
    assert all(len(ln) <= max(limit, max_line) + 1 for ln in returned)
