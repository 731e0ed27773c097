"""Render the `report` views (daily … blocks) as tables, JSON and CSV.

A table has one row per period or item, a totals row, and, for blocks, a line
on the open block. Columns have a priority: a wide console shows every column,
a narrow one (80 columns, a pipe) the essential ones, so no figure is ever cut.
The JSON and CSV shapes are documented in docs/figures.md ("Report views").
`report limits` (the plan windows of the status line, docs/plan-limits.md)
is rendered here too, from the ledger's plan tables.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from exporter.ingest.formats import CLAUDE, CODEX
from exporter.ledger import connections
from exporter.projections import agents
from exporter.projections.class_prices import ClassPrices
from exporter.projections.figures import Covered
from exporter.projections.json_text import to_json
from exporter.projections.periods import Range, Zone, iso
from exporter.projections.plan.cost import claude_cost, codex_cost
from exporter.projections.plan.windows import (
    Instance,
    PlanFigures,
    instances,
    plan_figures,
)
from exporter.projections.usage import Usage
from exporter.projections.views import ActiveBlock, Row, View
from exporter.report.columns import (
    LEVELS,
    UNMEASURED_NOTE,
    WRITES,
    fitting,
    negative_saving,
    unmeasured_writes,
)
from exporter.report.limits_agents import (
    agents_json,
    instance_json,
    pace_line,
    render_agents,
    windows_json,
    worth_line,
)
from exporter.report.summary import NEGATIVE_NOTE, duration, header, say, tokens, usd, when
from exporter.shown import csv_cell, text
from exporter.sqlite import sqlite3

TITLES: Final = {
    "daily": "Daily usage", "weekly": "Weekly usage (Monday to Sunday)",
    "monthly": "Monthly usage", "session": "Sessions", "project": "Projects",
    "blocks": "5-hour blocks",
}
def render_view(view: View, console: Console) -> None:
    """Print one view: the header line, the table, what it hides, the open block."""
    say(console, header(TITLES[view.name], view.covered))
    if not view.count:
        say(console, "No requests in this range.")
        return
    out, hidden = fitting(view, console)
    say(console, out)
    notes(console, view, [c.header for c in out.columns], hidden)
    if view.agents:  # each agent's open block, named
        for agent, block in view.actives.items():
            lines = active_lines(block)
            for line in [f"{agents.name(agent)}: {lines[0]}", *lines[1:]]:
                say(console, line)
    elif view.active is not None:
        for line in active_lines(view.active):
            say(console, line)


def notes(console: Console, view: View, shown: Sequence[Any], hidden: str | None) -> None:
    """The lines under a view's table: rows left out, a negative saving, columns hidden."""
    if len(view.rows) < view.count:
        say(console, f"showing {len(view.rows):,} of {view.count:,} rows (--limit); "
                     "the other row and the total cover all of them")
    if "cache saved" in shown and negative_saving(view):
        say(console, NEGATIVE_NOTE)
    if WRITES in shown and unmeasured_writes(view):
        say(console, UNMEASURED_NOTE)
    if hidden:
        say(console, hidden)


def active_lines(a: ActiveBlock) -> list[str]:
    """The open block, a phrase per line: elapsed and left, burn rate, its projected end."""
    return [f"open block: {duration(a.elapsed)} in, {duration(a.remaining)} left",
            f"  burn rate: {tokens(a.tokens_per_hour)} tokens/h, "
            f"{usd(pico_usd(a.cost_pico_per_hour))}/h",
            f"  projected at its end: {tokens(a.projected_tokens)} tokens, "
            f"{usd(pico_usd(a.projected_cost_pico))}"]


def pico_usd(pico: float) -> float:
    """Pico-dollars (possibly fractional) as USD rounded to 1e-6."""
    return round(pico / 1e12, 6)


# ---- JSON and CSV ---------------------------------------------------------------------
def _usage_json(u: Usage) -> dict[str, Any]:
    """The ``T`` fields plus the cache-read share and re-read ratio (rounded to 1e-6)."""
    return {**u.totals(), "cache_read_share": round(u.cache_read_share, 6),
            "cache_reads_per_output_token": round(u.reread_ratio, 6)}


