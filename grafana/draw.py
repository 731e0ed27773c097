"""Draw a queried dashboard (:mod:`grafana.query`) to one PNG with matplotlib.

An approximation of what Grafana shows, on its dark theme and its 24-column
grid (30 px cells, 8 px gaps): stat panels as big numbers coloured by their
thresholds, bar gauges as horizontal bars, time series as lines or (stacked)
bars with their legend and totals, heatmaps, tables after their
transformations, text panels as text. Units are formatted close to Grafana's.
The point is to see what a user sees: an empty panel, a needle, a flattened
line, a fraction where a count belongs.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator

from grafana.panels import COUNT_UNITS
from grafana.query import PanelData, Series, Variables, column_units, table

BACKGROUND, PANEL, BORDER, TRACK = "#111217", "#181b1f", "#2c3036", "#25282e"
TEXT, MUTED = "#ccccdc", "#8e8e9e"
PALETTE = ("#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9",
           "#705da0", "#37872d", "#fade2a")
NAMED = {"green": "#73bf69", "orange": "#ff9830", "red": "#f2495c", "blue": "#5794f2",
         "yellow": "#fade2a", "purple": "#b877d9"}
WIDTH_PX, UNIT_PX, GAP_PX, HEADER_PX = 1800, 38, 8, 40
DPI = 100
PT = 72 / DPI  # points per pixel


# ------------------------------------------------------------------ units


_SI = ((1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k"))
_SHORT = ((1e12, " Tri"), (1e9, " Bil"), (1e6, " Mil"), (1e3, " K"))


def _fixed(value: float, decimals: int | None) -> str:
    """A number with ``decimals`` places, or about three significant digits."""
    if decimals is not None:
        return f"{value:,.{decimals}f}"
    magnitude = abs(value)
    if value == round(value) and magnitude < 1e15:
        return f"{value:,.0f}"
    if 0 < magnitude < 0.01:
        return f"{value:.2g}"
    places = 0 if magnitude >= 100 or magnitude == 0 else 1 if magnitude >= 10 else 2
    return f"{value:,.{places}f}"


def _scaled(value: float, steps: Sequence[tuple[float, str]], decimals: int | None,
            unit: str) -> str:
    """``value`` scaled by the first step it reaches, then ``unit`` (``12.3 Mil tok``)."""
    for size, prefix in steps:
        if abs(value) >= size:
            places = None if decimals == 0 else decimals
            return f"{_fixed(value / size, places)}{prefix}{unit}".strip()
    return f"{_fixed(value, decimals)} {unit.strip()}".strip()


def _seconds(value: float, decimals: int | None) -> str:
    """Seconds as Grafana's ``s`` unit: ms, s, min, hour, day."""
    for size, name in ((86400, " day"), (3600, " hour"), (60, " min")):
        if abs(value) >= size:
            return f"{_fixed(value / size, None)}{name}"
    if 0 < abs(value) < 1:
        return f"{_fixed(value * 1000, decimals)} ms"
    return f"{_fixed(value, decimals)} s"


def _usd(value: float, decimals: int | None) -> str:
    """US dollars: cents below a thousand, then K / Mil."""
    if abs(value) >= 1e3:
        return "$" + _scaled(value, _SHORT, decimals, "").replace(" ", "")
    return f"${value:,.{2 if decimals is None else decimals}f}"


_FORMATS: dict[str, Callable[[float, int | None], str]] = {
    "currencyUSD": _usd,
    "percentunit": lambda v, d: f"{_fixed(v * 100, 1 if d is None else d)}%",
    "decbytes": lambda v, d: _scaled(v, _SI, d, "B"),
    "bps": lambda v, d: _scaled(v, _SI, d, "b/s"),
    "Bps": lambda v, d: _scaled(v, _SI, d, "B/s"),
    "s": _seconds,
}


def fmt(value: float | None, unit: str, decimals: int | None = None) -> str:
    """``value`` as Grafana renders ``unit`` (the units the dashboards use)."""
    if value is None or not math.isfinite(value):
        return "-"
    if unit in _FORMATS:
        return _FORMATS[unit](value, decimals)
    suffix = unit.split(":", 1)[1] if unit.startswith("count:") else ""
    return _scaled(value, _SHORT, decimals, " " + suffix if suffix else "")


