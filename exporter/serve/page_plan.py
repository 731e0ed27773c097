"""The page's plan panel: the status line's windows and other agents' (Codex's), as HTML.

Other agents' windows come from their own logs (Codex's rate limits) and are
shown under the agent's name below the status line's, only where that agent
logged one: a Claude-only page is as it was. Window names come from those logs
and are escaped and made visible (:mod:`exporter.shown`) like any logged text.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Final

from exporter.projections.agents import name as agent_name
from exporter.projections.periods import Zone
from exporter.projections.plan import pace
from exporter.serve import page_nav, svg
from exporter.serve.page_figures import PageData, Window
from exporter.shown import visible

WINDOW_NAMES: Final = {"five_hour": "5-hour window", "seven_day": "Weekly window"}


def pace_text(w: Window, now: float, zone: Zone) -> str:
    """A window's pace as HTML: projected at reset, and when it runs out (or on track)."""
    p = w.pace
    if p is None or p.state == pace.NOT_ENOUGH or p.projected_percent is None:
        return "Pace: not enough data yet (the window's first 5 %)"
    if p.state == pace.LIMIT_REACHED and p.limit_at is not None:
        return (f"Limit reached {escape(page_nav.when(p.limit_at, now, zone))}"
                f" ({escape(page_nav.relative(p.limit_at, now))})")
    projected = f"Projected at reset: {p.projected_percent / 100:.0%}"
    if p.limit_at is None:
        return f"{projected}, on track"
    return (f"{projected}, runs out {escape(page_nav.when(p.limit_at, now, zone))}"
            f" ({escape(page_nav.relative(p.limit_at, now))}) at this pace")


def agents(data: PageData, money: Callable[[float], str]) -> str:
    """Each other agent's windows under its name (empty when none logged any)."""
    return "".join(
        f'<div data-agent-plan="{escape(agent)}"><p><b>'
        f"{escape(agent_name(agent))}</b> (from its logs)</p>"
        + "".join(_window(agent, w, data, money) for w in windows) + "</div>"
        for agent, windows in data.agent_plan.items())


def _window(agent: str, w: Window, data: PageData, money: Callable[[float], str]) -> str:
    """One window of another agent: used, reset, instances at 100 %, $ per 1 %, pace."""
    name = escape(visible(w.name))
    mark = f"{escape(agent)}-{name}"
    title = escape(visible(WINDOW_NAMES.get(w.name, w.name)))
    worth = ("no estimate yet" if w.usd_per_percent is None else
             f"1 % ≈ {escape(money(w.usd_per_percent))}, the window ≈ "
             f"{escape(money(100 * w.usd_per_percent))} at list price")
    return (f'<p>{title}: <b data-figure="used-{mark}">{w.used_ratio:.0%}</b> used, '
            f'resets <span data-figure="resets-{mark}">'
            f"{escape(page_nav.when(w.resets_at, data.now, data.zone))}"
            f" ({escape(page_nav.relative(w.resets_at, data.now))})</span> · "
            f'<span data-figure="exhausted-{mark}">{w.exhausted:,}</span> reached 100 %</p>'
            f'<p><span data-figure="usd-per-percent-{mark}">{worth}</span></p>'
            f'<p><span data-figure="pace-{mark}">{pace_text(w, data.now, data.zone)}</span></p>'
            + svg.meter(f"plan-{agent}-{visible(w.name)}",
                        f"{visible(agent)} {visible(w.name)} window used", w.used_ratio))
