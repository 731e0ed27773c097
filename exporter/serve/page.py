"""The landing page ``/`` and ``/api/summary.json``: the report's figures, without Grafana.

Built server-side from the same SQL figures as ``report`` (slots and rollups,
never a scan of every request): the summary of the last 30 days, today's,
this week's and this month's cost against the budgets, cost per day, by
project and by model, active sessions and, where the status line feeds them,
the plan-limit windows. Charts are inline SVG (:mod:`exporter.serve.svg`); no
script, no external asset, nothing fetched at run time.

The page shows nothing the scrape does not: no session ids (the summary's
session table is left empty), projects under the ``project_label`` policy.
The rendered page is cached for ``ttl`` seconds; a copy up to ``stale``
seconds old is served while it is rebuilt in the background, so reloads never
wait for the SQL, and an older one is rebuilt before answering.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from exporter.ledger import slots
from exporter.ledger.store import Ledger
from exporter.projections import caps, figures
from exporter.projections.facts import (
    CONTEXT_SQL,
    ZERO,
    Facts,
    Prices,
    Selection,
    TimeKey,
    Usage,
    usd,
)
from exporter.projections.labels import LabelPolicy
from exporter.projections.periods import (
    DAY,
    Range,
    Zone,
    date_day,
    day_date,
    iso,
    local_zone,
    month_start,
    offset_sql,
    transitions,
    week_start,
)
from exporter.projections.pricing import Pricing
from exporter.records import TTL_1H, TTL_5M
from exporter.report import summary as report
from exporter.serve import svg
from exporter.sqlite import sqlite3

if TYPE_CHECKING:  # the options' module imports OpenTelemetry; the page needs only four fields
    from exporter.projections.metrics import MetricsOptions

WINDOW_DAYS: Final = 30
TOP_ROWS: Final = 8  # projects and models shown; the rest add up to "other"
TTLS: Final = (("5m", TTL_5M), ("1h", TTL_1H))  # active sessions, as the gauge's ttl label
StartResponse = Callable[..., Any]
Wsgi = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True, slots=True)
class Window:
    """One plan-limit window as the status line last reported it."""

    name: str  # five_hour, seven_day
    used_ratio: float
    resets_at: float


@dataclass(frozen=True, slots=True)
class PageData:
    """Every figure on the page, as of ``now``."""

    summary: figures.Summary  # the last WINDOW_DAYS days (whole local days)
    now: float
    zone: Zone
    periods: Mapping[str, float]  # today / week / month: cost in USD
    budgets: Mapping[str, float]  # day / month: USD (settings budget_*_usd)
    daily: tuple[tuple[str, float], ...]  # (local date, cost USD), oldest first, no gaps
    by_project: tuple[tuple[str, float], ...]  # (project label, cost USD), most first
    active: Mapping[str, int]  # ttl -> sessions whose last request is younger
    plan: tuple[Window, ...] = ()
    prices: Mapping[str, str] = field(default_factory=dict)  # Pricing.describe(), as report's

    def to_json(self) -> dict[str, Any]:
        """``report --json``'s object for the page's range and its own figures, capped (caps.py)."""
        projects, rest = self.by_project[:caps.API_ROWS], self.by_project[caps.API_ROWS:]
        page: dict[str, Any] = {
            "generated": iso(self.now, self.zone),
            "cost_usd": {k: round(v, 6) for k, v in self.periods.items()},
            "budget_usd": dict(self.budgets),
            "daily_cost_usd": [{"day": d, "cost_usd": round(c, 6)} for d, c in self.daily],
            "by_project_cost_usd": [{"project": p, "cost_usd": round(c, 6)}
                                    for p, c in projects],
            "active_sessions": dict(self.active),
            "plan_windows": [{"window": w.name, "used_ratio": w.used_ratio,
                              "resets_at": iso(w.resets_at, self.zone)} for w in self.plan],
        }
        if rest:
            page["by_project_other"] = caps.other_cost(rest, "projects")
        return {**caps.summary_json(self.summary), "prices": dict(self.prices), "page": page}


class LedgerSource:
    """Computes :class:`PageData` from a ledger's SQL figures for some transcript roots."""

    def __init__(self, ledger: Ledger, roots: Sequence[Path], prices: Prices, zone: Zone, *,
                 budgets: Mapping[str, float], project_label: str = "basename",
                 kv_bytes_per_token: Mapping[str, int] | None = None,
                 upload_bytes_per_token: float = 0.0,
                 clock: Callable[[], float] = time.time) -> None:
        """Remember what to read; the ledger's shape (slots, days, context) is checked once."""
        tables = {r[0] for r in ledger.read("SELECT name FROM sqlite_master", [])}
        columns = {r[1] for r in ledger.read("PRAGMA table_info(requests)", [])}
        self._ledger = ledger
        self._base = Selection(
            ledger.read, ledger.scope(list(roots)), Range(None, None, zone),
            slots="slots" in tables, days={"slot_days", "slot_day_peaks"} <= tables,
            slot_thresholds=slots.read_thresholds(ledger.read) if "slots" in tables
            else slots.DEFAULT_THRESHOLDS,
            slot_scope=ledger.scope_filter(list(roots)),
            context="context" if "context" in columns else CONTEXT_SQL)
        self._plan = "plan_windows" in tables
        self._prices = prices
        self._zone = zone
        self._budgets = dict(budgets)
        self._project_label = project_label
        self._kv = dict(kv_bytes_per_token or {})
        self._upload = upload_bytes_per_token
        self._clock = clock

    def __call__(self) -> PageData:
        """The figures now."""
        now = self._clock()
        zone = self._zone
        today = date_day(zone.local(now).date())
        # At least 30 days, and the whole month (31 days on the 31st).
        first = min(today - WINDOW_DAYS + 1, month_start(today))
        recent = self._select(zone.midnight(first))
        summary = figures.summary(
            recent, self._prices, kv_bytes_per_token=self._kv,
            upload_bytes_per_token=self._upload, lines=self._ledger.counters("lines"),
            rejected=self._ledger.counters("rejected"), session_rows=0)
        days, by_project = self._by_day(recent, zone.midnight(first), now)
        cost = {day: usage.cost_pico for day, usage in days.items()}

        def since(start: int) -> float:
            return usd(sum(c for d, c in cost.items() if d >= start))

        periods = {"today": since(today), "week": since(week_start(today)),
                   "month": since(month_start(today))}
        daily = tuple((day_date(n).isoformat(), usd(cost.get(n, 0)))
                      for n in range(first, today + 1))
        return PageData(
            summary=summary, now=now, zone=zone, periods=periods, budgets=self._budgets,
            daily=daily, by_project=by_project, active=self._active(now),
            plan=self._windows(now), prices=self._prices.pricing.describe())

    def _select(self, since: float) -> Selection:
        """The base selection from ``since`` on."""
        return dataclasses.replace(self._base, range=Range(since, None, self._zone))

    def _by_day(self, selection: Selection, lo: float, now: float,
                ) -> tuple[dict[int, Usage], tuple[tuple[str, float], ...]]:
        """Usage per local day, and cost per project label (most first), from one query.

        Days are grouped in SQL like the ``daily`` view does (slot sums where the
        zone's offsets keep slots whole); projects go through the scrape's
        ``project_label`` policy, so the page names them as /metrics does.
        """
        segments = transitions(self._zone, lo, max(now, lo) + DAY)
        aligned = all(o % slots.SLOT_SECONDS == 0 for _, o in segments) and all(
            t % slots.SLOT_SECONDS == 0 for t, _ in segments[1:])
        utc = len(segments) == 1 and segments[0][1] % DAY == 0

        def day(t: str) -> str:
            return f"CAST(({t} + {offset_sql(segments, t)}) / {DAY} AS INTEGER)"

        # Folded per price class and project in SQL: the sessions never reach Python.
        found = Facts(selection, self._prices, by_class=True, keep_project=True).collect(
            TimeKey(day, aligned, day_aligned=utc))
        days: dict[int, Usage] = {}
        # The label policy's privacy, not its metric cap: the page ranks by cost and caps itself.
        policy = LabelPolicy(self._project_label, max_projects=max(1, len(found)))
        projects: dict[str, int] = {}
        for f in found:
            days[int(f.key)] = days.get(int(f.key), ZERO) + f.usage
            label = policy.project(f.attrs.project) or "(all projects)"
            projects[label] = projects.get(label, 0) + f.usage.cost_pico
        ranked = sorted(((p, usd(c)) for p, c in projects.items()), key=lambda kv: (-kv[1], kv[0]))
        return days, tuple(ranked)

    def _active(self, now: float) -> dict[str, int]:
        """Sessions whose last request is younger than each cache TTL (an index range)."""
        out = {}
        for label, seconds in TTLS:
            rows = self._base.rows("count(DISTINCT session)", "ts >= ?", params=[now - seconds])
            out[label] = int(rows[0][0])
        return out

    def _windows(self, now: float) -> tuple[Window, ...]:
        """The plan-limit windows, where the status line has fed any."""
        if not self._plan:
            return ()
        from exporter.projections.plan.windows import plan_figures  # noqa: PLC0415 - only with plan tables

        conn = cast(sqlite3.Connection, _ReadConnection(self._ledger))
        found = plan_figures(conn, now).windows
        return tuple(Window(name, w.used_ratio, w.resets_at) for name, w in sorted(found.items()))