# ------------------------------------------------------------------ boxes


@dataclass(frozen=True)
class Box:
    """A rectangle in pixels from the figure's top left: left, top, width, height."""

    left: float
    top: float
    width: float
    height: float

    def inset(self, left: float = 0, top: float = 0, right: float = 0,
              bottom: float = 0) -> Box:
        """The box shrunk by the given margins."""
        return Box(self.left + left, self.top + top, max(self.width - left - right, 1),
                   max(self.height - top - bottom, 1))

    def split_bottom(self, height: float) -> tuple[Box, Box]:
        """(the box without its bottom ``height``, that bottom strip)."""
        height = min(height, self.height - 1)
        return (self.inset(bottom=height),
                Box(self.left, self.top + self.height - height, self.width, height))


@dataclass(frozen=True)
class Canvas:
    """A figure and the pixel size it was made with."""

    fig: Figure
    height_px: float

    def axes(self, box: Box) -> Axes:
        """Axes covering ``box``."""
        return self.fig.add_axes((box.left / WIDTH_PX, 1 - (box.top + box.height) / self.height_px,
                                  box.width / WIDTH_PX, box.height / self.height_px))

    def blank(self, box: Box) -> Axes:
        """Axes covering ``box`` in pixel coordinates (y down), no frame."""
        ax = self.axes(box)
        ax.set_axis_off()
        ax.set_xlim(0, box.width)
        ax.set_ylim(box.height, 0)
        return ax


# ------------------------------------------------------------------ helpers


def _colour(name: object, fallback: str) -> str:
    """A Grafana colour name or hex as a hex colour."""
    if not isinstance(name, str) or not name:
        return fallback
    return NAMED.get(name, name if name.startswith("#") else fallback)


def _defaults(panel: Mapping[str, Any]) -> dict[str, Any]:
    """The panel's field defaults."""
    found: dict[str, Any] = panel.get("fieldConfig", {}).get("defaults", {})
    return found


def threshold_colour(panel: Mapping[str, Any], value: float) -> str:
    """The colour of the threshold step ``value`` reaches."""
    steps = _defaults(panel).get("thresholds", {}).get("steps", [])
    chosen = steps[0]["color"] if steps else "green"
    for step in steps[1:]:
        if step.get("value") is not None and value >= step["value"]:
            chosen = step["color"]
    return _colour(chosen, NAMED["green"])


