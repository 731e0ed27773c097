"""Render the figures of ``stats.compute`` for people (rich tables) and for programs (JSON).

The text report follows the seed report's section 1.1: usage totals, request
shape, the cache-expiry table, cost by model/source/session, and the serving-side
estimates (KV cache size and transfer time, upload bytes). Colour is whatever the
console supports: none when writing to a file or a pipe.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

WIDE_CONSOLE = 110  # columns needed for the cost tables' per-token-type columns
LINK_GBPS = (100, 400, 800)  # reference link speeds for the KV transfer-time table
GAP_LABELS = {
    "first": "first of session",
    "lt_5m": "≤ 5 min",
    "5m_to_1h": "5 min – 1 h",
    "gt_1h": "> 1 h",
}
_TOKEN_UNITS = ("", "k", "M", "B", "T")
_BYTE_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")


def _scaled(value: float, units: tuple[str, ...], digits: int) -> tuple[str, str]:
    """Scale by 1000s to the largest unit keeping the number under 1000."""
    i = 0
    while abs(value) >= 999.95 and i < len(units) - 1:
        value /= 1000
        i += 1
    return f"{value:.{digits}g}", units[i]


def tokens(n: float) -> str:
    """Format a token count: exact below 10,000 (``3,321``), else ``456.9k``, ``1.951M``."""
    if abs(n) < 10_000:
        return f"{n:,.0f}"
    number, unit = _scaled(n, _TOKEN_UNITS, 4)
    return number + unit


def size(n: float) -> str:
    """Format bytes in decimal units: ``32.1 GB``."""
    number, unit = _scaled(n, _BYTE_UNITS, 3)
    return f"{number} {unit}"


def usd(x: float) -> str:
    """Format dollars: cents from $1 up, four decimals below (one request costs ~$0.001)."""
    return f"${x:,.2f}" if abs(x) >= 1 or x == 0 else f"${x:.4f}"


def pct(x: float) -> str:
    """Format a share in [0, 1] as a percentage; tiny non-zero shares as ``<0.1%``."""
    if 0 < x < 0.0005:
        return "<0.1%"
    return f"{x * 100:.1f}%"


def duration(seconds: float) -> str:
    """Format seconds as s, min or h with three significant digits."""
    if seconds < 100:
        return f"{seconds:.3g} s"
    if seconds < 6000:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def transfer_time(n_bytes: float, gbps: float) -> str:
    """Time to move ``n_bytes`` over a ``gbps`` link (bytes × 8 / rate), two digits."""
    seconds = n_bytes * 8 / (gbps * 1e9)
    return f"{seconds:.2g} s" if seconds < 100 else duration(seconds)


def _table(title: str, *columns: str) -> Table:
    """Build a table: first column left-aligned, the others right-aligned and never wrapped.

    On a narrow console (80 columns when piped) figures must stay whole, so only
    the first column (names, e.g. long model ids) folds onto a second line.
    """
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")
    table.add_column(columns[0], overflow="fold")
    for name in columns[1:]:
        table.add_column(name, justify="right", no_wrap=True)
    return table


def _spread(values: Mapping[str, Any], fmt: Any = tokens) -> str:
    """Format a p50/p90/max mapping as ``p50 … · p90 … · max …``."""
    return " · ".join(f"{q} {fmt(values[q])}" for q in ("p50", "p90", "max") if q in values)


def _overview(f: Mapping[str, Any]) -> Table:
    """Totals and request shape: the seed's first table."""
    t, gaps = f["totals"], f["gap_seconds"]
    table = _table("Usage", "figure", "value")
    rows = [
        ("requests", f"{t['requests']:,} in {f['sessions']:,} sessions"),
        ("estimated cost (list price)", usd(t["cost_usd"])),
        ("unpriced tokens", tokens(t["unpriced_tokens"])),
        ("input tokens (uncached)", tokens(t["input_tokens"])),
        ("cache read tokens", tokens(t["cache_read_tokens"])),
        (
            "cache write tokens (5 m / 1 h)",
            _pair(t, "cache_write_5m_tokens", "cache_write_1h_tokens"),
        ),
        ("output tokens", tokens(t["output_tokens"])),
        ("cache-read share of prompt", pct(f["cache_read_share"])),
        ("context per request", _spread(f["context_tokens"])),
        ("output per request", _spread(f["output_tokens"])),
        (
            "gap between main requests",
            f"p50 {duration(gaps['p50'])} · p90 {duration(gaps['p90'])} ({gaps['count']:,} gaps)",
        ),
        ("peak requests per minute", f"{f['peak_requests_per_minute']:,}"),
        ("max parallel sessions in 10 min", f"{f['max_parallel_sessions_10m']:,}"),
        (
            "active generation speed",
            f"{f['generation_tokens_per_second']:.0f} tokens/s (gaps ≤ 120 s)",
        ),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def _pair(t: Mapping[str, Any], a: str, b: str) -> str:
    """Format two token figures as ``a / b``."""
    return f"{tokens(t[a])} / {tokens(t[b])}"


def _cache_expiry(f: Mapping[str, Any]) -> Table:
    """Gap bucket → share of main requests and share of their prompt written to cache."""
    counts, shares = f["requests_by_gap"], f["cache_write_share_by_gap"]
    total = sum(counts.values())
    table = _table(
        "Cache expiry (main requests)",
        "gap before request",
        "requests",
        "share",
        "prompt rewritten",
    )
    for key, label in GAP_LABELS.items():
        n = counts.get(key, 0)
        table.add_row(label, f"{n:,}", pct(n / total) if total else "—", pct(shares.get(key, 0.0)))
    return table


def _cost_table(
    title: str, first: str, groups: Mapping[str, Mapping[str, Any]], wide: bool
) -> Table:
    """Requests, tokens, cost and unpriced tokens per model or per source.

    A narrow console gets no input/read/write columns, so model ids stay on one line.
    """
    extra = ("input", "read", "write") if wide else ()
    table = _table(title, first, "requests", *extra, "output", "cost", "unpriced")
    for name, t in groups.items():
        written = t["cache_write_5m_tokens"] + t["cache_write_1h_tokens"]
        middle = (t["input_tokens"], t["cache_read_tokens"], written) if wide else ()
        table.add_row(
            name,
            f"{t['requests']:,}",
            *map(tokens, (*middle, t["output_tokens"])),
            # A wholly unpriced group has no cost, not a cost of zero.
            "n/a" if t["cost_usd"] == 0 and t["unpriced_tokens"] else usd(t["cost_usd"]),
            tokens(t["unpriced_tokens"]) if t["unpriced_tokens"] else "—",
        )
    return table


def _sessions(rows: Iterable[Mapping[str, Any]]) -> Table:
    """The busiest sessions: requests, time span, median gap, output."""
    table = _table(
        "Sessions (most requests first)", "session", "requests", "span", "gap p50", "output"
    )
    for row in rows:
        table.add_row(
            str(row["session"])[:8],
            f"{row['requests']:,}",
            f"{row['span_hours']:.1f} h",
            duration(row["gap_p50"]),
            tokens(row["output_tokens"]),
        )
    return table


def _kv(f: Mapping[str, Any]) -> Table:
    """KV cache per request by reference architecture, and its transfer time on fast links."""
    speeds = [f"at {g} Gb/s" for g in LINK_GBPS]
    table = _table("KV cache per request (estimate)", "architecture · context", "bytes", *speeds)
    for arch, values in f.get("kv_bytes", {}).items():
        for q in ("p50", "p90", "max"):
            n = values.get(q, 0)
            table.add_row(f"{arch} · {q}", size(n), *(transfer_time(n, g) for g in LINK_GBPS))
    return table


def _upload_and_lines(f: Mapping[str, Any]) -> Table:
    """Upload bytes (the API re-sends the conversation) and how the lines were classified."""
    up, lines = f["upload_bytes"], f["lines"]
    table = _table("Upload and input lines", "figure", "value")
    table.add_row("upload, total (estimate)", size(up["total"]))
    table.add_row("upload per request", f"p50 {size(up['p50'])} · p90 {size(up['p90'])}")
    table.add_row("lines read", " · ".join(f"{k} {v:,}" for k, v in lines.items()))
    table.add_row("rejected lines", f"{f['rejected_lines']:,}")
    for reason, n in f.get("rejected_by_reason", {}).items():
        table.add_row(f"  rejected: {reason}", f"{n:,}")
    return table


def render_text(figures: Mapping[str, Any], console: Console) -> None:
    """Print the figures as a readable terminal summary of rich tables."""
    console.print(_overview(figures))
    console.print(_cache_expiry(figures))
    wide = console.width >= WIDE_CONSOLE
    note = " (tokens: input, cache read, cache write, output)" if wide else ""
    console.print(_cost_table("By model" + note, "model", figures.get("by_model", {}), wide))
    console.print(_cost_table("By source", "source", figures.get("by_source", {}), wide))
    if figures.get("by_session"):
        console.print(_sessions(figures["by_session"]))
    console.print(_kv(figures))
    console.print(_upload_and_lines(figures))


def _finite(value: Any) -> Any:
    """Replace NaN and infinities (not JSON) by None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def to_json(figures: Mapping[str, Any]) -> str:
    """Serialise the figures as JSON: sorted keys (stable diffs), never NaN."""
    return json.dumps(_finite(figures), indent=2, sort_keys=True, allow_nan=False)
