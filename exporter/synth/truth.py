"""Ground truth: every figure of docs/figures.md, from the book of unique requests.

Independent of the exporter on purpose: its prices come from the same source
(the genai-prices database) but through genai-prices' own ``calc_price`` per
request, in Decimals, not through the exporter's rate table; its own
percentiles and gap buckets; exact integer arithmetic (milliseconds, 1e-9 USD)
until the final division. A disagreement with ``report --json`` therefore
points at one of the two.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from genai_prices import Usage, calc_price

from exporter.synth import attribution_fields as attribution
from exporter.synth.book import SOURCES, Book, Entry
from exporter.synth.model import NOVA, OPUS, SimRequest

_UNPRICED: Final = (NOVA,)
# Our rules on top of the database (pricing.md): US-only inference ×1.1, and
# fast mode ×6 on Opus 4.6, for which genai-prices has no fast-mode price.
_GEO_US: Final = Decimal("1.1")
_FAST_MULTIPLIER: Final = {OPUS: 6}
# A request with no date is priced as on the generator's default start.
_DEFAULT_DATE: Final = datetime(2026, 10, 1, tzinfo=UTC)
_NANO: Final = Decimal(10) ** 9
GAP_BUCKETS: Final = ("first", "lt_5m", "5m_to_1h", "gt_1h")
_ACTIVE_GAP_MS: Final = 120_000


def cost_nano_usd(req: SimRequest, ts_ms: int | None = None, *,
                  cached: bool = True) -> int | None:
    """Cost of one request made at ``ts_ms`` in 1e-9 USD (None if its model has no price).

    genai-prices applies the long-context tier (prompt above 200k: every token at
    the tier's rates) and prices that change on a date; the multipliers are ours.
    ``cached=False``: the cost without the prompt cache (every prompt token plain
    input; the tier is still decided by the whole prompt).
    """
    if req.model in _UNPRICED:
        return None
    when = _DEFAULT_DATE if ts_ms is None else datetime.fromtimestamp(ts_ms / 1000, UTC)
    usage = Usage(
        input_tokens=req.context,  # genai-prices counts cache reads and writes in input
        cache_read_tokens=req.cache_read if cached else 0,
        cache_write_tokens=req.cache_write_5m + req.cache_write_1h if cached else 0,
        cache_write_1h_tokens=req.cache_write_1h if cached else 0,
        output_tokens=req.output,
    )
    fast = req.speed == "fast"
    price = calc_price(usage, req.model, provider_id="anthropic", genai_request_timestamp=when,
                       price_context={"speed": "fast"} if fast else None)
    total = price.total_price * (_GEO_US if req.geo == "us" else 1)
    if fast:
        total *= _FAST_MULTIPLIER.get(req.model, 1)
    nano = total * _NANO
    if nano != nano.to_integral_value():
        raise ValueError(f"{req.model}: a price below 1e-9 USD per request ({total})")
    return int(nano)


def percentile(values: Sequence[int], p: int) -> int:
    """Nearest rank on sorted values: ``v[ceil(p/100 × n) − 1]``; 0 when empty."""
    if not values:
        return 0
    return values[max(1, -(-p * len(values) // 100)) - 1]


def bucket(gap_ms: int | None) -> str:
    """Gap bucket of a main request (upper bounds inclusive)."""
    if gap_ms is None:
        return "first"
    return "lt_5m" if gap_ms <= 300_000 else "5m_to_1h" if gap_ms <= 3_600_000 else "gt_1h"


def compute_truth(
    book: Book, kv_bytes_per_token: Mapping[str, int], upload_bytes_per_token: float
) -> dict[str, Any]:
    """The ``report --json`` figures for everything the book recorded."""
    book.conversations()
    entries = sorted(book.entries.values(), key=lambda e: (e.ts_ms, e.req.key))
    # An advisor consultation is no request a conversation sent (figures.md): in the
    # totals, not in the line results, the distributions or the upload.
    own = [e for e in entries if e.source != SOURCES.index("advisor")]
    contexts = sorted(e.req.context for e in own)
    outputs = sorted(e.req.output for e in own)
    ctx = _spread(contexts)
    prompt_sum = sum(e.req.context for e in entries)
    totals, by_model, by_source = _totals(entries)
    usage = len(own)
    gaps = _gap_figures(entries)
    return {
        "totals": totals,
        "by_model": by_model,
        "by_source": by_source,
        "sessions": len({e.session for e in entries}),
        "rejected_lines": sum(book.rejected.values()),
        "rejected_by_reason": dict(sorted(book.rejected.items())),
        "context_tokens": ctx,
        "output_tokens": _spread(outputs),
        "gap_seconds": gaps["gap_seconds"],
        "cache_write_share_by_gap": gaps["cache_write_share_by_gap"],
        "requests_by_gap": gaps["requests_by_gap"],
        "cache_read_share": totals["cache_read_tokens"] / prompt_sum if prompt_sum else 0.0,
        "peak_requests_per_minute": max(
            Counter(e.ts_ms // 60_000 for e in entries).values(), default=0
        ),
        "max_parallel_sessions_10m": _parallel(entries),
        "generation_tokens_per_second": gaps["generation_tokens_per_second"],
        "kv_bytes": {
            a: {q: v * int(b) for q, v in ctx.items()} for a, b in kv_bytes_per_token.items()
        },
        "upload_bytes": {
            "total": round(sum(contexts) * upload_bytes_per_token),
            "p50": round(ctx["p50"] * upload_bytes_per_token),
            "p90": round(ctx["p90"] * upload_bytes_per_token),
        },
        "cache_savings_usd": totals["cache_savings_usd"],
        "cache_reads_per_output_token": (totals["cache_read_tokens"] / totals["output_tokens"]
                                         if totals["output_tokens"] else 0.0),
        "lines": {
            "usage": usage,
            "duplicate": book.usage_lines - usage,
            "other": book.other_lines,
            "rejected": sum(book.rejected.values()),
        },
        **({"iterations": dict(sorted(book.iterations.items()))} if book.iterations else {}),
        **({"attribution": _attribution(entries)} if any(e.req.attribution for e in entries)
           else {}),
    }


def _attribution(entries: Sequence[Entry]) -> dict[str, dict[str, Any]]:
    """``T`` per value of each attribution field ("none": requests without one)."""
    out: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(attribution.FIELDS):
        groups: dict[str, list[Entry]] = defaultdict(list)
        for e in entries:
            groups[attribution.labels(e.req)[i] or "none"].append(e)
        out[name] = {value: _totals(group)[0] for value, group in sorted(groups.items())}
    return out


def _spread(values: Sequence[int]) -> dict[str, int]:
    """p50/p90/max of sorted integers."""
    return {
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "max": values[-1] if values else 0,
    }


def _totals(entries: Sequence[Entry]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``T`` overall, by model (as recorded) and by source."""
    sums: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * 9)
    for e in entries:
        r = e.req
        nano = cost_nano_usd(r, e.ts_ms)
        plain = cost_nano_usd(r, e.ts_ms, cached=False)
        row = (
            1,
            r.input,
            r.output,
            r.cache_read,
            r.cache_write_5m,
            r.cache_write_1h,
            nano or 0,
            0 if nano is not None else r.context + r.output,
            (plain or 0) - (nano or 0),  # the cache's saving
        )
        for target in (("", ""), ("m", r.model), ("s", SOURCES[e.source])):
            acc = sums[target]
            for i, value in enumerate(row):
                acc[i] += value
    as_t = {key: _t(acc) for key, acc in sums.items()}
    total = as_t.pop(("", ""), _t([0] * 9))
    by_model = {name: t for (kind, name), t in sorted(as_t.items()) if kind == "m"}
    by_source = {s: as_t[("s", s)] for s in SOURCES if ("s", s) in as_t}
    return total, by_model, by_source


