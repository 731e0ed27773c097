"""Property tests of the parser: hostile bytes, random JSON, mutated real lines, huge lines.

The invariants, for any input: ``parse_lines`` never raises; every line is
counted exactly once (usage, other or rejected with a reason); valid lines
around garbage give exactly the requests they carry; the fast msgspec schema
and the tolerant path classify every line the same way; and for generated
records both equal an independent oracle written from transcript-format.md.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from functools import cache
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from exporter.ingest import line_schema
from exporter.ingest.line_schema import MAX_TOKENS
from exporter.ingest.parse import MAX_LINE_BYTES, parse_lines
from exporter.records import RejectReason, Request, Source, merge
from exporter.synth import GenOptions, generate
from tests.support.paths import REAL
from tests.support.records import assistant, jsonl

# Derandomized so CI runs the same examples every time; no deadline on a shared 2-core box.
# HARDENING_FUZZ_EXAMPLES scales a long run (docs/reliability.md gives its figures).
EXAMPLES = int(os.environ.get("HARDENING_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    derandomize=True, deadline=None, max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEW = settings(FUZZ, max_examples=max(1, EXAMPLES // 5))
NOW = datetime(2026, 12, 1, tzinfo=UTC).timestamp()  # the clock the parser and oracle share

Outcome = tuple[str, Any]  # ("usage", Request) | ("other", None) | ("rejected", reason)


# --------------------------------------------------------------------------- helpers
def classify(line: bytes, *, compaction_file: bool = False, fast: bool = True) -> Outcome:
    """How the parser classifies one line (which must not contain a newline)."""
    parsed = parse_lines(line + b"\n", compaction_file=compaction_file, fast=fast, now=NOW)
    assert parsed.counts.total == 1, (line[:200], parsed.counts)
    if parsed.counts.rejected:
        (reason,) = parsed.counts.rejected
        return "rejected", reason
    if parsed.counts.usage_lines:
        (req,) = parsed.requests.values()
        return "usage", req
    return "other", None


def classify_both(line: bytes, *, compaction_file: bool = False) -> Outcome:
    """The fast path's outcome, after checking the tolerant path gives the same."""
    fast = classify(line, compaction_file=compaction_file)
    slow = classify(line, compaction_file=compaction_file, fast=False)
    assert fast == slow, (line[:300], fast, slow)
    return fast


def lines_of(data: bytes) -> int:
    """Number of newline-terminated lines in ``data``."""
    return data.count(b"\n")


