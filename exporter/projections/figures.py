"""The figures of docs/figures.md, projected from the ledger's requests.

``compute`` returns the JSON shape that ``report`` renders and the generator's
ground truth uses. The building blocks (``percentile``, ``gap_bucket``,
``session_gaps``, ``peak_per_window``, ``max_sessions_per_window``) are public
so the live metrics classify requests exactly the same way.

Speed matters (a ledger holds 50k+ requests): one sort by time, one loop that
folds each request into per-price-class, per-gap-bucket and per-session sums,
and a few C-level passes (sorts, bisects). Each price class is priced once,
not each request.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from operator import eq, itemgetter
from typing import Any, TypeVar

from exporter.projections.pricing import Pricing
from exporter.records import Request, Source

GAP_BUCKETS = ("first", "lt_5m", "5m_to_1h", "gt_1h")
CACHE_5M_SECONDS = 300.0
CACHE_1H_SECONDS = 3600.0
ACTIVE_GAP_SECONDS = 120.0  # a gap this short is "the model generating" for the speed figure
SESSION_TABLE_ROWS = 20
TOKEN_FIELDS = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")
TOTAL_KEYS = (
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "cost_usd",
    "unpriced_tokens",
)
LINE_RESULTS = ("usage", "duplicate", "other", "rejected")

N = TypeVar("N", int, float)
# itemgetter by field index runs in C: much cheaper than attribute access per request.
_ts, _session = (itemgetter(Request._fields.index(name)) for name in ("ts", "session"))
_ts_key = itemgetter(Request._fields.index("ts"), Request._fields.index("key"))
_LOOP_FIELDS = ("ts", "model", "session", "source", *TOKEN_FIELDS)
_hot = itemgetter(
    *map(Request._fields.index, (*_LOOP_FIELDS, "inference_geo", "service_tier", "speed"))
)
# (model, source, inference_geo, service_tier, speed, long context, price period):
# one price per token type.
_PriceClass = tuple[str, Source, str, str, str, bool, int]


def percentile(sorted_values: Sequence[N], p: float) -> N | int:
    """Return the nearest-rank percentile ``v[ceil(p/100 * n) - 1]``; 0 if empty."""
    n = len(sorted_values)
    if n == 0:
        return 0
    # p * n first: for integer p the product is exact and the division rounds correctly.
    rank = math.ceil(p * n / 100)
    return sorted_values[min(max(rank, 1), n) - 1]


def gap_bucket(gap: float | None) -> str:
    """Return the cache-expiry bucket of a main request by the gap before it."""
    if gap is None:
        return "first"
    # Inclusive above, like the Prometheus histogram's le="300" and le="3600".
    if gap <= CACHE_5M_SECONDS:
        return "lt_5m"
    if gap <= CACHE_1H_SECONDS:
        return "5m_to_1h"
    return "gt_1h"


def gap_seconds(later: float, earlier: float) -> float:
    """Return the time between two request timestamps, rounded to whole milliseconds.

    Transcript timestamps have millisecond resolution; rounding removes the float
    noise of epoch seconds, so a 300.000 s gap is exactly 300 (bucket ``lt_5m``).
    """
    return round((later - earlier) * 1000) / 1000


def main_chain(requests: Iterable[Request]) -> list[tuple[Request, float | None]]:
    """List main requests by (ts, key), each with the gap since its session's previous one."""
    last: dict[str, float] = {}
    out: list[tuple[Request, float | None]] = []
    for req in sorted((r for r in requests if r.source is Source.MAIN), key=_ts_key):
        prev = last.get(req.session)
        out.append((req, None if prev is None else gap_seconds(req.ts, prev)))
        last[req.session] = req.ts
    return out


def session_gaps(requests: Iterable[Request]) -> dict[str, float | None]:
    """Map each main request's key to the gap before it (None for a session's first)."""
    return {req.key: gap for req, gap in main_chain(requests)}


