"""The parser's per-key fold: the inline path merges exactly as ``records.merge`` does.

The fast path keeps one mutable state per request key while it reads a
batch and builds each Request once at the end; a file read in several
chunks folds each chunk into the same ``Parsed``. These properties hold it
to the reference: the tolerant path, which merges every line's request
with ``records.merge`` one by one, over the same lines in one call.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.ingest.parse import parse_lines
from exporter.records import Parsed
from tests.support.records import assistant

NOW = 1_800_000_000.0  # 2027-01-15: after every generated time, and inside the exact span
SETTINGS = settings(derandomize=True, deadline=None, max_examples=200,
                    suppress_health_check=[HealthCheck.too_slow])

# Few keys and few distinct values, so that copies collide, tie on time and on session.
stamps = st.sampled_from([
    "2026-10-01T12:00:00.000Z", "2026-10-01T12:00:00.001Z", "2026-10-01T12:00:05.500Z",
    "2026-10-01T14:00:00.000+02:00",  # the same instant as 12:00:00.000Z, another offset
    "2026-10-01T12:00:00.001",  # naive: UTC, decided by the general rules
    "1969-12-31T23:59:59.999999Z",  # before 1970
    "2027-01-17T00:00:00.000Z",  # past the horizon: rejected
])
counts = st.integers(0, 40)


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    """An assistant record (or a progress line carrying one) from a small set of values."""
    key = draw(st.sampled_from(["a", "b", "c"]))
    inp, out, read, made, w1h = (draw(counts) for _ in range(5))
    usage = {"input_tokens": inp, "output_tokens": out, "cache_read_input_tokens": read,
             "cache_creation_input_tokens": made,
             "cache_creation": {"ephemeral_5m_input_tokens": max(0, made - w1h),
                                "ephemeral_1h_input_tokens": w1h}}
    cost = draw(st.none() | st.sampled_from([0.0, -0.0, 0.25, 1.5]))
    agent = draw(st.sampled_from([None, "acompact-1", "a1"]))
    session = draw(st.sampled_from(["s1", "s2", ""]))
    rec = assistant(f"msg_{key}", f"req_{key}", ts=draw(stamps), session=session,
                    model=draw(st.sampled_from(["claude-opus-4-6", "claude-haiku-4-5"])),
                    sidechain=draw(st.booleans()), agent=agent, usage=usage)
    if cost is not None:
        rec["costUSD"] = cost  # old builds' recorded cost
    if not draw(st.booleans()):
        return rec
    return {"type": "progress", "sessionId": session, "cwd": "/p", "isSidechain": False,
            "data": {"type": "agent_progress", "agentId": agent, "message": rec}}


def _lines(recs: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in recs]


def _same(a: Parsed, b: Parsed) -> None:
    """Equal requests (every field, every type, key order) and equal counts."""
    assert list(a.requests.items()) == list(b.requests.items())
    for key, req in a.requests.items():
        assert [type(v) for v in req] == [type(v) for v in b.requests[key]], key
        assert req.gap is None
    assert a.counts == b.counts


@SETTINGS
@given(st.lists(records(), min_size=1, max_size=25), st.booleans())
def test_one_batch_folds_like_merging_line_by_line(recs: list[dict[str, Any]],
                                                   compaction: bool) -> None:
    """One call: the inline fold equals records.merge applied line by line."""
    data = b"".join(_lines(recs))
    fast = parse_lines(data, compaction_file=compaction, now=NOW)
    slow = parse_lines(data, compaction_file=compaction, fast=False, now=NOW)
    _same(fast, slow)


@SETTINGS
@given(st.lists(records(), min_size=1, max_size=25), st.lists(st.integers(0, 25), max_size=4))
def test_a_file_read_in_chunks_folds_like_one_batch(recs: list[dict[str, Any]],
                                                    cuts: list[int]) -> None:
    """Chunks parsed into one Parsed (as the scan reads a long file) equal one call."""
    lines = _lines(recs)
    bounds = sorted({0, len(lines), *(min(c, len(lines)) for c in cuts)})
    chunked = Parsed()
    for lo, hi in itertools.pairwise(bounds):
        parse_lines(b"".join(lines[lo:hi]), into=chunked, now=NOW)
    _same(chunked, parse_lines(b"".join(lines), fast=False, now=NOW))


def test_an_earlier_copy_takes_over_the_labels() -> None:
    """A copy stamped earlier, read later, gives the request its time, model and session."""
    late = assistant("m", "r", ts="2026-10-01T12:00:05.000Z", model="late", session="s2",
                     usage={"input_tokens": 1, "output_tokens": 9})
    early = assistant("m", "r", ts="2026-10-01T12:00:00.000Z", model="early", session="s3",
                      usage={"input_tokens": 4, "output_tokens": 2})
    parsed = parse_lines(b"".join(_lines([late, early])), now=NOW)
    (req,) = parsed.requests.values()
    assert (req.model, req.session, req.input, req.output) == ("early", "s3", 4, 9)
    assert parsed.counts.usage_lines == 2
