"""OpenAI Codex CLI session logs (``rollout-*.jsonl``) → requests: one per turn, counted once.

A Codex log is a stream of typed lines: ``session_meta`` (the session id and
working directory), ``turn_context`` (the model in force from then on) and
``event_msg`` lines whose payload is a ``token_count`` event. Such an event
carries the session's *cumulative* usage (``total_token_usage``) and the
turn's (``last_token_usage``); Codex writes the same event more than once,
and the same session sits in many files (snapshots of a growing session,
archived copies, resumed sessions appended to).

So a turn is known by its place in its session's cumulative totals: its key
is the session id and those totals. Every copy of a turn, in any file, has
the same key and merges into one row; an event whose totals did not grow
repeats the turn before it (a duplicate line, whatever its
``last_token_usage`` says: after a compaction Codex writes zeros there).
A session whose totals go back (a reset) starts a new run of keys, so no
turn of the second run can take the key of one of the first.

A sub-agent's file (a fork) starts with its own ``session_meta``, then the
parent's, then a copy of the parent's history, re-dated to the fork: those
turns keep the parent's id (and merge with the parent's own file, whose
times win, being earlier); the fork's own turns, from its first
``turn_context`` whose ``turn_id`` (time-ordered) sorts after the fork's id,
go under the fork's id, their totals going on from the parent's (in a fork of
a fork, each turn goes to the newest thread created before it).

What each figure means (docs/figures.md, "Codex"): ``input`` is the
uncached input (``input_tokens − cached_input_tokens``), ``cache_read`` the
cached part, no cache writes (Codex reports none; the views say "not
measured", not 0), ``output`` includes the reasoning tokens, which are also
kept on their own (``reasoning``).

A read may start mid-file (a live append): the session, model and running
totals at the end of a read travel in the checkpoint (``Checkpoint.carry``).
"""

from __future__ import annotations

import dataclasses
import os
import re
from datetime import datetime
from typing import Final

import msgspec

from exporter.ingest import codex_limits
from exporter.ingest.ahead import AHEAD_LIMIT_SECONDS
from exporter.ingest.parse import FUTURE_SLACK_SECONDS, MAX_LINE_BYTES
from exporter.ingest.tail import cut_chunk
from exporter.records import (
    CODEX_AGENT,
    CODEX_KEY_PREFIX,
    Checkpoint,
    Chunk,
    MendKind,
    Parsed,
    RejectReason,
    Request,
    Source,
)

