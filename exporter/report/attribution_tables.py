"""Render the attribution views (`report skill|plugin|mcp|agent`) as tables, JSON and CSV.

The same shapes as the other views (exporter.report.tables): the usage figures,
the models, a totals row; the lead column names the skill, plugin, MCP server
or agent ("none": requests without one), with its sessions and first and last
request. ``--breakdown`` adds a row per model, effort or speed (``breakdown``
in the JSON names which). The shapes are in docs/figures.md ("Attribution").
"""

from __future__ import annotations

from typing import Any, Final

from rich.console import Console
from rich.table import Table

from exporter.projections.agents import name as agent_name
from exporter.projections.model_names import short_model
from exporter.projections.views import Row, View
from exporter.report.columns import (
    LEVELS,
    MODELS,
    USAGE,
    Column,
    at_level,
    hidden_note,
    rows_table,
    widest,
)
from exporter.report.summary import header, say, when
from exporter.report.tables import _agent_json, _csv, _iso, _usage_json, notes
from exporter.shown import clip

TITLES: Final = {"skill": "Skills", "plugin": "Plugins", "mcp": "MCP servers",
                 "agent": "Agents"}
KEYS: Final = {"skill": "skill", "plugin": "plugin", "mcp": "mcp_server", "agent": "agent"}


def shown(name: str) -> str:
    """A name from a transcript as a table cell: control characters visible, cut to fit.

    A skill or plugin name is whatever a line said: it must not move the cursor,
    clear the screen or style the table (cells are rich ``Text``, never markup).
    """
    return clip(name)


def _lead(view: View) -> tuple[Column, ...]:
    """The lead columns: the name, its sessions, its first and last request."""
    zone = view.covered.range.zone
    return (Column(KEYS[view.name].replace("_", " "), lambda v, r: shown(r.label)),
            Column("sessions", lambda v, r: f"{r.sessions:,}", 3),
            Column("first request", lambda v, r: when(r.first, zone), 4),
            Column("last request", lambda v, r: when(r.last, zone), 4))


#: With two agents, whose logs a row is: not "agent", the name of `report agent`'s rows.
AGENT_KEY: Final = "coding_agent"
_AGENT: Final = Column("coding agent", lambda v, r: agent_name(r.agent))


def _columns(view: View, level: int) -> list[Column]:
    """The view's columns of priority ``level`` or more important (an agent's, with two)."""
    return at_level((*_lead(view), *((_AGENT,) if view.agents else ()), *USAGE, MODELS), level)


def table(view: View, level: int, by: str = "model", models_width: int | None = None) -> Table:
    """The view's table at one column priority: rows, their breakdown rows, the total."""
    return rows_table(view, _columns(view, level), short_model if by == "model" else shown,
                      models_width)


def render(view: View, console: Console, by: str = "model") -> None:
    """Print the view: the header line, the widest table that fits, the notes under it."""
    say(console, header(TITLES[view.name], view.covered))
    if not view.count:
        say(console, "No requests in this range.")
        return
    out, level = widest(console, lambda lvl, wrap: table(view, lvl, by, wrap))
    say(console, out)
    notes(console, view, [c.header for c in out.columns],
          hidden_note(_columns(view, level), _columns(view, LEVELS[0])))


def _lead_json(view: View, row: Row) -> dict[str, Any]:
    """What a row is: the name, its sessions, its first and last request."""
    zone = view.covered.range.zone
    return {KEYS[view.name]: row.label, "sessions": row.sessions,
            "first_request": _iso(row.first, zone), "last_request": _iso(row.last, zone)}


def view_json(view: View, by: str = "model") -> dict[str, Any]:
    """The view as JSON: range, filters, rows, row count before --limit, totals."""
    rows = []
    for row in view.rows:
        out = {**_lead_json(view, row), **_agent_json(view, row, AGENT_KEY),
               **_usage_json(row.usage), "models": list(row.models)}
        if view.breakdown:
            out["breakdown"] = [{by: p, **_usage_json(u)} for p, u in row.breakdown]
        rows.append(out)
    doc: dict[str, Any] = {
        "view": view.name,
        "range": view.covered.to_json(),
        "filters": {k: list(v) for k, v in view.filters.items()},
        "rows": rows,
        "row_count": view.count,
        "totals": _usage_json(view.total),
    }
    if view.breakdown:
        doc["breakdown"] = by
    return doc


def view_csv(view: View, by: str = "model") -> str:
    """The view as CSV: one line per row, or per row and breakdown value."""
    lead = [KEYS[view.name], "sessions", "first_request", "last_request",
            *((AGENT_KEY,) if view.agents else ())]
    usage = list(_usage_json(view.total))
    head = [*lead, by, *usage] if view.breakdown else [*lead, *usage, "models"]
    records: list[dict[str, Any]] = []
    for row in view.rows:
        first = {**_lead_json(view, row), **_agent_json(view, row, AGENT_KEY)}
        if view.breakdown:
            records.extend({**first, by: p, **_usage_json(u)} for p, u in row.breakdown)
        else:
            records.append({**first, **_usage_json(row.usage), "models": ";".join(row.models)})
    return _csv(records, head)
