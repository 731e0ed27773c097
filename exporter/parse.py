"""Parse stage: complete transcript lines → requests and line counts.

Each line is decoded once by msgspec against a narrow schema: only the few
fields a usage record needs are materialised, everything else (tool output,
file contents, thinking text) is validated and skipped without building
Python objects. Container fields accept any JSON type, so a schema mismatch
can only mean "the line is not an object"; every other judgement is made by
hand below, in one place, and every rejected line is counted with a reason.
The parser never raises on input.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from exporter.records import Parsed, Request, Source

MAX_LINE_BYTES: Final = 64 * 1024 * 1024
MAX_TOKENS: Final = 2**53  # anything larger is not a token count (and breaks SQLite)
SYNTHETIC_MODEL: Final = "<synthetic>"


class RejectReason:
    """The ``reason`` label values of rejected lines."""

    INVALID_UTF8 = "invalid_utf8"
    INVALID_JSON = "invalid_json"
    NOT_OBJECT = "not_object"
    TOO_LONG = "too_long"
    BAD_MESSAGE = "bad_message"
    BAD_USAGE = "bad_usage"
    NEGATIVE_TOKENS = "negative_tokens"
    MISSING_ID = "missing_id"
    BAD_TIMESTAMP = "bad_timestamp"


# A container field may hold any JSON value; only an object of the expected
# shape is used. Listing every JSON type keeps msgspec from raising on lines
# whose unrelated fields have another shape.
_AnyButObject = str | int | float | bool | list[Any] | None


class _Message(msgspec.Struct):
    id: Any = None
    model: Any = None
    usage: Any = msgspec.UNSET


class _Embedded(msgspec.Struct):
    type: Any = None
    timestamp: Any = None
    requestId: Any = None  # noqa: N815 - the transcript's own field name
    agentId: Any = None  # noqa: N815
    message: _Message | _AnyButObject = None


class _Data(msgspec.Struct):
    type: Any = None
    agentId: Any = None  # noqa: N815
    message: _Embedded | _AnyButObject = None


class _Line(msgspec.Struct):
    type: Any = None
    isSidechain: Any = None  # noqa: N815
    isApiErrorMessage: Any = None  # noqa: N815
    cwd: Any = None
    sessionId: Any = None  # noqa: N815
    agentId: Any = None  # noqa: N815
    requestId: Any = None  # noqa: N815
    timestamp: Any = None
    costUSD: Any = None  # noqa: N815
    message: _Message | _AnyButObject = None
    data: _Data | _AnyButObject = None


_DECODER: Final = msgspec.json.Decoder(_Line)


class _RejectError(Exception):
    """Internal: a usage-bearing line that cannot be trusted."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_lines(
    data: bytes, *, compaction_file: bool = False, into: Parsed | None = None
) -> Parsed:
    """Classify every complete line of ``data`` (which must end with a newline).

    ``compaction_file`` marks a file named ``agent-acompact-*``: its sidechain
    records are compaction calls even when they carry no ``agentId``.
    """
    out = into if into is not None else Parsed()
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # the split after the final newline
    for line in lines:
        reason = parse_line(line, out, compaction_file)
        if reason is not None:
            out.counts.rejected[reason] += 1
    return out


def parse_line(line: bytes, out: Parsed, compaction_file: bool = False) -> str | None:
    """Classify one line into ``out``; return a rejection reason or None."""
    try:
        req = _classify(line, compaction_file)
    except _RejectError as exc:
        return exc.reason
    if req is None:
        out.counts.other += 1
    else:
        out.add(req)
    return None


def _classify(line: bytes, compaction_file: bool) -> Request | None:
    """The request one line carries, None for a valid line without one."""
    if len(line) > MAX_LINE_BYTES:
        raise _RejectError(RejectReason.TOO_LONG)
    if not line.isascii():
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            raise _RejectError(RejectReason.INVALID_UTF8) from None
    if not line.strip():
        return None  # a blank line carries nothing; Claude Code writes none
    try:
        rec = _DECODER.decode(line)
    except msgspec.ValidationError:
        raise _RejectError(RejectReason.NOT_OBJECT) from None
    except msgspec.DecodeError:
        raise _RejectError(RejectReason.INVALID_JSON) from None
    return _request(rec, compaction_file)


def _request(rec: _Line, compaction_file: bool) -> Request | None:
    """The request a decoded line carries, None if it carries none."""
    if rec.type == "assistant":
        return _from_record(rec, rec, embedded=False, compaction_file=compaction_file)
    if rec.type == "progress" and isinstance(rec.data, _Data):
        inner = rec.data.message
        if isinstance(inner, _Embedded) and inner.type == "assistant":
            return _from_record(inner, rec, embedded=True, compaction_file=compaction_file)
    return None


