"""Parse stage: complete transcript lines → requests and line counts.

Each line is decoded by msgspec against a narrow schema: only the few fields
a usage record needs are materialised, everything else (tool output, file
contents, thinking text) is validated and skipped without building Python
objects. Two schemas share one set of rules:

- the *fast* schema types the usage object strictly (token counts are
  integers in range) and the strings the common path reads, so msgspec
  checks them in C; it fits nearly every real line;
- the *tolerant* schema accepts any JSON type in every field. A line the
  fast schema refuses is decoded again with it and judged by hand below,
  which gives every rejected line its reason.

The fast path only accepts what the tolerant path would accept with the same
result (property tests hold them equal). The parser never raises on input.

This runs once per transcript line on a cold scan, so the common line (an
assistant record with usage, in the fast schema) is handled in one inlined
loop, and the copies of a request fold into one mutable state per key; the
Request is built once per key and batch, with ``records.merge``'s rules.

A timestamp more than ``FUTURE_SLACK_SECONDS`` ahead of the clock is not a
time a request was made (a broken clock, an edited file, year 9999): such a
line is rejected as ``bad_timestamp`` rather than kept as a session that
stays "active" and a last-request time far in the future.

A line refused as not JSON only for lone surrogate escapes (a JavaScript
string cut mid-emoji) is mended and judged again (``mend``), and counted in
``LineCounts.mended``; valid lines pay nothing for it.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Final

import msgspec

from exporter.ingest import mend
from exporter.ingest.iterations import Sink, split
from exporter.records import Parsed, Request, Source, merge

MAX_LINE_BYTES: Final = 64 * 1024 * 1024  # default limit; the largest real line seen is ~630 KB
FUTURE_SLACK_SECONDS: Final = 86_400.0  # a day: any time zone mix-up, any skew between hosts
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


class _Message(msgspec.Struct, gc=False):
    id: Any = None
    model: Any = None
    usage: Any = msgspec.UNSET


class _Embedded(msgspec.Struct, gc=False):
    type: Any = None
    timestamp: Any = None
    requestId: Any = None  # noqa: N815 - the transcript's own field name
    agentId: Any = None  # noqa: N815
    attributionSkill: Any = None  # noqa: N815 - attribution (docs/figures.md)
    attributionPlugin: Any = None  # noqa: N815
    attributionMcpServer: Any = None  # noqa: N815
    attributionAgent: Any = None  # noqa: N815
    effort: Any = None
    message: _Message | _AnyButObject = None


class _Data(msgspec.Struct, gc=False):
    type: Any = None
    agentId: Any = None  # noqa: N815
    message: _Embedded | _AnyButObject = None


class _Line(msgspec.Struct, gc=False):
    type: Any = None
    isSidechain: Any = None  # noqa: N815
    isApiErrorMessage: Any = None  # noqa: N815
    cwd: Any = None
    sessionId: Any = None  # noqa: N815
    agentId: Any = None  # noqa: N815
    requestId: Any = None  # noqa: N815
    timestamp: Any = None
    costUSD: Any = None  # noqa: N815
    attributionSkill: Any = None  # noqa: N815 - attribution (docs/figures.md)
    attributionPlugin: Any = None  # noqa: N815
    attributionMcpServer: Any = None  # noqa: N815
    attributionAgent: Any = None  # noqa: N815
    effort: Any = None
    message: _Message | _AnyButObject = None
    data: _Data | _AnyButObject = None


# A token count the fast schema takes: msgspec checks the range in C, and a count out
# of it sends the line to the tolerant path, which names the reason (negative or too big).
_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)]


class _FastCacheCreation(msgspec.Struct, gc=False):
    ephemeral_5m_input_tokens: _Count = 0
    ephemeral_1h_input_tokens: _Count = 0


class _FastServerToolUse(msgspec.Struct, gc=False):
    web_search_requests: int = 0


class _FastIteration(msgspec.Struct, gc=False):
    type: str | None = None
    model: str | None = None
    input_tokens: _Count = 0
    output_tokens: _Count = 0
    cache_read_input_tokens: _Count = 0
    cache_creation_input_tokens: _Count = 0
    cache_creation: _FastCacheCreation | None = None


class _FastUsage(msgspec.Struct, gc=False):
    input_tokens: _Count = 0
    output_tokens: _Count = 0
    cache_read_input_tokens: _Count = 0
    cache_creation_input_tokens: _Count = 0
    cache_creation: _FastCacheCreation | None = None
    server_tool_use: _FastServerToolUse | None = None
    service_tier: str | None = None
    inference_geo: str | None = None
    speed: str | None = None
    iterations: list[_FastIteration] | None = None  # the parts (exporter.ingest.iterations)


# The fast schema also types the strings the inline path reads (a number where a string
# belongs sends the line to the tolerant path, which treats it as before), so that path
# needs no per-field type checks.
class _FastMessage(_Message):
    id: str | None = None
    model: str | None = None
    usage: _FastUsage | msgspec.UnsetType = msgspec.UNSET


class _FastEmbedded(_Embedded):
    timestamp: str | None = None
    requestId: str | None = None  # noqa: N815 - the transcript's own field name
    attributionSkill: str | None = None  # noqa: N815 - attribution (docs/figures.md)
    attributionPlugin: str | None = None  # noqa: N815
    attributionMcpServer: str | None = None  # noqa: N815
    attributionAgent: str | None = None  # noqa: N815
    effort: str | None = None
    message: _FastMessage | _AnyButObject = None


class _FastData(_Data):
    message: _FastEmbedded | _AnyButObject = None


class _FastLine(_Line):
    cwd: str | None = None
    sessionId: str | None = None  # noqa: N815 - the transcript's own field name
    requestId: str | None = None  # noqa: N815
    timestamp: str | None = None
    attributionSkill: str | None = None  # noqa: N815 - attribution (docs/figures.md)
    attributionPlugin: str | None = None  # noqa: N815
    attributionMcpServer: str | None = None  # noqa: N815
    attributionAgent: str | None = None  # noqa: N815
    effort: str | None = None
    message: _FastMessage | _AnyButObject = None
    data: _FastData | _AnyButObject = None


_FAST: Final = msgspec.json.Decoder(_FastLine)
# float_hook: a float beyond double range (1e400) decodes to inf and is judged like
# any other wrong type, instead of failing the whole line as "out of range".
_TOLERANT: Final = msgspec.json.Decoder(_Line, float_hook=float)


# Per-key fold state while a batch is parsed: a Request's fields as a list, so that a
# later copy of the request (a streaming line) updates it in place instead of building
# two tuples per line (the line's request, then the merge). Indexes of the fields used.
_State = list[Any]
_TS, _SESSION, _SOURCE, _INPUT, _OUTPUT, _READ, _W5M, _W1H = 1, 3, 5, 6, 7, 8, 9, 10
_COST, _SEARCHES, _ATTRIBUTION, _GAP = 14, 15, 16, 21  # attribution: 16 to 20
_NO_LABELS: Final = ("", "", "", "", "")
MAX_LABEL_CHARS: Final = 256  # an attribution value longer than this is cut (hostile input)


class _RejectError(Exception):
    """Internal: a usage-bearing line that cannot be trusted."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_lines(
    data: bytes, *, compaction_file: bool = False, into: Parsed | None = None,
    fast: bool = True, now: float | None = None, max_line_bytes: int = MAX_LINE_BYTES,
) -> Parsed:
    """Classify every complete line of ``data`` (which must end with a newline).

    ``compaction_file`` marks a file named ``agent-acompact-*``: its sidechain
    records are compaction calls even when they carry no ``agentId``.
    ``fast=False`` sends every line through the tolerant schema (the reference
    the fast path must agree with; tests compare the two). ``now`` is the
    clock (epoch seconds, default the system's) that far-future timestamps
    are judged against; lines over ``max_line_bytes`` are ``too_long``.
    """
    out = into if into is not None else Parsed()
    horizon = (time.time() if now is None else now) + FUTURE_SLACK_SECONDS
    parse = _parse_fast if fast else _parse_tolerant
    state = parse(data, compaction_file, out, horizon, max_line_bytes)
    known, new = out.requests, tuple.__new__
    for key, s in state.items():  # each request built once per batch, not once per line
        known[key] = new(Request, s)  # what Request._make does, without the call
    return out


