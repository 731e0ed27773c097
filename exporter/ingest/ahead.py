"""Lines dated ahead of our clock: left for a later pass, never dropped.

The parser rejects a request time more than a day ahead of the clock
(``parse.FUTURE_SLACK_SECONDS``) as ``bad_timestamp``. When the clock that is
wrong is ours (a host two days behind), every new line is such a line, and
rejecting them would lose them for good: the checkpoint moves past them.

So a run of lines at the end of what was read that holds requests ahead of
the clock, by at most ``AHEAD_LIMIT_SECONDS``, with no request in time after
it, is not taken yet: the chunk is cut before the run's first request line
and its checkpoint stops there, marked so that every later pass reads on
from it (the file need not change again). Once the clock has caught up the
lines are read as usual. They are rejected for good only when they cannot
be a clock's fault: further ahead than the limit (year 9999), or followed by
a request whose time is in range (then the clock is right and those lines
are wrong) — so one absurd line never holds a file back.
"""

from __future__ import annotations

from typing import Final

from exporter.ingest.parse import FUTURE_SLACK_SECONDS, parse_lines
from exporter.ingest.tail import cut_chunk
from exporter.records import Checkpoint, Chunk, Parsed, RejectReason

AHEAD_LIMIT_SECONDS: Final = 366 * 86_400.0  # a clock behind by more is not told from bad lines


def parse_chunk(
    chunk: Chunk, before: Checkpoint | None, into: Parsed, *,
    compaction_file: bool, now: float, max_line_bytes: int,
) -> tuple[Chunk, int]:
    """Parse ``chunk`` into ``into``: (the chunk as taken, request lines left for later).

    ``before`` is the checkpoint the chunk was read from.
    """
    parsed = Parsed()
    parse_lines(chunk.data, compaction_file=compaction_file, into=parsed, now=now,
                max_line_bytes=max_line_bytes)
    if parsed.counts.rejected.get(RejectReason.BAD_TIMESTAMP):  # rare: look closer
        cut, left = _run_ahead(chunk.data, compaction_file, now, max_line_bytes)
        if left:
            chunk = cut_chunk(chunk, chunk.start + cut, before)
            parsed = Parsed()
            parse_lines(chunk.data, compaction_file=compaction_file, into=parsed, now=now,
                        max_line_bytes=max_line_bytes)
            into.update(parsed)
            return chunk, left
    into.update(parsed)
    return chunk, 0


def _run_ahead(data: bytes, compaction_file: bool, now: float, limit: int) -> tuple[int, int]:
    """(where the run of lines ahead of the clock at the end of ``data`` starts, its requests).

    Read backwards, line by line, down to the last request in time; only lines that
    name a usage object are parsed (no other line carries a request).
    """
    cut, left = len(data), 0
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        line = data[start:end]
        end = start
        if b'"usage"' not in line:
            continue  # no request on it (a user line, a tool result): neither in time nor ahead
        now_ = parse_lines(line, compaction_file=compaction_file, now=now, max_line_bytes=limit)
        if now_.counts.usage_lines:
            break  # a request in time: the lines after it, if any, are wrong, not our clock
        if now_.counts.rejected.get(RejectReason.BAD_TIMESTAMP) and parse_lines(
                line, compaction_file=compaction_file, max_line_bytes=limit,
                now=now + AHEAD_LIMIT_SECONDS - FUTURE_SLACK_SECONDS).counts.usage_lines:
            cut, left = start, left + 1
    return cut, left
