"""Run a dashboard's queries against a Prometheus the way Grafana does.

Grafana is not needed (nor installed here) to know what a dashboard shows:
its JSON says which queries to run, over which time range and at which
step, with which variables. This module does what Grafana's Prometheus data
source does with that JSON:

- variables: ``label_values()`` queries over the dashboard's range; "All" is
  the variable's ``allValue`` or, without one, the values found, escaped and
  joined as ``(a|b)``; other variables take their first value;
- time: the dashboard's range or a panel's own (``timeFrom`` such as
  ``now/d``, "today so far", in the dashboard's time zone), the interval from
  the range, the panel's minimum interval and its width, and range queries
  aligned to the step in that time zone (``utcOffsetSec``);
- built-ins: ``$__range``, ``$__interval``, ``$__rate_interval`` (a 15 s
  scrape interval), ``${__from:date:seconds}`` and ``${__to:date:seconds}``;
- results: legends, heatmap de-accumulation of ``le`` buckets;
- checks (:func:`problems`): a failed query, no data, only zeros, and a
  fractional value in a panel or table column whose unit counts things.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from grafana.panels import COUNT_UNITS

#: Grafana's default scrape interval of a Prometheus data source (``timeInterval``).
SCRAPE_INTERVAL_S = 15
#: Width of the whole grid in pixels, for ``maxDataPoints`` (Grafana uses the panel width).
GRID_PX = 1800
GRID_COLUMNS = 24


class QueryError(RuntimeError):
    """Prometheus refused a query (bad PromQL, too many samples, unreachable)."""


# ------------------------------------------------------------------ Prometheus


@dataclass(frozen=True)
class Prometheus:
    """The HTTP API of one Prometheus: instant, range and series queries."""

    url: str
    timeout_s: float = 60.0

    def api(self, path: str, params: Mapping[str, str]) -> Any:
        """GET ``/api/v1/<path>`` and return ``data``; raise :class:`QueryError` on failure."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}",
                                        timeout=self.timeout_s) as resp:
                doc = json.loads(resp.read())
        except urllib.error.HTTPError as err:
            doc = json.loads(err.read() or b"{}")
            raise QueryError(f"{path}: HTTP {err.code}: {doc.get('error', doc)}") from err
        except (OSError, ValueError) as err:
            raise QueryError(f"{path}: {err}") from err
        if doc.get("status") != "success":
            raise QueryError(f"{path}: {doc.get('error', doc)}")
        return doc["data"]


# ------------------------------------------------------------------ time


_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_MATH = re.compile(r"([+-])(\d+)([smhdwMy])|/([smhdwMy])")


