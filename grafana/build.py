"""Generate the Grafana dashboards of ``grafana/dashboards/`` from code.

The dashboards are built with the Grafana Foundation SDK (typed builders
generated from Grafana's own schemas), then written as plain JSON that Grafana
imports or provisions as is. The committed JSON must equal this module's
output; ``tests/test_grafana.py`` checks it.

    python3 -m grafana.build           # rewrite grafana/dashboards/*.json
    python3 -m grafana.build --check   # exit 1 if a committed file is stale

It needs exactly ``grafana-foundation-sdk==1769699520!11.4.0`` (``SDK_VERSION``,
the SDK's build for Grafana 11.4, which ``deploy/compose.yaml`` runs): the SDK's
versions are ``<timestamp>!<Grafana version>``, so anything but an exact pin
may pick a build for another Grafana, and its output differs between builds.

Every query filters on the target labels ``job``, ``instance`` and ``user``
(dashboard variables, "All" by default) and aggregates them away unless the
panel is per exporter, so one dashboard serves one machine or a fleet. Metric
names are those of ``shared/design/metrics.md`` and the recording rules of
``deploy/prometheus/rules/claude-code-recording.yml``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TypeVar

from grafana_foundation_sdk.builders import bargauge, common, heatmap, prometheus, stat, table
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import timeseries as ts
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import prometheus as pm

OUT_DIR = Path(__file__).resolve().parent / "dashboards"
SDK_VERSION = "1769699520!11.4.0"
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
GBITS = (100, 400, 800)  # link speeds of the seed's transfer-time table, Gb/s


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
    """Bucket counts per heatmap cell: requests that landed in each ``le`` bucket."""
    return f"sum by (le) (increase({histogram}_bucket{sel(*extra)}[$__rate_interval]))"


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


def _thresholds(*steps: tuple[float | None, str]) -> dash.ThresholdsConfig:
    """Absolute thresholds; the first step's value is None (minus infinity)."""
    return (
        dash.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in steps])
    )


NEUTRAL = _thresholds((None, "blue"))
BUDGET = _thresholds((None, "green"), (0.8, "orange"), (1.0, "red"))

P = TypeVar("P", ts.Panel, stat.Panel, bargauge.Panel, heatmap.Panel, table.Panel)


def _common(panel: P, title: str, description: str, unit: str, queries: Sequence[Q], *,
            w: int, h: int) -> P:
    """Title, description, unit, size, data source and queries shared by all panels."""
    panel = (
        panel.title(title).description(description).unit(unit).span(w).height(h).datasource(DS)
    )
    return panel.targets([_target(i, q) for i, q in enumerate(queries)])


def timeseries(title: str, description: str, unit: str, *queries: Q, w: int = 12, h: int = 8,
               stacked: bool = False, lines: dash.ThresholdsConfig | None = None,
               log: bool = False) -> ts.Panel:
    """A time series panel; ``lines`` draws thresholds as dashed lines."""
    panel = _common(ts.Panel(), title, description, unit, queries, w=w, h=h)
    panel = panel.legend(
        common.VizLegendOptions().display_mode(cm.LegendDisplayMode.LIST)
        .placement(cm.LegendPlacement.BOTTOM).show_legend(True)
    ).fill_opacity(10).line_width(1)
    if stacked:
        stacking = common.StackingConfig().mode(cm.StackingMode.NORMAL)
        panel = panel.stacking(stacking).fill_opacity(40)
    if lines is not None:
        panel = panel.thresholds(lines).thresholds_style(
            common.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
        )
    if log:
        panel = panel.scale_distribution(
            common.ScaleDistributionConfig().type(cm.ScaleDistribution.LOG).log(10)
        )
    return panel


def single(title: str, description: str, unit: str, *queries: Q, w: int = 4, h: int = 4,
           thresholds: dash.ThresholdsConfig = NEUTRAL, decimals: int | None = None,
           sparkline: bool = False) -> stat.Panel:
    """A stat panel showing each query's last value."""
    panel = _common(stat.Panel(), title, description, unit, queries, w=w, h=h)
    panel = panel.reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"])).thresholds(
        thresholds
    ).graph_mode(cm.BigValueGraphMode.AREA if sparkline else cm.BigValueGraphMode.NONE)
    panel = panel.color_mode(cm.BigValueColorMode.VALUE)
    return panel if decimals is None else panel.decimals(decimals)


def bars(title: str, description: str, unit: str, *queries: Q, w: int = 8, h: int = 8,
         thresholds: dash.ThresholdsConfig = NEUTRAL,
         maximum: float | None = None) -> bargauge.Panel:
    """A horizontal bar gauge, one bar per series (last value)."""
    panel = _common(bargauge.Panel(), title, description, unit, queries, w=w, h=h)
    panel = (
        panel.reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))
        .orientation(cm.VizOrientation.HORIZONTAL)
        .display_mode(cm.BarGaugeDisplayMode.GRADIENT)
        .thresholds(thresholds)
        .min(0)
    )
    return panel if maximum is None else panel.max(maximum)


def heat(title: str, description: str, y_unit: str, query: Q, *, w: int = 12,
         h: int = 9) -> heatmap.Panel:
    """A heatmap of a Prometheus histogram's buckets (already bucketed, not calculated).

    Cells count requests; ``y_unit`` is the unit of the histogram's bounds.
    """
    panel = _common(heatmap.Panel(), title, description, "short", [query], w=w, h=h)
    return (
        panel.calculate(False)
        .rows_frame(heatmap.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.LE).value("requests"))
        .y_axis(heatmap.YAxisConfig().unit(y_unit).axis_placement(cm.AxisPlacement.LEFT))
        .color(
            heatmap.HeatmapColorOptions().mode(hm.HeatmapColorMode.SCHEME).scheme("Spectral")
            .scale(hm.HeatmapColorScale.EXPONENTIAL).exponent(0.5).steps(64)
        )
        .cell_values(heatmap.CellValues().unit("short"))
        .show_value(cm.VisibilityMode.NEVER)
        .cell_gap(1)
    )


