"""The general rules: what one transcript line carries, or why it is rejected.

Every line the fast path of exporter.ingest.parse does not take is judged
here, and the fast path must agree with these rules (property tests hold
them equal). A line carries a request (an assistant record with usage, or a
copy of one inside a progress line), carries none, or is rejected with a
:class:`~exporter.records.RejectReason`. Nothing here raises on input but
:class:`RejectError`.

A timestamp more than the horizon ahead of the clock is not a time a request
was made (a broken clock, an edited file, year 9999): such a line is
rejected as ``bad_timestamp``. A line refused as not JSON only for lone
surrogate escapes (a JavaScript string cut mid-emoji) is mended and judged
again (exporter.ingest.mend), and counted in ``LineCounts.mended``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from exporter.ingest import mend
from exporter.ingest.iterations import Sink, split
from exporter.ingest.line_schema import (
    MAX_TOKENS,
    TOLERANT,
    Data,
    Embedded,
    FastUsage,
    Line,
    Message,
)
from exporter.records import MendKind, RejectReason, Request, Source

SYNTHETIC_MODEL: Final = "<synthetic>"  # an API error placeholder's model: bills nothing
MAX_LABEL_CHARS: Final = 256  # an attribution value longer than this is cut (hostile input)


class RejectError(Exception):
    """A line that cannot be trusted, with the reason it is counted under."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def classify(
    line: bytes, compaction_file: bool, decode: Callable[[bytes], Line], *,
    horizon: float, max_line_bytes: int, mended: Counter[str], sink: Sink | None = None,
) -> Request | None:
    """The request one raw line carries, None for a valid line without one (or RejectError).

    ``decode`` is the schema tried first (exporter.ingest.line_schema). A
    line that is not JSON only for lone surrogate escapes is mended, judged
    again and counted in ``mended``; with a ``sink``, the parts its
    iterations bill on top are left there.
    """
    try:
        return _classify_once(line, compaction_file, decode, horizon=horizon,
                              max_line_bytes=max_line_bytes, sink=sink)
    except RejectError as exc:
        if exc.reason != RejectReason.INVALID_JSON or (fixed := mend.mended(line)) is None:
            raise
    mended[MendKind.LONE_SURROGATE] += 1
    return _classify_once(fixed, compaction_file, decode, horizon=horizon,
                          max_line_bytes=max_line_bytes, sink=sink)


def _classify_once(
    line: bytes, compaction_file: bool,
    decode: Callable[[bytes], Line], *, horizon: float, max_line_bytes: int,
    sink: Sink | None = None,
) -> Request | None:
    """``classify`` without the mending."""
    if len(line) > max_line_bytes:
        raise RejectError(RejectReason.TOO_LONG)
    if not line.isascii():
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            raise RejectError(RejectReason.INVALID_UTF8) from None
    rec: Line
    try:
        rec = decode(line)
    except msgspec.ValidationError:
        rec = _decode_tolerant(line)
    except msgspec.DecodeError:
        if not line.strip():
            return None  # a blank line carries nothing; Claude Code writes none
        raise RejectError(RejectReason.INVALID_JSON) from None
    except RecursionError:  # nested deeper than the decoder's stack allows
        raise RejectError(RejectReason.INVALID_JSON) from None
    return classify_decoded(rec, compaction_file, horizon, sink)


def classify_decoded(
    rec: Line, compaction_file: bool, horizon: float, sink: Sink | None = None,
) -> Request | None:
    """The request a decoded line carries (an assistant record, or one inside progress).

    With a ``sink``, the parts its iterations bill on top are left there.
    """
    kind = rec.type
    if kind == "assistant":
        return from_record(rec, rec, horizon, embedded=False,
                           compaction_file=compaction_file, sink=sink)
    if kind == "progress" and isinstance(rec.data, Data):
        inner = rec.data.message
        if isinstance(inner, Embedded) and inner.type == "assistant":
            return from_record(inner, rec, horizon, embedded=True,
                               compaction_file=compaction_file, sink=sink)
    return None


def _decode_tolerant(line: bytes) -> Line:
    """Decode a line the fast schema refused (a non-object, a wrong type, or both)."""
    try:
        return TOLERANT.decode(line)
    except msgspec.ValidationError:
        # An object fails only on an integer too long for Python to convert (> 4300 digits).
        is_object = line.lstrip()[:1] == b"{"
        raise RejectError(
            RejectReason.INVALID_JSON if is_object else RejectReason.NOT_OBJECT
        ) from None
    except (msgspec.DecodeError, RecursionError):
        # The fast schema stopped at a wrong type before reaching the line's syntax error
        # (a truncated line), or the nesting is deeper than the decoder's stack allows.
        raise RejectError(RejectReason.INVALID_JSON) from None


