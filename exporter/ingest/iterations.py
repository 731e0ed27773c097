"""The parts of a request in ``message.usage.iterations[]``: which are billed on top.

Claude Code 2.1.98+ writes per-part usage beside a line's top-level usage
(docs/figures.md, "Iterations"):

- ``message`` and ``compaction`` entries are parts *of* the top-level usage:
  they are checked against it (a mismatch is counted) and never added;
- ``advisor_message`` entries are the advisor tool's consultations, billed on
  top at their own model's rates: each becomes a request of its own (source
  ``advisor``), keyed under the request's key by (type, model, ordinal of that
  type and model), so the copies of a line (streaming splits, resumed
  sessions, progress copies) merge field by field like requests do;
- a ``fallback_message`` is the attempt a server-side fallback served; the
  ``message``/``compaction`` entries before the last one are superseded
  (refused) attempts, which Anthropic does not bill: counted, never priced;
- any other type is counted by its name and never priced;
- an entry that is not an object with valid counts is counted as ``bad``.

Nothing here raises on input: a line's own request never depends on its
iterations.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Final

from exporter.ingest.line_schema import MAX_TOKENS
from exporter.records import IterationKind, Request, Source

PART_SEP: Final = "\x1e"  # between a request's key and a part's (the key uses \x1f)
ADVISOR: Final = "advisor_message"
FALLBACK: Final = "fallback_message"
PARTS_OF_TOP: Final = frozenset(("message", "compaction", FALLBACK))
MAX_ENTRIES: Final = 256  # entries read per line; the rest are counted as ``bad``
_NAME: Final = re.compile(r"[a-z][a-z0-9_]{0,39}")


class Sink:
    """Where the parser's general rules leave the parts a line bills on top, and the counts."""

    __slots__ = ("kinds", "parts")

    def __init__(self, kinds: Counter[str]) -> None:
        """Count entries into ``kinds`` (a batch's ``LineCounts.iterations``)."""
        self.kinds = kinds
        self.parts: list[Request] = []


Tokens = tuple[int, int, int, int, int]
"""(input, output, cache_read, cache_write_5m, cache_write_1h)."""


def split(entries: Any, line: Request, kinds: Counter[str]) -> list[Request]:
    """The billed parts of one line's iterations, as requests; counts every entry in ``kinds``.

    ``line`` is the line's own request (its key, time, session, project,
    top-level usage, service tier and geography, which a consultation shares).
    """
    key, top = line.key, (line.input, line.output, line.cache_read, line.cache_write_5m,
                          line.cache_write_1h)
    if not isinstance(entries, list) or not entries:
        return []
    if len(entries) > MAX_ENTRIES:
        kinds[IterationKind.BAD] += len(entries) - MAX_ENTRIES
        entries = entries[:MAX_ENTRIES]
    read = [_entry(e) for e in entries]
    last_fallback = max((i for i, e in enumerate(read) if e and e[0] == FALLBACK), default=-1)
    parts: list[Request] = []
    ordinals: Counter[tuple[str, str]] = Counter()
    summed = [0, 0, 0, 0, 0]
    bad = found = False
    for i, entry in enumerate(read):
        if entry is None:
            kinds[IterationKind.BAD] += 1
            bad = True
            continue
        kind, model, tokens = entry
        if kind == ADVISOR:
            n = ordinals[(kind, model)]
            ordinals[(kind, model)] = n + 1
            kinds[IterationKind.ADVISOR] += 1
            parts.append(Request(
                f"{key}{PART_SEP}{kind}\x1f{model}\x1f{n}", line.ts, model, line.session,
                line.project, Source.ADVISOR, *tokens, line.service_tier, line.inference_geo,
                skill=line.skill, plugin=line.plugin, mcp_server=line.mcp_server,
                agent=line.agent, effort=line.effort))  # the line's attribution (docs/figures.md)
        elif kind in PARTS_OF_TOP:
            if kind == FALLBACK:
                kinds[IterationKind.FALLBACK] += 1
            if i < last_fallback:
                kinds[IterationKind.SUPERSEDED] += 1  # refused, then served by the fallback
                continue
            found = True
            for j, value in enumerate(tokens):
                summed[j] += value
        else:
            kinds[_unknown(kind)] += 1
    if found and not bad and _total(summed) != _total(top):
        kinds[IterationKind.MISMATCH] += 1
    return parts


def _total(tokens: Tokens | list[int]) -> tuple[int, int, int, int]:
    """Input, output, cache read and all cache writes (how entries split writes varies)."""
    return tokens[0], tokens[1], tokens[2], tokens[3] + tokens[4]


def _unknown(kind: str) -> str:
    """The counter key of an undocumented type: its name when it is a plain one."""
    return f"{IterationKind.UNKNOWN}:{kind}" if _NAME.fullmatch(kind) else IterationKind.UNKNOWN


def _entry(entry: Any) -> tuple[str, str, Tokens] | None:
    """(type, model, tokens) of one entry, typed by the parser's schema or a plain dict."""
    if isinstance(entry, dict):
        get: Any = entry.get
        detail = get("cache_creation")
        if isinstance(detail, dict):
            writes = (detail.get("ephemeral_5m_input_tokens"),
                      detail.get("ephemeral_1h_input_tokens"))
        elif detail is not None:
            return None
    elif hasattr(entry, "__struct_fields__"):  # the fast schema's struct: counts in range
        get = entry.__getattribute__
        detail = entry.cache_creation
        if detail is not None:
            writes = (detail.ephemeral_5m_input_tokens, detail.ephemeral_1h_input_tokens)
    else:
        return None
    kind, model = get("type"), get("model")
    counts = [_count(get(name)) for name in (
        "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    w5, w1h = (counts[3], 0) if detail is None else (_count(writes[0]), _count(writes[1]))
    if not isinstance(kind, str) or None in counts or w5 is None or w1h is None:
        return None
    inp, out, read, created = (int(c) for c in counts)  # type: ignore[arg-type]
    w5 += max(0, created - w5 - w1h)  # the total is authoritative (as for the top level)
    return kind, model if isinstance(model, str) else "", (inp, out, read, w5, w1h)


def _count(value: Any) -> int | None:
    """A token count: absent or null is 0; anything but an integer in range is None."""
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= MAX_TOKENS:
        return None
    return value