def tabular(title: str, description: str, unit: str, *queries: Q, renames: dict[str, str],
            units: dict[str, str] | None = None, mappings: dict[str, dict[str, str]] | None = None,
            w: int = 12, h: int = 8) -> table.Panel:
    """A table of instant queries merged on their labels, ``Value #A`` ... renamed."""
    panel = _common(table.Panel(), title, description, unit, queries, w=w, h=h)
    panel = panel.with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
    panel = panel.with_transformation(dm.DataTransformerConfig(
        id_val="organize",
        options={"excludeByName": {"Time": True}, "renameByName": renames},
    ))
    for name, field_unit in (units or {}).items():
        unit_value = dm.DynamicConfigValue(id_val="unit", value=field_unit)
        panel = panel.override_by_name(name, [unit_value])
    for name, texts in (mappings or {}).items():
        value_map = dm.ValueMap(options={
            key: dm.ValueMappingResult(text=text, index=i)
            for i, (key, text) in enumerate(texts.items())
        })
        panel = panel.override_by_name(name, [dm.DynamicConfigValue(id_val="mappings",
                                                                    value=[value_map])])
    return panel


def colour(name_regexp: str, colour_name: str) -> tuple[str, list[dm.DynamicConfigValue]]:
    """An override giving fields whose name matches ``name_regexp`` a fixed colour."""
    return name_regexp, [dm.DynamicConfigValue(
        id_val="color", value={"mode": "fixed", "fixedColor": colour_name},
    )]


# ------------------------------------------------------------------- variables


def _query_variable(name: str, label: str, query: str, description: str, *,
                    with_all: bool = True) -> dash.QueryVariable:
    """A variable listing a label's values; with "All" (regex ``.*``) unless ``with_all``."""
    variable = (
        dash.QueryVariable(name).label(label).description(description).datasource(DS)
        .query(query).refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
    )
    if with_all:
        variable = variable.multi(True).include_all(True).all_value(".*").current(
            dm.VariableOption(selected=True, text=["All"], value=["$__all"])
        )
    return variable


def variables(*extra: str) -> list[dash.DatasourceVariable | dash.QueryVariable]:
    """Data source and target filters, then the ``extra`` ones (model, project, arch)."""
    found: list[dash.DatasourceVariable | dash.QueryVariable] = [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus").description(
            "The Prometheus that scrapes the exporters (job claude-code)."
        ),
        _query_variable("job", "Job", "label_values(claude_code_exporter_build_info, job)",
                        "Scrape job(s) of the exporters."),
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


# ------------------------------------------------------------------ dashboards

AnyPanel = ts.Panel | stat.Panel | bargauge.Panel | heatmap.Panel | table.Panel
Row = tuple[str, list[AnyPanel]]


def row(title: str, panels: list[AnyPanel]) -> Row:
    """A dashboard row: its title and its panels, left to right, top to bottom."""
    return title, panels


