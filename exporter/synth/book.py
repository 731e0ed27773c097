"""The copy book: every usage-bearing line the writer emits, folded per request key.

This is the generator's own record of what it wrote, kept as it writes (never by
reading files back): for each unique request, the copy with the smallest
``(ts, sessionId)`` (which decides the request's time and session, per
docs/figures.md) and the strongest source seen; plus how many lines of each
kind went out, for the line accounting.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from exporter.synth.model import SimRequest

SOURCES: Final = ("main", "subagent", "compaction")  # merge order: a later one wins


@dataclass(slots=True)
class Entry:
    """One unique request and the facts its copies settle."""

    req: SimRequest
    ts_ms: int
    session: str
    source: int  # index into SOURCES


@dataclass(slots=True)
class Book:
    """Unique requests by key, and line counts by result."""

    entries: dict[str, Entry] = field(default_factory=dict)
    usage_lines: int = 0
    other_lines: int = 0
    rejected: Counter[str] = field(default_factory=Counter)

    def usage(self, req: SimRequest, ts_ms: int, session: str, source: str) -> None:
        """Record one line carrying ``req`` (a streamed part, a progress or resume copy)."""
        self.usage_lines += 1
        rank = SOURCES.index(source)
        entry = self.entries.get(req.key)
        if entry is None:
            self.entries[req.key] = Entry(req, ts_ms, session, rank)
            return
        if entry.req is not req:
            raise AssertionError(f"two simulated requests share the key {req.key!r}")
        entry.ts_ms, entry.session = min((entry.ts_ms, entry.session), (ts_ms, session))
        entry.source = max(entry.source, rank)

    def other(self) -> None:
        """Record one valid line that bills nothing."""
        self.other_lines += 1

    def reject(self, reason: str) -> None:
        """Record one malformed line."""
        self.rejected[reason] += 1