# --------------------------------------------------------------------------- the oracle
class RejectError(Exception):
    """Oracle: the line is rejected with ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _count(obj: dict[str, Any], name: str) -> int:
    value = obj.get(name, 0)
    if value is None and name != "output_tokens":
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise RejectError(RejectReason.BAD_USAGE)
    if value < 0:
        raise RejectError(RejectReason.NEGATIVE_TOKENS)
    if value > MAX_TOKENS:
        raise RejectError(RejectReason.BAD_USAGE)
    return value


def _tokens(usage: Any) -> tuple[int, int, int, int, int]:
    if not isinstance(usage, dict):
        raise RejectError(RejectReason.BAD_USAGE)
    inp, out = _count(usage, "input_tokens"), _count(usage, "output_tokens")
    read = _count(usage, "cache_read_input_tokens")
    made = _count(usage, "cache_creation_input_tokens")
    detail = usage.get("cache_creation")
    if detail is None:
        return inp, out, read, made, 0
    if not isinstance(detail, dict):
        raise RejectError(RejectReason.BAD_USAGE)
    w5 = _count(detail, "ephemeral_5m_input_tokens")
    w1h = _count(detail, "ephemeral_1h_input_tokens")
    return inp, out, read, w5 + max(0, made - w5 - w1h), w1h


def _epoch(value: Any) -> float:
    if not isinstance(value, str):
        raise RejectError(RejectReason.BAD_TIMESTAMP)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise RejectError(RejectReason.BAD_TIMESTAMP) from None
    ts = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    if ts > NOW + 86_400:  # more than a day ahead of the clock: not a real request time
        raise RejectError(RejectReason.BAD_TIMESTAMP)
    return ts


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _request(rec: dict[str, Any], outer: dict[str, Any], source: Source) -> Request | None:
    msg = rec.get("message")
    if not isinstance(msg, dict):
        raise RejectError(RejectReason.BAD_MESSAGE)
    if "usage" not in msg:
        return None
    if msg.get("model") == "<synthetic>" or outer.get("isApiErrorMessage") is True:
        return None
    tokens = _tokens(msg["usage"])
    usage = msg["usage"]
    if not isinstance(msg.get("id"), str) or not msg["id"]:
        raise RejectError(RejectReason.MISSING_ID)
    rid = rec.get("requestId")
    key = f"{msg['id']}\x1f{rid}" if isinstance(rid, str) and rid else msg["id"]
    ts = _epoch(rec.get("timestamp"))
    cost = outer.get("costUSD")
    usd = 0.0
    if isinstance(cost, int | float) and not isinstance(cost, bool) and 0 <= cost < 1e9:
        usd = float(cost)
    return Request(
        key, ts, _text(msg.get("model")), _text(outer.get("sessionId")), _text(outer.get("cwd")),
        source, *tokens, _text(usage.get("service_tier")), _text(usage.get("inference_geo")),
        _text(usage.get("speed")), usd,
    )


def _agent_source(agent: Any) -> Source:
    return Source.COMPACTION if isinstance(agent, str) and agent.startswith("acompact") \
        else Source.SUBAGENT


def oracle(value: Any, *, compaction_file: bool = False) -> Outcome:
    """The outcome transcript-format.md prescribes for one decoded JSON line."""
    if not isinstance(value, dict):
        return "rejected", RejectReason.NOT_OBJECT
    try:
        req = None
        if value.get("type") == "assistant":
            source = Source.MAIN
            if value.get("isSidechain") is True:
                source = _agent_source(value.get("agentId"))
                if compaction_file:
                    source = Source.COMPACTION
            req = _request(value, value, source)
        elif value.get("type") == "progress" and isinstance(value.get("data"), dict):
            inner = value["data"].get("message")
            if isinstance(inner, dict) and inner.get("type") == "assistant":
                agent = inner.get("agentId")
                if not isinstance(agent, str):
                    agent = value["data"].get("agentId")
                req = _request(inner, value, _agent_source(agent))
    except RejectError as exc:
        return "rejected", exc.reason
    return ("other", None) if req is None else ("usage", req)


# --------------------------------------------------------------------------- strategies
SCHEMA_KEYS = ["type", "isSidechain", "isApiErrorMessage", "cwd", "sessionId", "agentId",
               "requestId", "timestamp", "costUSD", "message", "data", "id", "model", "usage",
               "input_tokens", "output_tokens", "cache_read_input_tokens",
               "cache_creation_input_tokens", "cache_creation", "ephemeral_5m_input_tokens",
               "ephemeral_1h_input_tokens", "service_tier", "inference_geo", "speed"]
scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))


def _containers(kids: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Arrays and objects of ``kids``; object keys mostly the schema's own field names."""
    keys = st.sampled_from(SCHEMA_KEYS) | st.text(max_size=6)
    return st.lists(kids, max_size=4) | st.dictionaries(keys, kids, max_size=5)