def date_math(expr: str, now: datetime) -> datetime:
    """Grafana's relative time: ``now``, ``now-24h``, ``now/d``, ``now-29d/d`` (in now's zone)."""
    if not expr.startswith("now"):
        raise ValueError(f"not a relative time: {expr!r}")
    at = now
    rest = expr[3:]
    for match in _MATH.finditer(rest):
        sign, amount, unit, rounding = match.groups()
        if rounding is not None:
            at = _start_of(at, rounding)
        elif unit == "M":
            months = at.month - 1 + (int(amount) if sign == "+" else -int(amount))
            at = at.replace(year=at.year + months // 12, month=months % 12 + 1)
        else:
            delta = timedelta(seconds=int(amount) * _UNITS_S[unit])
            at = at + delta if sign == "+" else at - delta
    if _MATH.sub("", rest):
        raise ValueError(f"cannot parse relative time {expr!r}")
    return at


def _start_of(at: datetime, unit: str) -> datetime:
    """The start of the ``unit`` (s, m, h, d, w = Monday, M, y) containing ``at``."""
    second = at.replace(microsecond=0)
    minute = second.replace(second=0)
    hour = minute.replace(minute=0)
    day = hour.replace(hour=0)
    starts = {"s": second, "m": minute, "h": hour, "d": day,
              "w": day - timedelta(days=day.weekday()), "M": day.replace(day=1),
              "y": day.replace(month=1, day=1)}
    return starts[unit]


@dataclass(frozen=True)
class Window:
    """A panel's time range and the interval Grafana would give its queries."""

    start: float  # unix seconds
    end: float
    interval_s: int
    utc_offset_s: int

    @property
    def range_s(self) -> int:
        """``$__range`` in seconds (rounded, as Grafana does)."""
        return round(self.end - self.start)

    def aligned(self) -> tuple[float, float]:
        """Start and end rounded down to the step, in the dashboard's time zone (Grafana)."""
        step, off = self.interval_s, self.utc_offset_s
        return (math.floor((self.start + off) / step) * step - off,
                math.floor((self.end + off) / step) * step - off)


#: Grafana's interval rounding (``rangeUtil.roundInterval``): (below ms, interval s).
_ROUNDING = ((1500, 1), (3500, 2), (7500, 5), (12500, 10), (17500, 15), (25000, 20),
             (45000, 30), (90000, 60), (210000, 120), (450000, 300), (750000, 600),
             (1050000, 900), (1500000, 1200), (2700000, 1800), (5400000, 3600),
             (9000000, 7200), (16200000, 10800), (27000000, 21600), (43200000, 43200),
             (86400000, 86400), (604800000, 604800))


def round_interval(ms: float) -> int:
    """A "nice" interval in seconds for a raw interval of ``ms`` milliseconds."""
    for below, seconds in _ROUNDING:
        if ms < below:
            return seconds
    return 2592000


def parse_duration(text: str) -> int:
    """``15s``, ``1h``, ``1d`` in seconds."""
    match = re.fullmatch(r"(\d+)([smhdwy])", text.strip())
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    return int(match.group(1)) * _UNITS_S[match.group(2)]


def duration(seconds: int) -> str:
    """A PromQL duration in the largest whole unit: ``1d``, ``1h``, ``90s``."""
    for unit in ("w", "d", "h", "m"):
        size = _UNITS_S[unit]
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def window(board: Mapping[str, Any], panel: Mapping[str, Any], now: datetime) -> Window:
    """The panel's time range (its ``timeFrom`` or the dashboard's) and its interval."""
    raw_from, raw_to = board["time"]["from"], board["time"]["to"]
    if panel.get("timeFrom"):
        raw_from, raw_to = panel["timeFrom"], "now"
        if not raw_from.startswith("now"):
            raw_from = "now-" + raw_from
    start, end = date_math(raw_from, now), date_math(raw_to, now)
    width_px = GRID_PX * panel["gridPos"]["w"] / GRID_COLUMNS
    max_points = panel.get("maxDataPoints") or width_px
    raw_ms = (end - start).total_seconds() * 1000 / max_points
    interval = round_interval(raw_ms)
    if panel.get("interval"):
        interval = max(interval, parse_duration(panel["interval"]))
    offset = now.utcoffset() or timedelta(0)
    return Window(start.timestamp(), end.timestamp(), interval, int(offset.total_seconds()))


# ------------------------------------------------------------------ variables


_LABEL_VALUES = re.compile(r"^label_values\((.+),\s*(\w+)\)$")
_REGEX_SPECIAL = re.compile(r"([\\^$*+?.()|{}\[\]])")


def regex_escape(value: str) -> str:
    """A label value escaped for a PromQL regex inside a double-quoted string (Grafana's way)."""
    return _REGEX_SPECIAL.sub(r"\\\\\1", value)


@dataclass
class Variables:
    """Values of a dashboard's variables: what is substituted, and what a title shows."""

    values: dict[str, str] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    listed: dict[str, list[str]] = field(default_factory=dict)

    def substitute(self, text: str, extra: Mapping[str, str] | None = None,
                   *, display: bool = False) -> str:
        """``text`` with ``$name``, ``${name}`` replaced (unknown names are left as they are)."""
        table = {**(self.texts if display else self.values), **(extra or {})}

        def value(match: re.Match[str]) -> str:
            spec = match.group(1) or match.group(2)  # name, or name:format
            return table.get(spec, table.get(spec.split(":")[0], match.group(0)))

        return re.sub(r"\$\{([\w:]+)\}|\$(\w+)", value, text)


def resolve_variables(board: Mapping[str, Any], prom: Prometheus, start: float, end: float,
                      overrides: Mapping[str, str] | None = None) -> Variables:
    """List every query variable's values over the dashboard's range and choose one, in order.

    A custom variable (a fixed list) keeps its current choice.

    "All" is the variable's ``allValue`` when it has one, else the values found
    (escaped and joined as ``(a|b)``, as Grafana sends a multi-value variable).
    ``overrides`` give a variable a literal value instead.
    """
    found = Variables()
    for variable in board.get("templating", {}).get("list", []):
        name = variable["name"]
        if variable["type"] == "datasource":
            found.values[name] = found.texts[name] = "prometheus"
            continue
        if variable["type"] == "custom":  # a fixed list: its current choice, as Grafana keeps it
            chosen = overrides[name] if overrides and name in overrides else str(
                variable["current"]["value"])
            found.values[name] = chosen
            found.texts[name] = next((str(o["text"]) for o in variable.get("options", [])
                                      if str(o["value"]) == chosen), chosen)
            continue
        if variable["type"] != "query":
            continue
        listed = label_values(prom, found.substitute(variable["query"]), start, end)
        found.listed[name] = listed
        if overrides and name in overrides:
            found.values[name] = found.texts[name] = overrides[name]
        elif variable.get("includeAll"):
            found.texts[name] = "All"
            all_value = variable.get("allValue")
            escaped = [regex_escape(v) for v in listed]
            found.values[name] = (all_value if all_value is not None else
                                  escaped[0] if len(escaped) == 1 else
                                  "(" + "|".join(escaped) + ")")
        else:
            chosen = listed[0] if listed else ""
            found.values[name] = found.texts[name] = chosen
    return found


def label_values(prom: Prometheus, query: str, start: float, end: float) -> list[str]:
    """What Grafana lists for ``label_values(selector, label)``: sorted, distinct."""
    match = _LABEL_VALUES.match(query)
    if match is None:
        raise QueryError(f"unsupported variable query {query!r}")
    series = prom.api("series", {"match[]": match.group(1), "start": str(int(start)),
                                 "end": str(int(end))})
    label = match.group(2)
    return sorted({s[label] for s in series if label in s})


# ------------------------------------------------------------------ queries


@dataclass
class Series:
    """One series of a query result: a name (the legend), labels, points."""

    name: str
    labels: dict[str, str]
    times: list[float]
    values: list[float]


@dataclass
class Result:
    """One query of a panel, as run: the expression sent, its series, or its error."""

    ref_id: str
    expr: str
    instant: bool
    series: list[Series] = field(default_factory=list)
    error: str | None = None


@dataclass
class PanelData:
    """A panel with its window and the results of its queries."""

    panel: dict[str, Any]
    title: str
    window: Window | None
    results: list[Result]

    @property
    def kind(self) -> str:
        """The panel type (stat, timeseries, bargauge, heatmap, table, text, row)."""
        return str(self.panel["type"])

    @property
    def unit(self) -> str:
        """The panel's default unit."""
        return str(self.panel.get("fieldConfig", {}).get("defaults", {}).get("unit", ""))

    def values(self) -> list[float]:
        """Every finite value of every series."""
        return [v for r in self.results for s in r.series for v in s.values if math.isfinite(v)]


_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """A series name: the legend format with ``{{label}}`` filled in, or the label set."""
    if fmt and fmt != "__auto":
        return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), fmt).strip()
    inner = ", ".join(f'{k}="{v}"' for k, v in labels.items() if k != "__name__")
    return labels.get("__name__", "") + "{" + inner + "}"


