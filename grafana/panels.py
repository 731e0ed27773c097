"""Query and panel helpers for the dashboards of :mod:`grafana.build`.

Conventions every panel follows, written once here so that a new panel cannot
forget them:

- every metric selector carries the target filters ``job``, ``instance`` and
  ``user`` (:func:`sel`), so one dashboard serves one machine or a fleet;
- panels read the exporter's own series, never recorded ones: they are right
  from the first scrape and right after a backfill, whether or not the
  recording rules were backfilled too;
- counts are counted: queries of a panel whose unit counts things
  (:data:`COUNT_UNITS`) are rounded, so a Prometheus extrapolation never shows
  7.02 requests;
- "per hour" and "per day" figures are bars of ``increase()`` over the bar's
  own interval (:func:`per_bar`), drawn at the start of that interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from grafana_foundation_sdk.builders import (
    bargauge,
    common,
    heatmap,
    prometheus,
    stat,
    table,
    text,
)
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import timeseries as ts
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import prometheus as pm
from grafana_foundation_sdk.models import text as tm

TAG = "claude-code"

#: Every panel and variable query goes through this data source variable.
DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

#: Target labels: one dashboard for one exporter or a fleet of them.
TARGET = 'job=~"$job", instance=~"$instance", user=~"$user"'
MODEL = 'model=~"$model"'
PROJECT = 'project=~"$project"'
PROMPT_TYPES = 'type=~"input|cache_read|cache_write_5m|cache_write_1h"'
DAY, MONTH = 'period="day"', 'period="month"'
CACHE_READ, CACHE_WRITE = 'type="cache_read"', 'type="cache_write"'
GAP_TYPES = 'type=~"input|cache_read|cache_write"'  # the types of *_after_gap_total
NOT_FIRST, LT_5M, GT_1H = 'gap!="first"', 'gap="lt_5m"', 'gap="gt_1h"'
TTL_5M = 'ttl="5m"'
ARCH = 'arch=~"$arch"'
CLAUDE_ALERTS = 'alertname=~"ClaudeCode.+"'

#: Units of panels (or table columns) whose figures count things: their
#: queries are rounded and tests require whole numbers.
COUNT_UNITS = frozenset({"short", "none", "count:tok"})

#: The interval of one bar: the panel's ``interval`` (1 h) unless the time
#: range is so long that Grafana widens it.
BAR = "$__interval"


def sel(*extra: str) -> str:
    """A label selector: the target filters plus ``extra`` matchers."""
    return "{" + ", ".join([TARGET, *extra]) + "}"


def quantile(q: float, histogram: str, window: str, *extra: str) -> str:
    """``histogram_quantile`` over all series of a histogram, one figure for the selection."""
    return (
        f"histogram_quantile({q}, sum by (le) "
        f"(increase({histogram}_bucket{sel(*extra)}[{window}])))"
    )


def buckets(histogram: str, *extra: str) -> str:
    """Requests per heatmap cell: the ``le`` buckets' growth during each bar interval."""
    return f"round(sum by (le) ({per_bar(histogram + '_bucket', *extra)}))"


def per_bar(metric: str, *extra: str, window: str = BAR) -> str:
    """``increase()`` of ``metric`` over the ``window`` that *starts* at each step.

    A bar at 14:00 shows 14:00-15:00 (``offset -1h`` looks forward), as a
    user reads a bar chart; the bar of the current hour grows until its end.
    """
    return f"increase({metric}{sel(*extra)}[{window}] offset -{window})"


def in_range(metric: str, *extra: str, window: str = "$__range") -> str:
    """``increase()`` of ``metric`` over the panel's time range (or ``window``)."""
    return f"increase({metric}{sel(*extra)}[{window}])"


# --------------------------------------------------------------------- queries


@dataclass(frozen=True)
class Q:
    """One Prometheus query of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False
    fmt: pm.PromQueryFormat | None = None


def _target(index: int, q: Q) -> prometheus.Dataquery:
    """The SDK query for ``q``, with a ``refId`` of A, B, C, ... by position."""
    target = prometheus.Dataquery().ref_id(chr(ord("A") + index)).expr(q.expr).datasource(DS)
    target = target.instant() if q.instant else target.range()
    if q.legend:
        target = target.legend_format(q.legend)
    if q.fmt is not None:
        target = target.format(q.fmt)
    return target


def thresholds(*steps: tuple[float | None, str]) -> dash.ThresholdsConfig:
    """Absolute thresholds; the first step's value is None (minus infinity)."""
    return (
        dash.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in steps])
    )