json_values = st.recursive(scalars, _containers, max_leaves=25)
# Token fields: mostly integers (so the fast schema takes the line) with both range
# edges often, plus every wrong type.
edge_ints = st.sampled_from([0, 1, MAX_TOKENS, MAX_TOKENS + 1, 2**63, 2**64 + 5, -1, -(2**63)])
wrong_types = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1.0, 12.5, -0.0]), st.booleans(), st.none(), st.text(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
token_values = st.one_of(st.integers(0, 400_000), st.integers(0, 400_000), edge_ints,
                         edge_ints, wrong_types)
ABSENT = object()


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The strategy, or the field left out (``ABSENT``)."""
    return st.just(ABSENT) | strategy


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not ABSENT}


offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
timestamps = st.one_of(
    st.tuples(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
              st.none() | st.just(UTC) | offsets)
    .map(lambda pair: pair[0].replace(tzinfo=pair[1]).isoformat()),
    st.sampled_from(["2026-10-01T12:00:00.000Z", "2026-10-01", "2026-10-01T12:00:00+14:00",
                     "yesterday", "", "2026-13-01T00:00:00Z", "2026-10-01T25:00:00Z",
                     "9999-12-31T23:59:59Z", "2026-12-02T00:00:00Z", "2026-12-02T00:00:01Z"]),
    st.text(max_size=20), st.integers(), st.none(),
)
cache_creation = st.fixed_dictionaries({}, optional={
    "ephemeral_5m_input_tokens": token_values, "ephemeral_1h_input_tokens": token_values,
})
usages = st.one_of(
    st.fixed_dictionaries({}, optional={
        "input_tokens": token_values, "output_tokens": token_values,
        "cache_read_input_tokens": token_values, "cache_creation_input_tokens": token_values,
        "cache_creation": st.none() | cache_creation | token_values,
        "service_tier": st.sampled_from(["standard", "priority", "batch"]) | scalars,
        "inference_geo": st.sampled_from(["global", "us", "", "not_available"]) | scalars,
        "speed": st.just("fast") | scalars,
        "server_tool_use": json_values,
    }),
    token_values,
)
ids = st.sampled_from(["msg_a", "msg_b", "msg_c", ""]) | st.text(max_size=5) | scalars
messages = st.one_of(
    st.builds(
        lambda **f: _present(f), id=maybe(ids),
        model=maybe(st.sampled_from(["claude-opus-4-6", "<synthetic>", "claude-x"]) | scalars),
        usage=maybe(usages), content=maybe(json_values),
    ),
    scalars, st.lists(scalars, max_size=2),
)


def _record(**fields: Any) -> dict[str, Any]:
    return _present(fields)


records = st.builds(
    _record,
    type=st.just("assistant") | st.sampled_from(["user", "system", "progress"]) | scalars,
    isSidechain=maybe(st.booleans() | scalars),
    isApiErrorMessage=maybe(st.booleans() | scalars),
    agentId=maybe(st.sampled_from(["a1b2c3", "acompact-77aa"]) | scalars),
    cwd=maybe(st.text(max_size=12) | scalars),
    sessionId=maybe(st.sampled_from(["s1", "s2"]) | scalars),
    requestId=maybe(st.sampled_from(["req_1", "req_2", ""]) | scalars),
    timestamp=maybe(timestamps),
    costUSD=maybe(st.floats(-1, 2e9, allow_nan=False) | scalars),
    message=maybe(messages),
    extra=maybe(json_values),
)


def _progress(outer: dict[str, Any], inner: dict[str, Any], agent: Any) -> dict[str, Any]:
    data = _record(type="agent_progress", agentId=agent, message=inner)
    return {**{k: v for k, v in outer.items() if k != "message"}, "type": "progress",
            "data": data}


progress_records = st.builds(_progress, records, records,
                             maybe(st.sampled_from(["a9", "acompact-1"]) | scalars))
any_record = st.one_of(records, records, progress_records, json_values)


def dump(value: Any, spaced: bool) -> bytes:
    """One JSON line as Node writes it (compact) or spaced."""
    sep = (", ", ": ") if spaced else (",", ":")
    return json.dumps(value, separators=sep, ensure_ascii=False).encode()


# --------------------------------------------------------------------------- properties
@FUZZ
@given(st.lists(st.binary(max_size=200), max_size=20))
def test_arbitrary_bytes_never_raise_and_every_line_counts_once(parts: list[bytes]) -> None:
    """Random bytes, split into lines anywhere, are each counted exactly once."""
    data = b"\n".join(parts) + b"\n"
    parsed = parse_lines(data)
    assert parsed.counts.total == lines_of(data)
    assert parsed.counts.usage_lines == 0 and not parsed.requests  # noise carries no key


@FUZZ
@given(json_values, st.booleans(), st.booleans())
def test_arbitrary_json_agrees_on_both_paths(value: Any, spaced: bool, compaction: bool) -> None:
    """Any JSON value (keys drawn from the schema) gets the same outcome on both paths."""
    outcome = classify_both(dump(value, spaced), compaction_file=compaction)
    if not isinstance(value, dict):
        assert outcome == ("rejected", RejectReason.NOT_OBJECT)
    elif value.get("type") not in ("assistant", "progress"):
        assert outcome == ("other", None)


@FUZZ
@given(any_record, st.booleans(), st.booleans())
def test_records_match_the_oracle_on_fast_and_tolerant_paths(
    value: Any, spaced: bool, compaction: bool
) -> None:
    """Random usage records (random field types and values) give the oracle's outcome."""
    outcome = classify_both(dump(value, spaced), compaction_file=compaction)
    assert outcome == oracle(value, compaction_file=compaction)


# Usage objects inside the fast schema's own domain (integers that fit 64 bits, string
# or null tiers): the fast path decides these lines, so its verdict is what is compared.
int64 = st.one_of(st.integers(0, 10**6), edge_ints, st.integers(-(2**63), 2**64 - 1))
fast_usages = st.fixed_dictionaries({}, optional={
    "input_tokens": int64, "output_tokens": int64, "cache_read_input_tokens": int64,
    "cache_creation_input_tokens": int64,
    "cache_creation": st.none() | st.fixed_dictionaries({}, optional={
        "ephemeral_5m_input_tokens": int64, "ephemeral_1h_input_tokens": int64}),
    "service_tier": st.none() | st.text(max_size=8), "speed": st.none() | st.just("fast"),
})


@FUZZ
@given(fast_usages, st.booleans(), st.booleans())
def test_fast_schema_domain_matches_tolerant_and_oracle(usage: dict[str, Any], sidechain: bool,
                                                        spaced: bool) -> None:
    """Lines the fast schema accepts get exactly the tolerant path's and the oracle's outcome."""
    record = assistant("m", "r", usage=usage, sidechain=sidechain)
    line = dump(record, spaced)
    counts = [v for v in [*usage.values(), *(usage.get("cache_creation") or {}).values()]
              if type(v) is int]
    if all(0 <= v <= MAX_TOKENS for v in counts):
        fast = line_schema.FAST.decode(line).message
        assert isinstance(fast, line_schema.FastMessage)  # the fast path
    else:  # the schema checks the range: the tolerant path names the reason
        with pytest.raises(msgspec.ValidationError):
            line_schema.FAST.decode(line)
    assert classify_both(line) == oracle(record)


@FUZZ
@given(any_record, st.booleans(), st.floats(0, 1, exclude_max=True))
def test_partially_written_records_are_invalid_json(value: Any, spaced: bool, at: float) -> None:
    """Any record cut short (a crash mid-write) is one rejected line, on both paths."""
    assume(isinstance(value, dict) and value)
    line = dump(value, spaced)
    cut = line[: max(1, int(len(line) * at))]
    try:
        cut.decode("utf-8")
    except UnicodeDecodeError:
        want: Outcome = ("rejected", RejectReason.INVALID_UTF8)  # cut inside a character
    else:
        want = ("rejected", RejectReason.INVALID_JSON)
    assert classify_both(cut) == want


@FEW
@given(st.lists(any_record, min_size=1, max_size=30), st.booleans())
def test_batch_merges_like_the_oracle(values: list[Any], crlf: bool) -> None:
    """A batch (keys colliding, any order, CRLF or LF) equals the oracle merged per key."""
    want: dict[str, Request] = {}
    reasons: Counter[str] = Counter()
    usage = other = 0
    for value in values:
        kind, detail = oracle(value)
        if kind == "usage":
            usage += 1
            old = want.get(detail.key)
            want[detail.key] = detail if old is None else merge(old, detail)
        elif kind == "rejected":
            reasons[detail] += 1
        else:
            other += 1
    end = b"\r\n" if crlf else b"\n"
    parsed = parse_lines(b"".join(dump(v, False) + end for v in values), now=NOW)
    assert parsed.requests == want
    assert (parsed.counts.usage_lines, parsed.counts.other) == (usage, other)
    assert parsed.counts.rejected == reasons


@FEW
@given(st.lists(st.integers(0, 99), min_size=1, max_size=12),
       st.lists(st.binary(max_size=120) | json_values.map(lambda v: dump(v, False)), max_size=12))
def test_valid_lines_around_garbage_are_counted_exactly(picks: list[int],
                                                        garbage: list[bytes]) -> None:
    """Valid usage lines keep their exact values whatever garbage sits between them."""
    garbage = [g.replace(b"\n", b" ") for g in garbage]
    good = [jsonl(assistant(f"m{i}", f"r{i}", usage={"input_tokens": i, "output_tokens": 7 * i}))
            for i in picks]
    rng = random.Random(len(picks) * 1000 + len(garbage))
    lines = [*good, *(g + b"\n" for g in garbage)]
    rng.shuffle(lines)
    parsed = parse_lines(b"".join(lines))
    assert parsed.counts.total == len(lines)
    assert {k: (r.input, r.output) for k, r in parsed.requests.items()} == {
        f"m{i}\x1fr{i}": (i, 7 * i) for i in picks
    }
    assert parsed.counts.usage_lines == len(picks)  # garbage never carries a usage key


@cache
def _corpus() -> list[bytes]:
    """Lines to mutate: the real transcripts when present, else a generated tree."""
    files = sorted(REAL.glob("projects/**/*.jsonl"))
    if not files:
        import tempfile
        from pathlib import Path

        tree = Path(tempfile.mkdtemp(prefix="fuzz-corpus-"))
        generate(tree, GenOptions(seed=5, sessions=2, requests_per_session=40))
        files = sorted(tree.glob("projects/**/*.jsonl"))
    out = [ln for f in files for ln in f.read_bytes().split(b"\n") if ln and len(ln) < 30_000]
    usage_first = sorted(out, key=lambda ln: b'"usage"' not in ln)  # shrink towards usage lines
    return usage_first


def _mutate(line: bytes, ops: list[tuple[int, int, bytes]]) -> bytes:
    """Apply (kind, position, bytes) edits: flip, insert, delete, truncate, duplicate."""
    buf = bytearray(line)
    for kind, pos, blob in ops:
        if not buf:
            break
        at = pos % len(buf)
        if kind == 0:
            buf[at] ^= blob[0] if blob else 0x20
        elif kind == 1:
            buf[at:at] = blob
        elif kind == 2:
            del buf[at : at + 1 + len(blob)]
        elif kind == 3:
            del buf[at:]
        else:
            buf[at:at] = buf[at : at + 1 + len(blob) * 8]
    return bytes(buf).replace(b"\n", b"")


edits = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2**20),
                           st.binary(min_size=1, max_size=6)
                           | st.sampled_from([b'"', b"\\", b"{", b"}", b"\x00", b"\xff",
                                              b"-", b"1e400", b"null", b"\r", b"9" * 25])),
                 min_size=1, max_size=4)