def builtins(win: Window) -> dict[str, str]:
    """Grafana's built-in variables for a panel's window."""
    rate = max(win.interval_s + SCRAPE_INTERVAL_S, 4 * SCRAPE_INTERVAL_S)
    return {"__from:date:seconds": str(int(win.start)), "__to:date:seconds": str(int(win.end)),
            "__range": f"{win.range_s}s", "__range_s": str(win.range_s),
            "__range_ms": str(win.range_s * 1000), "__interval": duration(win.interval_s),
            "__interval_ms": str(win.interval_s * 1000), "__rate_interval": duration(rate)}


def run_query(prom: Prometheus, target: Mapping[str, Any], expr: str, win: Window) -> Result:
    """One target, instant at the window's end or over its aligned range."""
    instant = bool(target.get("instant"))
    result = Result(str(target.get("refId", "A")), expr, instant)
    try:
        if instant:
            data = prom.api("query", {"query": expr, "time": f"{win.end:.3f}"})
        else:
            start, end = win.aligned()
            data = prom.api("query_range", {"query": expr, "start": f"{start:.3f}",
                                            "end": f"{end:.3f}", "step": str(win.interval_s)})
    except QueryError as exc:
        result.error = str(exc)
        return result
    fmt = str(target.get("legendFormat", ""))
    for item in data["result"]:
        points = [item["value"]] if "value" in item else item.get("values", [])
        result.series.append(Series(legend(fmt, item["metric"]), dict(item["metric"]),
                                    [float(t) for t, _ in points],
                                    [float(v) for _, v in points]))
    if target.get("format") == "heatmap":
        result.series = deaccumulate(result.series)
    return result


def _le(series: Series) -> float:
    """The numeric upper bound of a bucket series."""
    return float(series.labels.get("le", "inf").replace("+Inf", "inf"))


def deaccumulate(series: Sequence[Series]) -> list[Series]:
    """Cumulative ``le`` buckets as per-bucket counts, lowest bound first (Grafana's heatmap)."""
    ordered = sorted(series, key=_le)
    out: list[Series] = []
    below: dict[float, float] = {}
    for bucket in ordered:
        values = [v - below.get(t, 0.0) for t, v in zip(bucket.times, bucket.values, strict=True)]
        below = dict(zip(bucket.times, bucket.values, strict=True))
        out.append(Series(bucket.name, bucket.labels, list(bucket.times), values))
    return out