def _mending(
    line: bytes, compaction_file: bool, decode: Callable[[bytes], _Line], *,
    horizon: float, max_line_bytes: int, mended: Counter[str], sink: Sink | None = None,
) -> Request | None:
    """``_classify``, and for a line that is not JSON only for lone surrogate escapes, mended."""
    try:
        return _classify(line, compaction_file, decode, horizon=horizon,
                         max_line_bytes=max_line_bytes, sink=sink)
    except _RejectError as exc:
        if exc.reason != RejectReason.INVALID_JSON or (fixed := mend.mended(line)) is None:
            raise
    mended[mend.LONE_SURROGATE] += 1
    return _classify(fixed, compaction_file, decode, horizon=horizon,
                     max_line_bytes=max_line_bytes, sink=sink)


def _parse_tolerant(
    data: bytes, compaction_file: bool, out: Parsed, horizon: float, max_line_bytes: int,
) -> dict[str, _State]:
    """Every line through the tolerant schema and the general rules (the fast path's reference)."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # the split after the final newline
    state: dict[str, _State] = {}
    rejected = out.counts.rejected
    sink = Sink(out.counts.iterations)
    other = usage = 0
    for line in lines:
        carried = _judged(state, out.requests, rejected, functools.partial(
            _mending, line, compaction_file, _TOLERANT.decode, horizon=horizon,
            max_line_bytes=max_line_bytes, mended=out.counts.mended, sink=sink), sink)
        other += carried is False
        usage += carried is True
    out.counts.other += other
    out.counts.usage_lines += usage
    return state


def _parse_fast(  # noqa: PLR0912, PLR0915 - one inlined loop: this runs once per line
    data: bytes, compaction_file: bool, out: Parsed, horizon: float, max_line_bytes: int,
) -> dict[str, _State]:
    """Classify lines; the common usage line is handled inline, every other by the general rules.

    The inline case is an ``assistant`` line the fast schema decoded, with
    valid token counts, an id and an aware timestamp inside the horizon:
    exactly what ``_from_record`` accepts, giving the same values, folded into
    ``state`` as ``records.merge`` would. Any other line that might carry a
    request (a bad count, no id, a naive or wrong timestamp, a progress copy,
    a line the fast schema refused) goes through ``_dispatch``/``_classify``,
    which give every rejected line its reason.
    """
    state: dict[str, _State] = {}
    known = out.requests
    rejected = out.counts.rejected
    sink = Sink(out.counts.iterations)
    decode, fromiso = _FAST.decode, datetime.fromisoformat
    top, main, unset = MAX_TOKENS, Source.MAIN, msgspec.UNSET
    other = usage = 0
    # Lines are views into ``data``, not copies (a split copies every byte once more).
    # A batch all ASCII and within the limit (nearly every one) spares the per-line checks.
    all_ascii = data.isascii()
    plain = all_ascii and len(data) <= max_line_bytes
    view, find, end, start = memoryview(data), data.find, len(data), 0
    while start < end:
        stop = find(b"\n", start)
        if stop < 0:
            stop = end  # a last line without its newline
        line = view[start:stop]
        try:
            # The common line (fits, ASCII, decodes) here; every other one by _classify.
            rec = decode(line) if plain or (
                stop - start <= max_line_bytes and (all_ascii or bytes(line).isascii())) else None
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            rec = None
        start = stop + 1
        if rec is not None:
            # The assistant record: the line itself, or a copy inside a progress line.
            kind = rec.type
            if kind == "assistant":
                inner: _FastLine | _FastEmbedded = rec
                embedded = False
            elif kind == "progress" and type(data_ := rec.data) is _FastData \
                    and type(copy := data_.message) is _FastEmbedded and copy.type == "assistant":
                inner = copy
                embedded = True
            else:
                other += 1  # a user, system, snapshot... line: no request (as in _dispatch)
                continue
            if type(msg := inner.message) is _FastMessage:
                if (u := msg.usage) is unset or msg.model == SYNTHETIC_MODEL \
                        or rec.isApiErrorMessage is True:
                    other += 1  # no usage, or an API error placeholder: bills nothing
                    continue
                inp, outp = u.input_tokens, u.output_tokens
                read, created = u.cache_read_input_tokens, u.cache_creation_input_tokens
                if (detail := u.cache_creation) is None:
                    w5, w1h = created, 0
                else:
                    w5, w1h = detail.ephemeral_5m_input_tokens, detail.ephemeral_1h_input_tokens
                mid, stamp = msg.id, inner.timestamp
                moment = None
                if mid and stamp:  # strings or None (the schema); counts in range (the schema)
                    rid = inner.requestId
                    key = f"{mid}\x1f{rid}" if rid else mid
                    try:
                        moment = fromiso(stamp)
                    except ValueError:
                        moment = None
                # A naive timestamp (UTC) and every rejection: the general rules below.
                if moment is not None and moment.tzinfo is not None \
                        and (ts := moment.timestamp()) <= horizon:
                    usage += 1
                    if detail is not None and (extra := created - w5 - w1h) > 0:
                        w5 += extra  # the total is authoritative (as in _tokens)
                    tools = u.server_tool_use
                    searches = tools.web_search_requests if tools is not None else 0
                    if not 0 <= searches <= top:
                        searches = 0
                    cost = rec.costUSD
                    if embedded or rec.isSidechain is True:
                        source = _source(inner, rec, embedded=embedded,
                                         compaction_file=compaction_file)
                    else:
                        source = main
                    # Attribution, from the record itself (a progress copy's own fields).
                    sk, pl, mc, ag, ef = (inner.attributionSkill, inner.attributionPlugin,
                                          inner.attributionMcpServer, inner.attributionAgent,
                                          inner.effort)
                    if sk or pl or mc or ag or ef:
                        labels = (sk or "", pl or "", mc or "", ag or "", ef or "")
                        joined = "".join(labels)  # strings or None (the schema)
                        if len(joined) > MAX_LABEL_CHARS or not joined.isascii():
                            labels = _labels(inner)  # long or not ASCII: checked one by one
                    else:
                        labels = _NO_LABELS
                    if u.iterations:  # the parts billed on top, each a request of its own
                        _fold_parts(state, known, sink, u.iterations, Request(
                            key, ts, "", rec.sessionId or "", rec.cwd or "", source, inp, outp,
                            read, w5, w1h, u.service_tier or "", u.inference_geo or "", "",
                            0.0, 0, *labels))
                    if (s := state.get(key)) is None:
                        if not known or (old := known.get(key)) is None:
                            # A new request: the line's values, as _from_record builds them.
                            state[key] = [
                                key, ts, msg.model or "", rec.sessionId or "", rec.cwd or "",
                                source, inp, outp, read, w5, w1h, u.service_tier or "",
                                u.inference_geo or "", u.speed or "",
                                _cost(cost) if cost is not None else 0.0, searches, *labels,
                                None,
                            ]
                            continue
                        s = state[key] = _seed(old)  # known from an earlier batch
                    if ts <= s[_TS] and (ts < s[_TS] or (rec.sessionId or "") < s[_SESSION]):
                        # An earlier copy: its labels win (rare; the general merge).
                        _fold_record(state, known, inner, rec, horizon, embedded=embedded,
                                     compaction_file=compaction_file)
                        continue
                    # A later copy (the streaming case): labels stay, counts take the maximum.
                    # ``if``, not max(): no call; and like max() it keeps the first of equals.
                    if source > s[_SOURCE]:  # noqa: PLR1730
                        s[_SOURCE] = source
                    if inp > s[_INPUT]:  # noqa: PLR1730
                        s[_INPUT] = inp
                    if outp > s[_OUTPUT]:  # noqa: PLR1730
                        s[_OUTPUT] = outp
                    if read > s[_READ]:  # noqa: PLR1730
                        s[_READ] = read
                    if w5 > s[_W5M]:  # noqa: PLR1730
                        s[_W5M] = w5
                    if w1h > s[_W1H]:  # noqa: PLR1730
                        s[_W1H] = w1h
                    if cost is not None and (c := _cost(cost)) > s[_COST]:
                        s[_COST] = c
                    if searches > s[_SEARCHES]:  # noqa: PLR1730
                        s[_SEARCHES] = searches
                    if labels is not _NO_LABELS:  # a blank never hides a name (records.merge)
                        for i, label in enumerate(labels, _ATTRIBUTION):
                            if label and not s[i]:
                                s[i] = label
                    continue
        carried = _judged(state, known, rejected, functools.partial(
            _mending, bytes(line), compaction_file, decode, horizon=horizon,
            max_line_bytes=max_line_bytes, mended=out.counts.mended,
            sink=sink) if rec is None  # the fast schema refused it
            else functools.partial(_dispatch, rec, compaction_file, horizon, sink), sink)
        other += carried is False
        usage += carried is True
    out.counts.other += other
    out.counts.usage_lines += usage
    return state


def _judged(
    state: dict[str, _State], known: dict[str, Request], rejected: Counter[str],
    judge: Callable[[], Request | None], sink: Sink,
) -> bool | None:
    """Judge one line by the general rules, and fold or count what it gives.

    True: it carried a request (folded into ``state``, with the parts its
    iterations bill on top); False: it carried none; None: it was rejected
    (counted under its reason).
    """
    try:
        req = judge()
    except _RejectError as exc:
        rejected[exc.reason] += 1
        return None
    if req is None:
        return False
    _fold(state, known, req)
    for part in sink.parts:
        _fold(state, known, part)
    sink.parts.clear()
    return True


def _fold_parts(
    state: dict[str, _State], known: dict[str, Request], sink: Sink, entries: Any, line: Request,
) -> None:
    """Fold the parts an inline-accepted line's iterations bill on top of ``line``."""
    for part in split(entries, line, sink.kinds):
        _fold(state, known, part)