def from_record(
    rec: Line | Embedded, outer: Line, horizon: float, *,
    embedded: bool, compaction_file: bool, sink: Sink | None = None,
) -> Request | None:
    """Build a request from an assistant record (possibly embedded in a progress line).

    With a ``sink``, the parts its iterations bill on top are left there
    (only once the line is accepted).
    """
    msg = rec.message
    if not isinstance(msg, Message):
        raise RejectError(RejectReason.BAD_MESSAGE)
    if msg.usage is msgspec.UNSET:
        return None  # an assistant line without usage bills nothing
    if msg.model == SYNTHETIC_MODEL or outer.isApiErrorMessage is True:
        return None  # API error placeholder, not a billed request
    usage = msg.usage
    if type(usage) is FastUsage:
        tokens = _fast_tokens(usage)
        tier, geo, speed = usage.service_tier, usage.inference_geo, usage.speed
        tools = usage.server_tool_use
        searches = _searches(tools.web_search_requests if tools is not None else 0)
        iterations: Any = usage.iterations
    else:
        tokens = _tokens(usage)
        tier, geo, speed = usage.get("service_tier"), usage.get("inference_geo"), usage.get("speed")
        tools = usage.get("server_tool_use")
        searches = _searches(tools.get("web_search_requests") if isinstance(tools, dict) else 0)
        iterations = usage.get("iterations")
    if not isinstance(msg.id, str) or not msg.id:
        raise RejectError(RejectReason.MISSING_ID)
    request_id = rec.requestId
    key = f"{msg.id}\x1f{request_id}" if isinstance(request_id, str) and request_id else msg.id
    ts = _timestamp(rec.timestamp)
    if ts > horizon:
        raise RejectError(RejectReason.BAD_TIMESTAMP)
    source = source_of(rec, outer, embedded=embedded, compaction_file=compaction_file)
    model, session, cwd = msg.model, outer.sessionId, outer.cwd
    # Positional construction, inline type checks: this runs for every usage line.
    req = Request(
        key,
        ts,
        model if type(model) is str else "",
        session if type(session) is str else "",
        cwd if type(cwd) is str else "",
        source,
        *tokens,
        tier if type(tier) is str else "",
        geo if type(geo) is str else "",
        speed if type(speed) is str else "",
        recorded_cost(outer.costUSD) if outer.costUSD is not None else 0.0,
        searches,
        *attribution_of(rec),
    )
    if iterations and sink is not None:
        sink.parts = split(iterations, req, sink.kinds)
    return req


def attribution_of(rec: Line | Embedded) -> tuple[str, str, str, str, str]:
    """A record's attribution (``records.ATTRIBUTION`` order); "" for what is absent or not text.

    Values are hostile strings: cut to ``MAX_LABEL_CHARS``, and a lone surrogate
    (an escape no UTF-8 can hold, which SQLite would refuse) becomes ``?``.
    """
    return (_label(rec.attributionSkill), _label(rec.attributionPlugin),
            _label(rec.attributionMcpServer), _label(rec.attributionAgent), _label(rec.effort))


def _label(value: Any) -> str:
    """One attribution value, checked (see ``attribution_of``)."""
    if type(value) is not str or not value:
        return ""
    text: str = value[:MAX_LABEL_CHARS]
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _searches(value: Any) -> int:
    """Web searches a request made: a count in range, else 0 (an aside never rejects a line)."""
    return value if type(value) is int and 0 <= value <= MAX_TOKENS else 0


def _fast_tokens(usage: FastUsage) -> tuple[int, int, int, int, int]:
    """The token tuple of a strictly typed usage object (same rules as ``_tokens``).

    The schema has checked every count's range already.
    """
    inp, out = usage.input_tokens, usage.output_tokens
    read, created = usage.cache_read_input_tokens, usage.cache_creation_input_tokens
    detail = usage.cache_creation
    if detail is None:
        return inp, out, read, created, 0
    w5, w1h = detail.ephemeral_5m_input_tokens, detail.ephemeral_1h_input_tokens
    return inp, out, read, w5 + max(0, created - w5 - w1h), w1h


def _tokens(usage: Any) -> tuple[int, int, int, int, int]:
    """Validated (input, output, cache_read, write_5m, write_1h) of a usage object."""
    if not isinstance(usage, dict):
        raise RejectError(RejectReason.BAD_USAGE)
    inp = _count(usage, "input_tokens")
    out = _count(usage, "output_tokens")
    read = _count(usage, "cache_read_input_tokens")
    created = _count(usage, "cache_creation_input_tokens")
    detail = usage.get("cache_creation")
    if detail is None:
        # Builds before mid-2025 have no 5m/1h breakdown: all writes were 5 m.
        return inp, out, read, created, 0
    if not isinstance(detail, dict):
        raise RejectError(RejectReason.BAD_USAGE)
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
        raise RejectError(RejectReason.BAD_USAGE)
    if value < 0:
        raise RejectError(RejectReason.NEGATIVE_TOKENS)
    if value > MAX_TOKENS:
        raise RejectError(RejectReason.BAD_USAGE)
    return value


def _timestamp(value: Any) -> float:
    """Epoch seconds of an ISO-8601 timestamp; naive times are UTC."""
    if not isinstance(value, str):
        raise RejectError(RejectReason.BAD_TIMESTAMP)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise RejectError(RejectReason.BAD_TIMESTAMP) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def source_of(
    rec: Line | Embedded, outer: Line, *, embedded: bool, compaction_file: bool
) -> Source:
    """main, subagent or compaction, per transcript-format.md."""
    if embedded:
        # A progress copy is always a sidechain record, whatever the outer line says.
        agent = rec.agentId
        if not isinstance(agent, str) and isinstance(outer.data, Data):
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


def recorded_cost(value: Any) -> float:
    """Old builds' recorded cost, 0 when absent or not a finite non-negative number."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e9:
        return float(value)
    return 0.0