@FUZZ
@given(st.integers(0, 10**6), edits)
def test_mutated_real_lines_agree_on_both_paths(index: int, ops: list[tuple[int, int, bytes]]
                                                ) -> None:
    """Real lines with random byte edits are classified once, identically on both paths."""
    corpus = _corpus()
    line = _mutate(corpus[index % len(corpus)], ops)
    assume(line)
    classify_both(line)


def test_real_lines_unmutated_agree_on_both_paths() -> None:
    """Every line of the corpus (real when present) gets the same outcome on both paths."""
    corpus = _corpus()
    kinds = Counter(classify_both(line)[0] for line in corpus)
    assert kinds["usage"] > 0 and kinds["other"] > 0
    assert sum(kinds.values()) == len(corpus)


# --------------------------------------------------------------------------- edge cases
@pytest.mark.parametrize("depth", [999, 1000, 5_000, 200_000])
@pytest.mark.parametrize("where", ["top", "field", "usage", "usage_tolerant", "message"])
def test_deep_nesting_is_a_rejected_line_not_a_crash(depth: int, where: str) -> None:
    """JSON nested deeper than the decoder's recursion limit is rejected, never raised."""
    deep = b"[" * depth + b"]" * depth
    line = {
        "top": deep,
        "field": b'{"type":"user","x":' + deep + b"}",
        "usage": b'{"type":"assistant","timestamp":"2026-10-01T12:00:00Z","message":{"id":"m",'
                 b'"usage":{"input_tokens":1,"x":' + deep + b"}}}",
        "usage_tolerant": b'{"type":"assistant","message":{"id":"m","usage":{"input_tokens":"1",'
                          b'"x":' + deep + b"}}}",
        "message": b'{"type":"user","message":' + b'{"a":' * depth + b"1" + b"}" * depth + b"}",
    }[where]
    good = jsonl(assistant("ok"))
    parsed = parse_lines(good + line + b"\n" + good)
    assert parsed.counts.total == 3
    assert list(parsed.requests) == ["ok\x1freq_1"] and parsed.counts.usage_lines == 2


