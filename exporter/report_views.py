"""Render the `report` views (daily … blocks) as tables, JSON and CSV.

A table has one row per period or item, a totals row, and, for blocks, a line
on the open block. Columns have a priority: a wide console shows every column,
a narrow one (80 columns, a pipe) the essential ones, so no figure is ever cut.
The JSON and CSV shapes are documented in docs/figures.md ("Report views").
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from exporter.projections.facts import Usage
from exporter.projections.periods import Zone, iso
from exporter.projections.views import ActiveBlock, Row, View
from exporter.report import cost_cell, duration, header, pct, tokens, usd, when

TITLES: Final = {
    "daily": "Daily usage", "weekly": "Weekly usage (Monday to Sunday)",
    "monthly": "Monthly usage", "session": "Sessions", "project": "Projects",
    "blocks": "5-hour blocks",
}
LEVELS: Final = (3, 2, 1)  # column priorities shown, widest layout first
_DATE_SUFFIX: Final = re.compile(r"-\d{8}$")

Cell = Callable[[View, Row], str]


@dataclass(frozen=True, slots=True)
class Column:
    """One table column: its title, its cell, and how important it is (1 always shown)."""

    title: str
    cell: Cell
    priority: int = 1
    usage: Callable[[Usage], str] | None = None  # the cell for a breakdown or totals row


def short_model(model: str) -> str:
    """A model id without the ``claude-`` prefix and date: ``opus-4-6``, ``sonnet-4-5``."""
    return _DATE_SUFFIX.sub("", model.removeprefix("claude-"))


def _basename(path: str) -> str:
    """The last part of a project path."""
    return path.rstrip("/").rsplit("/", 1)[-1] or path


def _zone(view: View) -> Zone:
    return view.covered.range.zone


def _figure(title: str, fn: Callable[[Usage], str], priority: int) -> Column:
    """A usage figure, the same for rows, breakdown rows and the total."""
    return Column(title, lambda v, r: fn(r.usage), priority, fn)


USAGE: Final = (
    _figure("requests", lambda u: f"{u.requests:,}", 1),
    _figure("input", lambda u: tokens(u.input), 3),
    _figure("output", lambda u: tokens(u.output), 2),
    _figure("cache read", lambda u: tokens(u.cache_read), 2),
    _figure("write 5m", lambda u: tokens(u.cache_write_5m), 3),
    _figure("write 1h", lambda u: tokens(u.cache_write_1h), 3),
    _figure("read share", lambda u: pct(u.cache_read_share), 3),
    _figure("cost", cost_cell, 1),
    # The saving before the read share when space is short: it is the figure in dollars.
    _figure("cache saved", lambda u: usd(u.saved_usd) if u.cost_pico else "—", 2),
    _figure("re-read", lambda u: f"{u.reread_ratio:,.0f}×" if u.output else "—", 3),
    _figure("unpriced", lambda u: tokens(u.unpriced) if u.unpriced else "—", 3),
)
MODELS: Final = Column("models", lambda v, r: ", ".join(map(short_model, r.models)) or "—")


def _block_status(view: View, row: Row) -> str:
    """``open, 2.1 h left`` for the block still open, else ``ended``."""
    if row.active and view.active is not None:
        return f"open, {duration(view.active.remaining)} left"
    return "ended"


LEAD: Final[dict[str, tuple[Column, ...]]] = {
    "daily": (Column("day", lambda v, r: r.label),),
    "weekly": (Column("week", lambda v, r: r.label),
               Column("from", lambda v, r: when(r.start, _zone(v))[:10], 2)),
    "monthly": (Column("month", lambda v, r: r.label),),
    "session": (
        Column("session", lambda v, r: r.label[:8]),
        Column("project", lambda v, r: _basename(r.project), 2),
        Column("first request", lambda v, r: when(r.first, _zone(v))),
        Column("last request", lambda v, r: when(r.last, _zone(v)), 3),
        Column("duration", lambda v, r: duration(max(r.last - r.first, 0.0))),
        Column("gap p50", lambda v, r: "—" if r.gap_p50 is None else duration(r.gap_p50), 2),
    ),
    "project": (Column("project", lambda v, r: _basename(r.label)),
                Column("sessions", lambda v, r: f"{r.sessions:,}", 2)),
    "blocks": (Column("block start", lambda v, r: when(r.start, _zone(v))),
               Column("end", lambda v, r: when(r.end, _zone(v))[11:]),
               Column("status", _block_status, 2)),
}


def columns(view: View, level: int) -> list[Column]:
    """The view's columns of priority ``level`` or more important."""
    return [c for c in (*LEAD[view.name], *USAGE, MODELS) if c.priority <= level]


