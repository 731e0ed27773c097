"""The page's range bar, its notes, and times as a person reads them.

The range choices are links carrying ``since``/``until``/``tz``
(:mod:`exporter.serve.page_range`); a from–to form sends the same parameters.
When a range holds no request but the roots do, a note offers the range that
has them; when the roots hold none at all, a note says where ``serve`` looked.
Every value that came in a query string is escaped where it is written.
"""

from __future__ import annotations

from html import escape
from typing import Final

from exporter.projections.agents import name as agent_name
from exporter.projections.periods import Zone, date_day
from exporter.serve.page_figures import WINDOW_DAYS, PageData
from exporter.serve.page_range import PageQuery
from exporter.shown import visible

_AGES: Final = (("90 days", "90d"), ("a year", "365d"))
_ISO_DATE: Final = 10  # characters of YYYY-MM-DD


def choices(data: PageData) -> list[tuple[str, PageQuery]]:
    """The ranges a person expects, in order, each as the query that asks for it."""
    q, zone = data.query, data.zone
    today = zone.local(data.now).date()
    month = today.replace(day=1)

    def since(text: str | None) -> PageQuery:
        return PageQuery(text, None, q.tz, ranged=True, agent=q.agent)

    return [("Today", since(today.isoformat())), ("7 days", since("7d")),
            ("30 days", PageQuery(tz=q.tz, agent=q.agent)),
            ("This month", since(month.isoformat())),
            *((label, since(age)) for label, age in _AGES), ("All", since(None))]


def range_bar(data: PageData) -> str:
    """The range links (the current one marked) and the from–to form."""
    links = []
    for label, query in choices(data):
        current = query.key() == data.query.key()
        mark = ' aria-current="page" class="on"' if current else ""
        links.append(f'<a data-range="{escape(label)}" href="{escape(query.query())}"'
                     f"{mark}>{escape(label)}</a>")
    q = data.query
    dates = {k: v if v and len(v) == _ISO_DATE else "" for k, v in
             (("since", q.since), ("until", q.until))}
    tz = "".join(f'<input type="hidden" name="{name}" value="{escape(visible(value))}">'
                 for name, value in (("tz", q.tz), ("agent", q.agent)) if value)
    fields = " ".join(f'<label>{word} <input type="date" name="{name}" '
                      f'value="{escape(dates[name])}"></label>'
                      for word, name in (("from", "since"), ("to", "until")))
    form = (f'<form method="get" action="./" data-form="range">{fields}{tz} '
            '<button type="submit">Show</button></form>')
    return f'<nav class="ranges">{" ".join(links)}{form}</nav>'


def range_text(data: PageData) -> str:
    """The range shown, in words: ``2026-02-01 to 2026-02-28`` and what it is."""
    covered = data.summary.covered.range
    if not data.query.ranged:
        since = data.zone.local(covered.since).date().isoformat() if covered.since else ""
        return f"last {WINDOW_DAYS} days and this month, from {since}"
    lo = "the first request" if covered.since is None else _moment(covered.since, data.zone)
    hi = "now" if covered.until is None else _moment(covered.until, data.zone)
    return f"from {lo} to {hi}"


def _moment(ts: float, zone: Zone) -> str:
    """A range end: the date at midnight, else the date and minute."""
    local = zone.local(ts)
    if (local.hour, local.minute, local.second) == (0, 0, 0):
        return local.date().isoformat()
    return local.strftime("%Y-%m-%d %H:%M")


def notes(data: PageData) -> str:
    """Why the page is empty, when it is: no transcripts at all, or none in this range."""
    if data.span is None:
        where = visible(", ".join(data.roots) or "no directory")
        whose = "Claude Code transcripts" if data.query.agent is None else (
            f"{agent_name(data.query.agent)} logs")
        return ('<p class="hint" data-note="no-transcripts">'
                f"No {escape(whose)} found "
                f"in {escape(where)}. Use Claude Code first, start <code>serve</code> with "
                "<code>--data-dir</code> pointing at a directory of transcripts, or try "
                "<code>serve --demo</code>.</p>")
    if data.summary.totals.requests:
        return ""
    zone = data.zone
    first, last = (zone.local(t).date().isoformat() for t in data.span)
    offer = PageQuery(first, last, data.query.tz, ranged=True, agent=data.query.agent)
    return ('<p class="hint" data-note="empty-range">No requests in this range. The ledger '
            f"holds requests from {escape(first)} to {escape(last)}: "
            f'<a data-offer="range" href="{escape(offer.query())}">show them</a>.</p>')


def when(ts: float, now: float, zone: Zone) -> str:
    """A moment as a person reads it: ``today 14:30``, ``tomorrow 09:00``, ``Mon 8 Dec 14:30``."""
    local = zone.local(ts)
    days = date_day(local.date()) - date_day(zone.local(now).date())
    day = {0: "today", 1: "tomorrow", -1: "yesterday"}.get(days, local.strftime("%a %-d %b"))
    return f"{day} {local.strftime('%H:%M')}"


def relative(ts: float, now: float) -> str:
    """How far ``ts`` is from ``now``: ``in 2 h 10 min``, ``in 3 d 4 h``, ``5 min ago``."""
    seconds = abs(ts - now)
    minutes = int(seconds // 60)
    if minutes < 1:
        span = "under a minute"
    elif minutes < 60:
        span = f"{minutes} min"
    elif minutes < 24 * 60:
        span = f"{minutes // 60} h {minutes % 60} min" if minutes % 60 else f"{minutes // 60} h"
    else:
        hours = minutes // 60
        span = f"{hours // 24} d {hours % 24} h" if hours % 24 else f"{hours // 24} d"
    return f"in {span}" if ts >= now else f"{span} ago"


def monthly(daily: tuple[tuple[str, float], ...]) -> list[tuple[str, float]]:
    """Daily costs summed per month (``YYYY-MM``), for a range too long for a bar a day."""
    out: dict[str, float] = {}
    for day, cost in daily:
        out[day[:7]] = out.get(day[:7], 0.0) + cost
    return list(out.items())