def board(uid: str, title: str, description: str,
          variable_list: Sequence[dash.DatasourceVariable | dash.QueryVariable],
          rows: Sequence[Row]) -> dm.Dashboard:
    """A dashboard: shared settings, links to its siblings, rows of panels, numbered ids."""
    builder = (
        dash.Dashboard(title).uid(uid).description(description).tags([TAG])
        .time("now-24h", "now").refresh("1m").timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .link(
            dash.DashboardLink("Claude Code").type(dm.DashboardLinkType.DASHBOARDS).tags([TAG])
            .as_dropdown(True).include_vars(True).keep_time(True)
        )
        .annotation(
            dash.AnnotationQuery().name("Annotations & Alerts").built_in(1).type("dashboard")
            .datasource(dm.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .enable(True).hide(True).icon_color("rgba(0, 211, 255, 1)")
        )
    )
    for variable in variable_list:
        builder = builder.with_variable(variable)
    for row_title, panels in rows:
        builder = builder.with_row(dash.Row(row_title))
        for panel in panels:
            builder = builder.with_panel(panel)
    model = builder.build()
    _layout(model.panels or [])
    for number, panel_model in enumerate(model.panels or [], start=1):
        panel_model.id_val = number
    return model


GRID_COLUMNS = 24


def _layout(panels: Sequence[dm.Panel | dm.RowPanel]) -> None:
    """Place panels left to right, wrapping before a panel that would overflow the grid.

    (The SDK's own placement wraps only after a line is full, so a wide panel
    could start past the middle and stick out.) Each row starts a new line.
    """
    x = y = line = 0
    for panel in panels:
        if isinstance(panel, dm.RowPanel):
            y, x, line = y + line, 0, 0
            panel.grid_pos = dm.GridPos(h=1, w=GRID_COLUMNS, x=0, y=y)
            y += 1
            continue
        pos = panel.grid_pos or dm.GridPos()
        if x + pos.w > GRID_COLUMNS:
            y, x, line = y + line, 0, 0
        pos.x, pos.y = x, y
        panel.grid_pos = pos
        x += pos.w
        line = max(line, pos.h)


def usage() -> dm.Dashboard:
    """Usage & cost: spend against the budgets, by model, token type and project."""
    mp = (MODEL, PROJECT)
    cost = "claude_code_cost_usd_total"
    in_range = "[$__range]"
    spend = row(
        "Spend and budgets",
        [
            single("Spent, last 24 h", "Estimated list-price USD of the last 24 hours (rolling), "
                   "from the recording rule claude_code:cost_usd:increase1d: the figure the "
                   "daily-budget alert compares. All models and projects.",
                   "currencyUSD", Q(f"sum(claude_code:cost_usd:increase1d{sel()})"),
                   sparkline=True),
            single("Daily budget", "claude_code_budget_usd{period=\"day\"} from the exporters' "
                   "configuration (budget_day_usd), summed over the selected exporters. "
                   "No value: no budget set.", "currencyUSD",
                   Q(f'sum(claude_code_budget_usd{sel(DAY)} > 0)')),
            single("Spent, last 30 days", "Estimated USD of the last 30 days (rolling), from "
                   "claude_code:cost_usd:increase30d (the hourly spend summed at each full hour; "
                   "needs more than 30 days of Prometheus retention to be complete).",
                   "currencyUSD", Q(f"sum(claude_code:cost_usd:increase30d{sel()})"),
                   sparkline=True),
            single("Monthly budget", "claude_code_budget_usd{period=\"month\"} (budget_month_usd), "
                   "summed over the selected exporters. No value: no budget set.", "currencyUSD",
                   Q(f'sum(claude_code_budget_usd{sel(MONTH)} > 0)')),
            single("Spend rate, last 15 min (USD/h)", "USD per hour over the last 15 minutes "
                   "(claude_code:cost_usd_per_hour:rate15m), the spend-spike alert's input.",
                   "currencyUSD", Q(f"sum(claude_code:cost_usd_per_hour:rate15m{sel()})"),
                   sparkline=True),
            single("Spent in the selected range", "Estimated USD in the dashboard's time range, "
                   "for the selected models and projects. Pick \"Today so far\" in the time "
                   "picker for the calendar day.", "currencyUSD",
                   Q(f"sum(increase({cost}{sel(*mp)}{in_range}))", instant=True)),
            bars("Daily budget used, per exporter", "Last 24 h spend / daily budget for each "
                 "exporter (as the ClaudeCodeDailyBudgetExceeded alert compares them). Over 100 %: "
                 "the alert fires after 5 minutes.", "percentunit",
                 Q(f"claude_code:cost_usd:increase1d{sel()} / ignoring (period) "
                   f'(claude_code_budget_usd{sel(DAY)} > 0)',
                   "{{user}} {{instance}}"), w=12, h=6, thresholds=BUDGET, maximum=1),
            bars("Monthly budget used, per exporter", "Last 30 days spend / monthly budget for "
                 "each exporter (ClaudeCodeMonthlyBudgetExceeded).", "percentunit",
                 Q(f"claude_code:cost_usd:increase30d{sel()} / ignoring (period) "
                   f'(claude_code_budget_usd{sel(MONTH)} > 0)',
                   "{{user}} {{instance}}"), w=12, h=6, thresholds=BUDGET, maximum=1),
        ],
    )
    costs = row(
        "Cost",
        [
            timeseries("Spend rate by model (USD/h)", "Estimated USD per hour, by model, for the "
                       "selected models and projects.", "currencyUSD",
                       Q(f"sum by (model) (rate({cost}{sel(*mp)}[$__rate_interval])) * 3600",
                         "{{model}}"), stacked=True),
            timeseries("Spend rate by token type (USD/h)", "Estimated USD per hour by token type: "
                       "input, output, cache_read, cache_write_5m, cache_write_1h. Cache writes "
                       "cost 1.25x (5 min) or 2x (1 h) input, reads 0.1x.", "currencyUSD",
                       Q(f"sum by (type) (rate({cost}{sel(*mp)}[$__rate_interval])) * 3600",
                         "{{type}}"), stacked=True),
            bars("Cost by model, selected range", "Estimated USD per model in the time range.",
                 "currencyUSD",
                 Q(f"sum by (model) (increase({cost}{sel(*mp)}{in_range}))", "{{model}}",
                   instant=True)),
            bars("Cost by token type, selected range", "Estimated USD per token type in the time "
                 "range.", "currencyUSD",
                 Q(f"sum by (type) (increase({cost}{sel(*mp)}{in_range}))", "{{type}}",
                   instant=True)),
            bars("Top projects by cost, selected range", "The ten projects with the highest "
                 "estimated USD in the time range (project label policy: project_label).",
                 "currencyUSD",
                 Q(f"topk(10, sum by (project) (increase({cost}{sel(*mp)}{in_range})))",
                   "{{project}}", instant=True)),
            timeseries("Spend per exporter, hourly average (USD/h)", "USD per hour over the last "
                       "hour per exporter (recording rule claude_code:cost_usd_per_hour:rate1h). "
                       "All models and projects.", "currencyUSD",
                       Q(f"sum by (instance, user) (claude_code:cost_usd_per_hour:rate1h{sel()})",
                         "{{user}} {{instance}}")),
            timeseries("Spend by model, hourly average (USD/h)", "USD per hour over the last hour "
                       "by model (recording rule claude_code:cost_usd_per_hour_by_model:rate1h).",
                       "currencyUSD",
                       Q("sum by (model) "
                         f"(claude_code:cost_usd_per_hour_by_model:rate1h{sel(MODEL)})",
                         "{{model}}")),
        ],
    )
    tokens = row(
        "Tokens and requests",
        [
            timeseries("Tokens by type", "Tokens per second by type. Prompt tokens are input + "
                       "cache_read + cache writes; agent workloads are mostly cache reads.",
                       "count:tok/s",
                       Q("sum by (type) (rate(claude_code_tokens_total"
                         f"{sel(*mp)}[$__rate_interval]))", "{{type}}"), stacked=True),
            timeseries("Requests by source", "Billed API requests per second: main chain, "
                       "subagents (sidechains) and compaction calls.", "reqps",
                       Q("sum by (source) (rate(claude_code_requests_total"
                         f"{sel(*mp)}[$__rate_interval]))", "{{source}}"), stacked=True),
            single("Requests, selected range", "Billed API requests in the time range (the seed: "
                   "1,299 requests in 4 sessions over 3 days).", "short",
                   Q(f"sum(increase(claude_code_requests_total{sel(*mp)}{in_range}))",
                     instant=True), w=4, h=8),
            single("Tokens, selected range", "All tokens (every type) in the time range.",
                   "count:tok",
                   Q(f"sum(increase(claude_code_tokens_total{sel(*mp)}{in_range}))",
                     instant=True), w=4, h=8),
            single("Unpriced tokens, selected range", "Tokens of models with no known price: "
                   "their cost is missing from every USD figure. Add the model under [pricing] "
                   "in the exporter's config.", "count:tok",
                   Q(f"sum(increase(claude_code_unpriced_tokens_total{sel(MODEL)}{in_range}))",
                     instant=True),
                   thresholds=_thresholds((None, "green"), (1, "orange")), w=4, h=8),
            bars("Requests by project, selected range", "The ten projects with the most requests "
                 "in the time range.", "short",
                 Q("topk(10, sum by (project) (increase(claude_code_requests_total"
                   f"{sel(*mp)}{in_range})))", "{{project}}", instant=True), w=12, h=8),
        ],
    )
    return board(
        "claude-code-usage", "Claude Code / Usage & cost",
        "Estimated list-price spend of Claude Code against the budgets, by model, token type "
        "and project, from claude-code-exporter.",
        variables("model", "project"), [spend, costs, tokens],
    )


GAP_NAMES = {"first": "first request", "lt_5m": "≤ 5 min", "5m_to_1h": "5 min – 1 h",
             "gt_1h": "> 1 h"}


def _gap_share(le: str, above: bool) -> str:
    """Share of idle gaps at or below (or above) the bucket bound ``le`` seconds."""
    bound = f'le="{le}"'
    gaps = f"sum(increase(claude_code_request_gap_seconds_count{sel()}[$__range]))"
    below = f"sum(increase(claude_code_request_gap_seconds_bucket{sel(bound)}[$__range]))"
    return f"({gaps} - {below}) / {gaps}" if above else f"{below} / {gaps}"


def _rewritten(gaps: str) -> str:
    """Share of prompt tokens written to the cache for requests after the ``gaps`` buckets."""
    tokens = "claude_code_prompt_tokens_after_gap_total"
    bucket = f'gap=~"{gaps}"'
    write = f"sum(increase({tokens}{sel(bucket, CACHE_WRITE)}[$__range]))"
    every = f"sum(increase({tokens}{sel(bucket, GAP_TYPES)}[$__range]))"
    return f"{write} / ({every} > 0)"


def cache() -> dm.Dashboard:
    """Cache & context: cache reads, rewrite after idle gaps, context and output sizes."""
    mp = (MODEL, PROJECT)
    ctx, out, gap = ("claude_code_request_context_tokens", "claude_code_request_output_tokens",
                     "claude_code_request_gap_seconds")
    after_gap = "claude_code_requests_after_gap_total"
    prompt_after_gap = "claude_code_prompt_tokens_after_gap_total"
    share_steps = _thresholds((None, "red"), (0.5, "orange"), (0.85, "green"))
    prompt_cache = row(
        "Prompt cache",
        [
            single("Cache-read share, selected range", "Cache reads / all prompt tokens (input + "
                   "cache reads + cache writes). The seed: 96.9 %; agent workloads 85-97 %. "
                   "Under 50 % with real traffic raises ClaudeCodeCacheReadShareLow.",
                   "percentunit",
                   Q("sum(increase(claude_code_tokens_total"
                     f"{sel(*mp, CACHE_READ)}[$__range])) / "
                     f"sum(increase(claude_code_tokens_total{sel(*mp, PROMPT_TYPES)}[$__range]))",
                     instant=True), thresholds=share_steps, decimals=1, w=6),
            single("Prompt rewritten after ≤ 5 min idle", "Share of the prompt written to the "
                   "cache by requests that followed at most 5 minutes idle (gap bucket lt_5m), "
                   "selected range. The seed: 2.1 %.", "percentunit",
                   Q(_rewritten("lt_5m"), instant=True), decimals=1, w=6),
            single("Prompt rewritten after > 5 min idle", "The same for requests after more than "
                   "5 minutes idle (buckets 5m_to_1h and gt_1h): the 5-minute cache has expired.",
                   "percentunit", Q(_rewritten("5m_to_1h|gt_1h"), instant=True), decimals=1,
                   w=6),
            single("Prompt rewritten after > 1 h idle", "The same after more than an hour idle "
                   "(gt_1h): both cache TTLs have expired and the whole context is re-written. "
                   "The seed: 85.5 %.", "percentunit",
                   Q(_rewritten("gt_1h"), instant=True), decimals=1, w=6),
            tabular("Idle gap and cache rewrite (the seed's table)", "Per gap bucket (time since "
                    "the session's previous main-chain request): requests, their share of all "
                    "gaps (the first request of a session has none), and the share of their "
                    "prompt tokens written to the cache, selected range. The seed: ≤ 5 min "
                    "96.5 % of gaps / 2.1 % written; > 1 h 1.0 % / 85.5 %.", "percentunit",
                    Q(f"sum by (gap) (increase({after_gap}{sel()}[$__range]))",
                      instant=True, fmt=pm.PromQueryFormat.TABLE),
                    Q(f"sum by (gap) (increase({after_gap}{sel(NOT_FIRST)}[$__range]))"
                      " / on () group_left () "
                      f"sum(increase({after_gap}{sel(NOT_FIRST)}[$__range]))",
                      instant=True, fmt=pm.PromQueryFormat.TABLE),
                    Q(f"sum by (gap) (increase({prompt_after_gap}"
                      f"{sel(CACHE_WRITE)}[$__range])) / (sum by (gap) "
                      f"(increase({prompt_after_gap}"
                      f"{sel(GAP_TYPES)}[$__range])) > 0)",
                      instant=True, fmt=pm.PromQueryFormat.TABLE),
                    renames={"gap": "Idle gap before the request", "Value #A": "Requests",
                             "Value #B": "Share of gaps",
                             "Value #C": "Share of prompt written to cache"},
                    units={"Requests": "short"},
                    mappings={"Idle gap before the request": GAP_NAMES}),
            timeseries("Prompt rewritten after idle, per exporter (24 h)", "Recording rules "
                       "claude_code:cache_write_share_after_5m_idle:rate1d and "
                       "..._after_1h_idle:rate1d, and the ≤ 5 min bucket of "
                       "claude_code:cache_write_share_by_gap:rate1d: rolling one-day shares per "
                       "exporter.", "percentunit",
                       Q(f"claude_code:cache_write_share_by_gap:rate1d{sel(LT_5M)}",
                         "{{user}} {{instance}} ≤ 5 min"),
                       Q(f"claude_code:cache_write_share_after_5m_idle:rate1d{sel()}",
                         "{{user}} {{instance}} > 5 min"),
                       Q(f"claude_code:cache_write_share_after_1h_idle:rate1d{sel()}",
                         "{{user}} {{instance}} > 1 h")),
            timeseries("Cache-read share per exporter (1 h)", "Recording rule "
                       "claude_code:cache_read_share:rate1h; the dashed line is the 50 % "
                       "threshold of ClaudeCodeCacheReadShareLow.", "percentunit",
                       Q(f"claude_code:cache_read_share:rate1h{sel()}", "{{user}} {{instance}}"),
                       lines=_thresholds((None, "red"), (0.5, "green"))),
            timeseries("Prompt tokens by type", "Prompt tokens per second: input, cache reads and "
                       "cache writes (5 min and 1 h TTL).", "count:tok/s",
                       Q("sum by (type) (rate(claude_code_tokens_total"
                         f"{sel(*mp, PROMPT_TYPES)}[$__rate_interval]))", "{{type}}"),
                       stacked=True),
        ],
    )
    context = row(
        "Context size per request",
        [
            single("Context p50, selected range", "Median prompt size (input + cache read + cache "
                   "writes) per request, from the histogram (interpolated within buckets). The "
                   "seed: 456,875 tokens.", "count:tok",
                   Q(quantile(0.5, ctx, "$__range", MODEL), instant=True), w=4, h=8),
            single("Context p90, selected range", "90th percentile of the prompt size. The seed: "
                   "842,140 tokens.", "count:tok",
                   Q(quantile(0.9, ctx, "$__range", MODEL), instant=True), w=4, h=8),
            single("Context mean, selected range", "Mean prompt size per request.", "count:tok",
                   Q(f"sum(increase({ctx}_sum{sel(MODEL)}[$__range])) / "
                     f"sum(increase({ctx}_count{sel(MODEL)}[$__range]))", instant=True),
                   w=4, h=8),
            timeseries("Context p50 / p90, 1-hour window", "Percentiles of the prompt size over "
                       "the preceding hour.", "count:tok",
                       Q(quantile(0.5, ctx, "1h", MODEL), "p50"),
                       Q(quantile(0.9, ctx, "1h", MODEL), "p90")),
            heat("Context size distribution", "Requests per context-size bucket over time "
                 "(bucket bounds 1k ... 1M tokens). Long agent sessions climb towards the top "
                 "until a compaction.", "count:tok", Q(buckets(ctx, MODEL), "{{le}}",
                                                       fmt=pm.PromQueryFormat.HEATMAP), w=24),
        ],
    )
    gaps = row(
        "Idle gaps (prompt-cache TTL 5 min and 1 h)",
        [
            single("Gaps ≤ 5 min", "Share of gaps between a session's main-chain requests of at "
                   "most 5 minutes: the 5-minute cache is still warm. The seed: 96.5 %.",
                   "percentunit", Q(_gap_share("300", above=False), instant=True), decimals=1),
            single("Gaps > 5 min", "Share of gaps over 5 minutes (5-minute cache expired). The "
                   "seed: 3.5 %.", "percentunit", Q(_gap_share("300", above=True), instant=True),
                   decimals=1),
            single("Gaps > 1 h", "Share of gaps over an hour (both TTLs expired). The seed: "
                   "1.0 % (13 requests).", "percentunit",
                   Q(_gap_share("3600", above=True), instant=True), decimals=1),
            single("Requests after > 1 h idle", "Requests after more than an hour idle in the "
                   "time range: each re-writes its whole context to the cache.", "short",
                   Q(f"sum(increase({after_gap}{sel(GT_1H)}[$__range]))", instant=True)),
            single("Gap p50, selected range", "Median gap between a session's requests. The seed: "
                   "10.7-15.2 s.", "s", Q(quantile(0.5, gap, "$__range"), instant=True)),
            single("Gap p90, selected range", "90th percentile of the gap. The seed: 35-89 s.",
                   "s", Q(quantile(0.9, gap, "$__range"), instant=True)),
            heat("Idle gap before each request", "Requests per gap bucket over time; the rows "
                 "le=300 and le=3600 end at the 5-minute and 1-hour cache TTLs.", "s",
                 Q(buckets(gap), "{{le}}", fmt=pm.PromQueryFormat.HEATMAP)),
            timeseries("Gap p50 / p90, 1-hour window", "Percentiles of the idle gap over the "
                       "preceding hour; the dashed lines are the cache TTLs (300 s, 3600 s).",
                       "s", Q(quantile(0.5, gap, "1h"), "p50"), Q(quantile(0.9, gap, "1h"), "p90"),
                       lines=_thresholds((None, "green"), (300, "orange"), (3600, "red")),
                       log=True),
            _gap_bars(),
            timeseries("Requests by gap bucket", "Main-chain requests per second by the gap "
                       "before them (first, lt_5m, 5m_to_1h, gt_1h).", "reqps",
                       Q(f"sum by (gap) (rate({after_gap}{sel()}[$__rate_interval]))", "{{gap}}"),
                       stacked=True),
        ],
    )
    output = row(
        "Output and sessions",
        [
            single("Output p50, selected range", "Median output tokens per request. The seed: "
                   "582.", "count:tok", Q(quantile(0.5, out, "$__range", MODEL), instant=True),
                   w=6, h=8),
            single("Output p90, selected range", "90th percentile of output tokens per request. "
                   "The seed: 3,321.", "count:tok",
                   Q(quantile(0.9, out, "$__range", MODEL), instant=True), w=6, h=8),
            timeseries("Active sessions", "Sessions whose last request is younger than the cache "
                       "TTL (5 min, 1 h). The seed: at most 3 sessions in one 10-minute window.",
                       "short",
                       Q(f"sum by (ttl) (claude_code_active_sessions{sel()})", "TTL {{ttl}}"),
                       h=8),
            heat("Output size distribution", "Requests per output-size bucket over time (10 ... "
                 "64k tokens): long prefixes, short outputs.", "count:tok",
                 Q(buckets(out, MODEL), "{{le}}", fmt=pm.PromQueryFormat.HEATMAP), w=24, h=8),
        ],
    )
    return board(
        "claude-code-cache", "Claude Code / Cache & context",
        "Prompt-cache behaviour of Claude Code: cache-read share, cache rewrites after idle "
        "gaps (5 min and 1 h TTLs), context and output sizes, active sessions.",
        variables("model", "project"), [prompt_cache, context, gaps, output],
    )


def _gap_bars() -> bargauge.Panel:
    """Requests per gap bucket in the range, coloured by which cache TTLs they outlived."""
    warm = "1|2|5|10|15|20|30|45|60|90|120|180|240|300"
    only_1h = "600|900|1800|3600"
    cold = "7200|14400|43200|86400|\\+Inf"
    panel = bars(
        "Gap distribution, selected range", "Requests per gap bucket (upper bound in seconds). "
        "Green: within the 5-minute TTL; orange: only a 1-hour cache survives; red: both "
        "expired.", "short",
        Q(f"sum by (le) (increase(claude_code_request_gap_seconds_bucket{sel()}[$__range]))",
          "≤ {{le}} s", instant=True, fmt=pm.PromQueryFormat.HEATMAP),
        w=12, h=9,
    )
    for regexp, properties in (colour(f"^≤ ({warm}) s$", "green"),
                               colour(f"^≤ ({only_1h}) s$", "orange"),
                               colour(f"^≤ ({cold}) s$", "red")):
        panel = panel.override_by_regexp(regexp, properties)
    return panel


def _kv_at(q: float, label: str) -> str:
    """KV bytes of the ``q``-quantile context per architecture, labelled ``context=label``."""
    context = quantile(q, "claude_code_request_context_tokens", "$__range", MODEL)
    per_token = f"max by (arch) (claude_code_kv_bytes_per_token{sel()})"
    return f'label_replace(scalar({context}) * {per_token}, "context", "{label}", "", "")'


def serving() -> dm.Dashboard:
    """Serving-side estimates: KV-cache bytes, transfer times, warm KV, upload bandwidth."""
    kv_both = f"({_kv_at(0.5, 'p50')} or {_kv_at(0.9, 'p90')})"
    upload = f"sum(claude_code:upload_bytes_per_second:rate5m{sel()}) * 8"
    per_session = f'{upload} / sum(claude_code_active_sessions{sel(TTL_5M)})'
    up_hist = "claude_code_request_upload_bytes"
    p90_hour = quantile(0.9, "claude_code_request_context_tokens", "1h", MODEL)
    transfer_queries = [Q(f"{kv_both} * 8 / {g}e9", instant=True, fmt=pm.PromQueryFormat.TABLE)
                        for g in GBITS]
    kv = row(
        "KV cache per request (estimate)",
        [
            bars("KV bytes per token", "Reference architectures (exporter setting "
                 "kv_bytes_per_token): mla = DeepSeek-V3-like, 61 layers x 576 dims x 2 bytes = "
                 "70,272 B; gqa = Llama-3.1-405B-like, 126 layers x 8 KV heads x 128 dims x 2 "
                 "(K, V) x 2 bytes = 516,096 B. Anthropic does not publish its models' shape: "
                 "these are orders of magnitude.", "decbytes",
                 Q(f"max by (arch) (claude_code_kv_bytes_per_token{sel()})", "{{arch}}",
                   instant=True), w=6, h=8),
            tabular("KV cache of the median and p90 context, and its transfer time",
                    "Context p50 / p90 of the selected range x bytes per token, and the time to "
                    "move it over one link (bytes x 8 / rate). The seed: 457k tokens -> 32 GB "
                    "(mla) / 236 GB (gqa); 0.64 s / 4.7 s at 400 Gb/s.", "s",
                    Q(kv_both, instant=True, fmt=pm.PromQueryFormat.TABLE), *transfer_queries,
                    renames={"arch": "Architecture", "context": "Context",
                             "Value #A": "KV bytes",
                             **{f"Value #{chr(ord('B') + i)}": f"at {g} Gb/s"
                                for i, g in enumerate(GBITS)}},
                    units={"KV bytes": "decbytes"}, w=18, h=8),
            heat("KV cache per request ($arch)", "Requests per bucket of estimated KV-cache size "
                 "(context x bytes per token of the chosen architecture).", "decbytes",
                 Q(buckets("claude_code_request_kv_cache_bytes", ARCH), "{{le}}",
                   fmt=pm.PromQueryFormat.HEATMAP)),
            timeseries("Transfer time of the p90 context's KV at 400 Gb/s", "KV bytes of the "
                       "p90 context of the preceding hour x 8 / 400 Gb/s, per architecture: "
                       "moving a session's cache inside a fast fabric takes seconds; across "
                       "regions it is usually cheaper to recompute.", "s",
                       Q(f"scalar({p90_hour}) * max by (arch) "
                         f"(claude_code_kv_bytes_per_token{sel()}) * 8 / 400e9",
                         "{{arch}}")),
        ],
    )
    warm = row(
        "KV held and computed by the provider (estimate)",
        [
            timeseries("KV cache held warm", "Estimated KV bytes kept warm for the sessions "
                       "whose cache has not expired (last context x bytes per token).",
                       "decbytes",
                       Q(f"sum by (arch) (claude_code_warm_kv_cache_bytes{sel()})", "{{arch}}")),
            timeseries("KV computed by the provider", "Estimated KV bytes per second the provider "
                       "had to compute (input + cache writes, i.e. the prefill the cache did not "
                       "save), recording rule claude_code:kv_recomputed_bytes_per_second:rate5m.",
                       "Bps",
                       Q("sum by (arch) "
                         f"(claude_code:kv_recomputed_bytes_per_second:rate5m{sel()})",
                         "{{arch}}")),
        ],
    )
    uploads = row(
        "Upload to the API (estimate)",
        [
            single("Upload bandwidth now", "Estimated bits per second sent to the API (every "
                   "request re-sends the whole conversation), recording rule "
                   "claude_code:upload_bytes_per_second:rate5m x 8.", "bps", Q(upload),
                   sparkline=True),
            single("Per active session", "Upload bandwidth / sessions active in the last "
                   "5 minutes. The seed: about 1 Mbit/s per session.", "bps", Q(per_session)),
            single("At a million such sessions", "Per-session upload x 1,000,000: the seed's "
                   "back-of-envelope for a large provider, about 1 Tbit/s.", "bps",
                   Q(f"({per_session}) * 1e6")),
            single("Request body p50, selected range", "Median estimated request size (context "
                   "x upload_bytes_per_token). The seed: 1-2 MB.", "decbytes",
                   Q(quantile(0.5, up_hist, "$__range"), instant=True)),
            single("Request body p90, selected range", "90th percentile of the request size.",
                   "decbytes", Q(quantile(0.9, up_hist, "$__range"), instant=True)),
            single("Uploaded, selected range", "Estimated bytes sent to the API in the time "
                   "range.", "decbytes",
                   Q(f"sum(increase(claude_code_upload_bytes_total{sel()}[$__range]))",
                     instant=True)),
            timeseries("Upload bandwidth per exporter", "Estimated upload bit rate per exporter "
                       "(recording rule claude_code:upload_bytes_per_second:rate5m x 8).", "bps",
                       Q("sum by (instance, user) "
                         f"(claude_code:upload_bytes_per_second:rate5m{sel()}) * 8",
                         "{{user}} {{instance}}")),
            heat("Request body size", "Requests per bucket of estimated request size.",
                 "decbytes", Q(buckets(up_hist), "{{le}}", fmt=pm.PromQueryFormat.HEATMAP)),
        ],
    )
    return board(
        "claude-code-serving", "Claude Code / Serving-side estimates",
        "What Claude Code's requests mean on the serving side, estimated from reference "
        "architectures: KV-cache bytes, transfer times at 100/400/800 Gb/s, warm KV, upload "
        "bandwidth.",
        variables("model", "arch"), [kv, warm, uploads],
    )


def exporter() -> dm.Dashboard:
    """Exporter health: targets, lines read and rejected, ledger, lag, alerts."""
    by_target = "max by (job, instance, user)"
    up_names = {"0": "down", "1": "up"}
    targets = row(
        "Exporters",
        [
            single("Exporters up", "Targets of the selected jobs answering scrapes (up == 1).",
                   "short", Q(f"sum(up{sel()})"), w=4, h=8),
            single("Exporters down", "Targets not answering (up == 0): their figures are stale "
                   "and budget alerts cannot fire for them (ClaudeCodeExporterDown).", "short",
                   Q(f"count(up{sel()} == 0) or vector(0)"),
                   thresholds=_thresholds((None, "green"), (1, "red")), w=4, h=8),
            single("Newest request age", "Time since the newest request any selected exporter "
                   "has seen. Growing while you are working means the exporter is not "
                   "following the transcripts.", "s",
                   Q(f"time() - max(claude_code_last_request_timestamp_seconds{sel()})"), w=4, h=8),
            tabular("Exporters", "One row per target: version, up, rows in the ledger, files "
                    "watched, age of the newest request.", "short",
                    Q(f"max by (job, instance, user, version) "
                      f"(claude_code_exporter_build_info{sel()})",
                      instant=True, fmt=pm.PromQueryFormat.TABLE),
                    Q(f"{by_target} (up{sel()})", instant=True, fmt=pm.PromQueryFormat.TABLE),
                    Q(f"{by_target} (claude_code_exporter_ledger_requests{sel()})",
                      instant=True, fmt=pm.PromQueryFormat.TABLE),
                    Q(f"{by_target} (claude_code_exporter_files_watched{sel()})",
                      instant=True, fmt=pm.PromQueryFormat.TABLE),
                    Q(f"time() - {by_target} (claude_code_last_request_timestamp_seconds{sel()})",
                      instant=True, fmt=pm.PromQueryFormat.TABLE),
                    renames={"Value #A": "build_info", "Value #B": "Up",
                             "Value #C": "Ledger rows", "Value #D": "Files watched",
                             "Value #E": "Newest request age"},
                    units={"Newest request age": "s"}, mappings={"Up": up_names}, w=12),
        ],
    )
    lines = row(
        "Transcript lines",
        [
            timeseries("Lines read by result", "Transcript lines per second: usage (a new "
                       "request), duplicate (a request already known), other (no usage), "
                       "rejected (malformed).", "count:lines/s",
                       Q("sum by (result) (rate(claude_code_exporter_lines_total"
                         f"{sel()}[$__rate_interval]))", "{{result}}"), stacked=True),
            timeseries("Rejected lines", "Malformed lines per second by reason, and all reasons "
                       "over 5 minutes (recording rule "
                       "claude_code:rejected_lines_per_second:rate5m). Rejected usage is missing "
                       "from every figure.", "count:lines/s",
                       Q("sum by (reason) (rate(claude_code_exporter_rejected_lines_total"
                         f"{sel()}[$__rate_interval]))", "{{reason}}"),
                       Q(f"sum(claude_code:rejected_lines_per_second:rate5m{sel()})",
                         "all reasons (5 min)")),
            bars("Rejected lines by reason, selected range", "Malformed lines in the time range "
                 "by reason (invalid_json, invalid_utf8, not_object, bad_usage, negative_tokens, "
                 "missing_id, bad_timestamp, bad_message, too_long).", "short",
                 Q("sum by (reason) (increase(claude_code_exporter_rejected_lines_total"
                   f"{sel()}[$__range]))", "{{reason}}", instant=True)),
            timeseries("Transcript bytes read", "Bytes of transcript read per second.", "Bps",
                       Q("sum by (instance) (rate(claude_code_exporter_bytes_read_total"
                         f"{sel()}[$__rate_interval]))", "{{instance}}"), w=8),
            single("Late updates, selected range", "Request upgrades that arrived after the "
                   "request had entered the histograms (counters took them, histograms kept the "
                   "earlier values).", "short",
                   Q(f"sum(increase(claude_code_exporter_late_updates_total{sel()}[$__range]))",
                     instant=True), w=8, h=8),
        ],
    )
    ledger = row(
        "Ledger and scrapes",
        [
            timeseries("Ledger rows", "Requests in each exporter's ledger (never decreases: rows "
                       "outlive the transcripts Claude Code deletes).", "short",
                       Q(f"sum by (instance) (claude_code_exporter_ledger_requests{sel()})",
                         "{{instance}}"), w=8),
            timeseries("Files watched", "Transcript files each exporter knows.", "short",
                       Q(f"sum by (instance) (claude_code_exporter_files_watched{sel()})",
                         "{{instance}}"), w=8),
            timeseries("Scrape duration", "How long Prometheus takes to scrape each exporter.",
                       "s", Q(f"max by (instance) (scrape_duration_seconds{sel()})",
                              "{{instance}}"), w=8),
            tabular("Claude Code alerts", "Pending and firing alerts of the shipped rules "
                    "(deploy/prometheus/rules), per exporter.", "none",
                    Q("max by (alertname, alertstate, severity, instance, user) "
                      f"(ALERTS{sel(CLAUDE_ALERTS)})",
                      instant=True, fmt=pm.PromQueryFormat.TABLE),
                    renames={"Value #A": "active"}, w=24, h=6),
        ],
    )
    return board(
        "claude-code-exporter", "Claude Code / Exporter health",
        "Health of claude-code-exporter: targets up, lines read and rejected, ledger rows, "
        "lag, late updates, alerts.",
        variables(), [targets, lines, ledger],
    )


def _team() -> dm.Dashboard:
    """The team dashboard of grafana/team.py, which builds on the helpers above."""
    from grafana.team import team  # noqa: PLC0415 -- grafana.team imports this module
    return team()


DASHBOARDS = {
    "claude-code-usage.json": usage,
    "claude-code-cache.json": cache,
    "claude-code-serving.json": serving,
    "claude-code-exporter.json": exporter,
    "claude-code-team.json": _team,
}


def render(model: dm.Dashboard) -> str:
    """The dashboard as committed: indented JSON, non-ASCII kept, trailing newline."""
    return json.dumps(model, cls=JSONEncoder, indent=2, ensure_ascii=False) + "\n"


def render_all() -> dict[str, str]:
    """Every dashboard file name and its JSON text."""
    return {name: render(make()) for name, make in DASHBOARDS.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Write the dashboards, or with ``--check`` report the stale ones and exit 1."""
    parser = argparse.ArgumentParser(prog="python3 -m grafana.build", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output directory")
    args = parser.parse_args(argv)
    installed = metadata.version("grafana-foundation-sdk")
    if installed != SDK_VERSION:
        print(f"grafana-foundation-sdk {installed} is installed; the dashboards are made with "
              f"{SDK_VERSION}: pip install 'grafana-foundation-sdk=={SDK_VERSION}'",
              file=sys.stderr)
        return 2
    stale = []
    for name, text in render_all().items():
        path = args.out / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(f"stale: {', '.join(stale)}; run python3 -m grafana.build", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