def _windows(times: Sequence[float], width: float) -> Iterator[tuple[int, int]]:
    """Yield ``(lo, hi)`` index ranges of sorted ``times`` sharing ``floor(t / width)``."""
    lo, n = 0, len(times)
    while lo < n:
        hi = bisect_left(times, (times[lo] // width + 1) * width, lo)
        yield lo, hi
        lo = hi


def peak_per_window(times: Sequence[float], width: float = 60.0) -> int:
    """Return the most sorted ``times`` in one aligned window (60 s: calendar minute)."""
    return max((hi - lo for lo, hi in _windows(times, width)), default=0)


def max_sessions_per_window(
    times: Sequence[float], sessions: Sequence[str], width: float = 600.0
) -> int:
    """Return the most distinct sessions in one aligned window of sorted ``times``."""
    return max((len(set(sessions[lo:hi])) for lo, hi in _windows(times, width)), default=0)


class _Scan:
    """Sums folded from one pass over the requests in time order."""

    def __init__(self) -> None:
        """Start empty."""
        # price class -> [requests, input, output, cache_read, cache_write_5m, cache_write_1h]
        self.classes: dict[_PriceClass, list[int]] = {}
        # session -> [first ts, last ts, last main ts or None, requests, output, main gaps]
        self.sessions: dict[str, list[Any]] = {}
        self.contexts: list[int] = []
        self.outputs: list[int] = []
        # Per gap bucket (GAP_BUCKETS order): [main requests, cache writes, prompt tokens].
        self.buckets = [[0, 0, 0] for _ in GAP_BUCKETS]
        self.active = [0, 0.0]  # output tokens and seconds after gaps <= ACTIVE_GAP_SECONDS

    def run(self, ordered: Iterable[Request], pricing: Pricing) -> None:
        """Fold requests sorted by ``ts``; flat on purpose, it runs once per request."""
        classes, sessions, buckets, active = self.classes, self.sessions, self.buckets, self.active
        add_context, add_output = self.contexts.append, self.outputs.append
        # model -> (long-context threshold, epochs where its prices change)
        limits: dict[str, tuple[float, tuple[float, ...]]] = {}
        main, short, long_gap = Source.MAIN, CACHE_5M_SECONDS, CACHE_1H_SECONDS
        for r in ordered:
            ts, model, session, source, inp, out, read, w5, w1, geo, tier, speed = _hot(r)
            ctx = inp + read + w5 + w1
            add_context(ctx)
            add_output(out)
            state = sessions.get(session)
            if state is None:
                state = sessions[session] = [ts, ts, None, 0, 0, []]
            state[1] = ts
            state[3] += 1
            state[4] += out
            if source is main:
                prev, state[2] = state[2], ts
                if prev is None:
                    bucket = buckets[0]
                else:
                    gap = round((ts - prev) * 1000) / 1000  # gap_seconds(), inlined
                    state[5].append(gap)
                    # gap_bucket() inlined: a call per request is measurable here.
                    bucket = buckets[1 if gap <= short else 2 if gap <= long_gap else 3]
                    if gap <= ACTIVE_GAP_SECONDS:
                        active[0] += out
                        active[1] += gap
                bucket[0] += 1
                bucket[1] += w5 + w1
                bucket[2] += ctx
            got = limits.get(model)
            if got is None:
                found = pricing.long_context_threshold(model)
                got = limits[model] = (math.inf if found is None else found,
                                       pricing.boundaries(model))
            limit, bounds = got
            period = bisect_right(bounds, ts) if bounds else 0  # prices that change on a date
            key = (model, source, geo, tier, speed, ctx > limit, period)
            acc = classes.get(key)
            if acc is None:
                acc = classes[key] = [0, 0, 0, 0, 0, 0]
            acc[0] += 1
            acc[1] += inp
            acc[2] += out
            acc[3] += read
            acc[4] += w5
            acc[5] += w1
        self.contexts.sort()
        self.outputs.sort()

    def cost_rows(self, pricing: Pricing) -> dict[tuple[str, str], list[Any]]:
        """Price each class once; fold into ``[requests, 5 token sums, cost, unpriced]``.

        Row keys: ``("", "")`` for the total, ``("m", model)``, ``("s", source label)``.
        """
        rows: dict[tuple[str, str], list[Any]] = defaultdict(lambda: [0] * 6 + [0.0, 0])
        for (model, source, geo, tier, speed, long, period), sums in self.classes.items():
            bounds = pricing.boundaries(model)
            at = (bounds[period - 1] if period else bounds[0] - 1.0) if bounds else None
            rates = pricing.rates(
                model, long_context=long, inference_geo=geo, service_tier=tier, speed=speed,
                at=at,
            )
            cost = 0.0 if rates is None else sum(rates.cost(*sums[1:]).values())
            unpriced = sum(sums[1:]) if rates is None else 0
            for target in (("", ""), ("m", model), ("s", source.label)):
                row = rows[target]
                for i, value in enumerate((*sums, cost, unpriced)):
                    row[i] += value
        return rows

    def gap_figures(self) -> dict[str, Any]:
        """Return gap percentiles, the cache-expiry table and the active generation speed."""
        gaps = sorted(gap for state in self.sessions.values() for gap in state[5])
        named = list(zip(GAP_BUCKETS, self.buckets, strict=True))
        output, seconds = self.active
        return {
            "gap_seconds": {
                "p50": float(percentile(gaps, 50)),
                "p90": float(percentile(gaps, 90)),
                "count": len(gaps),
            },
            "cache_write_share_by_gap": {
                name: written / prompt if prompt else 0.0 for name, (_, written, prompt) in named
            },
            "requests_by_gap": {name: count for name, (count, _, _) in named},
            "generation_tokens_per_second": output / seconds if seconds > 0 else 0.0,
        }

    def session_rows(self, limit: int = SESSION_TABLE_ROWS) -> list[dict[str, Any]]:
        """Per-session rows (seed §1.1): the ``limit`` sessions with most requests."""
        top = sorted(self.sessions.items(), key=lambda item: (-item[1][3], item[0]))
        return [
            {
                "session": session,
                "requests": state[3],
                "span_hours": (state[1] - state[0]) / 3600,
                "gap_p50": float(percentile(sorted(state[5]), 50)),
                "output_tokens": state[4],
            }
            for session, state in top[:limit]
        ]


def time_order(requests: Iterable[Request]) -> tuple[list[Request], list[float]]:
    """Sort requests by (ts, key), as the ledger lists them; return them and their times."""
    ordered = sorted(requests, key=_ts)  # cheap, and already right unless times tie
    times = list(map(_ts, ordered))
    if any(map(eq, islice(times, 1, None), times)):
        ordered.sort(key=_ts_key)  # equal times: break ties by key, independent of input order
    return ordered, times


def _scan(ordered: Sequence[Request], pricing: Pricing) -> _Scan:
    """Run the single pass over requests already sorted by ``ts``."""
    result = _Scan()
    result.run(ordered, pricing)
    return result


def sessions_table(
    requests: Iterable[Request], pricing: Pricing, limit: int = SESSION_TABLE_ROWS
) -> list[dict[str, Any]]:
    """Return per-session rows: requests, span hours, gap p50, output tokens; top ``limit``."""
    return _scan(time_order(requests)[0], pricing).session_rows(limit)


def _totals(row: Sequence[Any]) -> dict[str, Any]:
    """Turn a cost row into a ``T`` object."""
    return {
        key: float(value) if key == "cost_usd" else int(value)
        for key, value in zip(TOTAL_KEYS, row, strict=True)
    }


def _spread(sorted_values: list[int]) -> dict[str, int]:
    """Return p50/p90/max of sorted integers."""
    return {
        "p50": int(percentile(sorted_values, 50)),
        "p90": int(percentile(sorted_values, 90)),
        "max": sorted_values[-1] if sorted_values else 0,
    }


def compute(
    requests: Sequence[Request],
    pricing: Pricing,
    *,
    kv_bytes_per_token: Mapping[str, int],
    upload_bytes_per_token: float,
    lines: Mapping[str, int],
    rejected: Mapping[str, int],
) -> dict[str, Any]:
    """Return every figure of docs/figures.md for ``requests`` as a JSON-ready dict."""
    ordered, times = time_order(requests)
    acc = _scan(ordered, pricing)
    rows = {key: _totals(row) for key, row in acc.cost_rows(pricing).items()}
    total = rows.get(("", "")) or _totals([0] * 6 + [0.0, 0])
    prompt_sum = sum(acc.contexts)
    context = _spread(acc.contexts)
    gaps = acc.gap_figures()
    return {
        "totals": total,
        "by_model": {name: t for (kind, name), t in sorted(rows.items()) if kind == "m"},
        "by_source": {s.label: rows[("s", s.label)] for s in Source if ("s", s.label) in rows},
        "sessions": len(acc.sessions),
        "rejected_lines": int(lines.get("rejected", 0)),
        "rejected_by_reason": {k: int(v) for k, v in sorted(rejected.items())},
        "context_tokens": context,
        "output_tokens": _spread(acc.outputs),
        "gap_seconds": gaps["gap_seconds"],
        "cache_write_share_by_gap": gaps["cache_write_share_by_gap"],
        "requests_by_gap": gaps["requests_by_gap"],
        "cache_read_share": total["cache_read_tokens"] / prompt_sum if prompt_sum else 0.0,
        "peak_requests_per_minute": peak_per_window(times, 60.0),
        "max_parallel_sessions_10m": max_sessions_per_window(
            times, list(map(_session, ordered)), 600.0
        ),
        "generation_tokens_per_second": gaps["generation_tokens_per_second"],
        "kv_bytes": {
            arch: {q: v * int(per_token) for q, v in context.items()}
            for arch, per_token in kv_bytes_per_token.items()
        },
        "upload_bytes": {
            "total": round(prompt_sum * upload_bytes_per_token),
            "p50": round(context["p50"] * upload_bytes_per_token),
            "p90": round(context["p90"] * upload_bytes_per_token),
        },
        "lines": {k: int(lines.get(k, 0)) for k in LINE_RESULTS},
        "by_session": acc.session_rows(),
    }