def _seed(req: Request) -> _State:
    """Fold state starting from a merged request (``gap`` unset, as a merge leaves it)."""
    s = list(req)
    s[_GAP] = None
    return s


def _fold_record(
    state: dict[str, _State], known: dict[str, Request], rec: _Line | _Embedded, outer: _Line,
    horizon: float, *, embedded: bool, compaction_file: bool,
) -> None:
    """Fold an inline-accepted line through the general rules (an earlier copy: rare)."""
    req = _from_record(rec, outer, horizon, embedded=embedded, compaction_file=compaction_file)
    assert req is not None  # the inline checks accepted it: so do the general rules
    _fold(state, known, req)


def _fold(state: dict[str, _State], known: dict[str, Request], req: Request) -> None:
    """Merge one line's request into the fold state, exactly as ``records.merge`` does."""
    s = state.get(req.key)
    if s is not None:
        state[req.key] = list(merge(Request._make(s), req))
    elif (old := known.get(req.key)) is not None:
        state[req.key] = list(merge(old, req))
    else:
        state[req.key] = list(req)


def _classify(
    line: bytes, compaction_file: bool,
    decode: Callable[[bytes], _Line], *, horizon: float, max_line_bytes: int,
    sink: Sink | None = None,
) -> Request | None:
    """The request one line carries, None for a valid line without one."""
    if len(line) > max_line_bytes:
        raise _RejectError(RejectReason.TOO_LONG)
    if not line.isascii():
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            raise _RejectError(RejectReason.INVALID_UTF8) from None
    rec: _Line
    try:
        rec = decode(line)
    except msgspec.ValidationError:
        rec = _tolerant(line)
    except msgspec.DecodeError:
        if not line.strip():
            return None  # a blank line carries nothing; Claude Code writes none
        raise _RejectError(RejectReason.INVALID_JSON) from None
    except RecursionError:  # nested deeper than the decoder's stack allows
        raise _RejectError(RejectReason.INVALID_JSON) from None
    return _dispatch(rec, compaction_file, horizon, sink)