def _from_record(
    rec: _Line | _Embedded, outer: _Line, *, embedded: bool, compaction_file: bool
) -> Request | None:
    """Build a request from an assistant record (possibly embedded in a progress line)."""
    msg = rec.message
    if not isinstance(msg, _Message):
        raise _RejectError(RejectReason.BAD_MESSAGE)
    if msg.usage is msgspec.UNSET:
        return None  # an assistant line without usage bills nothing
    if msg.model == SYNTHETIC_MODEL or outer.isApiErrorMessage is True:
        return None  # API error placeholder, not a billed request
    tokens = _tokens(msg.usage)
    if not isinstance(msg.id, str) or not msg.id:
        raise _RejectError(RejectReason.MISSING_ID)
    request_id = rec.requestId
    key = f"{msg.id}\x1f{request_id}" if isinstance(request_id, str) and request_id else msg.id
    usage: dict[str, Any] = msg.usage
    return Request(
        key,
        _timestamp(rec.timestamp),
        msg.model if isinstance(msg.model, str) else "",
        _str(outer.sessionId),
        _str(outer.cwd),
        _source(rec, outer, embedded=embedded, compaction_file=compaction_file),
        *tokens,
        service_tier=_str(usage.get("service_tier")),
        inference_geo=_str(usage.get("inference_geo")),
        speed=_str(usage.get("speed")),
        recorded_cost_usd=_cost(outer.costUSD),
    )


def _tokens(usage: Any) -> tuple[int, int, int, int, int]:
    """Validated (input, output, cache_read, write_5m, write_1h) of a usage object."""
    if not isinstance(usage, dict):
        raise _RejectError(RejectReason.BAD_USAGE)
    inp = _count(usage, "input_tokens")
    out = _count(usage, "output_tokens")
    read = _count(usage, "cache_read_input_tokens")
    created = _count(usage, "cache_creation_input_tokens")
    detail = usage.get("cache_creation")
    if detail is None:
        # Builds before mid-2025 have no 5m/1h breakdown: all writes were 5 m.
        return inp, out, read, created, 0
    if not isinstance(detail, dict):
        raise _RejectError(RejectReason.BAD_USAGE)
    w5 = _count(detail, "ephemeral_5m_input_tokens")
    w1h = _count(detail, "ephemeral_1h_input_tokens")
    # The total is authoritative when the breakdown misses part of it.
    return inp, out, read, w5 + max(0, created - w5 - w1h), w1h


def _count(obj: dict[str, Any], name: str) -> int:
    """One token field: absent is 0; anything but a non-negative integer is rejected."""
    value = obj.get(name, 0)
    if value is None and name != "output_tokens":
        return 0  # some builds write explicit nulls for unused cache fields
    if type(value) is not int:  # bool is an int subclass: reject it too
        raise _RejectError(RejectReason.BAD_USAGE)
    if value < 0:
        raise _RejectError(RejectReason.NEGATIVE_TOKENS)
    if value > MAX_TOKENS:
        raise _RejectError(RejectReason.BAD_USAGE)
    return value


def _timestamp(value: Any) -> float:
    """Epoch seconds of an ISO-8601 timestamp; naive times are UTC."""
    if not isinstance(value, str):
        raise _RejectError(RejectReason.BAD_TIMESTAMP)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _RejectError(RejectReason.BAD_TIMESTAMP) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _source(
    rec: _Line | _Embedded, outer: _Line, *, embedded: bool, compaction_file: bool
) -> Source:
    """main, subagent or compaction, per transcript-format.md."""
    if embedded:
        # A progress copy is always a sidechain record, whatever the outer line says.
        agent = rec.agentId
        if not isinstance(agent, str) and isinstance(outer.data, _Data):
            agent = outer.data.agentId
    elif outer.isSidechain is True:
        if compaction_file:
            return Source.COMPACTION
        agent = outer.agentId
    else:
        return Source.MAIN
    if isinstance(agent, str) and agent.startswith("acompact"):
        return Source.COMPACTION
    return Source.SUBAGENT


def _str(value: Any) -> str:
    """A string field, or "" when absent or of another type."""
    return value if isinstance(value, str) else ""


def _cost(value: Any) -> float:
    """Old builds' recorded cost, 0 when absent or not a finite non-negative number."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e9:
        return float(value)
    return 0.0
