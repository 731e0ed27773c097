"""The columns of the `report` views' tables, and the widest set a terminal has room for.

Columns have a priority. A wide console shows every column; at 120 columns a
view still shows tokens by type (input, output, cache write, cache read, as
ccusage orders them); at 80 columns (or through a pipe) the essential ones:
the row, requests, all tokens, cost and the models. No figure is ever cut: only
the models column wraps. Whatever a table leaves out is named in one line under it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from exporter.projections import agents, caps
from exporter.projections.model_names import short_model
from exporter.projections.periods import Zone
from exporter.projections.usage import Usage
from exporter.projections.views import Row, View
from exporter.report.summary import cost_cell, duration, pct, tokens, usd, when
from exporter.shown import clip, text

LEVELS: Final = (4, 3, 2, 1)  # column priorities shown, widest layout first
TOKEN_TYPES: Final = 2  # the level adding input, output, cache write and cache read
MODELS_WRAP: Final = 20  # the models column wraps to this width before columns are hidden
NOTE_WIDTH: Final = 80  # the hidden-columns line fits an 80-column terminal

Cell = Callable[[View, Row], str]


@dataclass(frozen=True, slots=True)
class Column:
    """One table column: its title, its cell, and how important it is (1 always shown)."""

    title: str
    cell: Cell
    priority: int = 1
    usage: Callable[[Usage], str] | None = None  # the cell for a breakdown or totals row
    narrow: bool = False  # shown only in the narrowest layout (stands for hidden columns)


def _basename(path: str) -> str:
    """The last part of a project path, shown and cut like a model id."""
    return clip(path.rstrip("/").rsplit("/", 1)[-1] or path)


def _zone(view: View) -> Zone:
    return view.covered.range.zone


def _figure(title: str, fn: Callable[[Usage], str], priority: int,
            narrow: bool = False) -> Column:
    """A usage figure, the same for rows, breakdown rows and the total."""
    return Column(title, lambda v, r: fn(r.usage), priority, fn, narrow)


def saved_cell(u: Usage) -> str:
    """The prompt cache's saving; a dash where nothing was priced."""
    return usd(u.saved_usd) if u.cost_pico else "—"


WRITES: Final = "cache write"
UNMEASURED_NOTE: Final = "cache write —: not measured (Codex logs no cache writes)"


def writes_measured(view: View, agent: str = "") -> bool:
    """Whether the cache writes of ``agent``'s row of the view were measured (not Codex's)."""
    return view.cache_writes_measured and agents.measures_cache_writes(agent)


def unmeasured_writes(view: View) -> bool:
    """Whether the view shows a row (or the whole view) whose cache writes are not measured."""
    return not view.cache_writes_measured or any(
        not agents.measures_cache_writes(r.agent) for r in view.rows)


USAGE: Final = (
    _figure("requests", lambda u: f"{u.requests:,}", 1),
    _figure("input", lambda u: tokens(u.input), 2),
    _figure("output", lambda u: tokens(u.output), 2),
    # 5 m + 1 h (JSON: each); "—" for an agent that logs none (say so: never a measured 0)
    Column(WRITES, lambda v, r: tokens(r.usage.cache_write) if writes_measured(v, r.agent)
           else "—", 2, lambda u: tokens(u.cache_write)),
    _figure("cache read", lambda u: tokens(u.cache_read), 2),
    # Their sum, where the four token types have no room (the narrowest layout only).
    _figure("tokens", lambda u: tokens(u.tokens), 1, narrow=True),
    _figure("read share", lambda u: pct(u.cache_read_share), 3),
    _figure("cost", cost_cell, 1),
    _figure("cache saved", saved_cell, 3),
    _figure("re-read", lambda u: f"{u.reread_ratio:,.0f}×" if u.output else "—", 4),
    _figure("unpriced", lambda u: tokens(u.unpriced) if u.unpriced else "—", 4),
)


def _models(view: View, row: Row) -> str:
    """The row's models by name; past caps.MODEL_NAMES, the costliest and how many more."""
    if not row.top_models:
        return ", ".join(map(short_model, row.models)) or "—"
    more = len(row.models) - len(row.top_models)
    return ", ".join(map(short_model, row.top_models)) + f", +{more:,} more"


MODELS: Final = Column("models", _models)


def _block_status(view: View, row: Row) -> str:
    """``open, 2 h 50 min left`` for the block still open, else ``ended``."""
    block = view.actives.get(row.agent) if view.agents else view.active
    if row.active and block is not None:
        return f"open, {duration(block.remaining)} left"
    return "ended"


LEAD: Final[dict[str, tuple[Column, ...]]] = {
    "daily": (Column("day", lambda v, r: r.label),),
    "weekly": (Column("week", lambda v, r: r.label),
               Column("from", lambda v, r: when(r.start, _zone(v))[:10], 3)),
    "monthly": (Column("month", lambda v, r: r.label),),
    "session": (
        Column("session", lambda v, r: r.label[:8]),
        Column("project", lambda v, r: _basename(r.project), 3),
        Column("first request", lambda v, r: when(r.first, _zone(v))),
        Column("last request", lambda v, r: when(r.last, _zone(v)), 4),
        Column("duration", lambda v, r: duration(max(r.last - r.first, 0.0)), 3),
        Column("gap p50", lambda v, r: "—" if r.gap_p50 is None else duration(r.gap_p50), 3),
    ),
    "project": (Column("project", lambda v, r: _basename(r.label)),
                Column("sessions", lambda v, r: f"{r.sessions:,}", 3)),
    "blocks": (Column("block start", lambda v, r: when(r.start, _zone(v))),
               Column("end", lambda v, r: when(r.end, _zone(v))[11:], 3),
               Column("status", _block_status, 3)),
}


