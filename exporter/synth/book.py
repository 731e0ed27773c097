"""The copy book: every usage-bearing line the writer emits, folded per request key.

This is the generator's own record of what it wrote, kept as it writes (never by
reading files back): for each unique request, its earliest time and the
strongest source seen, and which sessions' files hold a copy of it; plus how
many lines of each kind went out, for the line accounting.

:meth:`Book.conversations` then settles what depends on all copies at once
(docs/figures.md): a request's owner is the session whose last request is
earliest among those holding it (the conversation a resume copied from), and
a main request's gap is the time since the latest earlier main request of any
session holding it (a resumed session's first new request is timed from the
last replayed one).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from exporter.synth import iteration_parts as iterations
from exporter.synth.model import SimRequest

SOURCES: Final = ("main", "subagent", "compaction", "advisor")  # merge order: a later one wins


@dataclass(slots=True)
class Entry:
    """One unique request and the facts its copies settle."""

    req: SimRequest
    ts_ms: int
    session: str  # the owner, once Book.conversations has run
    source: int  # index into SOURCES
    gap_ms: int | None = None  # set by Book.conversations (main requests only)


@dataclass(slots=True)
class Book:
    """Unique requests by key, and line counts by result."""

    entries: dict[str, Entry] = field(default_factory=dict)
    usage_lines: int = 0
    other_lines: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    held: dict[str, set[str]] = field(default_factory=dict)  # session -> keys its files hold
    iterations: Counter[str] = field(default_factory=Counter)  # by kind, per line
    parts: dict[str, SimRequest] = field(default_factory=dict)  # request key -> its consultation

    def usage(self, req: SimRequest, ts_ms: int, session: str, source: str) -> None:
        """Record one line carrying ``req`` (a streamed part, a progress or resume copy)."""
        self.usage_lines += 1
        self.iterations.update(iterations.line_kinds(req))
        if (extra := self.parts.get(req.key) or iterations.part(req)) is not None:
            self.parts[req.key] = extra  # one object per consultation, as per request
            self._copy(extra, ts_ms, session, "advisor")
        self._copy(req, ts_ms, session, source)

    def _copy(self, req: SimRequest, ts_ms: int, session: str, source: str) -> None:
        """Fold one copy of ``req`` (a line's request or the part it bills on top)."""
        self.held.setdefault(session, set()).add(req.key)
        rank = SOURCES.index(source)
        entry = self.entries.get(req.key)
        if entry is None:
            self.entries[req.key] = Entry(req, ts_ms, session, rank)
            return
        if entry.req is not req:
            raise AssertionError(f"two simulated requests share the key {req.key!r}")
        entry.ts_ms, entry.session = min((entry.ts_ms, entry.session), (ts_ms, session))
        entry.source = max(entry.source, rank)

    def conversations(self) -> None:
        """Settle every entry's owning session and, for main requests, its gap."""
        entries = self.entries
        last = {s: max(entries[k].ts_ms for k in keys) for s, keys in self.held.items()}
        owner: dict[str, tuple[int, str]] = {}
        prev: dict[str, int] = {}
        for session, keys in self.held.items():
            for key in keys:
                mine = (last[session], session)
                owner[key] = min(owner.get(key, mine), mine)
            chain = sorted((entries[k].ts_ms, k) for k in keys if entries[k].source == 0)
            for (_, key), (before, _) in zip(chain[1:], chain, strict=False):
                prev[key] = max(prev.get(key, before), before)
        for key, entry in entries.items():
            entry.session = owner[key][1]
            main = entry.source == 0 and key in prev
            entry.gap_ms = entry.ts_ms - prev[key] if main else None

    def other(self) -> None:
        """Record one valid line that bills nothing."""
        self.other_lines += 1

    def reject(self, reason: str) -> None:
        """Record one malformed line."""
        self.rejected[reason] += 1
