"""Per-session figures: the busiest sessions and each one's median gap between main requests."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.projections.savings import reread_ratio
from exporter.projections.selection import Selection
from exporter.projections.usage import Fact


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One of the busiest sessions: requests, time span, median gap, output tokens."""

    session: str
    requests: int
    span_hours: float
    gap_p50: float
    output_tokens: int
    cache_read_tokens: int = 0

    @property
    def reread_ratio(self) -> float:
        """Cache-read tokens per output token in this session."""
        return reread_ratio(self.cache_read_tokens, self.output_tokens)

    def to_json(self) -> dict[str, Any]:
        """The ``by_session`` row of ``report --json``."""
        return {"session": self.session, "requests": self.requests,
                "span_hours": self.span_hours, "gap_p50": self.gap_p50,
                "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens,
                "cache_reads_per_output_token": self.reread_ratio}


@dataclass(slots=True)
class SessionSums:
    """Sums of one session while folding facts."""

    requests: int = 0
    output: int = 0
    cache_read: int = 0
    gaps: int = 0  # main requests with a gap before them
    first: float = math.inf
    last: float = -math.inf


def busiest_sessions(selection: Selection, sessions: Mapping[str, SessionSums],
                      limit: int) -> Iterable[SessionRow]:
    """The ``limit`` sessions with most requests (ties by id) and their median main gap."""
    top = sorted(sessions.items(), key=lambda item: (-item[1].requests, item[0]))[:limit]
    medians = session_medians(selection, {name: s.gaps for name, s in top})
    for name, s in top:
        yield SessionRow(name, s.requests, (s.last - s.first) / 3600,
                         float(medians.get(name, 0.0)), s.output, s.cache_read)


def gap_counts(found: Iterable[Fact]) -> dict[str, int]:
    """Each session's number of main requests that have a gap (from facts split by bucket)."""
    out: dict[str, int] = {}
    for f in found:
        if f.bucket > 0:
            out[f.attrs.session] = out.get(f.attrs.session, 0) + f.usage.requests
    return out


def session_medians(selection: Selection, counts: Mapping[str, int]) -> dict[str, float]:
    """Each session's nearest-rank median gap between main requests, given its gap count.

    One ``ORDER BY gap LIMIT 1 OFFSET k`` per session: the ledger's index on
    (session, gap) makes it a short walk, and nothing is sorted in Python.
    """
    out: dict[str, float] = {}
    for session, n in counts.items():
        if n <= 0:
            continue
        # Only main requests have gaps: the (session, gap) index answers alone.
        rows = selection.rows("gap", "gap IS NOT NULL", "session = ?",
                              tail=f"ORDER BY gap LIMIT 1 OFFSET {(n * 50 + 99) // 100 - 1}",
                              params=(session,))
        if rows:
            out[session] = float(rows[0][0])
    return out