AGENT: Final = Column("agent", lambda v, r: agents.name(r.agent))  # a row per agent
# A session is one agent's, and its models say whose: at 80 columns they need the room.
SESSION_AGENT: Final = Column("agent", lambda v, r: agents.name(r.agent), 2)


def columns(view: View, level: int) -> list[Column]:
    """The view's columns of priority ``level`` or more important (an agent's, with two)."""
    agent = (SESSION_AGENT if view.name == "session" else AGENT,) if view.agents else ()
    return at_level((*LEAD[view.name], *agent, *USAGE, MODELS), level)


def at_level(cols: Iterable[Column], level: int) -> list[Column]:
    """The columns a layout of ``level`` shows: priority ``level`` or more important."""
    return [c for c in cols if c.priority <= level and not (c.narrow and level > LEVELS[-1])]


def widest(console: Console, build: Callable[[int, int | None], Table]) -> tuple[Table, int]:
    """The table of the widest level that fits the console, and that level.

    ``build(level, models_width)`` makes the table of a level. The token types
    (level :data:`TOKEN_TYPES`) may wrap the models column to :data:`MODELS_WRAP`
    to fit; the figures beyond them are shown only where the models fit unwrapped.
    """
    for level in LEVELS:
        wrap = MODELS_WRAP if level <= TOKEN_TYPES else None
        natural = Measurement.get(console, console.options.update_width(10_000),
                                  build(level, wrap))
        if natural.maximum <= console.width:
            return build(level, None), level
    return build(LEVELS[-1], None), LEVELS[-1]  # the narrowest: its models column folds


def hidden_note(shown: Sequence[Column], every: Sequence[Column]) -> str | None:
    """One line naming the columns left out, most important first, and how to see them."""
    names = [c.title for c in sorted((c for c in every if c not in shown),
                                     key=lambda c: c.priority)]
    if not names:
        return None
    head, tail = "hidden: ", " (widen the terminal, or --json)"
    room = NOTE_WIDTH - len(head) - len(tail)
    listed: list[str] = []
    for i, name in enumerate(names):
        more = f", +{len(names) - i - 1} more" if i + 1 < len(names) else ""
        if len(", ".join([*listed, name]) + more) > room:
            return head + ", ".join(listed) + f", +{len(names) - i} more" + tail
        listed.append(name)
    return head + ", ".join(listed) + tail


def fitting(view: View, console: Console) -> tuple[Table, str | None]:
    """The widest table of the view that fits the console, and the hidden-columns line."""
    out, level = widest(console, lambda lvl, wrap: table(view, lvl, wrap))
    return out, hidden_note(columns(view, level), columns(view, LEVELS[0]))


def table(view: View, level: int, models_width: int | None = None) -> Table:
    """The view's table at one column priority (:func:`rows_table`)."""
    return rows_table(view, columns(view, level), short_model, models_width)


def rows_table(view: View, cols: Sequence[Column], part_name: Callable[[str], str],
               models_width: int | None = None) -> Table:
    """A view's table: rows (and their breakdown rows), the rows left out, then the total.

    Rows past --limit (or :func:`caps.view_rows`) are summed in one row, and so
    are a row's breakdown values past :data:`caps.BREAKDOWN_MODELS`: every column
    adds up. ``part_name`` shows a breakdown value (a model id, an effort, ...);
    ``models_width`` caps the models column (None: as wide as its names).
    """
    out = Table(box=box.SIMPLE_HEAD)
    for i, col in enumerate(cols):
        last = col is MODELS
        out.add_column(col.title, justify="left" if i == 0 or last else "right",
                       no_wrap=not last, overflow="fold",
                       max_width=models_width if last else None)
    for row in view.rows:
        out.add_row(*(text(c.cell(view, row)) for c in cols))
        capped = caps.costliest(dict(row.breakdown), caps.BREAKDOWN_MODELS)
        blank = not writes_measured(view, row.agent)
        for part, usage in capped.shown:
            out.add_row(*_other(cols, f"  └ {part_name(part)}", usage, blank), style="dim")
        if capped.more:
            out.add_row(*_other(cols, f"  └ {caps.other_label(capped.more)}", capped.rest,
                                blank), style="dim")
    blank = not view.cache_writes_measured
    if len(view.rows) < view.count:
        out.add_row(*_other(cols, caps.other_label(view.count - len(view.rows)), view.rest,
                            blank))
    out.add_section()
    out.add_row(*_other(cols, "total", view.total, blank), style="bold")
    return out


def negative_saving(view: View) -> bool:
    """Whether a row, a breakdown row or the total of the view has a negative cache saving."""
    usages = [view.total, view.rest, *(r.usage for r in view.rows),
              *(u for r in view.rows for _, u in r.breakdown)]
    return any(u.saved_pico < 0 and u.cost_pico for u in usages)


def _other(cols: Iterable[Column], label: str, usage: Usage, unmeasured: bool = False
           ) -> list[Text]:
    """A breakdown or totals row: the label first, usage figures, blanks elsewhere.

    ``unmeasured``: its cache writes were not measured (Codex): "—", not 0.
    """
    cells = [("—" if unmeasured and c.title == WRITES else c.usage(usage)) if c.usage else ""
             for c in cols]
    cells[0] = label
    return [text(c) for c in cells]