def properties(panel: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Override properties that apply to the series or column called ``name``."""
    props: dict[str, Any] = {}
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        matcher = override.get("matcher", {})
        pattern = str(matcher.get("options", ""))
        hit = (matcher.get("id") == "byName" and pattern == name) or (
            matcher.get("id") == "byRegexp" and re.search(pattern, name) is not None)
        if hit:
            props.update({p["id"]: p.get("value") for p in override.get("properties", [])})
    return props


def _fixed_colour(props: Mapping[str, Any], fallback: str) -> str:
    """An override's fixed colour, else ``fallback``."""
    spec = props.get("color")
    return _colour(spec.get("fixedColor") if isinstance(spec, dict) else None, fallback)


def _decimals(panel: Mapping[str, Any]) -> int | None:
    """The panel's ``decimals`` setting."""
    value = _defaults(panel).get("decimals")
    return None if value is None else int(value)


def _series(data: PanelData) -> list[Series]:
    """Every series of every query of a panel that has a point."""
    return [s for r in data.results for s in r.series if s.values]


def _clip(text: str, width_px: float, px_per_char: float) -> str:
    """``text`` cut with an ellipsis to fit ``width_px``."""
    room = max(int(width_px / px_per_char), 4)
    return text if len(text) <= room else text[:room - 1] + "…"


def _no_data(canvas: Canvas, box: Box, data: PanelData) -> None:
    """The "No data" message (or the panel's ``noValue``)."""
    ax = canvas.blank(box)
    ax.text(box.width / 2, box.height / 2, _defaults(data.panel).get("noValue") or "No data",
            color=MUTED, fontsize=14, ha="center", va="center")


# ------------------------------------------------------------------ panel types


def draw_stat(canvas: Canvas, box: Box, data: PanelData) -> None:
    """Big last values, one per series (named below when there are several)."""
    series = _series(data)
    if not series:
        _no_data(canvas, box, data)
        return
    ax = canvas.blank(box)
    cell = box.width / len(series)
    # A series' own unit where an override sets one (a count beside dollars), as Grafana does.
    texts = [fmt(s.values[-1], properties(data.panel, s.name).get("unit", data.unit),
                 _decimals(data.panel)) for s in series]
    longest = max(len(t) for t in texts)
    size_px = min(box.height * 0.42, cell / (0.62 * longest + 1))
    for i, (s, text) in enumerate(zip(series, texts, strict=True)):
        middle = cell * (i + 0.5)
        ax.text(middle, box.height * 0.45, text, color=threshold_colour(data.panel, s.values[-1]),
                fontsize=size_px * PT, fontweight="bold", ha="center", va="center")
        if len(series) > 1:
            ax.text(middle, box.height * 0.88, _clip(s.name, cell, 6), color=MUTED, fontsize=8,
                    ha="center", va="center")


def draw_bargauge(canvas: Canvas, box: Box, data: PanelData) -> None:
    """One horizontal bar per series: name, bar filled to the maximum, value."""
    series = _series(data)
    if not series:
        _no_data(canvas, box, data)
        return
    top = _defaults(data.panel).get("max") or max([s.values[-1] for s in series] + [1e-12])
    ax = canvas.blank(box)
    row = min(30.0, box.height / len(series))
    name_w, value_w = box.width * 0.34, box.width * 0.18
    bar_w = box.width - name_w - value_w - 8
    y0 = (box.height - row * len(series)) / 2
    for i, s in enumerate(series):
        props = properties(data.panel, s.name)
        name = str(props.get("displayName", s.name))
        value = s.values[-1]
        colour = _fixed_colour(props, threshold_colour(data.panel, value))
        middle, thick = y0 + row * (i + 0.5), row * 0.62
        ax.text(0, middle, _clip(name, name_w, 6.3), color=TEXT, fontsize=8.5, va="center")
        ax.add_patch(Rectangle((name_w, middle - thick / 2), bar_w, thick, color=TRACK))
        ax.add_patch(Rectangle((name_w, middle - thick / 2),
                                   bar_w * min(max(value / top, 0.0), 1.0), thick, color=colour))
        ax.text(box.width, middle, fmt(value, data.unit, _decimals(data.panel)), color=colour,
                fontsize=9.5, va="center", ha="right", fontweight="bold")


def _style(ax: Axes, unit: str, decimals: int | None) -> None:
    """Dark axes, unit-formatted y ticks (whole numbers for counts)."""
    ax.set_facecolor(PANEL)
    for spine in ax.spines.values():
        spine.set_color(BORDER)
    ax.tick_params(colors=MUTED, labelsize=7.5)
    ax.grid(color=BORDER, linewidth=0.5)
    ax.set_axisbelow(True)
    if unit in COUNT_UNITS:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    else:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v, unit, decimals)))


def _dates(ax: Axes, now: datetime, start: float, end: float) -> None:
    """The x axis: the panel's range, dates in the dashboard's time zone."""
    zone = now.tzinfo
    ax.set_xlim(_days(start), _days(end))
    locator = mdates.AutoDateLocator(tz=zone, minticks=3, maxticks=9)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(  # type: ignore[no-untyped-call]
        locator, tz=zone, show_offset=False))


def _days(unix: float) -> float:
    """Unix seconds as matplotlib's date numbers (days since its epoch, 1970-01-01 UTC)."""
    return unix / 86400