def source_of(options: MetricsOptions, ledger: Ledger, roots: Sequence[Path], pricing: Pricing,
              *, clock: Callable[[], float] = time.time,
              env: Mapping[str, str] = os.environ) -> LedgerSource:
    """The page's figures for a running ``serve``: its options, ledger, roots and prices."""
    return LedgerSource(ledger, roots, Prices.of(pricing), local_zone(env),
                        budgets=dict(options.budgets), project_label=options.project_label,
                        kv_bytes_per_token=dict(options.kv_bytes_per_token),
                        upload_bytes_per_token=options.upload_bytes_per_token, clock=clock)


class _Rows(list[tuple[Any, ...]]):
    """A query's rows with the two cursor methods the plan figures call."""

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self)

    def fetchone(self) -> tuple[Any, ...] | None:
        return self[0] if self else None


class _ReadConnection:
    """``execute`` over :meth:`Ledger.read` (its lock, read-only), for the plan figures."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def execute(self, sql: str, params: Sequence[object] = ()) -> _Rows:
        return _Rows(self._ledger.read(sql, params))


# ---- rendering ----------------------------------------------------------------------------
def money(x: float) -> str:
    """Dollars as the page prints them: cents, or four decimals below a dollar."""
    return f"${x:,.2f}" if abs(x) >= 1 or x == 0 else f"${x:.4f}"


def count(n: float) -> str:
    """A token count, short: 1.2k, 3.4M, 5.6B."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f}{suffix}"
    return f"{int(n)}"