def _iso(ts: float, zone: Zone) -> str | None:
    """ISO time in the zone; None for NaN."""
    return None if math.isnan(ts) else iso(ts, zone)


def _lead_json(view: View, row: Row) -> dict[str, Any]:
    """What a row is: its period, session, project or block."""
    zone = view.covered.range.zone
    times = {"first_request": _iso(row.first, zone), "last_request": _iso(row.last, zone)}
    if view.name == "session":
        return {"session": row.label, "project": row.project, **times,
                "duration_seconds": round(max(row.last - row.first, 0.0), 3),
                "gap_p50_seconds": row.gap_p50}
    if view.name == "project":
        return {"project": row.label, "sessions": row.sessions, **times}
    if view.name == "blocks":
        return {"start": _iso(row.start, zone), "end": _iso(row.end, zone), **times,
                "active": row.active}
    return {"period": row.label, "start": _iso(row.start, zone), "end": _iso(row.end, zone)}


def _agent_json(view: View, row: Row, key: str = "agent") -> dict[str, str]:
    """``{"agent": "codex"}`` where the view has a row per agent; nothing where it has one."""
    return {key: row.agent} if view.agents else {}


def row_json(view: View, row: Row) -> dict[str, Any]:
    """One row of a view as JSON."""
    out = {**_lead_json(view, row), **_agent_json(view, row), **_usage_json(row.usage),
           "models": list(row.models)}
    if view.breakdown:
        out["breakdown"] = [{"model": m, **_usage_json(u)} for m, u in row.breakdown]
    return out


def view_json(view: View) -> dict[str, Any]:
    """A whole view as JSON: range, filters, rows, row count before --limit, totals."""
    out: dict[str, Any] = {
        "view": view.name,
        "range": view.covered.to_json(),
        "filters": {k: list(v) for k, v in view.filters.items()},
        "rows": [row_json(view, r) for r in view.rows],
        "row_count": view.count,
        "totals": _usage_json(view.total),
    }
    if view.name == "blocks":
        out["block_rule"] = view.block_rule
        out["active_block"] = None if view.active is None else _active_json(view, view.active)
        if view.agents:  # each agent's own blocks (its plan's windows are its own)
            out["active_block_by_agent"] = {a: _active_json(view, b) if (b := view.actives.get(a))
                                            else None for a in view.agents}
    return out


def _active_json(view: View, a: ActiveBlock) -> dict[str, Any]:
    """The open block's elapsed time, burn rate and projection."""
    zone = view.covered.range.zone
    return {
        "start": iso(a.start, zone), "end": iso(a.end, zone),
        "elapsed_seconds": round(a.elapsed, 3), "remaining_seconds": round(a.remaining, 3),
        "tokens_per_hour": round(a.tokens_per_hour, 3),
        "cost_usd_per_hour": pico_usd(a.cost_pico_per_hour),
        "projected_tokens": a.projected_tokens,
        "projected_cost_usd": pico_usd(a.projected_cost_pico),
    }


def view_csv(view: View) -> str:
    """A view as CSV: one line per row, or per row and model with --breakdown."""
    records: list[dict[str, Any]] = []
    for row in view.rows:
        lead = {**_lead_json(view, row), **_agent_json(view, row)}
        if view.breakdown:
            records.extend({**lead, "model": m, **_usage_json(u)} for m, u in row.breakdown)
        else:
            records.append({**lead, **_usage_json(row.usage), "models": ";".join(row.models)})
    return _csv(records, csv_header(view))


def csv_header(view: View) -> list[str]:
    """The CSV columns of a view, also when it has no row (a header is always printed)."""
    lead = {"session": ["session", "project", "first_request", "last_request",
                        "duration_seconds", "gap_p50_seconds"],
            "project": ["project", "sessions", "first_request", "last_request"],
            "blocks": ["start", "end", "first_request", "last_request", "active"],
            }.get(view.name, ["period", "start", "end"])
    lead = [*lead, "agent"] if view.agents else lead
    usage = list(_usage_json(view.total))
    return [*lead, "model", *usage] if view.breakdown else [*lead, *usage, "models"]


