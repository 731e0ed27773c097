"""Live session state behind the gauges: which sessions are warm, and how much KV.

A projection helper: the metrics projection notes every request it counts;
the gauges read the state at scrape time (from the HTTP thread), so every
access holds the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

from exporter.records import Request, Source

TTL_5M = 300.0
TTL_1H = 3600.0
Samples = Iterable[tuple[float, dict[str, str]]]


class LiveSessions:
    """Each session's newest request, and the newest request per source."""

    def __init__(self, clock: Callable[[], float]) -> None:
        """``clock`` gives the current epoch time (injected for tests)."""
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[float, int, bool]] = {}  # last ts, context, wrote 1h
        self._last_ts: dict[str, float] = {}

    def note(self, req: Request) -> None:
        """Remember a request: its session's last time and main-chain context."""
        with self._lock:
            last_ts, context, wrote_1h = self._sessions.get(req.session, (0.0, 0, False))
            if req.source is Source.MAIN and req.ts >= last_ts:
                context = req.context
            self._sessions[req.session] = (
                max(last_ts, req.ts), context, wrote_1h or req.cache_write_1h > 0
            )
            src = req.source.label
            self._last_ts[src] = max(self._last_ts.get(src, 0.0), req.ts)

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