_CSS: Final = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#222;
background:#f6f7f9}
header{background:#20324d;color:#fff;padding:12px 20px}header h1{font-size:18px;margin:0}
header p{margin:2px 0 0;font-size:12px;opacity:.8}header a{color:#cfe0ff}
main{display:grid;grid-template-columns:repeat(auto-fit,minmax(360px,1fr));gap:14px;
padding:14px 20px}
section{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:10px 14px;min-width:0}
section.wide{grid-column:1/-1}h2{font-size:14px;margin:0 0 8px;color:#20324d}
.kpis{display:grid;grid-template-columns:repeat(3,1fr);gap:8px}.kpi b{display:block;font-size:20px}
.kpi span{font-size:12px;color:#666}svg.chart{width:100%;height:auto;display:block}
table{border-collapse:collapse;width:100%;font-size:13px}td,th{padding:3px 6px;text-align:right}
td:first-child,th:first-child{text-align:left}tr+tr td{border-top:1px solid #eee}
p.note{font-size:12px;color:#666;margin:2px 0}
th{font-weight:600;color:#555;border-bottom:1px solid #ccc}
footer{padding:0 20px 16px;font-size:12px;color:#666}
"""


def _kpi(name: str, label: str, value: str, budget: float | None, spent: float) -> str:
    """One headline figure, with its budget meter when a budget is set."""
    extra = ""
    if budget:
        ratio = spent / budget
        extra = (svg.meter(f"budget-{name}", f"{label}: {ratio:.0%} of {money(budget)}", ratio)
                 + f"<span>{ratio:.0%} of {escape(money(budget))} budget</span>")
    return (f'<div class="kpi"><span>{escape(label)}</span>'
            f'<b data-figure="cost-{name}">{escape(value)}</b>{extra}</div>')


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], name: str) -> str:
    """A small table (cells already text)."""
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    cols = "".join(f"<th>{escape(h)}</th>" for h in head)
    return f'<table data-table="{name}"><tr>{cols}</tr>{body}</table>'


def _cumulative(daily: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Running sums of the daily costs."""
    out, run = [], 0.0
    for d, c in daily:
        run += c
        out.append((d, run))
    return out


def render(data: PageData, version: str) -> str:
    """The whole HTML page."""
    s = data.summary
    t = s.totals
    zone = data.zone
    kpis = "".join((
        _kpi("today", "Today", money(data.periods["today"]), data.budgets.get("day"),
             data.periods["today"]),
        _kpi("week", "This week", money(data.periods["week"]), None, data.periods["week"]),
        _kpi("month", "This month", money(data.periods["month"]), data.budgets.get("month"),
             data.periods["month"]),
    ))
    tokens = [("input", t.input), ("output", t.output), ("cache read", t.cache_read),
              ("cache write 5m", t.cache_write_5m), ("cache write 1h", t.cache_write_1h)]
    models = caps.chart_rows(sorted(((m, u.cost_usd) for m, u in s.by_model.items()),
                                    key=lambda kv: (-kv[1], kv[0])), TOP_ROWS)
    gaps = [(label, s.buckets.get(key, figures.GapBucket())) for key, label in (
        ("first", "first request"), ("lt_5m", "under 5 min"), ("5m_to_1h", "5 min to 1 h"),
        ("gt_1h", "over 1 h"))]
    short = [(day[5:], cost) for day, cost in data.daily]  # MM-DD under the bars
    sections = [
        _section("Cost (list prices)", f'<div class="kpis">{kpis}</div>', wide=True),
        _section(f"Cost per day, last {WINDOW_DAYS} days",
                 svg.bars("daily-cost", "Cost per day (USD)", short, fmt=money,
                          limit=data.budgets.get("day"), label_every=7)
                 + ('<p class="note">Dashed: the daily budget. Below: the running total.</p>'
                    if data.budgets.get("day") else '<p class="note">Below: the running total.</p>')
                 + svg.line("cumulative-cost", "Running total (USD)", _cumulative(short),
                            fmt=money)),
        _section("Tokens by type",
                 svg.stacked("tokens", "Tokens by type", tokens, fmt=count)
                 + _table(("type", "tokens (30 days)"), [(k, f"{v:,}") for k, v in tokens],
                          "tokens")
                 + f'<p>Cache-read share of the prompt: <b data-figure="cache-read-share">'
                   f'{s.cache_read_share:.1%}</b> · requests <b data-figure="requests">'
                   f'{t.requests:,}</b> · sessions <b data-figure="sessions">{s.sessions:,}</b>'
                   f' · cost <b data-figure="cost-30d">{money(t.cost_usd)}</b></p>'),
        _section("Cost by model", svg.hbars("by-model", "Cost by model (USD)", models, fmt=money)),
        _section("Cost by project",
                 svg.hbars("by-project", "Cost by project (USD)",
                           caps.chart_rows(data.by_project, TOP_ROWS), fmt=money)),
        _section("Prompt cache after an idle gap",
                 _table(("main requests after", "requests", "prompt rewritten to cache"),
                        [(label, f"{b.requests:,}", f"{b.write_share:.1%}") for label, b in gaps],
                        "cache-expiry")
                 + "<p>A gap longer than the cache's lifetime (5 min by default, 1 h when "
                   "written so) means the next request writes its prompt again.</p>"),
        _section("Context and output sizes (tokens per request)",
                 _table(("", "p50", "p90", "max"),
                        [(name, f"{sp.p50:,}", f"{sp.p90:,}", f"{sp.max:,}")
                         for name, sp in (("context", s.context), ("output", s.output))],
                        "sizes")
                 + f"<p>Gap between main requests: p50 {s.gap_p50:.1f} s, "
                   f"p90 {s.gap_p90:.1f} s.</p>"),
        _section("Active sessions",
                 _table(("last request within", "sessions"),
                        [(k, str(v)) for k, v in data.active.items()], "active")),
    ]
    if data.plan:
        sections.append(_section("Plan limits", "".join(
            f'<p>{escape(_WINDOW_NAMES.get(w.name, w.name))}: <b>{w.used_ratio:.0%}</b> used, '
            f'resets {escape(iso(w.resets_at, zone))}</p>'
            + svg.meter(f"plan-{w.name}", f"{w.name} window used", w.used_ratio)
            for w in data.plan)))
    covered = s.covered.to_json()
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>claude-code-exporter</title><style>{_CSS}</style></head><body>"
        f"<header><h1>Claude Code usage</h1><p>last {WINDOW_DAYS} days from "
        f"{escape(str(covered['since'])[:10])} · {escape(zone.name)} · as of "
        f"{escape(iso(data.now, zone))} · "
        '<a href="metrics">/metrics</a> · <a href="healthz">/healthz</a> · '
        '<a href="api/summary.json">/api/summary.json</a></p></header>'
        f"<main>{''.join(sections)}</main>"
        f"<footer>claude-code-exporter {escape(version)} · figures from the request ledger, "
        "as <code>report --json</code> computes them</footer></body></html>"
    )


_WINDOW_NAMES: Final = {"five_hour": "5-hour window", "seven_day": "Weekly window"}


def _section(title: str, body: str, *, wide: bool = False) -> str:
    """One card of the page."""
    cls = ' class="wide"' if wide else ""
    return f"<section{cls}><h2>{escape(title)}</h2>{body}</section>"


# ---- HTTP ---------------------------------------------------------------------------------
class _Cache:
    """The last page and JSON: fresh for ``ttl`` s, then rebuilt, in the background if recent.

    A copy younger than ``stale`` seconds is served while one rebuild (never two
    at once) runs via ``spawn``, so a reloading browser never waits for the SQL;
    an older one (the first request, a visit after a pause) is rebuilt before
    answering, so a page opened after a pause never shows figures that old.
    """

    def __init__(self, source: Callable[[], PageData], version: str, *, ttl: float,
                 stale: float, clock: Callable[[], float],
                 spawn: Callable[[Callable[[], None]], None]) -> None:
        self._source, self._version, self._clock, self._spawn = source, version, clock, spawn
        self._ttl, self._stale = ttl, stale
        self._lock = threading.Lock()  # guards the fields below
        self._build = threading.Lock()  # one rebuild at a time
        self._at = -math.inf
        self._bodies = (b"", b"")
        self._rebuilding = False

    def get(self) -> tuple[bytes, bytes]:
        """The HTML and JSON bodies."""
        with self._lock:
            age, bodies = self._clock() - self._at, self._bodies
            background = self._ttl <= age < self._stale and not self._rebuilding
            if background:
                self._rebuilding = True
        if age >= self._stale:
            return self._rebuild(self._stale)
        if background:
            self._spawn(self._background)
        return bodies

    def _background(self) -> None:
        """A rebuild off the request path; the stale page stays if it cannot finish."""
        try:
            self._rebuild(self._ttl)
        except sqlite3.ProgrammingError:
            pass  # the ledger closed under it: the daemon is stopping
        finally:
            with self._lock:
                self._rebuilding = False

    def _rebuild(self, older_than: float) -> tuple[bytes, bytes]:
        """Compute the figures and both bodies unless a rebuild just finished; keep them."""
        with self._build:
            with self._lock:
                if self._clock() - self._at < older_than:  # another thread just built them
                    return self._bodies
            data = self._source()
            bodies = (render(data, self._version).encode(),
                      (report.to_json(data.to_json()) + "\n").encode())
            with self._lock:
                self._bodies, self._at = bodies, self._clock()
            return bodies


def _thread(job: Callable[[], None]) -> None:
    """Run ``job`` on a daemon thread (it never blocks shutdown)."""
    threading.Thread(target=job, name="page-rebuild", daemon=True).start()


def routes(source: Callable[[], PageData], version: str, *, ttl: float = 2.0,
           stale: float = 10.0, clock: Callable[[], float] = time.monotonic,
           spawn: Callable[[Callable[[], None]], None] = _thread) -> dict[str, Wsgi]:
    """WSGI handlers for ``/``, ``/index.html`` and ``/api/summary.json``.

    The HTTP app puts them behind its basic auth (and TLS) like every route.
    """
    cache = _Cache(source, version, ttl=ttl, stale=stale, clock=clock, spawn=spawn)

    def page(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        body = cache.get()[0]
        start("200 OK", [("Content-Type", "text/html; charset=utf-8"),
                         ("Content-Length", str(len(body))), ("Cache-Control", "no-store"),
                         ("Content-Security-Policy",
                          "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'")])
        return [body]

    def summary_json(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        body = cache.get()[1]
        start("200 OK", [("Content-Type", "application/json"),
                         ("Content-Length", str(len(body))), ("Cache-Control", "no-store")])
        return [body]

    return {"/": page, "/index.html": page, "/api/summary.json": summary_json}