def _csv(records: list[dict[str, Any]], header: list[str]) -> str:
    """Records as CSV under ``header``: the header line even with no record.

    Booleans are written as in the JSON, ``true``/``false`` (not Python's ``True``);
    strings from transcripts are shown, never run (:func:`exporter.shown.csv_cell`).
    """
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: (("true" if v else "false") if isinstance(v, bool) else csv_cell(v))
                      for k, v in r.items()} for r in records)
    return buffer.getvalue()


# ---- limits: the plan windows of the status line (docs/plan-limits.md) -----------------
LIMITS: Final = "limits"
LIMITS_TITLE: Final = "Plan limits (from the status line)"
NO_SAMPLES: Final = ("No status-line samples recorded: set `claude-code-exporter statusline` "
                     "as Claude Code's status line (docs/plan-limits.md).")


@dataclass(frozen=True, slots=True)
class Limits:
    """The `report limits` view: each window now, and every instance in the range."""

    covered: Covered
    now: float
    figures: PlanFigures
    instances: tuple[Instance, ...]
    #: Other agents' window instances in the range (Codex's), by agent: only those present.
    peaks: Mapping[str, tuple[Instance, ...]] = field(default_factory=dict)


def limits_view(conn: sqlite3.Connection, prices: ClassPrices, rng: Range, now: float) -> Limits:
    """The view from a read connection to the ledger (its plan tables and requests)."""
    cost = claude_cost(conn, prices)  # the status line's windows: Claude Code's requests
    own = {CODEX: codex_cost(conn, prices)}  # each other agent's windows: its own turns' cost
    found = tuple(instances(conn, cost, now, rng.since, rng.until))
    figures = plan_figures(conn, now, cost, agent_cost=own)
    first = min((i.first_seen for i in found), default=None)
    last = max((i.last_seen for i in found), default=None)
    others = {agent: tuple(instances(conn, own[agent], now, rng.since, rng.until, agent=agent))
              for agent in figures.agents if agent in own}
    return Limits(Covered(rng, first, last), now, figures, found, others)


def run_limits(output: str, rng: Range, ledger_path: Path, prices: ClassPrices, now: float, *,
               console: Console | None = None) -> int:
    """Print `report limits` as a table, JSON or CSV; return the exit code (0)."""
    conn = connections.reader(ledger_path)
    try:
        view = limits_view(conn, prices, rng, now)
    finally:
        conn.close()
    if output == "json":
        sys.stdout.write(to_json(limits_json(view)) + "\n")
    elif output == "csv":
        sys.stdout.write(limits_csv(view))
    else:
        render_limits(view, console or Console())
    return 0


def _money(value: float | None) -> str:
    """Dollars, or a dash when there is no figure."""
    return "—" if value is None else usd(value)


def render_limits(view: Limits, console: Console) -> None:
    """Each window now (figure, reset, estimate), then a table of its instances."""
    zone = view.covered.range.zone
    say(console, header(LIMITS_TITLE, view.covered).replace("no requests", "no samples"))
    if not view.figures.windows:
        say(console, NO_SAMPLES)
        _render_agents(view, console)
        return
    for name, win in view.figures.windows.items():
        left = win.resets_at - view.now
        resets = (f"resets in {duration(left)} ({when(win.resets_at, zone)})" if left > 0
                  else f"reset at {when(win.resets_at, zone)}")
        worth = worth_line(win.estimate, "no requests here while the figure moved")
        say(console, text(f"{name}: {100 * win.used_ratio:.0f} % used, {resets}"))
        say(console, text(f"  {worth}"))
        say(console, text(f"  {pace_line(win.pace, view.now, zone)}"))
    if not view.instances:
        say(console, "No window in this range.")
        _render_agents(view, console)
        return
    say(console, _fitted(view, console))
    # A sentence per line: at 80 columns a wrapped note breaks mid-sentence.
    say(console, "Cost: this machine's requests at list price.")
    say(console, "Other machines and claude.ai share the windows,")
    say(console, "so $ per 1 % is a lower bound (docs/plan-limits.md).")
    _render_agents(view, console)