def panels_of(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every panel in grid order, rows included (a collapsed row's panels after it)."""
    found: list[dict[str, Any]] = []
    for panel in board.get("panels", []):
        found.append(panel)
        found += panel.get("panels", [])
    return found


def query_board(board: Mapping[str, Any], prom: Prometheus, now: datetime,
                overrides: Mapping[str, str] | None = None) -> tuple[Variables, list[PanelData]]:
    """Resolve the variables and run every panel's queries; rows and text panels have none."""
    default = window(board, {"gridPos": {"w": GRID_COLUMNS}}, now)
    variables = resolve_variables(board, prom, default.start, default.end, overrides)
    data = []
    for panel in panels_of(board):
        title = variables.substitute(str(panel.get("title", "")), display=True)
        if panel["type"] in ("row", "text"):
            data.append(PanelData(panel, title, None, []))
            continue
        win = window(board, panel, now)
        extra = builtins(win)
        results = [run_query(prom, t, variables.substitute(t["expr"], extra), win)
                   for t in panel.get("targets", [])]
        data.append(PanelData(panel, title, win, results))
    return variables, data


# ------------------------------------------------------------------ checks


def is_count(panel: Mapping[str, Any]) -> bool:
    """Whether a panel's default unit counts things (its figures must be whole numbers)."""
    return panel.get("fieldConfig", {}).get("defaults", {}).get("unit") in COUNT_UNITS


def column_units(panel: Mapping[str, Any]) -> dict[str, str]:
    """Units a table sets per column (by the column's displayed name)."""
    units = {}
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        for prop in override.get("properties", []):
            if prop.get("id") == "unit":
                units[str(override["matcher"]["options"])] = str(prop["value"])
    return units


def problems(data: PanelData) -> list[str]:
    """What is wrong with a drawn panel: failed queries, no data, only zeros, fractional counts."""
    if data.kind in ("row", "text"):
        return []
    found = [f"query {r.ref_id} failed: {r.error}" for r in data.results if r.error]
    values = data.values()
    if not values:
        found.append("no data")
    elif all(v == 0 for v in values):
        found.append("only zeros")
    if data.kind == "table":
        return found + _table_fractions(data)
    if is_count(data.panel):
        fractional = sorted({v for v in values if v != round(v)})
        if fractional:
            found.append(f"fractional counts {fractional[:5]}")
    return found


def _table_fractions(data: PanelData) -> list[str]:
    """Fractional values in a table's count columns (by each column's unit)."""
    shown = table(data)
    units = column_units(data.panel)
    found = []
    for column in shown.columns:
        if units.get(column) not in COUNT_UNITS:
            continue
        bad = sorted({v for r in shown.rows if isinstance(v := r.get(column), float)
                      and v != round(v)})
        if bad:
            found.append(f"fractional counts in column {column}: {bad[:5]}")
    return found


@dataclass(frozen=True)
class Table:
    """A table panel as Grafana shows it: columns (displayed names) and rows of raw values."""

    columns: list[str]
    rows: list[dict[str, str | float]]


def table(data: PanelData) -> Table:
    """Instant table queries through the panel's transformations: merge, sortBy, organize.

    Grafana's merge joins rows on the label columns every non-empty query has;
    a label only some queries have (``version``) becomes one more column.
    """
    frames = [(f"Value #{r.ref_id}", [
        ({k: v for k, v in s.labels.items() if k != "__name__"}, s.values[-1])
        for s in r.series if s.values]) for r in data.results]
    present = [rows for _, rows in frames if rows]
    keys = set.intersection(*(set(labels) for rows in present for labels, _ in rows)) \
        if present else set()
    merged: dict[tuple[tuple[str, str], ...], dict[str, str | float]] = {}
    order: list[str] = []
    for value_name, rows in frames:
        for labels, value in rows:
            order += [k for k in labels if k not in order]
            row = merged.setdefault(tuple(sorted((k, labels[k]) for k in keys)), {})
            row.update(labels)
            row[value_name] = value
    steps = {t["id"]: t.get("options", {}) for t in data.panel.get("transformations", [])}
    lines = list(merged.values())
    for rule in reversed(steps.get("sortBy", {}).get("sort", [])):
        field_name = str(rule["field"])
        lines.sort(key=lambda line: str(line.get(field_name, "")), reverse=bool(rule.get("desc")))
    organize = steps.get("organize", {})
    hidden = {k for k, v in organize.get("excludeByName", {}).items() if v}
    renames = organize.get("renameByName", {})
    raw = [c for c in order + [name for name, _ in frames] if c not in hidden]
    return Table([renames.get(c, c) for c in raw],
                 [{renames.get(c, c): line[c] for c in raw if c in line} for line in lines])