def _legend(canvas: Canvas, box: Box, entries: Sequence[tuple[str, str, str]]) -> None:
    """Legend entries (colour, name, total) in columns, or one per line with totals."""
    ax = canvas.blank(box)
    with_totals = any(total for _, _, total in entries)
    columns = 1 if with_totals else max(1, int(box.width // 230))
    width = box.width / columns
    first = 23 if with_totals else 8
    if with_totals:
        ax.text(box.width - 4, 8, "Total", color=MUTED, fontsize=7, va="center", ha="right")
    for i, (colour, name, total) in enumerate(entries):
        x, y = width * (i % columns), first + 15 * (i // columns)
        if y > box.height:
            break
        ax.add_patch(Rectangle((x, y - 4), 12, 8, color=colour))
        ax.text(x + 17, y, _clip(name, width - (90 if total else 20), 5.6), color=TEXT,
                fontsize=7.5, va="center")
        if total:
            ax.text(box.width - 4, y, total, color=TEXT, fontsize=7.5, va="center", ha="right")


def draw_timeseries(canvas: Canvas, box: Box, data: PanelData, now: datetime) -> None:
    """Lines or bars over the panel's range; stacked when the panel stacks."""
    series = _series(data)
    if not series or data.window is None:
        _no_data(canvas, box, data)
        return
    custom = _defaults(data.panel).get("custom", {})
    as_bars = custom.get("drawStyle") == "bars"
    stacked = custom.get("stacking", {}).get("mode") == "normal"
    totals = "sum" in data.panel.get("options", {}).get("legend", {}).get("calcs", [])
    per_line = 1 if totals else max(1, int(box.width // 230))
    listed = [s for s in series
              if not (properties(data.panel, s.name).get("custom.hideFrom") or {}).get("legend")]
    lines = math.ceil(len(listed) / per_line) + (1 if totals else 0)
    legend_h = 6 + 15 * min(lines, int(box.height * 0.4 // 15))
    plot_box, legend_box = box.split_bottom(legend_h)
    ax = canvas.axes(plot_box.inset(left=64, top=4, right=6, bottom=20))
    unit, decimals = data.unit, _decimals(data.panel)
    _style(ax, unit, decimals)
    step = data.window.interval_s / 86400
    stack: dict[float, float] = {}
    entries = []
    for i, s in enumerate(series):
        props = properties(data.panel, s.name)
        colour = _fixed_colour(props, PALETTE[i % len(PALETTE)])
        xs = [_days(t) for t in s.times]
        if as_bars and props.get("custom.drawStyle", "bars") == "bars":
            stacks = stacked and props.get("custom.stacking", {}).get("mode", "normal") == "normal"
            base = [stack.get(t, 0.0) if stacks else 0.0 for t in s.times]
            ax.bar(xs, s.values, width=step * 0.86, bottom=base, align="edge", color=colour,
                   linewidth=0)
            if stacks:
                for t, v in zip(s.times, s.values, strict=True):
                    stack[t] = stack.get(t, 0.0) + v
        else:
            _line(ax, xs, s.values, colour, dashed=bool(props.get("custom.lineStyle")),
                  gap=step * 1.5)
        total = fmt(sum(s.values), unit, decimals) if totals and as_bars else ""
        if s in listed:
            entries.append((colour, str(props.get("displayName", s.name)), total))
    if custom.get("thresholdsStyle", {}).get("mode"):
        for threshold in _defaults(data.panel).get("thresholds", {}).get("steps", [])[1:]:
            ax.axhline(threshold["value"], color=_colour(threshold["color"], MUTED),
                       linestyle="--", linewidth=1)
    maximum = _defaults(data.panel).get("max")
    ax.set_ylim(0, maximum * 1.02 if maximum is not None else None)
    start, _ = data.window.aligned()
    _dates(ax, now, start, data.window.end + (data.window.interval_s if as_bars else 0))
    _legend(canvas, legend_box.inset(left=64, right=6), entries)


def _line(ax: Axes, xs: Sequence[float], ys: Sequence[float], colour: str, *, dashed: bool,
          gap: float) -> None:
    """A line broken where consecutive points are more than ``gap`` apart (Grafana's gaps)."""
    runs: list[tuple[list[float], list[float]]] = []
    for x, y in zip(xs, ys, strict=True):
        if not runs or x - runs[-1][0][-1] > gap:
            runs.append(([], []))
        runs[-1][0].append(x)
        runs[-1][1].append(y)
    for run_x, run_y in runs:
        ax.plot(run_x, run_y, color=colour, linewidth=2 if dashed else 1.5,
                linestyle="--" if dashed else "-", marker="o" if len(run_x) == 1 else None,
                markersize=3)


def draw_heatmap(canvas: Canvas, box: Box, data: PanelData, now: datetime) -> None:
    """Buckets (rows, lowest first) against time (columns): requests per cell."""
    series = _series(data)
    if not series or data.window is None:
        _no_data(canvas, box, data)
        return
    times = sorted({t for s in series for t in s.times})
    column = {t: i for i, t in enumerate(times)}
    grid = [[math.nan] * len(times) for _ in series]
    for row, s in enumerate(series):
        for t, v in zip(s.times, s.values, strict=True):
            grid[row][column[t]] = v if v > 0 else math.nan
    ax = canvas.axes(box.inset(left=80, top=4, right=60, bottom=20))
    _style(ax, "short", 0)
    step = data.window.interval_s / 86400
    edges = [_days(t) for t in times]
    top = max((v for r in grid for v in r if math.isfinite(v)), default=1.0)
    mesh = ax.pcolormesh([*edges, edges[-1] + step], range(len(series) + 1), grid,
                         cmap="Spectral_r", norm=PowerNorm(0.5, vmin=0, vmax=top))
    unit = data.panel.get("options", {}).get("yAxis", {}).get("unit", "short")
    every = max(1, math.ceil(len(series) / max(2, box.height // 22)))
    ticks = list(range(0, len(series), every))
    ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator([i + 0.5 for i in ticks]))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FixedFormatter(
        [_bucket_label(series[i], unit) for i in ticks]))
    start, _ = data.window.aligned()
    _dates(ax, now, start, data.window.end + data.window.interval_s)
    bar = canvas.fig.colorbar(mesh, cax=canvas.axes(Box(box.left + box.width - 50, box.top + 4,
                                                        10, box.height - 24)))
    bar.ax.tick_params(colors=MUTED, labelsize=7)


def _bucket_label(series: Series, unit: str) -> str:
    """A bucket's upper bound as the heatmap's y axis names it."""
    bound = series.labels.get("le", "+Inf")
    return "≤ +Inf" if bound == "+Inf" else "≤ " + fmt(float(bound), unit)


def table_cells(data: PanelData) -> tuple[list[str], list[list[str]]]:
    """The table's header and its rows of formatted cells (units and value mappings)."""
    shown = table(data)
    units = column_units(data.panel)
    cells = []
    for row in shown.rows:
        line = []
        for column in shown.columns:
            value = row.get(column)
            text = _mapped(value, properties(data.panel, column).get("mappings"))
            if text is None and isinstance(value, float):
                decimals = properties(data.panel, column).get("decimals", _decimals(data.panel))
                text = fmt(value, units.get(column, data.unit), decimals)
            line.append(text if text is not None else "" if value is None else str(value))
        cells.append(line)
    return shown.columns, cells


def _mapped(value: object, mappings: Any) -> str | None:
    """A value's text from value mappings, if one maps it."""
    if value is None:
        return None
    key = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    for mapping in mappings or []:
        options = mapping.get("options", {})
        if key in options:
            return str(options[key].get("text", key))
    return None


def draw_table(canvas: Canvas, box: Box, data: PanelData) -> None:
    """A table: header, rows, columns as wide as their text."""
    columns, cells = table_cells(data)
    if not cells:
        _no_data(canvas, box, data)
        return
    ax = canvas.blank(box)
    longest = [max([len(c)] + [len(r[i]) for r in cells]) + 2 for i, c in enumerate(columns)]
    scale = box.width / max(sum(longest), 1)
    char_px = min(6.6, scale)
    row_h = 22
    x = 0.0
    for i, column in enumerate(columns):
        width = longest[i] * scale
        ax.add_patch(Rectangle((x, 0), width, row_h, color=TRACK))
        ax.text(x + 6, row_h / 2, _clip(column, width - 8, char_px), color=MUTED, fontsize=8,
                va="center")
        for r, line in enumerate(cells):
            y = row_h * (r + 1.5)
            if y > box.height:
                break
            ax.text(x + 6, y, _clip(line[i], width - 8, char_px), color=TEXT, fontsize=8.5,
                    va="center")
        x += width
    for r in range(len(cells) + 1):
        y = row_h * (r + 1)
        if y <= box.height:
            ax.plot([0, box.width], [y, y], color=BORDER, linewidth=0.6)


def draw_text(canvas: Canvas, box: Box, content: str) -> None:
    """Markdown as plain wrapped text (emphasis and code marks dropped)."""
    ax = canvas.blank(box)
    plain = re.sub(r"\*\*|\*|`", "", content)
    width = max(30, int(box.width / 6.2))
    lines = []
    for paragraph in plain.split("\n"):
        lines += textwrap.wrap(paragraph, width, subsequent_indent="  ") or [""]
    ax.text(0, 0, "\n".join(lines), color=TEXT, fontsize=8.5, va="top", linespacing=1.45)


# ------------------------------------------------------------------ dashboard


def _panel_box(pos: Mapping[str, int]) -> Box:
    """A grid position as a pixel box (below the dashboard's header line)."""
    column = WIDTH_PX / 24
    return Box(pos["x"] * column + 4, HEADER_PX + pos["y"] * UNIT_PX + 4,
               pos["w"] * column - GAP_PX, pos["h"] * UNIT_PX - GAP_PX)


def _frame(canvas: Canvas, box: Box, data: PanelData) -> Box:
    """The panel's background and title; returns the box left for its content."""
    ax = canvas.blank(box)
    ax.add_patch(Rectangle((0, 0), box.width, box.height, facecolor=PANEL,
                               edgecolor=BORDER, linewidth=1))
    note = {"now/d": "Today so far", "now-29d/d": "Last 30 days"}.get(
        str(data.panel.get("timeFrom", "")), str(data.panel.get("timeFrom", "")))
    room = box.width - 16 - (len(note) * 6.5 + 10 if note else 0)
    ax.text(8, 14, _clip(data.title, room, 7.4), color=TEXT, fontsize=10, fontweight="bold",
            va="center")
    if note:
        ax.text(box.width - 8, 14, note, color=MUTED, fontsize=8, va="center", ha="right")
    return box.inset(left=8, top=28, right=8, bottom=6)


def draw_board(board: Mapping[str, Any], variables: Variables, panels: Sequence[PanelData],
               now: datetime, path: Path) -> None:
    """Draw every panel of a dashboard on its grid and save the PNG at ``path``."""
    rows = max(p.panel["gridPos"]["y"] + p.panel["gridPos"]["h"] for p in panels)
    height = HEADER_PX + rows * UNIT_PX + 8
    fig = plt.figure(figsize=(WIDTH_PX / DPI, height / DPI), dpi=DPI, facecolor=BACKGROUND)
    canvas = Canvas(fig, height)
    header = canvas.blank(Box(0, 0, WIDTH_PX, HEADER_PX))
    header.text(8, HEADER_PX / 2, f"{board.get('title', '')}    "
                f"{_variables_line(board, variables)}    now = {now:%Y-%m-%d %H:%M %Z}",
                color=TEXT, fontsize=12, fontweight="bold", va="center")
    for data in panels:
        box = _panel_box(data.panel["gridPos"])
        if data.kind == "row":
            canvas.blank(box).text(0, box.height / 2, data.title, color=TEXT, fontsize=11,
                                   fontweight="bold", va="center")
            continue
        _draw_panel(canvas, _frame(canvas, box, data), data, now)
    fig.savefig(path, facecolor=BACKGROUND)
    plt.close(fig)


def _draw_panel(canvas: Canvas, box: Box, data: PanelData, now: datetime) -> None:
    """Dispatch on the panel type."""
    if data.kind == "text":
        draw_text(canvas, box, str(data.panel.get("options", {}).get("content", "")))
    elif data.kind == "stat":
        draw_stat(canvas, box, data)
    elif data.kind == "bargauge":
        draw_bargauge(canvas, box, data)
    elif data.kind == "timeseries":
        draw_timeseries(canvas, box, data, now)
    elif data.kind == "heatmap":
        draw_heatmap(canvas, box, data, now)
    elif data.kind == "table":
        draw_table(canvas, box, data)


def _variables_line(board: Mapping[str, Any], variables: Variables) -> str:
    """The variables as the dashboard's top bar shows them."""
    return "   ".join(f"{v['name']}: {variables.texts.get(v['name'], '')}"
                      for v in board.get("templating", {}).get("list", [])
                      if v["type"] == "query")
