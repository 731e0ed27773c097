"""Parse stage: complete transcript lines → requests and line counts.

Each line is decoded by msgspec (exporter.ingest.line_schema) and judged by
the general rules (exporter.ingest.classify), which give every rejected line
its reason; the parser never raises on input. The common line, an assistant
record with usage that the fast schema decodes, takes a shorter path here
(``_fold_common``) that accepts only what the general rules accept, with the
same result (property tests hold the two equal).

The copies of a request (streaming lines, progress copies, resumed sessions)
fold into one *draft* per key while a batch is parsed: the Request's fields
as a list, updated in place by ``records.merge``'s rules, so that a later
copy costs no new tuple. Each draft becomes a Request once per batch.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

import msgspec

from exporter.ingest.classify import (
    MAX_LABEL_CHARS,
    SYNTHETIC_MODEL,
    RejectError,
    attribution_of,
    classify,
    classify_decoded,
    from_record,
    recorded_cost,
    source_of,
)
from exporter.ingest.iterations import Sink, split
from exporter.ingest.line_schema import (
    FAST,
    TOLERANT,
    FastData,
    FastEmbedded,
    FastLine,
    FastMessage,
    FastUsage,
)
from exporter.records import Parsed, Request, Source, merge

MAX_LINE_BYTES: Final = 64 * 1024 * 1024  # default limit; the largest real line seen is ~630 KB
FUTURE_SLACK_SECONDS: Final = 86_400.0  # a day: any time zone mix-up, any skew between hosts

_Draft = list[Any]
"""A request being folded: its fields in ``Request`` order (``gap`` last, unset)."""
_TS, _SESSION, _SOURCE, _INPUT, _OUTPUT, _READ, _W5M, _W1H = 1, 3, 5, 6, 7, 8, 9, 10
_COST, _SEARCHES, _ATTRIBUTION, _GAP = 14, 15, 16, 23  # attribution: 16 to 20; 21, 22: Codex's
_NO_LABELS: Final = ("", "", "", "", "")
# Looked up once, not per line: ``datetime.fromisoformat`` makes a bound method at each look-up.
_from_iso: Final = datetime.fromisoformat
_UNSET: Final = msgspec.UNSET
_MAIN: Final = Source.MAIN


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
    drafts = parse(data, compaction_file, out, horizon, max_line_bytes)
    known, new = out.requests, tuple.__new__
    for key, draft in drafts.items():  # each request built once per batch, not once per line
        known[key] = new(Request, draft)  # what Request._make does, without the call
    return out


def _parse_tolerant(
    data: bytes, compaction_file: bool, out: Parsed, horizon: float, max_line_bytes: int,
) -> dict[str, _Draft]:
    """Every line through the tolerant schema and the general rules (the fast path's reference)."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # the split after the final newline
    drafts: dict[str, _Draft] = {}
    rejected = out.counts.rejected
    sink = Sink(out.counts.iterations)
    other = usage = 0
    for line in lines:
        carried = _judge_and_fold(drafts, out.requests, rejected, functools.partial(
            classify, line, compaction_file, TOLERANT.decode, horizon=horizon,
            max_line_bytes=max_line_bytes, mended=out.counts.mended, sink=sink), sink)
        other += carried is False
        usage += carried is True
    out.counts.other += other
    out.counts.usage_lines += usage
    return drafts


def _parse_fast(
    data: bytes, compaction_file: bool, out: Parsed, horizon: float, max_line_bytes: int,
) -> dict[str, _Draft]:
    """Classify lines; the common usage line by ``_fold_common``, every other by the general rules.

    Lines that carry no request (user, system, snapshot...) are counted here;
    an assistant record, or a copy of one in a progress line, goes to
    ``_fold_common``; what that declines, and a line the fast schema refused,
    goes to the general rules.
    """
    drafts: dict[str, _Draft] = {}
    known, rejected = out.requests, out.counts.rejected
    sink = Sink(out.counts.iterations)
    decode = FAST.decode
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
            rec = decode(line) if plain or (
                stop - start <= max_line_bytes and (all_ascii or bytes(line).isascii())) else None
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            rec = None
        start = stop + 1
        if rec is None:  # the fast schema refused it: the general rules, from the bytes
            judge: Callable[[], Request | None] = functools.partial(
                classify, bytes(line), compaction_file, decode, horizon=horizon,
                max_line_bytes=max_line_bytes, mended=out.counts.mended, sink=sink)
        else:
            kind = rec.type
            if kind == "assistant":
                carried = _fold_common(drafts, known, sink, rec, rec, False, horizon,
                                       compaction_file)
            elif kind == "progress" and type(data_ := rec.data) is FastData \
                    and type(copy := data_.message) is FastEmbedded and copy.type == "assistant":
                carried = _fold_common(drafts, known, sink, rec, copy, True, horizon,
                                       compaction_file)
            else:
                other += 1  # a user, system, snapshot... line: no request (as in classify_decoded)
                continue
            if carried:
                usage += 1
                continue
            if carried is False:
                other += 1
                continue
            judge = functools.partial(classify_decoded, rec, compaction_file, horizon, sink)
        carried = _judge_and_fold(drafts, known, rejected, judge, sink)
        other += carried is False
        usage += carried is True
    out.counts.other += other
    out.counts.usage_lines += usage
    return drafts


def _fold_common(  # noqa: PLR0911, PLR0917 - each return is a case; positional: per line
    drafts: dict[str, _Draft], known: dict[str, Request], sink: Sink, rec: FastLine,
    inner: FastLine | FastEmbedded, embedded: bool, horizon: float, compaction_file: bool,
) -> bool | None:
    """Fold the assistant record ``inner`` of the line ``rec`` (or a progress copy: ``embedded``).

    True: it carried a request, folded as ``classify.from_record`` would make
    it; False: it carries none (no usage, an API error placeholder); None:
    not the common case (another shape, no id, a naive or wrong timestamp).
    """
    msg = inner.message
    if type(msg) is not FastMessage:
        return None
    if (u := msg.usage) is _UNSET or msg.model == SYNTHETIC_MODEL \
            or rec.isApiErrorMessage is True:
        return False
    mid, stamp = msg.id, inner.timestamp  # strings or None (the schema); counts in range
    if not mid or not stamp:
        return None
    try:
        moment = _from_iso(stamp)
    except ValueError:
        return None
    if moment.tzinfo is None or (ts := moment.timestamp()) > horizon:
        return None  # a naive timestamp (UTC), or one too far ahead
    created = u.cache_creation_input_tokens
    if (detail := u.cache_creation) is None:
        w5, w1h = created, 0
    else:
        w5, w1h = detail.ephemeral_5m_input_tokens, detail.ephemeral_1h_input_tokens
        # The total is authoritative (as in the general rules).
        w5 += extra if (extra := created - w5 - w1h) > 0 else 0
    rid, cost, tools = inner.requestId, rec.costUSD, u.server_tool_use
    key = f"{mid}\x1f{rid}" if rid else mid
    searches = tools.web_search_requests if tools is not None else 0  # in range (the schema)
    source = source_of(inner, rec, embedded=embedded, compaction_file=compaction_file) \
        if embedded or rec.isSidechain is True else _MAIN
    labels = _common_labels(inner) if inner.attributionSkill or inner.attributionPlugin \
        or inner.attributionMcpServer or inner.attributionAgent or inner.effort else _NO_LABELS
    if u.iterations:  # the parts billed on top, each a request of its own
        _fold_parts(drafts, known, sink, u, Request(
            key, ts, "", rec.sessionId or "", rec.cwd or "", source, u.input_tokens,
            u.output_tokens, u.cache_read_input_tokens, w5, w1h, u.service_tier or "",
            u.inference_geo or "", "", 0.0, 0, *labels))
    if (s := drafts.get(key)) is None:
        if not known or (old := known.get(key)) is None:
            drafts[key] = [  # a new request
                key, ts, msg.model or "", rec.sessionId or "", rec.cwd or "", source,
                u.input_tokens, u.output_tokens, u.cache_read_input_tokens, w5, w1h,
                u.service_tier or "", u.inference_geo or "", u.speed or "",
                recorded_cost(cost) if cost is not None else 0.0, searches, *labels, 0, 0, None]
            return True
        s = drafts[key] = _draft_of(old)  # known from an earlier batch
    if ts <= s[_TS] and (ts < s[_TS] or (rec.sessionId or "") < s[_SESSION]):
        # An earlier copy: its descriptive fields and labels win (rare; the general merge).
        _fold_earlier_copy(drafts, known, rec, inner, embedded, horizon, compaction_file)
    else:
        _raise_counts(s, source, u, w5, w1h, cost, searches, labels)
    return True


def _common_labels(inner: FastLine | FastEmbedded) -> tuple[str, str, str, str, str]:
    """A typed record's attribution, as ``classify.attribution_of`` gives it."""
    labels = (inner.attributionSkill or "", inner.attributionPlugin or "",
              inner.attributionMcpServer or "", inner.attributionAgent or "", inner.effort or "")
    joined = "".join(labels)
    if len(joined) > MAX_LABEL_CHARS or not joined.isascii():
        return attribution_of(inner)  # long or not ASCII: checked one by one
    return labels


def _fold_earlier_copy(  # noqa: PLR0917 - the arguments _fold_common has
    drafts: dict[str, _Draft], known: dict[str, Request], rec: FastLine,
    inner: FastLine | FastEmbedded, embedded: bool, horizon: float, compaction_file: bool,
) -> None:
    """Fold a common line older than the draft by the general merge: its fields win."""
    req = from_record(inner, rec, horizon, embedded=embedded, compaction_file=compaction_file)
    assert req is not None  # _fold_common accepted it: so do the general rules
    _fold(drafts, known, req)


def _fold_parts(
    drafts: dict[str, _Draft], known: dict[str, Request], sink: Sink, usage: FastUsage,
    line: Request,
) -> None:
    """Fold the parts the iterations of ``line`` (a common line's request) bill on top."""
    for part in split(usage.iterations, line, sink.kinds):
        _fold(drafts, known, part)


def _raise_counts(  # noqa: PLR0917 - positional: once per line
    draft: _Draft, source: Source, u: FastUsage, w5: int, w1h: int, cost: Any, searches: int,
    labels: tuple[str, ...],
) -> None:
    """Fold a later copy of a request (the streaming case): labels stay, counts take the maximum."""
    # ``if``, not max(): no call; and like max() it keeps the first of equals.
    if source > draft[_SOURCE]:  # noqa: PLR1730
        draft[_SOURCE] = source
    if (n := u.input_tokens) > draft[_INPUT]:
        draft[_INPUT] = n
    if (n := u.output_tokens) > draft[_OUTPUT]:
        draft[_OUTPUT] = n
    if (n := u.cache_read_input_tokens) > draft[_READ]:
        draft[_READ] = n
    if w5 > draft[_W5M]:  # noqa: PLR1730
        draft[_W5M] = w5
    if w1h > draft[_W1H]:  # noqa: PLR1730
        draft[_W1H] = w1h
    if cost is not None and (c := recorded_cost(cost)) > draft[_COST]:
        draft[_COST] = c
    if searches > draft[_SEARCHES]:  # noqa: PLR1730
        draft[_SEARCHES] = searches
    if labels is not _NO_LABELS:  # a blank never hides a name (records.merge)
        for i, label in enumerate(labels, _ATTRIBUTION):
            if label and not draft[i]:
                draft[i] = label


def _judge_and_fold(
    drafts: dict[str, _Draft], known: dict[str, Request], rejected: Counter[str],
    judge: Callable[[], Request | None], sink: Sink,
) -> bool | None:
    """Judge one line by the general rules, and fold or count what it gives.

    True: it carried a request (folded into ``drafts``, with the parts its
    iterations bill on top); False: it carried none; None: it was rejected
    (counted under its reason).
    """
    try:
        req = judge()
    except RejectError as exc:
        rejected[exc.reason] += 1
        return None
    if req is None:
        return False
    _fold(drafts, known, req)
    for part in sink.parts:
        _fold(drafts, known, part)
    sink.parts.clear()
    return True


def _draft_of(req: Request) -> _Draft:
    """A draft starting from a request of an earlier batch (``gap`` unset, as a merge leaves it)."""
    draft = list(req)
    draft[_GAP] = None
    return draft


def _fold(drafts: dict[str, _Draft], known: dict[str, Request], req: Request) -> None:
    """Merge one line's request into the drafts, exactly as ``records.merge`` does."""
    s = drafts.get(req.key)
    if s is not None:
        drafts[req.key] = list(merge(Request._make(s), req))
    elif (old := known.get(req.key)) is not None:
        drafts[req.key] = list(merge(old, req))
    else:
        drafts[req.key] = list(req)
