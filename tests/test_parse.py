"""The parser: usage records, sources, dedupe keys, and counted rejections."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.ingest.parse import parse_lines
from exporter.records import RejectReason, Source
from tests.support.records import assistant, jsonl


def test_streaming_split_takes_each_field_maximum() -> None:
    """Lines of one response merge to one request with the final output count."""
    early = assistant(usage={"input_tokens": 3, "output_tokens": 2, "cache_read_input_tokens": 9})
    late = assistant(usage={"input_tokens": 3, "output_tokens": 400, "cache_read_input_tokens": 9})
    parsed = parse_lines(jsonl(early, late))
    (req,) = parsed.requests.values()
    assert (req.input, req.output, req.cache_read) == (3, 400, 9)
    assert parsed.counts.usage_lines == 2


def test_key_uses_request_id_or_message_id_alone() -> None:
    """The key is (message.id, requestId), or message.id when requestId is absent."""
    parsed = parse_lines(jsonl(assistant("m1", "r1"), assistant("m1", "r2"), assistant("m2", None)))
    assert sorted(parsed.requests) == ["m1\x1fr1", "m1\x1fr2", "m2"]


def test_cache_breakdown_and_old_builds() -> None:
    """1h writes come from the breakdown; without one every write is a 5m write."""
    new = assistant(
        "a",
        usage={
            "cache_creation_input_tokens": 50,
            "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 30},
        },
    )
    old = assistant("b", usage={"cache_creation_input_tokens": 70})
    reqs = parse_lines(jsonl(new, old)).requests
    assert (reqs["a\x1freq_1"].cache_write_5m, reqs["a\x1freq_1"].cache_write_1h) == (20, 30)
    assert (reqs["b\x1freq_1"].cache_write_5m, reqs["b\x1freq_1"].cache_write_1h) == (70, 0)


def test_sources_main_subagent_compaction() -> None:
    """Sidechain records are subagent, acompact agents or files are compaction."""
    lines = jsonl(
        assistant("m"),
        assistant("s", sidechain=True, agent="a1b2c3d"),
        assistant("c", sidechain=True, agent="acompact-12ab34"),
    )
    reqs = {r.key.split("\x1f")[0]: r.source for r in parse_lines(lines).requests.values()}
    assert reqs == {"m": Source.MAIN, "s": Source.SUBAGENT, "c": Source.COMPACTION}
    in_file = parse_lines(jsonl(assistant("x", sidechain=True)), compaction_file=True)
    assert next(iter(in_file.requests.values())).source == Source.COMPACTION


def test_progress_embedded_record_is_a_sidechain_copy() -> None:
    """A subagent record inside agent_progress counts, as subagent, with the outer cwd/session."""
    inner = assistant("sub", "rq", ts="2026-10-01T12:00:05.000Z")
    embedded = {
        "type": "assistant",
        "timestamp": inner["timestamp"],
        "message": inner["message"],
        "requestId": "rq",
        "uuid": "u",
    }
    line = {
        "type": "progress",
        "isSidechain": False,
        "cwd": "/w/p",
        "sessionId": "S",
        "timestamp": "2026-10-01T12:00:06.000Z",
        "data": {"type": "agent_progress", "agentId": "a77", "message": embedded},
    }
    (req,) = parse_lines(jsonl(line)).requests.values()
    assert (req.key, req.source, req.session, req.project) == (
        "sub\x1frq",
        Source.SUBAGENT,
        "S",
        "/w/p",
    )


def test_quoted_transcript_inside_tool_result_never_counts() -> None:
    """Usage JSON quoted in a string is text, not a record."""
    quoted = json.dumps(assistant("evil"), separators=(",", ":"))
    user = {
        "type": "user",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "content": quoted + "\n" + quoted}],
        },
        "toolUseResult": quoted,
    }
    parsed = parse_lines(jsonl(user))
    assert parsed.requests == {}
    assert parsed.counts.other == 1


def test_synthetic_and_api_errors_are_not_requests() -> None:
    """API-error placeholders are valid lines that bill nothing."""
    synth = assistant("e1", model="<synthetic>", usage={"input_tokens": 0, "output_tokens": 0})
    err = assistant("e2", isApiErrorMessage=True)
    parsed = parse_lines(jsonl(synth, err))
    assert parsed.requests == {}
    assert parsed.counts.other == 2


def test_spaced_json_and_crlf_parse() -> None:
    """Non-compact JSON and CRLF line ends are still valid lines."""
    data = json.dumps(assistant("sp"), indent=None).encode() + b"\r\n"
    assert list(parse_lines(data).requests) == ["sp\x1freq_1"]


def _bad_usage(**fields: Any) -> bytes:
    return jsonl(assistant("bad", usage=fields))


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"type":"assistant","message":{', RejectReason.INVALID_JSON),
        (b'{"type":"user","x":"a\x00b"}\n', RejectReason.INVALID_JSON),
        (b'{"type":"user","x":"\xff\xfe"}\n', RejectReason.INVALID_UTF8),
        (b"[1,2]\n", RejectReason.NOT_OBJECT),
        (b'"text"\n', RejectReason.NOT_OBJECT),
        (_bad_usage(output_tokens="12"), RejectReason.BAD_USAGE),
        (_bad_usage(output_tokens=1.5), RejectReason.BAD_USAGE),
        (_bad_usage(output_tokens=True), RejectReason.BAD_USAGE),
        (_bad_usage(input_tokens=-5), RejectReason.NEGATIVE_TOKENS),
        (
            jsonl(assistant("n", usage=None) | {"message": {"id": "n", "usage": None}}),
            RejectReason.BAD_USAGE,
        ),
        (jsonl(assistant("")), RejectReason.MISSING_ID),
        (jsonl(assistant("t", ts="yesterday")), RejectReason.BAD_TIMESTAMP),
        (jsonl({"type": "assistant", "message": "oops"}), RejectReason.BAD_MESSAGE),
    ],
)
def test_rejections_are_counted_by_reason(line: bytes, reason: str) -> None:
    """Each kind of bad line is rejected with its reason and nothing else is counted."""
    if not line.endswith(b"\n"):
        line += b"\n"
    good = jsonl(assistant("ok"))
    parsed = parse_lines(good + line + good)
    assert dict(parsed.counts.rejected) == {reason: 1}
    assert list(parsed.requests) == ["ok\x1freq_1"]
    assert parsed.counts.total == 3


def test_other_line_types_are_other() -> None:
    """Lines without usage (user, progress, snapshots, unknown types) count as other."""
    parsed = parse_lines(
        jsonl(
            {"type": "user", "message": {"role": "user", "content": "x"}},
            {"type": "file-history-snapshot", "snapshot": {}},
            {"type": "progress", "data": {"type": "hook_progress"}},
            {"type": "brand-new-type", "message": [1, 2]},
        )
    )
    assert parsed.counts.other == 4 and not parsed.requests


def test_timestamp_is_earliest_line() -> None:
    """A request's time is its earliest line's timestamp, whatever the order."""
    a = assistant(ts="2026-10-01T12:00:01.500Z")
    b = assistant(ts="2026-10-01T12:00:00.250Z")
    (req,) = parse_lines(jsonl(a, b)).requests.values()
    assert req.ts == pytest.approx(1790856000.25)


@pytest.mark.parametrize("searches", [3, 0, -1, 2**53 + 1, 10**30])
@pytest.mark.parametrize("fast", [True, False])
def test_a_web_search_count_out_of_range_bills_none(searches: int, fast: bool) -> None:
    """A web-search count out of range is 0 searches on either path; its line's request stays."""
    tools = {"web_search_requests": searches}
    usage = {"input_tokens": 5, "output_tokens": 1, "server_tool_use": tools}
    parsed = parse_lines(jsonl(assistant(usage=usage)), fast=fast)
    (req,) = parsed.requests.values()
    assert (req.input, req.web_search) == (5, searches if 0 <= searches <= 2**53 else 0)
    assert parsed.counts.usage_lines == 1 and not parsed.counts.rejected