NEUTRAL = thresholds((None, "blue"))
BUDGET = thresholds((None, "green"), (0.8, "orange"), (1.0, "red"))

P = TypeVar("P", ts.Panel, stat.Panel, bargauge.Panel, heatmap.Panel, table.Panel, text.Panel)
Overrides = Sequence[tuple[str, list[dm.DynamicConfigValue]]]


@dataclass(frozen=True)
class Time:
    """A panel's own time range and bar interval (Grafana's query options)."""

    time_from: str | None = None  # e.g. "now/d" (today so far), "now-29d/d"
    interval: str | None = None  # minimum interval of a step, e.g. "1h", "1d"


def _common(panel: P, title: str, description: str, unit: str, queries: Sequence[Q], *,
            w: int, h: int, time: Time = Time(), no_value: str | None = None,
            decimals: int | None = None) -> P:
    """Title, description, unit, size, data source, queries and query options of any panel."""
    panel = (
        panel.title(title).description(description).unit(unit).span(w).height(h).datasource(DS)
    )
    if time.time_from is not None:
        panel = panel.time_from(time.time_from)
    if time.interval is not None:
        panel = panel.interval(time.interval)
    if no_value is not None:
        panel = panel.no_value(no_value)
    if decimals is not None:
        panel = panel.decimals(decimals)
    return panel.targets([_target(i, q) for i, q in enumerate(queries)])


def _with_overrides(panel: P, overrides: Overrides) -> P:
    """Apply (field name regexp, properties) overrides."""
    for regexp, properties in overrides:
        panel = panel.override_by_regexp(regexp, properties)
    return panel


def timeseries(title: str, description: str, unit: str, *queries: Q, w: int = 12, h: int = 8,
               stacked: bool = False, lines: dash.ThresholdsConfig | None = None,
               log: bool = False, drawn_as_bars: bool = False, time: Time = Time(),
               decimals: int | None = None, max_value: float | None = None,
               totals: bool = False, overrides: Overrides = (),
               no_value: str | None = None) -> ts.Panel:
    """A time series panel; ``lines`` draws thresholds as dashed lines.

    ``drawn_as_bars`` draws each step as a bar (with :func:`per_bar` queries);
    ``totals`` shows each series' sum over the range in a legend table.
    """
    if decimals is None and unit == "short":
        decimals = 0  # whole-number axis ticks for small counts (1 rejected line, not 0.2)
    panel = _common(ts.Panel(), title, description, unit, queries, w=w, h=h, time=time,
                    decimals=decimals, no_value=no_value)
    legend = (
        common.VizLegendOptions().display_mode(cm.LegendDisplayMode.LIST)
        .placement(cm.LegendPlacement.BOTTOM).show_legend(True)
    )
    if totals:
        legend = legend.display_mode(cm.LegendDisplayMode.TABLE).placement(
            cm.LegendPlacement.BOTTOM).calcs(["sum"]).sort_by("Total").sort_desc(True)
    panel = panel.legend(legend).fill_opacity(10).line_width(1)
    if drawn_as_bars:
        panel = (
            panel.draw_style(cm.GraphDrawStyle.BARS).fill_opacity(80)
            .bar_alignment(cm.BarAlignment.AFTER).show_points(cm.VisibilityMode.NEVER)
        )
    if stacked:
        stacking = common.StackingConfig().mode(cm.StackingMode.NORMAL)
        panel = panel.stacking(stacking).fill_opacity(80 if drawn_as_bars else 40)
    if lines is not None:
        panel = panel.thresholds(lines).thresholds_style(
            common.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
        )
    if log:
        panel = panel.scale_distribution(
            common.ScaleDistributionConfig().type(cm.ScaleDistribution.LOG).log(10)
        )
    if max_value is not None:
        panel = panel.min(0).max(max_value)
    return _with_overrides(panel, overrides)


