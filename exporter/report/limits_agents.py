"""`report limits`: the plan windows other agents write into their own logs (Codex's).

Shown beside the status line's windows, in a section of their own per agent,
only when that agent recorded a reading (or refused one): a Claude-only
ledger's `report limits` is unchanged. Their figures are those of the status
line's windows: each window now (used, reset, instances that reached 100 %,
dollars per 1 % and pace) and every window instance in the range (start,
reset, peak, cost, dollars per 1 %), the dollars from the agent's own
requests alone (docs/plan-limits.md, "Codex"). Also the words and JSON fields
the status line's section shares (the pace, an estimate, an instance).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from exporter.projections.agents import name as agent_name
from exporter.projections.periods import Zone, iso
from exporter.projections.plan.estimate import Estimate
from exporter.projections.plan.pace import LIMIT_AHEAD, LIMIT_REACHED, NOT_ENOUGH, Pace
from exporter.projections.plan.windows import Instance, PlanFigures, WindowFigures, limits_rows
from exporter.report.summary import duration, say, usd, when
from exporter.shown import text


def agents_json(figures: PlanFigures, found: Mapping[str, Sequence[Instance]], now: float,
                zone: Zone) -> dict[str, Any]:
    """Per other agent: samples, windows now (as the status line's rows), instances, rejections."""
    out: dict[str, Any] = {}
    for agent, own in figures.agents.items():
        out[agent] = {"name": agent_name(agent), "samples": own.samples,
                      "sample_age_seconds": own.sample_age_seconds,
                      "windows": windows_json(own, now, zone),
                      "instances": [instance_json(i, now, zone) for i in found.get(agent, ())],
                      "rejected": dict(own.rejected)}
    return out


def windows_json(figures: PlanFigures, now: float, zone: Zone) -> list[dict[str, Any]]:
    """Each window now as JSON: figure, reset, the look-back estimate and the pace."""
    windows = []
    for row in limits_rows(figures, now):
        win = figures.windows[str(row["window"])]
        per = None if win.estimate is None else win.estimate.usd_per_percent
        windows.append({**row, "resets_at": iso(win.resets_at, zone),
                        "usd_per_percent": None if per is None else round(per, 6),
                        "window_usd": None if per is None else round(100 * per, 4),
                        **pace_json(win.pace, now, zone)})
    return windows


def instance_json(inst: Instance, now: float, zone: Zone) -> dict[str, Any]:
    """One window instance as JSON (and a CSV line)."""
    est = inst.estimate
    per = None if est.usd_per_percent is None else round(est.usd_per_percent, 6)
    return {
        "window": inst.window, "start": iso(inst.start, zone),
        "resets_at": iso(inst.resets_at, zone),
        "first_sample": iso(inst.first_seen, zone), "last_sample": iso(inst.last_seen, zone),
        "peak_percent": inst.peak_percent, "limit_reached": inst.exhausted,
        "open": inst.open(now), "cost_usd": round(inst.cost_usd, 6),
        "usd_per_percent": per, "pairs": est.pairs,
    }


def worth_line(est: Estimate | None, idle_says: str) -> str:
    """A window's look-back estimate in words (``idle_says``: why none when nothing cost)."""
    value = None if est is None else est.usd_per_percent
    idle = est is not None and est.windows > 0 and est.usd <= 0
    if value is None and idle:
        return f"no estimate: {idle_says}"
    if value is None or est is None:
        return "no estimate yet"
    return (f"1 % ≈ {usd(value)}, the window ≈ {usd(100 * value)} at list price "
            f"({est.pairs:,} sample pairs, {est.windows} "
            f"window{'' if est.windows == 1 else 's'})")


def pace_line(pace: Pace | None, now: float, zone: Zone) -> str:
    """A window's pace in words: projected at reset, and when it runs out at this pace."""
    if pace is None or pace.state == NOT_ENOUGH or pace.projected_percent is None:
        return "pace: not enough data yet"
    rate = f"pace {pace.percent_per_hour or 0:.1f} % an hour"
    if pace.state == LIMIT_REACHED and pace.limit_at is not None:
        return f"{rate}; limit reached {when(pace.limit_at, zone)}"
    projected = f"projected at reset: {pace.projected_percent:.0f} %"
    if pace.state == LIMIT_AHEAD and pace.limit_at is not None:
        return (f"{rate}, {projected}; runs out in {duration(pace.limit_at - now)} "
                f"({when(pace.limit_at, zone)})")
    return f"{rate}, {projected}: on track"


def pace_json(pace: Pace | None, now: float, zone: Zone) -> dict[str, Any]:
    """A window's pace as JSON fields (None where there is no figure)."""
    if pace is None:
        return {"pace": NOT_ENOUGH, "pace_percent_per_hour": None, "projected_percent": None,
                "limit_at": None, "limit_in_seconds": None}
    at = pace.limit_at
    return {
        "pace": pace.state,
        "pace_percent_per_hour": None if pace.percent_per_hour is None
        else round(pace.percent_per_hour, 3),
        "projected_percent": None if pace.projected_percent is None
        else round(pace.projected_percent, 1),
        "limit_at": None if at is None else iso(at, zone),
        "limit_in_seconds": None if at is None else max(0.0, at - now),
    }


def render_agents(figures: PlanFigures, found: Mapping[str, Sequence[Instance]], now: float,
                  zone: Zone, console: Console, *,
                  table: Callable[[Sequence[Instance]], Table]) -> None:
    """A section per other agent: each window now, its instances, its refused readings.

    ``table``: the instances as the status line's instance table draws them.
    """
    for agent, own in figures.agents.items():
        name = agent_name(agent)
        say(console, text(f"{name} plan limits (from its logs, {own.samples:,} readings)"))
        if not own.windows:
            say(console, text(f"  No {name} window recorded yet."))
        for window, win in own.windows.items():
            _window_lines(console, (window, win), now, zone, name)
        if found.get(agent):
            say(console, table(found[agent]))
            say(console, text(f"Cost: {name}'s turns at list price (docs/plan-limits.md)."))
        refused = {r: n for r, n in own.rejected.items() if n}
        if refused:
            say(console, text("  readings refused: " + ", ".join(
                f"{n:,} {r.replace('_', ' ')}" for r, n in refused.items())))


def _window_lines(console: Console, window: tuple[str, WindowFigures], now: float, zone: Zone,
                  name: str) -> None:
    """One (name, figures) window of another agent: figure and reset, estimate, pace."""
    window_name, win = window
    left = win.resets_at - now
    resets = (f"resets in {duration(left)} ({when(win.resets_at, zone)})" if left > 0
              else f"reset at {when(win.resets_at, zone)}")
    say(console, text(f"  {window_name}: {100 * win.used_ratio:.0f} % used, {resets}, "
                      f"{win.exhausted:,} reached 100 %"))
    say(console, text("    " + worth_line(
        win.estimate, f"no {name} turn here while the figure moved")))
    say(console, text(f"    {pace_line(win.pace, now, zone)}"))