def test_ten_megabyte_line_is_parsed_exactly() -> None:
    """A usage line carrying a 12 MB tool output keeps its exact values."""
    big = assistant("huge", "rq", usage={"input_tokens": 5, "output_tokens": 77})
    big["message"]["content"] = [{"type": "text", "text": "x\\\"y" * 3_000_000}]
    data = jsonl(assistant("a")) + jsonl(big) + b"{" * 11_000_000 + b"\n" + jsonl(assistant("b"))
    assert len(data) > 23_000_000
    parsed = parse_lines(data)
    assert parsed.counts.total == 4
    assert dict(parsed.counts.rejected) == {RejectReason.INVALID_JSON: 1}
    assert (parsed.requests["huge\x1frq"].input, parsed.requests["huge\x1frq"].output) == (5, 77)


def test_line_over_the_limit_is_too_long() -> None:
    """A line longer than MAX_LINE_BYTES is rejected as too_long, its neighbours counted."""
    data = jsonl(assistant("a")) + b" " * (MAX_LINE_BYTES + 1) + b"\n" + jsonl(assistant("b"))
    parsed = parse_lines(data)
    del data
    assert dict(parsed.counts.rejected) == {RejectReason.TOO_LONG: 1}
    assert sorted(parsed.requests) == ["a\x1freq_1", "b\x1freq_1"]