def single(title: str, description: str, unit: str, *queries: Q, w: int = 4, h: int = 4,
           thresholds: dash.ThresholdsConfig = NEUTRAL, decimals: int | None = None,
           sparkline: bool = False, time: Time = Time(),
           no_value: str | None = None) -> stat.Panel:
    """A stat panel showing each query's last value."""
    panel = _common(stat.Panel(), title, description, unit, queries, w=w, h=h, time=time,
                    decimals=decimals, no_value=no_value)
    panel = panel.reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"])).thresholds(
        thresholds
    ).graph_mode(cm.BigValueGraphMode.AREA if sparkline else cm.BigValueGraphMode.NONE)
    return panel.color_mode(cm.BigValueColorMode.VALUE)


def bars(title: str, description: str, unit: str, *queries: Q, w: int = 8, h: int = 8,
         thresholds: dash.ThresholdsConfig = NEUTRAL, maximum: float | None = None,
         time: Time = Time(), no_value: str | None = None, decimals: int | None = None,
         overrides: Overrides = ()) -> bargauge.Panel:
    """A horizontal bar gauge, one bar per series (last value)."""
    panel = _common(bargauge.Panel(), title, description, unit, queries, w=w, h=h, time=time,
                    no_value=no_value, decimals=decimals)
    panel = (
        panel.reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))
        .orientation(cm.VizOrientation.HORIZONTAL)
        .display_mode(cm.BarGaugeDisplayMode.GRADIENT)
        .thresholds(thresholds)
        .min(0)
    )
    panel = panel if maximum is None else panel.max(maximum)
    return _with_overrides(panel, overrides)


def heat(title: str, description: str, y_unit: str, query: Q, *, w: int = 12,
         h: int = 9, time: Time = Time(interval="1h")) -> heatmap.Panel:
    """A heatmap of a Prometheus histogram's buckets (already bucketed, not calculated).

    Cells count requests (one column per bar interval, see :func:`buckets`);
    ``y_unit`` is the unit of the histogram's bounds.
    """
    panel = _common(heatmap.Panel(), title, description, "short", [query], w=w, h=h, time=time)
    return (
        panel.calculate(False)
        .rows_frame(heatmap.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.LE).value("requests"))
        .y_axis(heatmap.YAxisConfig().unit(y_unit).axis_placement(cm.AxisPlacement.LEFT))
        .color(
            heatmap.HeatmapColorOptions().mode(hm.HeatmapColorMode.SCHEME).scheme("Spectral")
            .scale(hm.HeatmapColorScale.EXPONENTIAL).exponent(0.5).steps(64)
        )
        .cell_values(heatmap.CellValues().unit("short").decimals(0))
        .show_value(cm.VisibilityMode.NEVER)
        .cell_gap(1)
    )


def tabular(title: str, description: str, unit: str, *queries: Q, renames: dict[str, str],
            units: dict[str, str] | None = None, mappings: dict[str, dict[str, str]] | None = None,
            w: int = 12, h: int = 8, hidden: Sequence[str] = (),
            sort_by: str | None = None, time: Time = Time()) -> table.Panel:
    """A table of instant queries merged on their labels, ``Value #A`` ... renamed.

    ``hidden`` columns are dropped (after ``sort_by``, a column of the merged
    table, has ordered the rows); ``units`` and ``mappings`` are per column.
    """
    panel = _common(table.Panel(), title, description, unit, queries, w=w, h=h, time=time)
    panel = panel.with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
    if sort_by is not None:
        panel = panel.with_transformation(dm.DataTransformerConfig(
            id_val="sortBy", options={"fields": {}, "sort": [{"field": sort_by}]},
        ))
    exclude: dict[str, Any] = {"Time": True, **dict.fromkeys(hidden, True)}
    panel = panel.with_transformation(dm.DataTransformerConfig(
        id_val="organize", options={"excludeByName": exclude, "renameByName": renames},
    ))
    for name, field_unit in (units or {}).items():
        properties = [dm.DynamicConfigValue(id_val="unit", value=field_unit)]
        panel = panel.override_by_name(name, properties)
    for name, texts in (mappings or {}).items():
        value_map = dm.ValueMap(options={
            key: dm.ValueMappingResult(text=text, index=i)
            for i, (key, text) in enumerate(texts.items())
        })
        panel = panel.override_by_name(name, [dm.DynamicConfigValue(id_val="mappings",
                                                                    value=[value_map])])
    return panel


