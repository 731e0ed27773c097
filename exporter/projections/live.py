"""Live session state behind the gauges: which sessions are warm, and how much KV.

A projection helper: the metrics projection notes every request it counts;
the gauges read the state at scrape time (from the HTTP thread), so every
access holds the lock. Only sessions inside the longest window (an hour) are
kept, so the state is bounded by recent activity, not by history.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

from exporter.projections.counting import TTL_1H, TTL_5M
from exporter.records import Request, Source

__all__ = ["TTL_1H", "TTL_5M", "LiveSessions"]
_PRUNE_EVERY = 1024  # notes between sweeps of sessions that left the window
Samples = Iterable[tuple[float, dict[str, str]]]


class LiveSessions:
    """Each session's newest request, and the newest request per source."""

    def __init__(self, clock: Callable[[], float]) -> None:
        """``clock`` gives the current epoch time (injected for tests)."""
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[float, int, bool]] = {}  # last ts, context, wrote 1h
        self._last_ts: dict[str, float] = {}
        self._notes = 0

    def note(self, req: Request) -> None:
        """Remember a request: its source's newest time, its session's time and context.

        A request more than an hour ahead of the clock is no session's live state
        (start-up reads the same window, so a restart sees what the running
        process saw); the newest time per source takes every request.
        """
        self.saw(req.source, req.ts)
        if req.ts > self._clock() + TTL_1H:
            return
        with self._lock:
            last_ts, context, wrote_1h = self._sessions.get(req.session, (0.0, 0, False))
            if req.source is Source.MAIN and req.ts >= last_ts:
                context = req.context
            self._sessions[req.session] = (
                max(last_ts, req.ts), context, wrote_1h or req.cache_write_1h > 0
            )
            self._notes += 1
            if self._notes % _PRUNE_EVERY == 0:
                self._prune()

    def saw(self, source: Source, ts: float) -> None:
        """Remember the newest request time of a source (start-up, from the rollups)."""
        with self._lock:
            src = source.label
            self._last_ts[src] = max(self._last_ts.get(src, 0.0), ts)

    def _prune(self) -> None:
        """Forget sessions older than the longest window (the lock is held)."""
        horizon = self._clock() - TTL_1H
        for session in [s for s, v in self._sessions.items() if v[0] <= horizon]:
            del self._sessions[session]

    def last_request(self) -> Samples:
        """``last_request_timestamp_seconds`` by source."""
        with self._lock:
            return [(ts, {"source": s}) for s, ts in sorted(self._last_ts.items())]

    def active(self) -> Samples:
        """``active_sessions``: sessions younger than each cache TTL."""
        ages = self._ages()
        return [(float(sum(a < TTL_5M for a, _, _ in ages)), {"ttl": "5m"}),
                (float(len(ages)), {"ttl": "1h"})]

    def warm_kv(self, bytes_per_token: Mapping[str, int]) -> Samples:
        """``warm_kv_cache_bytes``: last context of sessions whose cache is still warm.

        Warm means younger than 5 minutes, or than an hour for a session that
        wrote 1-hour cache.
        """
        warm = sum(ctx for age, ctx, wrote_1h in self._ages() if age < TTL_5M or wrote_1h)
        return [(float(warm * b), {"arch": a}) for a, b in sorted(bytes_per_token.items())]

    def _ages(self) -> list[tuple[float, int, bool]]:
        """(age seconds, last context, wrote 1h cache) of sessions active within an hour."""
        now = self._clock()
        with self._lock:
            return [(now - ts, ctx, h) for ts, ctx, h in self._sessions.values()
                    if now - ts < TTL_1H]
