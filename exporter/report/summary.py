"""Render `report` for people (rich tables) and for programs (JSON, CSV).

The summary: usage totals, request shape, the cache-expiry table (prompt
rewritten after an idle gap), cost by model, source and session, and the
serving-side estimates (KV cache size and transfer time, upload bytes). Every
report starts with one line naming the range it covers and its time zone.
Colour is whatever the console supports: none when writing to a file or a pipe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from exporter.projections import caps
from exporter.projections.agents import name as agent_name
from exporter.projections.figures import Covered, Spread, Summary
from exporter.projections.model_names import short_model
from exporter.projections.periods import Zone
from exporter.projections.pricing import RateTable
from exporter.projections.savings import ContextCost
from exporter.projections.sessions import SessionRow
from exporter.projections.usage import AgentUsage, Usage
from exporter.records import ACTIVE_GAP_SECONDS
from exporter.shown import clip, markup, text

if TYPE_CHECKING:  # rich is imported where tables are drawn: `report --json` never needs it
    from rich.console import Console
    from rich.table import Table

WIDE_CONSOLE = 110  # columns needed for the cost tables' per-token-type columns
LINK_GBPS = (100, 400, 800)  # reference link speeds for the KV transfer-time table
GAP_LABELS = {
    "first": "first of conversation",
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
    """Format dollars, always to the cent: ``$0.26``, ``$1,234.50``; under a cent ``<$0.01``.

    One rule for every amount, so a column of costs lines up on its decimal point.
    A negative amount (the cache saved less than its writes cost) reads ``-$0.03``.
    """
    sign, x = ("-", -x) if x < 0 else ("", x)
    if 0 < x < 0.005:
        return sign + "<$0.01"
    return sign + f"${x:,.2f}"


def pct(x: float) -> str:
    """Format a share in [0, 1] as a percentage; tiny non-zero shares as ``<0.1%``."""
    if 0 < x < 0.0005:
        return "<0.1%"
    return f"{x * 100:.1f}%"


_UNITS: Final = ((3600, "h"), (60, "min"), (1, "s"))


def duration(seconds: float) -> str:
    """Format seconds as their two largest whole units: ``14 s``, ``1 min 5 s``, ``5 h 1 min``.

    One format for every duration a report shows; under ten seconds one decimal
    (``4.2 s``), so a short gap does not read as nothing.
    """
    if seconds < 9.95:
        return f"{max(seconds, 0.0):.1f} s".replace(".0 s", " s")
    whole = round(seconds)
    for i, (size, unit) in enumerate(_UNITS):
        if whole >= size:
            big, rest = divmod(whole, size)
            if i + 1 < len(_UNITS):
                small, small_unit = _UNITS[i + 1]
                rest = round(rest / small)
                if rest * small == size:  # 59.6 min rounds up to the next hour
                    big, rest = big + 1, 0
                return f"{big} {unit}" + (f" {rest} {small_unit}" if rest else "")
            return f"{big} {unit}"
    return "0 s"


def transfer_time(n_bytes: float, gbps: float) -> str:
    """Time to move ``n_bytes`` over a ``gbps`` link (bytes × 8 / rate), two digits."""
    seconds = n_bytes * 8 / (gbps * 1e9)
    return f"{seconds:.2g} s" if seconds < 100 else duration(seconds)


def say(console: Console, renderable: Any, **options: Any) -> None:
    """Print without rich's automatic highlighting: a number is the colour of its text.

    Highlighting colours what looks like a number by guesswork ("23." cyan, "21M"
    plain, the "5" of "5-hour blocks"); a report's figures are set apart by its
    tables instead.
    """
    console.print(renderable, highlight=False, **options)


def new_table(title: str, *columns: str) -> Table:
    """Build a table: first column left-aligned, the others right-aligned and never wrapped.

    On a narrow console (80 columns when piped) figures must stay whole, so only
    the first column (names, e.g. long model ids) folds onto a second line.
    """
    from rich import box  # noqa: PLC0415 - see the TYPE_CHECKING import
    from rich.table import Table  # noqa: PLC0415

    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")
    table.add_column(columns[0], overflow="fold")
    for name in columns[1:]:
        table.add_column(name, justify="right", no_wrap=True)
    return table


def _spread(values: Spread, fmt: Any = tokens) -> str:
    """Format p50/p90/max as ``p50 … · p90 … · max …``."""
    return f"p50 {fmt(values.p50)} · p90 {fmt(values.p90)} · max {fmt(values.max)}"


def _overview(f: Summary) -> Table:
    """Totals and request shape."""
    t = f.totals
    table = new_table("Usage", "figure", "value")
    rows = [
        ("requests", f"{t.requests:,} in {f.sessions:,} sessions"),
        ("estimated cost (list price)", usd(t.cost_usd)),
        ("saved by the prompt cache", saving(t)),
        ("unpriced tokens", tokens(t.unpriced)),
        ("input tokens (uncached)", tokens(t.input)),
        ("cache read tokens", tokens(t.cache_read)),
        ("cache write tokens (5 m / 1 h)",
         f"{tokens(t.cache_write_5m)} / {tokens(t.cache_write_1h)}"
         if f.cache_writes_measured else NOT_MEASURED),
        ("output tokens", tokens(t.output)),
        ("cache-read share of prompt", pct(f.cache_read_share)),
        ("cache reads per output token", f"{t.reread_ratio:,.0f}" if t.output else "—"),
        ("context per request", _spread(f.context)),
        ("output per request", _spread(f.output)),
        (
            "gap between main requests",
            f"p50 {duration(f.gap_p50)} · p90 {duration(f.gap_p90)} ({f.gap_count:,} gaps)",
        ),
        ("peak requests per minute", f"{f.peak_requests_per_minute:,}"),
        ("max parallel sessions in 10 min", f"{f.max_parallel_sessions_10m:,}"),
        (
            "active generation speed",
            f"{f.generation_tokens_per_second:.0f} tokens/s (gaps ≤ {ACTIVE_GAP_SECONDS:.0f} s)",
        ),
    ]
    if t.web_search:
        rows.insert(8, ("web searches", f"{t.web_search:,}"))
    for row in rows:
        table.add_row(*row)
    return table


def _cache_expiry(f: Summary) -> Table:
    """The cache-expiry table: gap bucket → share of main requests and of prompt rewritten."""
    total = sum(b.requests for b in f.buckets.values())
    table = new_table(
        "Cache expiry: prompt rewritten after an idle gap",
        "gap before request",
        "requests",
        "share",
        "prompt rewritten",
    )
    for key, label in GAP_LABELS.items():
        b = f.buckets.get(key)
        n = b.requests if b else 0
        share = b.write_share if b else 0.0
        table.add_row(label, f"{n:,}", pct(n / total) if total else "—", pct(share))
    return table


def _cost_table(title: str, first: str, groups: Mapping[str, Usage], wide: bool,
                writes: bool = True) -> Table:
    """Requests, tokens, cost, the cache's saving and unpriced tokens per model or per source.

    A narrow console gets no input/read/write/saved columns, so model ids stay on one line.
    Past :data:`caps.SUMMARY_MODELS` groups, the costliest are shown and one row
    sums the rest. ``writes``: the cache writes were measured (else "—": Codex's).
    """
    extra = ("input", "read", "write") if wide else ()
    saved = ("cache saved",) if wide else ()
    table = new_table(title, first, "requests", *extra, "output", "cost", *saved, "unpriced")
    capped = caps.costliest(groups, caps.SUMMARY_MODELS)
    rest = ((caps.other_label(capped.more), capped.rest),) if capped.more else ()
    for label, t in (*capped.shown, *rest):
        middle = (t.input, t.cache_read, t.cache_write) if wide else ()
        table.add_row(
            text(clip(label)),
            f"{t.requests:,}",
            *(tokens(n) if writes or i != 2 else "—" for i, n in enumerate((*middle, t.output))),
            cost_cell(t),
            *((usd(t.saved_usd) if t.cost_pico else "—",) if wide else ()),
            tokens(t.unpriced) if t.unpriced else "—",
        )
    return table


NOT_MEASURED: Final = "not measured"
_AGENT_ROWS: Final[tuple[tuple[str, Callable[[AgentUsage], str]], ...]] = (
    ("requests", lambda a: f"{a.usage.requests:,}"),
    ("input (uncached)", lambda a: tokens(a.usage.input)),
    ("cache read", lambda a: tokens(a.usage.cache_read)),
    ("cache write", lambda a: tokens(a.usage.cache_write) if a.cache_writes_measured
     else NOT_MEASURED),
    ("output", lambda a: tokens(a.usage.output)),
    ("  of it reasoning", lambda a: "—" if a.reasoning is None else tokens(a.reasoning)),
    ("cost", lambda a: cost_cell(a.usage)),
)


def agents_table(by_agent: Mapping[str, AgentUsage], title: str = "") -> Table:
    """A column per agent (80 columns hold three): requests, tokens by kind, cost.

    Reasoning is a part of output, on its own line ("—" for an agent that does
    not report it apart); cache writes an agent does not log are "not measured",
    never a zero (docs/figures.md, "Agents").
    """
    items = list(by_agent.values())
    table = new_table(title, "by agent", *(agent_name(a.agent) for a in items))
    for label, cell in _AGENT_ROWS:
        table.add_row(label, *(cell(a) for a in items))
    return table


def window_lines(by_agent: Mapping[str, AgentUsage]) -> list[str]:
    """Per agent whose logs state the context window: how full the prompt made it."""
    out = []
    for a in by_agent.values():
        if (share := a.context_window_share) is not None:
            out.append(f"{agent_name(a.agent)} prompt / context window: p50 {share.p50:.0%} · "
                       f"p90 {share.p90:.0%} · max {share.max:.0%} ({share.turns:,} turns)")
    return out


NEGATIVE_SAVING: Final = "written, not yet read back enough"
NEGATIVE_NOTE: Final = ("cache saved: negative where the cache was written and not yet read "
                        "back enough")


def saving(t: Usage) -> str:
    """What the prompt cache saved, and the cost without it.

    Negative when the cache was written (at a premium over plain input) and read
    back too little to pay for it yet: a new conversation, or one that went idle.
    """
    if t.saved_pico < 0:
        return f"{usd(t.saved_usd)} ({NEGATIVE_SAVING})"
    return f"{usd(t.saved_usd)} (without it: {usd(t.cost_usd + t.saved_usd)})"


def cost_cell(t: Usage) -> str:
    """The cost of some usage; a wholly unpriced group has no cost (``n/a``), not $0."""
    return "n/a" if t.cost_pico == 0 and t.unpriced else usd(t.cost_usd)


def _sessions(rows: Iterable[SessionRow]) -> Table:
    """The busiest sessions: requests, time span, median gap, output, re-read ratio."""
    table = new_table(
        "Sessions (most requests first)", "session", "requests", "span", "gap p50", "output",
        "re-read",
    )
    for row in rows:
        table.add_row(
            text(row.session[:8]),
            f"{row.requests:,}",
            duration(row.span_hours * 3600),
            duration(row.gap_p50),
            tokens(row.output_tokens),
            f"{row.reread_ratio:,.0f}×" if row.output_tokens else "—",
        )
    return table


def _context_costs(costs: Iterable[ContextCost]) -> Table:
    """One prompt of your median and p90 size: read from the cache vs recomputed."""
    table = new_table("Cost of one prompt at your context size (list price)",
                      "model · prompt", "tokens", "from the cache", "recomputed", "ratio")
    for c in costs:
        tier = " (long context)" if c.long else ""
        ratio = c.recomputed_pico / c.cached_pico if c.cached_pico else 0.0
        label = text(f"{short_model(c.model)} · {c.quantile}{tier}")
        table.add_row(label, tokens(c.context),
                      usd(c.cached_pico / 1e12), usd(c.recomputed_pico / 1e12),
                      f"{ratio:.0f}×" if ratio else "—")
    return table


def _kv(f: Summary) -> Table:
    """KV cache per request by reference architecture, and its transfer time on fast links."""
    speeds = [f"at {g} Gb/s" for g in LINK_GBPS]
    table = new_table("KV cache per request (estimate)", "architecture · context", "bytes", *speeds)
    for arch, spread in f.kv_bytes.items():
        for q, n in (("p50", spread.p50), ("p90", spread.p90), ("max", spread.max)):
            table.add_row(f"{arch} · {q}", size(n), *(transfer_time(n, g) for g in LINK_GBPS))
    return table


def _upload_and_lines(f: Summary) -> Table:
    """Upload bytes (the API re-sends the conversation) and how the lines were classified."""
    table = new_table("Upload and input lines", "figure", "value")
    table.add_row("upload, total (estimate)", size(f.upload_total))
    table.add_row("upload per request", f"p50 {size(f.upload.p50)} · p90 {size(f.upload.p90)}")
    lines = {k: int(f.lines.get(k, 0)) for k in ("usage", "duplicate", "other", "rejected")}
    # The rejected count has its own row below: said once, the row fits 80 columns unwrapped.
    table.add_row("lines read", " · ".join(f"{k} {v:,}" for k, v in lines.items()
                                           if k != "rejected"))
    table.add_row("rejected lines", f"{lines['rejected']:,}")
    for reason, n in sorted(f.rejected.items()):
        table.add_row(text(f"  rejected: {reason}"), f"{n:,}")
    _iteration_rows(table, f.iterations)
    return table


MAX_UNKNOWN_ROWS = 8  # undocumented iteration types named one per row; the rest summed


def _iteration_rows(table: Table, kinds: Mapping[str, int]) -> None:
    """What the lines' ``usage.iterations`` held (docs/figures.md): nothing without any."""
    if not kinds:
        return
    known = ("advisor", "fallback", "superseded", "mismatch", "bad")
    said = " · ".join(f"{k} {kinds[k]:,}" for k in known if kinds.get(k))
    table.add_row("usage iterations", said or "-")
    unknown = sorted(((n, k) for k, n in kinds.items() if k not in known), reverse=True)
    for n, kind in unknown[:MAX_UNKNOWN_ROWS]:
        # Names are plain ones (exporter.ingest.iterations), or just "unknown".
        table.add_row(text(f"  type {kind.partition(':')[2] or '?'}"), f"{n:,} not priced")
    if rest := sum(n for n, _ in unknown[MAX_UNKNOWN_ROWS:]):
        table.add_row("  other types", f"{rest:,} not priced")


def render_text(figures: Summary, console: Console) -> None:
    """Print the summary as a readable terminal report of rich tables."""
    say(console, header("Summary", figures.covered))
    if figures.covered.first is None:  # tables of zeros say less than one sentence
        say(console, "No requests in this range.")
        say(console, _upload_and_lines(figures))
        return
    say(console, _overview(figures))
    say(console, _cache_expiry(figures))
    wide = console.width >= WIDE_CONSOLE
    note = " (tokens: input, cache read, cache write, output)" if wide else ""
    writes = figures.cache_writes_measured
    say(console, _cost_table("By model" + note, "model", figures.by_model, wide, writes))
    say(console, _cost_table("By source", "source", figures.by_source, wide, writes))
    if figures.by_agent:  # only where the roots hold two agents' logs
        say(console, agents_table(figures.by_agent, "By agent"))
        if lines := window_lines(figures.by_agent):
            say(console, "\n".join(lines) + "\n")
    groups = (*figures.by_model.values(), *figures.by_source.values())
    if wide and any(u.saved_pico < 0 and u.cost_pico for u in groups):
        say(console, NEGATIVE_NOTE)
    if figures.by_session:
        say(console, _sessions(figures.by_session))
    if figures.context_costs:
        say(console, _context_costs(figures.context_costs))
    say(console, _kv(figures))
    say(console, _upload_and_lines(figures))


def render_prices(figures: Summary, pricing: RateTable, console: Console, *,
                  brief: bool = False) -> None:
    """Where the prices come from, and how to price each model that has none.

    Past :data:`caps.UNPRICED_LINES` unpriced models, the most used get a line
    and one more line counts the rest (``report --json`` lists every model).
    ``brief`` (the one-screen summary): the most used gets a line, one more counts the rest.
    """
    info = pricing.describe()
    source = f"{info['package']} {info['version']}".strip() or "no price database"
    dated = f", prices to {info['data_date']}" if info["data_date"] else ""
    # soft_wrap: each is one line of text however narrow the terminal (grep, copy).
    say(console, text(f"Prices: {source}{dated} ({info['origin']}; overrides: "
                       f"{info['overrides']})"), soft_wrap=True)
    unpriced = {m: u for m, u in sorted(figures.by_model.items()) if u.unpriced}
    capped = caps.costliest(unpriced, 1 if brief else caps.UNPRICED_LINES)
    for model, usage in capped.shown:
        say(console, text(f"  unpriced: {tokens(usage.unpriced)} tokens — "
                           f"{pricing.unpriced_help(model)}"), soft_wrap=True)
    if capped.more:
        more = f"{capped.more:,} more model{'' if capped.more == 1 else 's'}"
        how = ("report --full says how to price each" if brief
               else "report --json lists every model")
        say(console, f"  unpriced: {tokens(capped.rest.unpriced)} tokens of {more} ({how})",
            soft_wrap=True)


def header(title: str, covered: Covered) -> str:
    """The report's first line: what it is, its time zone, the requests it covers.

    A second line gives the range asked for with --since/--until, if any.
    """
    zone = covered.range.zone
    rng = covered.range
    if covered.first is None:
        span = "no requests"
    else:
        last = covered.last if covered.last is not None else covered.first
        span = f"{when(covered.first, zone)} → {when(last, zone)}"
    line = f"[bold]{markup(title)}[/bold] · {markup(zone.name)} · {span}"
    asked = [f"{name} {when(ts, zone)}" for name, ts in (("since", rng.since),
                                                        ("until", rng.until)) if ts is not None]
    return line + (f"\n  range asked: {', '.join(asked)}" if asked else "")


def when(ts: float, zone: Zone) -> str:
    """A local time to the minute: ``2026-01-31 18:05``."""
    return zone.local(ts).strftime("%Y-%m-%d %H:%M")