def note(title: str, content: str, *, w: int = 24, h: int = 4) -> text.Panel:
    """A Markdown text panel: what a figure assumes, or where to find what is not here."""
    panel = text.Panel().title(title).description(content.split("\n", 1)[0]).span(w).height(h)
    return panel.mode(tm.TextMode.MARKDOWN).content(content)


def colour(name_regexp: str, colour_name: str) -> tuple[str, list[dm.DynamicConfigValue]]:
    """An override giving fields whose name matches ``name_regexp`` a fixed colour."""
    return name_regexp, [dm.DynamicConfigValue(
        id_val="color", value={"mode": "fixed", "fixedColor": colour_name},
    )]


def renamed(name: str, display: str, colour_name: str) -> tuple[str, list[dm.DynamicConfigValue]]:
    """An override showing the series called exactly ``name`` as ``display``, in a colour."""
    return "^" + name + "$", [
        dm.DynamicConfigValue(id_val="displayName", value=display),
        dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": colour_name}),
    ]


def dashed_line(name: str, colour_name: str) -> tuple[str, list[dm.DynamicConfigValue]]:
    """An override drawing the series ``name`` as a dashed line over bars, not stacked.

    The line is left out of the legend (its legend total would add up a level,
    not an amount): say what it is in the panel's title.
    """
    return "^" + name + "$", [
        dm.DynamicConfigValue(id_val="custom.drawStyle", value="line"),
        dm.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}),
        dm.DynamicConfigValue(id_val="custom.lineWidth", value=2),
        dm.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
        dm.DynamicConfigValue(id_val="custom.stacking", value={"mode": "none", "group": "A"}),
        dm.DynamicConfigValue(id_val="custom.hideFrom",
                              value={"legend": True, "tooltip": False, "viz": False}),
        dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": colour_name}),
    ]


# ------------------------------------------------------------------- variables


def _query_variable(name: str, label: str, query: str, description: str, *,
                    with_all: bool = True, all_value: str | None = ".*") -> dash.QueryVariable:
    """A variable listing a label's values, with "All" unless ``with_all`` is false.

    "All" is the regex ``all_value``; with ``all_value=None`` it is the list of
    the values the variable query found, so it cannot match anything else.
    """
    variable = (
        dash.QueryVariable(name).label(label).description(description).datasource(DS)
        .query(query).refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
    )
    if with_all:
        variable = variable.multi(True).include_all(True).current(
            dm.VariableOption(selected=True, text=["All"], value=["$__all"])
        )
        if all_value is not None:
            variable = variable.all_value(all_value)
    return variable


def variables(*extra: str) -> list[dash.DatasourceVariable | dash.QueryVariable]:
    """Data source and target filters, then the ``extra`` ones (model, project, arch).

    ``job`` lists the jobs that scrape an exporter (those with
    ``claude_code_exporter_build_info``) and its "All" is exactly that list:
    ``up`` of a blackbox probe or of any other job in the same Prometheus is
    never counted. ``instance`` and ``user`` list the targets of those jobs.
    """
    found: list[dash.DatasourceVariable | dash.QueryVariable] = [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus").description(
            "The Prometheus that scrapes the exporters (job claude-code)."
        ),
        _query_variable("job", "Job", "label_values(claude_code_exporter_build_info, job)",
                        "Scrape jobs of the exporters (only jobs whose targets expose "
                        "claude_code_exporter_build_info).", all_value=None),
        _query_variable("instance", "Instance", 'label_values(up{job=~"$job"}, instance)',
                        "Exporters (one per machine), including those that are down."),
        _query_variable("user", "User", 'label_values(up{job=~"$job"}, user)',
                        "The `user` target label, if your scrape config sets one."),
    ]
    targets = '{job=~"$job", instance=~"$instance"}'
    per_request = f"claude_code_requests_total{targets}"
    known = {
        "model": _query_variable("model", "Model", f"label_values({per_request}, model)",
                                 "Model id as recorded in the transcripts."),
        "project": _query_variable("project", "Project", f"label_values({per_request}, project)",
                                   "Project label (policy set by the exporter's project_label)."),
        "arch": _query_variable(
            "arch", "Architecture",
            f"label_values(claude_code_kv_bytes_per_token{targets}, arch)",
            "Reference architecture for the per-request KV heatmap.", with_all=False,
        ),
    }
    return found + [known[name] for name in extra]