AGENT: Final = CODEX_AGENT
FALLBACK_MODEL: Final = "gpt-5 (assumed)"
"""The model of a turn no ``turn_context`` names (old builds): priced as gpt-5, shown as assumed."""
KEY_PREFIX: Final = CODEX_KEY_PREFIX
_SESSION_IN_NAME: Final = re.compile(
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$")
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_MAX_LABEL: Final = 512  # a session id, model or directory longer than this is not one


class _Line(msgspec.Struct):
    """Any line: its type and time; the payload is decoded only for the types read."""

    type: str = ""
    timestamp: str = ""
    payload: msgspec.Raw = msgspec.Raw(b"null")


class _Meta(msgspec.Struct):
    """``session_meta``'s payload (the fields read)."""

    id: str = ""
    cwd: str = ""


class _Context(msgspec.Struct):
    """``turn_context``'s payload (the fields read)."""

    model: str = ""
    cwd: str = ""
    turn_id: str = ""


class _Usage(msgspec.Struct):
    """A usage object: ``cached_input_tokens`` is a part of ``input_tokens``."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_output_tokens: int = 0

    def counts(self) -> tuple[int, int, int, int]:
        """(input, cached, output, reasoning)."""
        return (self.input_tokens, self.cached_input_tokens, self.output_tokens,
                self.reasoning_output_tokens)


class _Info(msgspec.Struct):
    """A token_count event's ``info``."""

    total_token_usage: _Usage | None = None
    last_token_usage: _Usage | None = None
    model_context_window: int | None = None


class _Settings(msgspec.Struct):
    """A ``thread_settings_applied`` event's ``thread_settings`` (the field read)."""

    service_tier: str | None = None


class _Event(msgspec.Struct):
    """An ``event_msg`` payload (the fields read)."""

    type: str = ""
    info: _Info | None = None
    thread_settings: _Settings | None = None
    rate_limits: msgspec.Raw = msgspec.Raw(b"null")  # checked by exporter.ingest.codex_limits


_LINE: Final = msgspec.json.Decoder(_Line)
_META: Final = msgspec.json.Decoder(_Meta)
_CONTEXT: Final = msgspec.json.Decoder(_Context)
_EVENT: Final = msgspec.json.Decoder(_Event)
_CARRY_ENCODE: Final = msgspec.json.Encoder().encode


class Carry(msgspec.Struct, array_like=True):
    """A file's parser state after some lines: what the next line's turn needs."""

    session: str = ""  # whose turns these are: the file's own, or a parent's being copied
    cwd: str = ""
    model: str = ""
    totals: tuple[int, int, int, int] | None = None  # the cumulative usage last seen
    run: int = 0  # how many times the totals went back (each starts a run of keys)
    own: str = ""  # the file's own session (its first session_meta)
    last_key: str = ""  # the key of the turn the totals last grew to
    threads: list[str] = msgspec.field(default_factory=list)  # session_meta ids, in file order
    tier: str = ""  # the service tier the session last stated ("" for its default)


_CARRY_DECODE: Final = msgspec.json.Decoder(Carry)


def carry_of(text: str) -> Carry:
    """The state a checkpoint carries ("" or unreadable: a file's start)."""
    if not text:
        return Carry()
    try:
        return _CARRY_DECODE.decode(text)
    except msgspec.DecodeError:
        return Carry()


def parse_chunk(
    chunk: Chunk, before: Checkpoint | None, into: Parsed, *, now: float,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> tuple[Chunk, int]:
    """Parse a Codex file's chunk into ``into``: (the chunk as taken, turns left for later).

    A turn dated more than a day ahead of ``now``, but within a year, is
    left with the lines after it for a later pass (our clock may be behind);
    the chunk is cut before it. ``before`` is the checkpoint the chunk was
    read from: its carried state, unless the chunk starts the file.
    """
    fresh = chunk.restarted or chunk.start == 0
    state = Carry() if fresh or before is None else carry_of(before.carry)
    if not state.session:
        state.session = session_in_name(chunk.path)
    reader = _Reader(state, into, now + FUTURE_SLACK_SECONDS, now + AHEAD_LIMIT_SECONDS,
                     max_line_bytes)
    cut = reader.run(chunk.data)
    if cut is not None:
        chunk = cut_chunk(chunk, chunk.start + cut, before)
    checkpoint = dataclasses.replace(chunk.checkpoint, carry=_CARRY_ENCODE(state).decode())
    return dataclasses.replace(chunk, checkpoint=checkpoint), 1 if cut is not None else 0


def session_in_name(path: str) -> str:
    """The session id a rollout file's name ends with ("" when it has none)."""
    found = _SESSION_IN_NAME.search(os.path.basename(path))
    return found.group(1) if found else ""


class _Reader:
    """One chunk's lines in order, folding turns into ``into`` and the state forward."""

    def __init__(self, state: Carry, into: Parsed, horizon: float, limit: float,
                 max_line_bytes: int) -> None:
        """Read into ``into``; turns after ``horizon`` wait, after ``limit`` are rejected."""
        self.state, self.into = state, into
        self.horizon, self.limit, self.max_line_bytes = horizon, limit, max_line_bytes
        self.rejected = into.counts.rejected
        self.readings = codex_limits.Readings()  # the plan windows events carry

    def run(self, data: bytes) -> int | None:
        """Every line of ``data``; the offset of a turn left for later, if one is."""
        start, end = 0, len(data)
        while start < end:
            stop = data.find(b"\n", start)
            stop = end if stop < 0 else stop
            if self.line(data[start:stop]) is _WAIT:
                return start
            start = stop + 1
        return None

    def line(self, raw: bytes) -> object:
        """One line: counted as a turn, other, or rejected (with its reason)."""
        if len(raw) > self.max_line_bytes:
            self.rejected[RejectReason.TOO_LONG] += 1
            return None
        if b'"token_count"' not in raw and b'"turn_context"' not in raw \
                and b'"session_meta"' not in raw and b'"thread_settings_applied"' not in raw:
            self.into.counts.other += 1  # what no figure reads is not decoded (most bytes)
            return None
        try:
            line = _LINE.decode(raw)
            if line.type == "event_msg" and b'"token_count"' in raw:
                return self.event(line, _EVENT.decode(line.payload))
            if line.type == "event_msg":
                self.settings(_EVENT.decode(line.payload))
            if line.type == "turn_context":
                self.context(_CONTEXT.decode(line.payload))
            elif line.type == "session_meta":
                self.meta(_META.decode(line.payload))
        except msgspec.ValidationError:
            self.rejected[RejectReason.BAD_MESSAGE] += 1
            return None
        except msgspec.DecodeError:
            self.rejected[_undecodable(raw)] += 1
            return None
        self.into.counts.other += 1
        return None

    def meta(self, meta: _Meta) -> None:
        """A ``session_meta``: the file's own (its first), or a parent's whose history follows."""
        state = self.state
        if meta.id and len(meta.id) <= _MAX_LABEL:
            state.session = meta.id
            if not state.own:
                state.own = meta.id
            if meta.id not in state.threads and len(state.threads) < 64:
                state.threads.append(meta.id)
        if meta.cwd and len(meta.cwd) <= _MAX_LABEL:
            state.cwd = meta.cwd

    def settings(self, event: _Event) -> None:
        """A ``thread_settings_applied`` event: the service tier of the turns that follow.

        Codex states ``default`` for the standard tier (stored as "", as for a
        session that never says); ``priority``, ``fast`` or ``flex`` price at that
        tier's rates (exporter.projections.prices).
        """
        tier = event.thread_settings.service_tier if event.thread_settings else None
        if event.type == "thread_settings_applied" and tier is not None \
                and len(tier) <= _MAX_LABEL:
            self.state.tier = "" if tier == "default" else tier

    def context(self, context: _Context) -> None:
        """A ``turn_context``: the model from now on; a fork's own turns begin at its first."""
        state = self.state
        if context.model and len(context.model) <= _MAX_LABEL:
            state.model = context.model
        if context.cwd and len(context.cwd) <= _MAX_LABEL and not state.cwd:
            state.cwd = context.cwd
        # A turn is the newest thread's created before it (UUIDv7 ids sort by time); a file
        # of one thread, or a turn id of another kind, leaves the session as it is.
        if len(state.threads) > 1 and _UUID.fullmatch(context.turn_id):
            before = [t for t in state.threads if t < context.turn_id]
            if before:
                state.session = max(before)

    def event(self, line: _Line, event: _Event) -> object:
        """A ``token_count`` event: a turn, unless it carries no usage."""
        info = event.info
        if event.type != "token_count" or info is None or (
                info.total_token_usage is None and info.last_token_usage is None):
            self.into.counts.other += 1
            if event.type == "token_count":
                self.limits(line, event, None)
            return None
        ts = _epoch(line.timestamp)
        if ts is None or ts > self.limit:
            self.rejected[RejectReason.BAD_TIMESTAMP] += 1
            return None
        if ts > self.horizon:
            return _WAIT
        turn = _turn(self.state, info)
        if turn is None:
            self.rejected[RejectReason.NEGATIVE_TOKENS] += 1
            return None
        key, (inp, cached, out, reasoning) = turn
        state = self.state
        state.last_key = key
        if not state.model:
            self.into.counts.mended[MendKind.MODEL_ASSUMED] += 1
        self.into.add(Request(
            key, ts, state.model or FALLBACK_MODEL, state.session, state.cwd, Source.MAIN,
            max(inp - cached, 0), out, cached, 0, 0, service_tier=state.tier, reasoning=reasoning,
            context_window=_window(info.model_context_window)))
        self.limits(line, event, ts)
        return None

    def limits(self, line: _Line, event: _Event, ts: float | None) -> None:
        """The plan windows an event carries, as a reading (or a counted rejection).

        ``ts``: the event's time when its turn was read; an event without usage
        has its time read here (one it cannot place in time is rejected).
        """
        raw = bytes(event.rate_limits)
        if raw == b"null":
            return
        if ts is None:
            ts = _epoch(line.timestamp)
            if ts is None or ts > self.horizon:  # a usage-less line never waits for the clock
                self.into.limit_rejected[AGENT, "bad_record"] += 1
                return
        sample, reason = self.readings.reading(raw, ts)
        if reason is not None:
            self.into.limit_rejected[AGENT, reason] += 1
        elif sample is not None:
            self.into.add_limit(sample)


_WAIT: Final = object()  # a turn ahead of the clock: the chunk stops before it


def _turn(state: Carry, info: _Info) -> tuple[str, tuple[int, int, int, int]] | None:
    """(key, usage) of an event's turn, moving the state's totals on; None if counts are negative.

    The usage is ``last_token_usage``, or the totals' step when it is absent.
    """
    last = info.last_token_usage.counts() if info.last_token_usage is not None else None
    if info.total_token_usage is None:  # no place in the totals: known by its own counts
        assert last is not None
        if min(last) < 0:
            return None
        return _key(state, "last", last), last
    totals = info.total_token_usage.counts()
    if min(totals) < 0 or (last is not None and min(last) < 0):
        return None
    before = state.totals
    if before == totals and state.last_key:  # no new usage: the turn before, again
        return state.last_key, (0, 0, 0, 0)
    if before is not None and any(t < b for t, b in zip(totals, before, strict=True)):
        state.run += 1  # the totals went back: a new run of keys
        before = None
    if last is None:
        last = totals if before is None else tuple(  # type: ignore[assignment]
            t - b for t, b in zip(totals, before, strict=True))
    state.totals = totals
    return _key(state, str(state.run), totals), last  # type: ignore[return-value]


def _window(value: int | None) -> int:
    """A stated context window, if it is a plausible one (0: none)."""
    return value if value is not None and 0 < value < 1 << 40 else 0


def _key(state: Carry, run: str, counts: tuple[int, ...]) -> str:
    """A turn's key: its session, its run and the cumulative counts it brought the session to."""
    return KEY_PREFIX + "\x1f".join((state.session, run, *map(str, counts)))


def _epoch(text: str) -> float | None:
    """Epoch seconds of an ISO 8601 time with a zone (None: not one)."""
    if not text or len(text) > 64:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at.timestamp() if at.tzinfo is not None else None


def _undecodable(raw: bytes) -> str:
    """Why a line msgspec cannot decode is rejected: its bytes, or its JSON."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return RejectReason.INVALID_UTF8
    return RejectReason.INVALID_JSON