def _render_agents(view: Limits, console: Console) -> None:
    """The other agents' sections, their instances drawn as the status line's are."""
    render_agents(view.figures, view.peaks, view.now, view.covered.range.zone, console,
                  table=lambda found: _fitted(dataclasses.replace(view, instances=tuple(found)),
                                        console))


#: The instance table's columns: title, cell, priority (1: always shown).
LIMIT_COLUMNS: Final[tuple[tuple[str, Callable[[Instance, Limits], str], int], ...]] = (
    ("window", lambda i, v: i.window, 1),
    ("start", lambda i, v: when(i.start, v.covered.range.zone), 2),
    ("reset", lambda i, v: when(i.resets_at, v.covered.range.zone), 1),
    ("peak", lambda i, v: f"{i.peak_percent:g} %", 1),
    ("cost", lambda i, v: usd(i.cost_usd), 1),
    ("$ per 1 %", lambda i, v: _money(i.estimate.usd_per_percent), 1),
    ("pairs", lambda i, v: f"{i.estimate.pairs:,}", 3),
    ("status", lambda i, v: ("open" if i.open(v.now) else "ended")
     + (", limit" if i.exhausted else ""), 2),
)


def _fitted(view: Limits, console: Console) -> Table:
    """The instance table in the widest layout that fits: no figure is ever cut."""
    for level in LEVELS:
        out = limits_table(view, level)
        natural = Measurement.get(console, console.options.update_width(10_000), out)
        if natural.maximum <= console.width:
            break
    return out


def limits_table(view: Limits, level: int) -> Table:
    """The instances as a table with the columns of priority ``level`` or more important."""
    cols = [(t, cell) for t, cell, priority in LIMIT_COLUMNS if priority <= level]
    out = Table(box=box.SIMPLE_HEAD)
    for i, (title, _) in enumerate(cols):
        out.add_column(title, justify="left" if title in ("window", "status") or i == 0
                       else "right", no_wrap=True)
    for inst in view.instances:
        out.add_row(*(text(cell(inst, view)) for _, cell in cols))
    return out


#: The keys of a window instance in JSON, and the CSV header of `report limits --csv`.
INSTANCE_FIELDS: Final = ("window", "start", "resets_at", "first_sample", "last_sample",
                          "peak_percent", "limit_reached", "open", "cost_usd",
                          "usd_per_percent", "pairs")


def _instance_json(inst: Instance, view: Limits) -> dict[str, Any]:
    """One window instance as JSON (and a CSV line)."""
    return instance_json(inst, view.now, view.covered.range.zone)


def limits_json(view: Limits) -> dict[str, Any]:
    """The view as JSON: each window now (with the look-back estimate), then the instances."""
    zone = view.covered.range.zone
    windows = windows_json(view.figures, view.now, zone)
    out = {
        "view": LIMITS,
        "range": view.covered.to_json(),
        "samples": view.figures.samples,
        "windows": windows,
        "instances": [_instance_json(i, view) for i in view.instances],
    }
    if view.figures.agents:  # only then: a Claude-only user's JSON is as it was
        out["agents"] = agents_json(view.figures, view.peaks, view.now, zone)
    return out


def limits_csv(view: Limits) -> str:
    """The instances as CSV, one line each; an ``agent`` column first when another agent has any.

    Without another agent's instance the CSV is the status line's alone, as before.
    """
    others = [(agent, i) for agent, found in view.peaks.items() for i in found]
    if not others:
        return _csv([_instance_json(i, view) for i in view.instances], list(INSTANCE_FIELDS))
    rows = [{"agent": agent, **_instance_json(i, view)}
            for agent, i in [*((CLAUDE, i) for i in view.instances), *others]]
    return _csv(rows, ["agent", *INSTANCE_FIELDS])
