"""The page's HTML: cards of figures with inline SVG charts (:mod:`exporter.serve.svg`).

No script, no external asset, nothing fetched at run time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Final

from exporter.projections import caps, figures
from exporter.projections.budget_pace import Pace
from exporter.projections.model_names import short_model
from exporter.projections.periods import iso
from exporter.serve import page_agents, page_nav, page_plan, svg
from exporter.serve.page_figures import MAX_BARS, PageData
from exporter.serve.page_plan import WINDOW_NAMES, pace_text
from exporter.shown import visible

TOP_ROWS: Final = 8  # projects and models shown; the rest add up to "other"


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
.kpi span{font-size:12px;color:#666}.kpi .pace{display:block}
.kpi .pace b{display:inline;font-size:inherit}
.kpi .pace.over{color:#b00020}
svg.chart{width:100%;height:auto;display:block}
table{border-collapse:collapse;width:100%;font-size:13px}td,th{padding:3px 6px;text-align:right}
td:first-child,th:first-child{text-align:left}tr+tr td{border-top:1px solid #eee}
p.note{font-size:12px;color:#666;margin:2px 0}
th{font-weight:600;color:#555;border-bottom:1px solid #ccc}
footer{padding:0 20px 16px;font-size:12px;color:#666}
nav.ranges{padding:8px 20px 0;display:flex;flex-wrap:wrap;gap:6px 10px;align-items:center}
nav.ranges a{color:#20324d}nav.ranges a.on{font-weight:700;text-decoration:none}
nav.ranges form{margin-left:auto;font-size:12px}
p.hint{margin:10px 20px 0;padding:8px 12px;background:#fff6dd;border:1px solid #e8d49a;
border-radius:6px}
"""


def _kpi(name: str, label: str, value: str, budget: float | None, spent: float, *,
         pace: str = "") -> str:
    """One headline figure, with its budget meter when a budget is set, and its pace line."""
    extra = ""
    if budget:
        ratio = spent / budget
        extra = (svg.meter(f"budget-{name}", f"{label}: {ratio:.0%} of {money(budget)}", ratio)
                 + f"<span>{ratio:.0%} of {escape(money(budget))} budget</span>")
    return (f'<div class="kpi"><span>{escape(label)}</span>'
            f'<b data-figure="cost-{name}">{escape(value)}</b>{extra}{pace}</div>')


def _pace(pace: Pace | None) -> str:
    """The month's end at the current pace (docs/budget-pace.md), against its budget if set."""
    if pace is None:
        return ""
    if pace.projected_usd is None:
        return '<span class="pace">At this pace: not enough data yet</span>'
    share = (f" ({pace.projected_usd / pace.budget_usd:.0%} of the budget)"
             if pace.budget_usd else "")
    css = "pace over" if pace.over else "pace"
    return (f'<span class="{css}">At this pace: <b data-figure="projected-{pace.period}">'
            f'{escape(money(pace.projected_usd))}</b> by month end{escape(share)}</span>')


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
    zone = data.zone
    sections = [*_cost_sections(data), *_shape_sections(data)]
    if data.agents:  # the roots hold another agent's logs: each side by side, and a filter
        sections.insert(1, page_agents.panel(data, money))
    if data.plan or data.agent_plan:  # other agents' windows below (none: as it was)
        sections.append(_section("Plan limits", "".join(
            f'<p>{escape(WINDOW_NAMES.get(w.name, w.name))}: <b>{w.used_ratio:.0%}</b> used, '
            f'resets <span data-figure="resets-{escape(w.name)}">'
            f'{escape(page_nav.when(w.resets_at, data.now, zone))}'
            f' ({escape(page_nav.relative(w.resets_at, data.now))})</span></p>'
            f'<p><span data-figure="pace-{escape(w.name)}">{pace_text(w, data.now, zone)}'
            "</span></p>"
            + svg.meter(f"plan-{w.name}", f"{w.name} window used", w.used_ratio)
            for w in data.plan) + page_plan.agents(data, money), name="plan"))
    return (
        _HEAD + f"<header><h1>{escape(page_agents.title(data))}</h1><p>"
        f'<span data-figure="range"{_range_marks(data)}>'
        f"{escape(page_nav.range_text(data))}</span> · "
        f"{escape(zone.name)} · as of {escape(page_nav.when(data.now, data.now, zone))} · "
        '<a href="metrics">/metrics</a> · <a href="healthz">/healthz</a> · '
        f'<a href="api/summary.json{escape(_json_query(data))}">/api/summary.json</a></p>'
        f"</header>{page_nav.range_bar(data)}{page_nav.notes(data)}"
        f"<main>{''.join(sections)}</main>"
        f"<footer>claude-code-exporter {escape(version)} · figures from the request ledger, "
        "as <code>report --json</code> computes them</footer></body></html>"
    )


_HEAD: Final = ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
                '<meta name="viewport" content="width=device-width,initial-scale=1">'
                f"<title>claude-code-exporter</title><style>{_CSS}</style></head><body>")


def _range_marks(data: PageData) -> str:
    """The range's exact ends as attributes (ISO 8601), for programs reading the page."""
    covered = data.summary.covered.range
    return "".join(f' data-{name}="{escape(iso(at, data.zone))}"' for name, at in
                   (("since", covered.since), ("until", covered.until)) if at is not None)