def _dispatch(
    rec: _Line, compaction_file: bool, horizon: float, sink: Sink | None = None,
) -> Request | None:
    """The request a decoded line carries (an assistant record, or one inside progress).

    With a ``sink``, the parts its iterations bill on top are left there.
    """
    kind = rec.type
    if kind == "assistant":
        return _from_record(rec, rec, horizon, embedded=False,
                            compaction_file=compaction_file, sink=sink)
    if kind == "progress" and isinstance(rec.data, _Data):
        inner = rec.data.message
        if isinstance(inner, _Embedded) and inner.type == "assistant":
            return _from_record(inner, rec, horizon, embedded=True,
                                compaction_file=compaction_file, sink=sink)
    return None


def _tolerant(line: bytes) -> _Line:
    """Decode a line the fast schema refused (a non-object, a wrong type, or both)."""
    try:
        return _TOLERANT.decode(line)
    except msgspec.ValidationError:
        # An object fails only on an integer too long for Python to convert (> 4300 digits).
        is_object = line.lstrip()[:1] == b"{"
        raise _RejectError(
            RejectReason.INVALID_JSON if is_object else RejectReason.NOT_OBJECT
        ) from None
    except (msgspec.DecodeError, RecursionError):
        # The fast schema stopped at a wrong type before reaching the line's syntax error
        # (a truncated line), or the nesting is deeper than the decoder's stack allows.
        raise _RejectError(RejectReason.INVALID_JSON) from None