def fitting(view: View, console: Console) -> Table:
    """The widest layout of the view's table that fits the console without cutting a figure."""
    for level in LEVELS:
        candidate = table(view, level)
        natural = Measurement.get(console, console.options.update_width(10_000), candidate)
        if natural.maximum <= console.width:
            return candidate
    return candidate  # the narrowest: its last column (models) folds


def table(view: View, level: int) -> Table:
    """The view's table: rows (and their per-model rows), then the total."""
    cols = columns(view, level)
    out = Table(box=box.SIMPLE_HEAD)
    for i, col in enumerate(cols):
        last = col is MODELS
        out.add_column(col.title, justify="left" if i == 0 or last else "right",
                       no_wrap=not last, overflow="fold")
    for row in view.rows:
        out.add_row(*(c.cell(view, row) for c in cols))
        for model, usage in row.breakdown:
            out.add_row(*_other(cols, f"  └ {short_model(model)}", usage), style="dim")
    out.add_section()
    out.add_row(*_other(cols, "total", view.total), style="bold")
    return out


def _other(cols: Iterable[Column], label: str, usage: Usage) -> list[str]:
    """A breakdown or totals row: the label first, usage figures, blanks elsewhere."""
    cells = [c.usage(usage) if c.usage else "" for c in cols]
    cells[0] = label
    return cells


def render_view(view: View, console: Console) -> None:
    """Print one view: the header line, the table, the open block."""
    console.print(header(TITLES[view.name], view.covered))
    if not view.count:
        console.print("No requests in this range.")
        return
    console.print(fitting(view, console))
    if len(view.rows) < view.count:
        console.print(f"showing {len(view.rows):,} of {view.count:,} rows (--limit); "
                      "the total covers all of them")
    if view.active is not None:
        console.print(active_line(view.active))


def active_line(a: ActiveBlock) -> str:
    """The open block in one line: elapsed, burn rate, projection to its end."""
    return (f"open block: {duration(a.elapsed)} in, {duration(a.remaining)} left · burn rate "
            f"{tokens(a.tokens_per_hour)} tokens/h, {usd(pico_usd(a.cost_pico_per_hour))}/h · "
            f"at its end: {tokens(a.projected_tokens)} tokens, "
            f"{usd(pico_usd(a.projected_cost_pico))} (projected)")


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
    zone = _zone(view)
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


def row_json(view: View, row: Row) -> dict[str, Any]:
    """One row of a view as JSON."""
    out = {**_lead_json(view, row), **_usage_json(row.usage), "models": list(row.models)}
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
    return out


def _active_json(view: View, a: ActiveBlock) -> dict[str, Any]:
    """The open block's elapsed time, burn rate and projection."""
    zone = _zone(view)
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
        lead = _lead_json(view, row)
        if view.breakdown:
            records.extend({**lead, "model": m, **_usage_json(u)} for m, u in row.breakdown)
        else:
            records.append({**lead, **_usage_json(row.usage), "models": ";".join(row.models)})
    buffer = io.StringIO()
    if records:
        writer = csv.DictWriter(buffer, fieldnames=list(records[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
    return buffer.getvalue()
