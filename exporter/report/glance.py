"""The default `report`: what a person asks first, on one screen.

Today's, this week's and this month's cost, the cost by model, the prompt
cache's share and saving, and the open 5-hour block with its burn rate. The
whole analysis (request shape, cache expiry, sessions, serving-side estimates)
is `report --full` (exporter.report.summary); `--json` always has every figure.
Periods are those of the report's time zone, inside its range and filters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from exporter.projections import budget_pace, caps, views
from exporter.projections.budget_pace import Pace
from exporter.projections.class_prices import ClassPrices
from exporter.projections.figures import Summary
from exporter.projections.model_names import short_model
from exporter.projections.periods import (
    Range,
    Zone,
    date_day,
    month_start,
    next_month,
    week_start,
)
from exporter.projections.selection import Selection
from exporter.projections.usage import ZERO, Usage
from exporter.projections.views import ActiveBlock
from exporter.report.summary import (
    NEGATIVE_SAVING,
    NOT_MEASURED,
    agents_table,
    cost_cell,
    duration,
    header,
    new_table,
    pct,
    say,
    tokens,
    usd,
    when,
)
from exporter.report.tables import pico_usd
from exporter.shown import text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

MODEL_ROWS: Final = 5  # models named in the default report; the rest summed in one row
MORE: Final = ("more: report --full (request shape, cache expiry, sessions, estimates)",
               "  or a table: report daily|weekly|monthly|blocks|project|session")


@dataclass(frozen=True, slots=True)
class Glance:
    """The periods' usage (label, first day, usage) and the 5-hour block open now."""

    periods: tuple[tuple[str, float, Usage], ...]
    block: ActiveBlock | None
    last_block_end: float | None  # when the newest block that has ended ended; None: none
    month_pace: Pace | None = None  # the month's end at this pace (None: no request at all)


def glance(sel: Selection, prices: ClassPrices, now: float,
           budgets: Mapping[str, float] | None = None) -> Glance:
    """Today, this week (Monday first) and this month at ``now``, the open block, the pace.

    ``budgets``: the settings' ``budget_<period>_usd`` that are set (the month's
    projection is shown against its budget).
    """
    zone = sel.range.zone
    today = date_day(zone.local(now).date())
    month = month_start(today)
    days = {"today": (today, today + 1), "this week": (week_start(today), week_start(today) + 7),
            "this month": (month, next_month(month))}
    spans = {k: (zone.midnight(a), zone.midnight(b)) for k, (a, b) in days.items()}
    rows = views.build("daily", _within(sel, min(s for s, _ in spans.values())), prices,
                       views.Options(now=now)).rows
    periods = tuple(
        (label, start, sum((r.usage for r in rows if start <= r.start < end), ZERO))
        for label, (start, end) in spans.items() if _overlaps(sel.range, start, end))
    starts = [s for s in views.block_starts(sel) if s <= now]  # not those dated ahead
    ended = [s + views.BLOCK_SECONDS for s in starts if s + views.BLOCK_SECONDS <= now]
    block = None
    if starts and now < starts[-1] + views.BLOCK_SECONDS:  # the block holding now
        block = views.build("blocks", _within(sel, starts[-1]), prices,
                            views.Options(now=now)).active
    pace = budget_pace.of_selection(sel, prices, now, budgets).get("month")
    return Glance(periods, block, ended[-1] if ended else None, pace)


def _within(sel: Selection, since: float) -> Selection:
    """The selection from ``since`` on (or from its own start, if later)."""
    rng = sel.range
    lo = since if rng.since is None else max(since, rng.since)
    return dataclasses.replace(sel, range=Range(lo, rng.until, rng.zone))


def _overlaps(rng: Range, start: float, end: float) -> bool:
    """Whether the period [start, end) meets the report's range."""
    return (rng.since is None or rng.since < end) and (rng.until is None or rng.until > start)


def render(figures: Summary, seen: Glance, console: Console) -> None:
    """Print the default report: periods, models, tokens and cache, the open block."""
    say(console, header("Summary", figures.covered))
    if figures.covered.first is None:
        say(console, "No requests in this range.")
        return
    say(console, _periods(figures, seen))
    if seen.month_pace is not None:
        say(console, pace_line(seen.month_pace, figures.covered.range.zone))
    say(console, _models(figures))
    if figures.by_agent:  # only where the roots hold two agents' logs
        say(console, agents_table(figures.by_agent))
    t = figures.totals
    written = tokens(t.cache_write) if figures.cache_writes_measured else NOT_MEASURED
    say(console, f"tokens: input {tokens(t.input)} · output {tokens(t.output)} · cache write "
                 f"{written} · cache read {tokens(t.cache_read)}")
    saved = (f"{usd(t.saved_usd)} ({NEGATIVE_SAVING})" if t.saved_pico < 0
             else f"saving {usd(t.saved_usd)}")
    say(console, f"prompt cache: {pct(figures.cache_read_share)} of prompt tokens read "
                 f"from it, {saved}")
    for line in block_lines(seen, figures):
        say(console, line)
    for line in MORE:
        say(console, line)


def pace_line(month: Pace, zone: Zone) -> str:
    """The month's end at this pace, against its budget when one is set, in one line."""
    if month.projected_usd is None:
        return "this month at this pace: not enough data yet"
    last_day = when(month.end - 1, zone)[:10]
    line = f"this month at this pace: {usd(month.projected_usd)} by {last_day}"
    if month.budget_usd:
        share = month.projected_usd / month.budget_usd
        over = ", over" if share > 1 else ""
        line += f" ({share:.0%} of the {usd(month.budget_usd)} budget{over})"
    return line


def _periods(figures: Summary, seen: Glance) -> Table:
    """Today, this week, this month, and the whole range."""
    zone = figures.covered.range.zone
    table = new_table("", "period", "from", "requests", "tokens", "cost")
    first = figures.covered.first
    rows = [*seen.periods, ("total", first if first is not None else 0.0, figures.totals)]
    for label, start, usage in rows:
        table.add_row(label, when(start, zone)[:10], f"{usage.requests:,}",
                      tokens(usage.tokens), cost_cell(usage))
    return table


def _models(figures: Summary) -> Table:
    """Cost by model, costliest first, with its share of the cost."""
    table = new_table("", "model", "requests", "tokens", "cost", "share")
    capped = caps.costliest(figures.by_model, MODEL_ROWS)
    ranked = sorted(capped.shown, key=lambda mu: (-mu[1].cost_pico, -mu[1].unpriced, mu[0]))
    rest = ((caps.other_label(capped.more), capped.rest),) if capped.more else ()
    whole = figures.totals.cost_pico
    for label, usage in (*((short_model(m), u) for m, u in ranked), *rest):
        share = pct(usage.cost_pico / whole) if whole and usage.cost_pico else "—"
        table.add_row(text(label), f"{usage.requests:,}", tokens(usage.tokens),
                      cost_cell(usage), share)
    return table


def block_lines(seen: Glance, figures: Summary) -> list[str]:
    """The open 5-hour block in two lines, or when the last one ended; nothing without any."""
    zone = figures.covered.range.zone
    a = seen.block
    if a is None:
        if seen.last_block_end is None:
            return []
        return [f"5-hour block: none open (the last ended {when(seen.last_block_end, zone)})"]
    return [f"open 5-hour block: {duration(a.elapsed)} in, {duration(a.remaining)} left, "
            f"{usd(a.usage.cost_usd)} so far",
            f"  burn rate {usd(pico_usd(a.cost_pico_per_hour))}/h · projected "
            f"{usd(pico_usd(a.projected_cost_pico))} at its end ({when(a.end, zone)[11:]})"]
