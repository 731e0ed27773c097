"""`report limits`: the plan windows other agents write into their own logs (Codex's).

Shown beside the status line's windows, in a section of their own per agent,
only when that agent recorded a reading (or refused one): a Claude-only
ledger's `report limits` is unchanged. Their figures are the windows now
(used, reset, instances that reached 100 %); no dollars per 1 % and no pace:
those need the agent's own cost (docs/plan-limits.md, "Codex").
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from exporter.ingest.formats import AGENT_NAMES
from exporter.projections.periods import Zone, iso
from exporter.projections.plan.windows import PlanFigures, limits_rows
from exporter.report.summary import duration, say, when
from exporter.shown import text


def agents_json(figures: PlanFigures, now: float, zone: Zone) -> dict[str, Any]:
    """Per other agent: its samples, its windows now (as the status line's rows) and rejections."""
    out: dict[str, Any] = {}
    for agent, own in figures.agents.items():
        windows = [{**row, "resets_at": iso(own.windows[str(row["window"])].resets_at, zone)}
                   for row in limits_rows(own, now)]
        out[agent] = {"name": AGENT_NAMES.get(agent, agent), "samples": own.samples,
                      "sample_age_seconds": own.sample_age_seconds, "windows": windows,
                      "rejected": dict(own.rejected)}
    return out


def render_agents(figures: PlanFigures, now: float, zone: Zone, console: Console) -> None:
    """A section per other agent: each window's figure and reset, then its rejected readings."""
    for agent, own in figures.agents.items():
        name = AGENT_NAMES.get(agent, agent)
        say(console, text(f"{name} plan limits (from its logs, {own.samples:,} readings)"))
        if not own.windows:
            say(console, text(f"  No {name} window recorded yet."))
        for window, win in own.windows.items():
            left = win.resets_at - now
            resets = (f"resets in {duration(left)} ({when(win.resets_at, zone)})" if left > 0
                      else f"reset at {when(win.resets_at, zone)}")
            say(console, text(f"  {window}: {100 * win.used_ratio:.0f} % used, {resets}, "
                              f"{win.exhausted:,} reached 100 %"))
        refused = {r: n for r, n in own.rejected.items() if n}
        if refused:
            say(console, text("  readings refused: " + ", ".join(
                f"{n:,} {r.replace('_', ' ')}" for r, n in refused.items())))