def _from_record(
    rec: _Line | _Embedded, outer: _Line, horizon: float, *,
    embedded: bool, compaction_file: bool, sink: Sink | None = None,
) -> Request | None:
    """Build a request from an assistant record (possibly embedded in a progress line).

    With a ``sink``, the parts its iterations bill on top are left there
    (only once the line is accepted).
    """
    msg = rec.message
    if not isinstance(msg, _Message):
        raise _RejectError(RejectReason.BAD_MESSAGE)
    if msg.usage is msgspec.UNSET:
        return None  # an assistant line without usage bills nothing
    if msg.model == SYNTHETIC_MODEL or outer.isApiErrorMessage is True:
        return None  # API error placeholder, not a billed request
    usage = msg.usage
    if type(usage) is _FastUsage:
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
        raise _RejectError(RejectReason.MISSING_ID)
    request_id = rec.requestId
    key = f"{msg.id}\x1f{request_id}" if isinstance(request_id, str) and request_id else msg.id
    ts = _timestamp(rec.timestamp)
    if ts > horizon:
        raise _RejectError(RejectReason.BAD_TIMESTAMP)
    source = _source(rec, outer, embedded=embedded, compaction_file=compaction_file)
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
        _cost(outer.costUSD) if outer.costUSD is not None else 0.0,
        searches,
        *_labels(rec),
    )
    if iterations and sink is not None:
        sink.parts = split(iterations, req, sink.kinds)
    return req


