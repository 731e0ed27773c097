"""`report limits`: the plan windows other agents write into their own logs (Codex's).

Shown beside the status line's windows, in a section of their own per agent,
only when that agent recorded a reading (or refused one): a Claude-only
ledger's `report limits` is unchanged. Their figures are the windows now
(used, reset, instances that reached 100 %) and every window instance in the
range (start, reset, peak); no dollars and no pace: those need the agent's own
cost (docs/plan-limits.md, "Codex").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from exporter.ingest.formats import AGENT_NAMES
from exporter.projections.periods import Zone, iso
from exporter.projections.plan.windows import Peak, PlanFigures, limits_rows
from exporter.report.summary import duration, say, when
from exporter.shown import text


def agents_json(figures: PlanFigures, peaks: Mapping[str, Sequence[Peak]], now: float,
                zone: Zone) -> dict[str, Any]:
    """Per other agent: samples, windows now (as the status line's rows), instances, rejections."""
    out: dict[str, Any] = {}
    for agent, own in figures.agents.items():
        windows = [{**row, "resets_at": iso(own.windows[str(row["window"])].resets_at, zone)}
                   for row in limits_rows(own, now)]
        out[agent] = {"name": AGENT_NAMES.get(agent, agent), "samples": own.samples,
                      "sample_age_seconds": own.sample_age_seconds, "windows": windows,
                      "instances": [peak_json(p, now, zone) for p in peaks.get(agent, ())],
                      "rejected": dict(own.rejected)}
    return out


def peak_json(peak: Peak, now: float, zone: Zone) -> dict[str, Any]:
    """One window instance of another agent as JSON (the status line's keys, less the dollars)."""
    return {"window": peak.window, "start": iso(peak.start, zone),
            "resets_at": iso(peak.resets_at, zone), "first_sample": iso(peak.first_seen, zone),
            "last_sample": iso(peak.last_seen, zone), "peak_percent": peak.peak_percent,
            "limit_reached": peak.exhausted, "open": peak.open(now)}


def render_agents(figures: PlanFigures, peaks: Mapping[str, Sequence[Peak]], now: float,
                  zone: Zone, console: Console) -> None:
    """A section per other agent: each window now, its instances, its refused readings."""
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
        if peaks.get(agent):
            say(console, peak_table(peaks[agent], now, zone))
        refused = {r: n for r, n in own.rejected.items() if n}
        if refused:
            say(console, text("  readings refused: " + ", ".join(
                f"{n:,} {r.replace('_', ' ')}" for r, n in refused.items())))


def peak_table(found: Sequence[Peak], now: float, zone: Zone) -> Table:
    """An agent's window instances: window, start, reset, peak, status."""
    out = Table(box=box.SIMPLE_HEAD)
    for title in ("window", "start", "reset", "peak", "status"):
        out.add_column(title, justify="left" if title in ("window", "status") else "right",
                       no_wrap=True)
    for peak in found:
        status = ("open" if peak.open(now) else "ended") + (", limit" if peak.exhausted else "")
        out.add_row(text(peak.window), text(when(peak.start, zone)),
                    text(when(peak.resets_at, zone)), text(f"{peak.peak_percent:g} %"),
                    text(status))
    return out