def _t(acc: Sequence[int]) -> dict[str, Any]:
    """One ``T`` object from integer sums (cost in 1e-9 USD)."""
    return {
        "requests": acc[0],
        "input_tokens": acc[1],
        "output_tokens": acc[2],
        "cache_read_tokens": acc[3],
        "cache_write_5m_tokens": acc[4],
        "cache_write_1h_tokens": acc[5],
        "cost_usd": acc[6] / 1e9,
        "unpriced_tokens": acc[7],
        "cache_savings_usd": acc[8] / 1e9,
    }


def _gap_figures(entries: Sequence[Entry]) -> dict[str, Any]:
    """Gap percentiles, the cache-expiry table and the active generation speed."""
    gaps: list[int] = []
    count = dict.fromkeys(GAP_BUCKETS, 0)
    written = dict.fromkeys(GAP_BUCKETS, 0)
    prompt = dict.fromkeys(GAP_BUCKETS, 0)
    active_out = active_ms = 0
    for e in entries:  # already in time order
        if e.source != 0:
            continue  # only the main chain has gaps
        gap = e.gap_ms  # by conversation: Book.conversations
        b = bucket(gap)
        count[b] += 1
        written[b] += e.req.cache_write_5m + e.req.cache_write_1h
        prompt[b] += e.req.context
        if gap is not None:
            gaps.append(gap)
            if gap <= _ACTIVE_GAP_MS:
                active_out += e.req.output
                active_ms += gap
    gaps.sort()
    return {
        "gap_seconds": {
            "p50": percentile(gaps, 50) / 1000,
            "p90": percentile(gaps, 90) / 1000,
            "count": len(gaps),
        },
        "cache_write_share_by_gap": {
            b: written[b] / prompt[b] if prompt[b] else 0.0 for b in GAP_BUCKETS
        },
        "requests_by_gap": count,
        "generation_tokens_per_second": active_out * 1000 / active_ms if active_ms else 0.0,
    }


def _parallel(entries: Sequence[Entry]) -> int:
    """Most distinct sessions with a request in one aligned 10-minute window."""
    windows: dict[int, set[str]] = defaultdict(set)
    for e in entries:
        windows[e.ts_ms // 600_000].add(e.session)
    return max(map(len, windows.values()), default=0)