def _labels(rec: _Line | _Embedded) -> tuple[str, str, str, str, str]:
    """A record's attribution (``records.ATTRIBUTION`` order); "" for what is absent or not text.

    Values are hostile strings: cut to ``MAX_LABEL_CHARS``, and a lone surrogate
    (an escape no UTF-8 can hold, which SQLite would refuse) becomes ``?``.
    """
    return (_label(rec.attributionSkill), _label(rec.attributionPlugin),
            _label(rec.attributionMcpServer), _label(rec.attributionAgent), _label(rec.effort))


def _label(value: Any) -> str:
    """One attribution value, checked (see ``_labels``)."""
    if type(value) is not str or not value:
        return ""
    text: str = value[:MAX_LABEL_CHARS]
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _searches(value: Any) -> int:
    """Web searches a request made: a count in range, else 0 (an aside never rejects a line)."""
    return value if type(value) is int and 0 <= value <= MAX_TOKENS else 0


def _fast_tokens(usage: _FastUsage) -> tuple[int, int, int, int, int]:
    """The token tuple of a strictly typed usage object (same rules as ``_tokens``).

    The schema has checked every count's range already (``_Count``).
    """
    inp, out = usage.input_tokens, usage.output_tokens
    read, created = usage.cache_read_input_tokens, usage.cache_creation_input_tokens
    detail = usage.cache_creation
    if detail is None:
        w5, w1h = created, 0
    else:
        w5 = detail.ephemeral_5m_input_tokens
        w1h = detail.ephemeral_1h_input_tokens
    if detail is not None:
        w5 += max(0, created - w5 - w1h)
    return inp, out, read, w5, w1h


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


def _cost(value: Any) -> float:
    """Old builds' recorded cost, 0 when absent or not a finite non-negative number."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e9:
        return float(value)
    return 0.0