def _json_query(data: PageData) -> str:
    """The page's query string for the JSON link (empty for the default range)."""
    query = data.query.query()
    return "" if query == "./" else query


def render_refusal(message: str, version: str) -> str:
    """The page for a range it cannot take: ``report``'s message and the way back."""
    return (_HEAD + "<header><h1>Claude Code usage</h1></header>"
            f'<p class="hint" data-note="bad-range">{escape(visible(message))}</p>'
            '<p class="hint">The page takes <code>since</code>, <code>until</code> and '
            "<code>tz</code> as <code>report --since</code>, <code>--until</code> and "
            '<code>--timezone</code> take them. <a href="./">The last 30 days</a>.</p>'
            f"<footer>claude-code-exporter {escape(version)}</footer></body></html>")


def _models(s: figures.Summary) -> list[tuple[str, float]]:
    """Cost by model under the short names the report uses, most first, the tail as other."""
    costs: dict[str, float] = {}
    for model, usage in s.by_model.items():
        costs[short_model(model)] = costs.get(short_model(model), 0.0) + usage.cost_usd
    return caps.chart_rows(sorted(costs.items(), key=lambda kv: (-kv[1], kv[0])), TOP_ROWS)


def _daily_chart(data: PageData) -> tuple[str, str]:
    """The cost chart's title and bars: a bar a day, or a month when the range is long."""
    if len(data.daily) > MAX_BARS:
        months = page_nav.monthly(data.daily)
        return "Cost per month", svg.bars("daily-cost", "Cost per month (USD)", months,
                                          fmt=money, label_every=max(1, len(months) // 6))
    short = [(day[5:], cost) for day, cost in data.daily]  # MM-DD under the bars
    return "Cost per day", svg.bars("daily-cost", "Cost per day (USD)", short, fmt=money,
                                    limit=data.budgets.get("day"),
                                    label_every=max(7, len(short) // 6))


def _cost_sections(data: PageData) -> list[str]:
    """The cards on cost: against the budgets, per day, by token type, by model and project."""
    s = data.summary
    t = s.totals
    kpis = "".join((
        _kpi("today", "Today", money(data.periods["today"]), data.budgets.get("day"),
             data.periods["today"]),
        _kpi("week", "This week", money(data.periods["week"]), None, data.periods["week"]),
        _kpi("month", "This month", money(data.periods["month"]), data.budgets.get("month"),
             data.periods["month"], pace=_pace(data.pace.get("month"))),
    ))
    tokens = [("input", t.input), ("output", t.output), ("cache read", t.cache_read),
              *((("cache write 5m", t.cache_write_5m), ("cache write 1h", t.cache_write_1h))
                if s.cache_writes_measured else ())]  # Codex alone: none logged (said below)
    title, bars = _daily_chart(data)
    short = [(day[5:], cost) for day, cost in data.daily]
    budget_line = data.budgets.get("day") and len(data.daily) <= MAX_BARS
    return [
        _section("Cost (list prices)", f'<div class="kpis">{kpis}</div>', wide=True),
        _section(title, bars
                 + ('<p class="note">Dashed: the daily budget. Below: the running total.</p>'
                    if budget_line else '<p class="note">Below: the running total.</p>')
                 + svg.line("cumulative-cost", "Running total (USD)", _cumulative(short),
                            fmt=money)),
        _section("Tokens by type",
                 svg.stacked("tokens", "Tokens by type", tokens, fmt=count)
                 + _table(("type", "tokens"), [(k, f"{v:,}") for k, v in tokens]
                          + ([] if s.cache_writes_measured else [("cache write", "not measured")]),
                          "tokens")
                 + f'<p>Cache-read share of the prompt: <b data-figure="cache-read-share">'
                   f'{s.cache_read_share:.1%}</b> · requests <b data-figure="requests">'
                   f'{t.requests:,}</b> · sessions <b data-figure="sessions">{s.sessions:,}</b>'
                   f' · cost <b data-figure="cost-range">{money(t.cost_usd)}</b></p>'),
        _section("Cost by model",
                 svg.hbars("by-model", "Cost by model (USD)", _models(s), fmt=money)),
        _section("Cost by project",
                 svg.hbars("by-project", "Cost by project (USD)",
                           caps.chart_rows(data.by_project, TOP_ROWS), fmt=money)),
    ]


def _shape_sections(data: PageData) -> list[str]:
    """The cards on the requests' shape: the cache after a gap, sizes, active sessions."""
    s = data.summary
    gaps = [(label, s.buckets.get(key, figures.GapBucket())) for key, label in (
        ("first", "first request"), ("lt_5m", "under 5 min"), ("5m_to_1h", "5 min to 1 h"),
        ("gt_1h", "over 1 h"))]
    return [
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


def _section(title: str, body: str, *, wide: bool = False, name: str = "") -> str:
    """One card of the page (``name``: its ``data-section``, for the tests)."""
    cls = ' class="wide"' if wide else ""
    mark = f' data-section="{escape(name)}"' if name else ""
    return f"<section{cls}{mark}><h2>{escape(title)}</h2>{body}</section>"