@pytest.mark.parametrize(
    ("edit", "want"),
    [
        (lambda s: s.replace(b'"hi"', b'"h\x00i"'), ("rejected", RejectReason.INVALID_JSON)),
        (lambda s: s.replace(b'"hi"', b'"h\\u0000i"'), ("usage", None)),
        (lambda s: s.replace(b'"hi"', b'"h\xc3\x28i"'), ("rejected", RejectReason.INVALID_UTF8)),
        (lambda s: s.replace(b'"hi"', b'"h\xed\xa0\x80i"'),
         ("rejected", RejectReason.INVALID_UTF8)),
        (lambda s: s.replace(b'"hi"', b'"h\\ud800i"'), ("usage", None)),  # mended
        (lambda s: s.replace(b'"hi"', '"h\u2028\u00e9\U0001f600i"'.encode()), ("usage", None)),
        (lambda s: s + b"\r", ("usage", None)),
        (lambda s: b"\xef\xbb\xbf" + s, ("rejected", RejectReason.INVALID_JSON)),
        (lambda s: b"\x00" + s, ("rejected", RejectReason.INVALID_JSON)),
        (lambda s: s.replace(b'"input_tokens":3', b'"input_tokens":1e400'),
         ("rejected", RejectReason.BAD_USAGE)),
        (lambda s: s.replace(b'"input_tokens":3', b'"input_tokens":-1,"output_tokens":2e99999'),
         ("rejected", RejectReason.NEGATIVE_TOKENS)),
        (lambda s: s.replace(b'"input_tokens":3', b'"input_tokens":' + b"9" * 400),
         ("rejected", RejectReason.BAD_USAGE)),
        (lambda s: s.replace(b'"input_tokens":3', b'"input_tokens":' + b"9" * 5000),
         ("rejected", RejectReason.INVALID_JSON)),
        (lambda s: s.replace(b'"cwd":"/home/u/proj"', b'"cwd":' + b"9" * 5000),
         ("rejected", RejectReason.INVALID_JSON)),
        (lambda s: s.replace(b'"type":"text"', b'"type":' + b"9" * 5000), ("usage", None)),
        (lambda s: s.replace(b'"input_tokens":3', b'"input_tokens":null').replace(
            b'"output_tokens":10', b'"output_tokens"10'), ("rejected", RejectReason.INVALID_JSON)),
        (lambda s: s.replace(b'"input_tokens":3', b'"input_tokens":"3"')[:-40],
         ("rejected", RejectReason.INVALID_JSON)),
    ],
    ids=["raw-nul", "escaped-nul", "bad-utf8", "utf8-surrogate", "lone-surrogate-escape",
         "unicode-separators", "crlf", "bom", "leading-nul", "float-overflow",
         "float-overflow-after-negative", "400-digit-int", "5000-digit-int",
         "5000-digit-int-in-cwd", "5000-digit-int-in-skipped-content",
         "wrong-type-then-syntax-error", "wrong-type-then-truncated"],
)
def test_hostile_bytes_in_a_valid_line(edit: Any, want: Outcome) -> None:
    """NUL, bad UTF-8, surrogates, BOM, CR, overflowing numbers: each gets one fixed outcome."""
    line = edit(jsonl(assistant("m", "r"))[:-1])
    kind, detail = classify_both(line)
    assert (kind, detail if kind == "rejected" else None) == want
    if kind == "usage":
        assert detail.key == "m\x1fr" and detail.input == 3


def test_field_order_does_not_change_the_reason() -> None:
    """A usage with a huge field before a negative one gets the tolerant path's reason."""
    usage = {"input_tokens": MAX_TOKENS + 1, "output_tokens": -1}
    assert classify_both(jsonl(assistant(usage=usage))[:-1]) == oracle(assistant(usage=usage))
