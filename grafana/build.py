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

The conventions every panel follows (target filters, no recorded series,
rounded counts, bars of ``increase()``) are in :mod:`grafana.panels`. Metric
names are those of the catalogue, docs/metrics.md. ``python3 -m grafana.render``
draws the dashboards from a live Prometheus (docs/grafana.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

from grafana_foundation_sdk.builders import bargauge, heatmap, stat, table, text
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import timeseries as ts
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from grafana import codex, codex_plan
from grafana.panels import (
    ARCH,
    BUDGET,
    CACHE_READ,
    CACHE_WRITE,
    CLAUDE_ALERTS,
    DAY,
    DS,
    GAP_TYPES,
    GT_1H,
    LT_5M,
    MODEL,
    MONTH,
    NEUTRAL,
    NOT_FIRST,
    PROJECT,
    PROMPT_TYPES,
    TAG,
    TARGET,
    TTL_5M,
    Q,
    Time,
    bars,
    buckets,
    colour,
    dashed_line,
    heat,
    in_range,
    note,
    per_bar,
    quantile,
    renamed,
    sel,
    single,
    tabular,
    thresholds,
    timeseries,
    variables,
)

# The helpers and constants of grafana.panels stay importable from here, where
# they were first (a dashboard module of this package may import either).
__all__ = ["ARCH", "BUDGET", "CACHE_READ", "CACHE_WRITE", "CLAUDE_ALERTS", "DASHBOARDS", "DAY",
           "DS", "GAP_TYPES", "GT_1H", "LT_5M", "MODEL", "MONTH", "NEUTRAL", "NOT_FIRST",
           "PROJECT", "PROMPT_TYPES", "SDK_VERSION", "TARGET", "TTL_5M", "Q", "Time", "bars",
           "board", "buckets", "colour", "heat", "main", "note", "per_bar", "quantile", "render",
           "render_all", "row", "sel", "single", "tabular", "thresholds", "timeseries",
           "variables"]
_thresholds = thresholds  # the name this module used before grafana.panels

OUT_DIR = Path(__file__).resolve().parent / "dashboards"
SDK_VERSION = "1769699520!11.4.0"
GBITS = (100, 400, 800)  # link speeds of the transfer-time table, Gb/s

COST = "claude_code_cost_usd_total"
REQUESTS = "claude_code_requests_total"
TOKENS = "claude_code_tokens_total"
#: Panel time options: today so far (in the dashboard's time zone), bars of
#: one hour, and 30 calendar days of daily bars.
TODAY = Time(time_from="now/d")
HOURLY = Time(interval="1h")
LAST_30_DAYS = Time(time_from="now-29d/d", interval="1d")
PER_EXPORTER = "sum by (job, instance, user)"
#: The end of the panel's time range (now) as unix seconds, for ``@``: a gauge's
#: current value drawn across a whole graph.
NOW_S = "${__to:date:seconds}"
EXPORTER_LEGEND = "{{instance}} {{user}}"


AnyPanel = ts.Panel | stat.Panel | bargauge.Panel | heatmap.Panel | table.Panel | text.Panel
Row = tuple[str, list[AnyPanel]]


def row(title: str, panels: list[AnyPanel]) -> Row:
    """A dashboard row: its title and its panels, left to right, top to bottom."""
    return title, panels


def board(uid: str, title: str, description: str,
          variable_list: Sequence[dash.DatasourceVariable | dash.QueryVariable
                                  | dash.CustomVariable],
          rows: Sequence[Row], *,
          annotations: Sequence[dash.AnnotationQuery] = ()) -> dm.Dashboard:
    """A dashboard: shared settings, links to its siblings, rows of panels, numbered ids.

    ``annotations``: query annotations beside Grafana's built-in one (marks on every graph).
    """
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
    for extra in annotations:
        builder = builder.annotation(extra)
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




def spent(window: str = "$__range") -> str:
    """A budget's spend over ``window``: every agent's cost (codex.every_agent), to be summed."""
    return codex.every_agent(lambda metric: in_range(metric, window=window), COST)


def daily() -> str:
    """A budget's spend per day bar: every agent's cost (codex.every_agent), to be summed."""
    return codex.every_agent(lambda metric: per_bar(metric, window="1d"), COST)


def usage() -> dm.Dashboard:
    """Usage & cost: today against the budgets, cost per day and hour, tokens and requests."""
    mp = (MODEL, PROJECT)
    all_scope = ("All models, projects and agents (Claude Code and Codex): a budget is for "
                 "everything an exporter counts, whatever $model, $project and $agent say.")
    budgets = row(
        "Today and the budgets (all models and projects)",
        [
            single("Spent today", "Estimated list-price USD since midnight in the dashboard's "
                   "time zone (Dashboard settings → Time zone; the browser's by default). "
                   + all_scope, "currencyUSD", Q(f"sum({spent()})", instant=True),
                   time=TODAY, decimals=2, w=4, h=5),
            single("Daily budget", "claude_code_budget_usd{period=\"day\"} from the exporters' "
                   "configuration (budget_day_usd), summed over the selected exporters.",
                   "currencyUSD", Q(f"sum(claude_code_budget_usd{sel(DAY)} > 0)", instant=True),
                   no_value="not set", w=4, h=5),
            bars("Today / daily budget", "Spend since midnight / daily budget, per "
                 "exporter. The alert ClaudeCodeDailyBudgetExceeded compares a rolling 24 hours "
                 "instead (it has no time zone), so it can fire before this reaches 100 % in the "
                 "morning after a busy evening.", "percentunit",
                 Q(f"{PER_EXPORTER} ({spent()}) / {PER_EXPORTER} "
                   f"(claude_code_budget_usd{sel(DAY)} > 0)", EXPORTER_LEGEND, instant=True),
                 time=TODAY, thresholds=BUDGET, maximum=1, no_value="no daily budget", w=4, h=5),
            single("Spent, last 30 days", "Estimated USD of the last 30 days (rolling), from the "
                   "exporters' cost counters: complete from the first scrape after a backfill. "
                   "Needs a Prometheus retention over 30 days. " + all_scope, "currencyUSD",
                   Q(f"sum({spent(window='30d')})", instant=True), decimals=2, w=4, h=5),
            single("Monthly budget", "claude_code_budget_usd{period=\"month\"} "
                   "(budget_month_usd), summed over the selected exporters.", "currencyUSD",
                   Q(f"sum(claude_code_budget_usd{sel(MONTH)} > 0)", instant=True),
                   no_value="not set", w=4, h=5),
            bars("30 days / monthly budget", "Rolling 30-day spend / monthly "
                 "budget per exporter, as ClaudeCodeMonthlyBudgetExceeded compares them.",
                 "percentunit",
                 Q(f"{PER_EXPORTER} ({spent(window='30d')}) / {PER_EXPORTER} "
                   f"(claude_code_budget_usd{sel(MONTH)} > 0)", EXPORTER_LEGEND, instant=True),
                 thresholds=BUDGET, maximum=1, no_value="no monthly budget", w=4, h=5),
            timeseries("Cost per day, last 30 days (dashed: daily budget)", "Estimated USD "
                       "per calendar day (midnight to midnight in the dashboard's time zone) by "
                       "model, today so far on the right; the dashed line is today's daily "
                       "budget. The legend's Total is the 30 days. " + all_scope, "currencyUSD",
                       Q(f"sum by (model) ({daily()}) > 0", "{{model}}"),
                       Q(f"sum(claude_code_budget_usd{sel(DAY)} @ {NOW_S} > 0)", "daily budget"),
                       stacked=True, drawn_as_bars=True, totals=True, time=LAST_30_DAYS,
                       decimals=2, overrides=[dashed_line("daily budget", "red")], w=24, h=9),
        ],
    )
    money = row(
        "Where the money goes (model $model, project $project)",
        [
            timeseries("Cost per hour by model", "Estimated USD per hour (each bar is one "
                       "hour, the current one still growing), by model. The legend's Total is "
                       "the selected range.", "currencyUSD",
                       Q(f"sum by (model) ({per_bar(COST, *mp)}) > 0", "{{model}}"),
                       stacked=True, drawn_as_bars=True, totals=True, time=HOURLY, decimals=2,
                       h=9),
            timeseries("Cost per hour by token type", "Estimated USD per hour by token type: "
                       "input, output, cache_read, cache_write_5m, cache_write_1h. Cache writes "
                       "cost 1.25x (5 min) or 2x (1 h) the input price, reads 0.1x.",
                       "currencyUSD", Q(f"sum by (type) ({per_bar(COST, *mp)}) > 0", "{{type}}"),
                       stacked=True, drawn_as_bars=True, totals=True, time=HOURLY, decimals=2,
                       h=9),
            single("Spent in the selected range", "Estimated USD in the dashboard's time range "
                   "for the selected models and projects.", "currencyUSD",
                   Q(f"sum({in_range(COST, *mp)})", instant=True), decimals=2, w=4, h=7),
            single("Cache-read share, selected range", "Cache reads / all prompt tokens (input "
                   "+ cache reads + cache writes). Agent workloads read 85-97 % of their prompt "
                   "from the cache; one heavy month: 96.9 %.", "percentunit",
                   Q(f"sum({in_range(TOKENS, *mp, CACHE_READ)}) / "
                     f"sum({in_range(TOKENS, *mp, PROMPT_TYPES)})", instant=True),
                   thresholds=thresholds((None, "red"), (0.5, "orange"), (0.85, "green")),
                   decimals=1, w=4, h=7),
            single("Saved by the prompt cache, selected range", "Estimated list-price USD the "
                   "prompt cache saved in the time range: every cache read billed as plain input "
                   "instead, minus the cache-write premium (5 min 1.25x, 1 h 2x input); negative "
                   "when caches were written and not read. From the exporter's saving and "
                   "write-premium counters, priced at each model's rates ([pricing] overrides "
                   "included), as `report` prices them.",
                   "currencyUSD", Q(f"{_saved(*mp)}", instant=True), decimals=2, w=4, h=7),
            single("Without the cache, selected range", "What the same requests would have cost "
                   "with no prompt cache (spent + saved), at the same long-context tier.",
                   "currencyUSD", Q(f"sum({in_range(COST, *mp)}) + {_saved(*mp)}", instant=True),
                   decimals=2, w=4, h=7),
            single("Cache reads per output token, selected range", "Tokens of history the model "
                   "re-read from the cache for every token it wrote (cache-read tokens / output "
                   "tokens). One user's month: 4.24 B reads for 2.52 M output tokens, 1,685.",
                   "suffix:×", Q(f"round(sum({in_range(TOKENS, *mp, CACHE_READ)}) / "
                              f"sum({in_range(TOKENS, *mp, OUTPUT)}), 0.1)", instant=True),
                   decimals=1, w=4, h=7),
            bars("One prompt at your context size: from the cache vs recomputed", "A prompt of "
                 "your median (p50) and p90 request's context, priced at the average cache-read "
                 "rate (from the cache) and the average input rate (recomputed) you paid in the "
                 "time range. The context histogram has no project label: $project does not "
                 "apply.", "currencyUSD",
                 *(Q(_prompt_cost(q, kind), f"p{round(q * 100)} {name}", instant=True)
                   for q in (0.5, 0.9) for kind, name in (("cache_read", "from the cache"),
                                                          ("input", "recomputed"))),
                 decimals=4, w=12, h=7),
            bars("Top projects by cost, selected range", "The ten projects with the highest "
                 "estimated USD in the time range (project label policy: project_label).",
                 "currencyUSD",
                 Q(f"topk(10, sum by (project) ({in_range(COST, *mp)}) > 0)", "{{project}}",
                   instant=True), decimals=2, w=8, h=7),
            bars("Top projects by requests, selected range", "The ten projects with the most "
                 "billed requests in the time range (projects without any are left out).",
                 "short",
                 Q(f"topk(10, round(sum by (project) ({in_range(REQUESTS, *mp)})) > 0)",
                   "{{project}}", instant=True), w=8, h=7),
        ],
    )
    tokens = row(
        "Requests and tokens (model $model, project $project)",
        [
            timeseries("Requests per hour by source", "Billed API requests per hour: main "
                       "chain, subagents (sidechains) and compaction calls.", "short",
                       Q(f"round(sum by (source) ({per_bar(REQUESTS, *mp)})) > 0", "{{source}}"),
                       stacked=True, drawn_as_bars=True, totals=True, time=HOURLY),
            timeseries("Tokens per hour by type", "Tokens per hour by type. Prompt tokens are "
                       "input + cache_read + cache writes; agent workloads are mostly cache "
                       "reads.", "count:tok",
                       Q(f"round(sum by (type) ({per_bar(TOKENS, *mp)})) > 0", "{{type}}"),
                       stacked=True, drawn_as_bars=True, totals=True, time=HOURLY),
            single("Requests, selected range", "Billed API requests in the time range (a "
                   "measured heavy-use month: 1,299 requests in 4 sessions over 3 days).", "short",
                   Q(f"round(sum({in_range(REQUESTS, *mp)}))", instant=True), w=4),
            single("Tokens, selected range", "All tokens (every type) in the time range.",
                   "count:tok", Q(f"round(sum({in_range(TOKENS, *mp)}))", instant=True), w=4),
            single("Unpriced tokens (all projects)", "Tokens of models with no known price in "
                   "the time range: their cost is missing from every USD figure. Add the model "
                   "under [pricing] in the exporter's config. This counter has a model label "
                   "but no project label, so $project does not apply.", "count:tok",
                   Q(f"round(sum({in_range('claude_code_unpriced_tokens_total', MODEL)}))",
                     instant=True),
                   thresholds=thresholds((None, "green"), (1, "orange")), w=4),
            note("Sessions", "**Top sessions are not here.** The metrics carry no session "
                 "label (one series per session would grow without bound), so Prometheus "
                 "cannot rank sessions. The exporter's ledger can: run "
                 "`claude-code-exporter report` on the machine.", w=12, h=4),
        ],
    )
    return board(
        "claude-code-usage", "Claude Code / Usage & cost",
        "Estimated list-price spend of Claude Code: today against the daily budget, the plan's "
        "5-hour and weekly limits, cost per day and per hour by model, token type and project, "
        "requests and tokens.",
        [*variables("model", "project"), codex.agent_variable()],
        [budgets, _plan_row(), money, tokens,
         row(codex.row_title(), [*codex.panels(), *codex_plan.panels()])],
        annotations=[_plan_resets()],
    )


# ---- plan limits (docs/plan-limits.md) -------------------------------------------------
USED = "claude_code_plan_window_used_ratio"
RESETS = "claude_code_plan_window_resets_at_seconds"
PROJECTED = "claude_code_plan_window_projected_ratio"  # the exporter's pace model
LIMIT_AT = "claude_code_plan_window_limit_at_seconds"
PACE = ("The exporter's pace model (docs/plan-limits.md, Pace): the window's average pace "
        "blended with the ledger's recent spend; empty while there is not enough data (the "
        "first 5 % of a window). ")
PER_WINDOW = "max by (user, window)"  # one account per user label: its machines agree
WINDOW_LEGEND = "{{window}} {{user}}"
PLAN_SCOPE = ("From Claude Code's status line (`claude-code-exporter statusline`, "
              "docs/plan-limits.md); a plan window is the account's: all models and projects.")


def _plan_row() -> Row:
    """Utilisation and projection over time, reset, time to limit, projection, window in dollars."""
    return row(
        "Plan limits from the status line (all models and projects)",
        [
            timeseries("Plan window used and projected at reset (dashed: 80 % and the "
                       "limit)", "Official utilisation of the 5-hour and weekly windows, "
                       "0-100 % (a little over 100 % once the limit is passed); it drops to 0 "
                       "when the window resets (the annotations mark each reset). Next to it, "
                       "where each window will stand at its reset at the current pace (live "
                       "figures only: not backfilled). " + PACE + PLAN_SCOPE, "percentunit",
                       Q(f"{PER_WINDOW} ({USED}{sel()})", WINDOW_LEGEND),
                       Q(f"{PER_WINDOW} ({PROJECTED}{sel()})", "projected " + WINDOW_LEGEND),
                       lines=BUDGET, decimals=0, w=12, h=8),
            single("Resets in", "Time until each window resets, as Claude Code reported it. "
                   + PLAN_SCOPE, "s",
                   Q(f"({PER_WINDOW} ({RESETS}{sel()}) - time()) > 0", "{{window}}",
                     instant=True), no_value="reset", w=4, h=5),
            single("Time to limit at this pace", "Time until the window reaches 100 % at the "
                   "current pace (0 once reached); empty while it is on track. Red within an "
                   "hour (ClaudeCodeFiveHourLimitAhead and ClaudeCodeWeeklyLimitAhead fire on "
                   "the same projection). " + PACE + PLAN_SCOPE, "s",
                   Q(f"min by (user, window) (clamp_min({LIMIT_AT}{sel()} - time(), 0))",
                     "{{window}}", instant=True),
                   thresholds=thresholds((None, "red"), (3600, "orange"), (4 * 3600, "green")),
                   no_value="on track", w=4, h=5),
            single("Projected at reset", "The figure the window reaches by its reset at the "
                   "current pace (the alerts' gauge): over 100 % means the limit comes first. "
                   + PACE + PLAN_SCOPE, "percentunit",
                   Q(f"{PER_WINDOW} ({PROJECTED}{sel()})", "{{window}}", instant=True),
                   thresholds=BUDGET, decimals=0, no_value="not enough data", w=4, h=5),
            _window_dollars(),
            single("Context window, latest session", "How full the context window of the "
                   "session whose status line refreshed last is (compaction near 100 %). "
                   + PLAN_SCOPE, "percentunit",
                   Q(f"max(claude_code_context_window_used_ratio{sel()})", instant=True),
                   thresholds=BUDGET, decimals=0, w=3, h=5),
            single("Status line last reported", "Seconds since a status line last recorded a "
                   "sample: growing while you work means the status line is not set (or "
                   "another tool took it over; ClaudeCodePlanSamplesStale). " + PLAN_SCOPE, "s",
                   Q(f"min(claude_code_plan_sample_age_seconds{sel()})", instant=True), w=3,
                   h=5),
        ],
    )


def _window_dollars() -> stat.Panel:
    """100 x dollars per percent, with the number of sample pairs behind each estimate."""
    panel = single(
        "Window in list-price dollars (and sample pairs)", "What a whole window is worth at "
        "list price: dollars per 1 % of it (this machine's request costs between the moments "
        "the official figure moved) x 100, over the last 7 days (5-hour) or 35 days (weekly); "
        "next to it the sample pairs the estimate rests on. A lower bound when other machines "
        "or claude.ai share the account. " + PLAN_SCOPE, "currencyUSD",
        Q(f"{PER_WINDOW} (100 * claude_code_plan_window_usd_per_percent{sel()})",
          "{{window}} $", instant=True),
        Q(f"{PER_WINDOW} (claude_code_plan_window_usd_per_percent_pairs{sel()})",
          "{{window}} pairs", instant=True),
        decimals=0, no_value="no estimate yet", w=6, h=5)
    return panel.override_by_regexp(" pairs$", [dm.DynamicConfigValue(id_val="unit",
                                                                      value="short")])


def _plan_resets() -> dash.AnnotationQuery:
    """A mark on every graph where a plan window reset (its reset time moved on)."""
    return (
        dash.AnnotationQuery().name("Plan window resets").datasource(DS).enable(True)
        .icon_color("rgba(255, 152, 48, 1)")
        .expr(f"changes({RESETS}{sel()}[5m]) > 0")
    )


GAP_NAMES = {"first": "first request", "lt_5m": "≤ 5 min", "5m_to_1h": "5 min – 1 h",
             "gt_1h": "> 1 h"}
#: Row order of the gap table: by gap, the first request of a session (no gap) last.
GAP_ORDER = {"lt_5m": "1", "5m_to_1h": "2", "gt_1h": "3", "first": "4"}
#: Coarse ranges of the gap histogram (upper bounds in seconds, None: +Inf)
#: with their names and colours: green within the 5-minute cache TTL, orange
#: where only a 1-hour cache survives, red past both.
GAP_RANGES = (
    (None, "10", "≤ 10 s", "green"), ("10", "30", "10-30 s", "green"),
    ("30", "60", "30-60 s", "green"), ("60", "120", "1-2 min", "green"),
    ("120", "300", "2-5 min", "green"), ("300", "900", "5-15 min", "orange"),
    ("900", "3600", "15-60 min", "orange"), ("3600", "14400", "1-4 h", "red"),
    ("14400", "86400", "4-24 h", "red"), ("86400", None, "> 24 h", "red"),
)
NO_MODEL_NO_PROJECT = ("These counters have no model or project label: $model and $project do "
                       "not apply.")


#: What the prompt cache saved on reads and cost above plain input on writes, per
#: request at its model's rates (exporter.projections.savings): the counters, not ratios of
#: the cost counters, so a [pricing] override with other cache multipliers is right too.
SAVINGS = "claude_code_cache_savings_usd_total"
WRITE_PREMIUM = "claude_code_cache_write_premium_usd_total"
OUTPUT = 'type="output"'


def _type(kind: str) -> str:
    """The matcher ``type="kind"``."""
    return f'type="{kind}"'


def _saved(*extra: str) -> str:
    """USD the prompt cache saved over the range: reads' saving minus writes' premium."""
    reads = in_range(SAVINGS, *extra, _type("cache_read"))
    return f"sum({reads} or {in_range(WRITE_PREMIUM, *extra)} * -1)"


def _prompt_cost(q: float, kind: str) -> str:
    """USD of one prompt of the ``q``-quantile context at the range's mean ``kind`` rate."""
    context = quantile(q, "claude_code_request_context_tokens", "$__range", MODEL)
    cost, tokens = (in_range(m, MODEL, _type(kind)) for m in (COST, TOKENS))
    rate = f"sum({cost}) / sum({tokens})"
    return f"{context} * ({rate})"


def _gap_ordered(expr: str) -> str:
    """``expr`` with an ``order`` label by gap bucket, for sorting the table's rows."""
    for gap, order in GAP_ORDER.items():
        expr = f'label_replace({expr}, "order", "{order}", "gap", "{gap}")'
    return expr


def _gap_range(low: str | None, high: str | None) -> str:
    """Requests whose idle gap fell in (low, high] seconds, in the selected range."""
    gap = "claude_code_request_gap_seconds_bucket"
    upto = f"sum({in_range(gap, 'le=' + _le(high))})"
    if low is None:
        return f"round({upto})"
    return f"round({upto} - sum({in_range(gap, 'le=' + _le(low))}))"


def _le(bound: str | None) -> str:
    """A quoted ``le`` value: the bound, or ``+Inf`` for None."""
    return '"+Inf"' if bound is None else f'"{bound}"'


def _gap_bars() -> bargauge.Panel:
    """Requests per coarse gap range in the selected range, coloured by the TTLs they outlived."""
    queries = [Q(_gap_range(low, high), name, instant=True)
               for low, high, name, _ in GAP_RANGES]
    return bars(
        "Idle gap before each request, selected range", "Main-chain requests by the time since "
        "the session's previous request. Green: within the 5-minute cache TTL; orange: only a "
        "1-hour cache survives; red: both expired, the whole context is written again. "
        + NO_MODEL_NO_PROJECT, "short", *queries,
        overrides=[colour(f"^{name}$", hue) for _, _, name, hue in GAP_RANGES], w=6, h=9,
    )


def cache() -> dm.Dashboard:
    """Cache & context: cache-read share, cache rewrites after idle gaps, context sizes."""
    mp = (MODEL, PROJECT)
    ctx, out, gap = ("claude_code_request_context_tokens", "claude_code_request_output_tokens",
                     "claude_code_request_gap_seconds")
    after_gap = "claude_code_requests_after_gap_total"
    prompt_after_gap = "claude_code_prompt_tokens_after_gap_total"
    share_steps = thresholds((None, "red"), (0.5, "orange"), (0.85, "green"))
    prompt_cache = row(
        "Prompt cache (model $model, project $project)",
        [
            single("Cache-read share, selected range", "Cache reads / all prompt tokens (input + "
                   "cache reads + cache writes). One heavy month: 96.9 %; agent workloads "
                   "85-97 %. Under 50 % in an hour with real traffic raises "
                   "ClaudeCodeCacheReadShareLow.", "percentunit",
                   Q(f"sum({in_range(TOKENS, *mp, CACHE_READ)}) / "
                     f"sum({in_range(TOKENS, *mp, PROMPT_TYPES)})", instant=True),
                   thresholds=share_steps, decimals=1, w=6, h=8),
            timeseries("Cache-read share per hour", "Cache reads / prompt tokens of each hour "
                       "(hours without requests have no bar); the dashed line is the 50 % "
                       "threshold of ClaudeCodeCacheReadShareLow.", "percentunit",
                       Q(f"sum({per_bar(TOKENS, *mp, CACHE_READ)}) / "
                         f"(sum({per_bar(TOKENS, *mp, PROMPT_TYPES)}) > 0)", "cache-read share"),
                       drawn_as_bars=True, time=HOURLY, max_value=1,
                       lines=thresholds((None, "red"), (0.5, "green")), w=9, h=8),
            timeseries("Prompt tokens per hour by type", "Prompt tokens per hour: input, cache "
                       "reads and cache writes (5-minute and 1-hour TTL).", "count:tok",
                       Q(f"round(sum by (type) ({per_bar(TOKENS, *mp, PROMPT_TYPES)})) > 0",
                         "{{type}}"),
                       stacked=True, drawn_as_bars=True, totals=True, time=HOURLY, w=9, h=8),
        ],
    )
    gaps = row(
        "Idle gaps and cache rewrites (all models and projects)",
        [
            tabular("Idle gap and cache rewrite (the cache-expiry table)", "Per gap bucket "
                    "(time since the session's previous main-chain request): requests, their "
                    "share of all gaps (a session's first request has none), and the share of "
                    "their prompt tokens written to the cache, selected range. One heavy month: "
                    "≤ 5 min 96.5 % of gaps / 2.1 % written; > 1 h 1.0 % / 85.5 %. "
                    + NO_MODEL_NO_PROJECT, "percentunit",
                    Q(_gap_ordered(f"round(sum by (gap) ({in_range(after_gap)}))"),
                      instant=True, fmt=pm.PromQueryFormat.TABLE),
                    Q(_gap_ordered(f"sum by (gap) ({in_range(after_gap, NOT_FIRST)})"
                                   " / on () group_left () "
                                   f"sum({in_range(after_gap, NOT_FIRST)})"),
                      instant=True, fmt=pm.PromQueryFormat.TABLE),
                    Q(_gap_ordered(f"sum by (gap) ({in_range(prompt_after_gap, CACHE_WRITE)}) "
                                   f"/ (sum by (gap) ({in_range(prompt_after_gap, GAP_TYPES)})"
                                   " > 0)"),
                      instant=True, fmt=pm.PromQueryFormat.TABLE),
                    renames={"gap": "Idle gap before the request", "Value #A": "Requests",
                             "Value #B": "Share of gaps",
                             "Value #C": "Share of prompt written to cache"},
                    units={"Requests": "short"}, hidden=("order",), sort_by="order",
                    mappings={"Idle gap before the request": GAP_NAMES}, w=12, h=9),
            single("Gap p50, selected range", "Median idle gap between a session's main-chain "
                   "requests (interpolated within histogram buckets). One heavy month: "
                   "10.7-15.2 s.", "s", Q(quantile(0.5, gap, "$__range"), instant=True),
                   w=3, h=9),
            single("Gap p90, selected range", "90th percentile of the gap. One heavy month: "
                   "35-89 s.", "s", Q(quantile(0.9, gap, "$__range"), instant=True),
                   w=3, h=9),
            _gap_bars(),
            timeseries("Requests per hour by idle gap", "Main-chain requests per hour by the "
                       "gap before them: green within the 5-minute TTL, orange past it, red "
                       "past an hour (a cold restart), blue a session's first request. "
                       + NO_MODEL_NO_PROJECT, "short",
                       Q(f"round(sum by (gap) ({per_bar(after_gap)})) > 0", "{{gap}}"),
                       stacked=True, drawn_as_bars=True, totals=True, time=HOURLY,
                       overrides=[renamed(key, GAP_NAMES[key], hue) for key, hue in
                                  (("lt_5m", "green"), ("5m_to_1h", "orange"),
                                   ("gt_1h", "red"), ("first", "blue"))], w=18, h=8),
            single("Active sessions now", "Sessions whose last request is younger than the "
                   "cache TTL (5 minutes, 1 hour): the caches the provider keeps warm for you. "
                   "A live gauge (not in a backfill). One heavy month: at most 3 sessions in "
                   "one 10-minute window.", "short",
                   Q(f"sum by (ttl) (claude_code_active_sessions{sel()})", "TTL {{ttl}}",
                     instant=True), no_value="none", w=6, h=8),
        ],
    )
    context = row(
        "Context and output per request (model $model; all projects)",
        [
            single("Context p50, selected range", "Median prompt size (input + cache read + "
                   "cache writes) per request, from the histogram (interpolated within "
                   "buckets). One heavy month: 456,875 tokens. The histograms have a model "
                   "label but no project label.", "count:tok",
                   Q(f"round({quantile(0.5, ctx, '$__range', MODEL)})", instant=True)),
            single("Context p90, selected range", "90th percentile of the prompt size. A "
                   "measured heavy-use month: 842,140 tokens.", "count:tok",
                   Q(f"round({quantile(0.9, ctx, '$__range', MODEL)})", instant=True)),
            single("Context mean, selected range", "Mean prompt size per request.", "count:tok",
                   Q(f"round(sum({in_range(ctx + '_sum', MODEL)}) / "
                     f"sum({in_range(ctx + '_count', MODEL)}))", instant=True)),
            single("Output p50, selected range", "Median output tokens per request. A measured "
                   "heavy-use month: 582.", "count:tok",
                   Q(f"round({quantile(0.5, out, '$__range', MODEL)})", instant=True), w=6),
            single("Output p90, selected range", "90th percentile of output tokens per "
                   "request. One heavy month: 3,321.", "count:tok",
                   Q(f"round({quantile(0.9, out, '$__range', MODEL)})", instant=True), w=6),
            heat("Context size per request, per hour", "Requests per hour per context-size "
                 "bucket (bounds 1k ... 1M tokens). Long agent sessions climb towards the top "
                 "until a compaction.", "count:tok",
                 Q(buckets(ctx, MODEL), "{{le}}", fmt=pm.PromQueryFormat.HEATMAP), w=24, h=9),
        ],
    )
    return board(
        "claude-code-cache", "Claude Code / Cache & context",
        "Prompt-cache behaviour of Claude Code: cache-read share, cache rewrites after idle "
        "gaps (5-minute and 1-hour TTLs), context and output sizes, active sessions.",
        variables("model", "project"), [prompt_cache, gaps, context],
    )


ESTIMATES = """**Estimates, not measurements.** Anthropic does not publish its models' \
architecture. These panels apply two *public reference architectures* to the sizes of your \
requests, to give orders of magnitude:

- `mla`: DeepSeek-V3-like multi-head latent attention, 61 layers × 576 dims × 2 bytes = \
**70,272 B of KV cache per token**;
- `gqa`: Llama-3.1-405B-like grouped-query attention, 126 layers × 8 KV heads × 128 dims × \
2 (K and V) × 2 bytes = **516,096 B per token**;
- upload: the API is stateless, so every request re-sends the whole conversation: \
prompt tokens × **4 bytes per token** of request body.

The constants are exporter settings (`kv_bytes_per_token`, `upload_bytes_per_token`). \
To scale a figure to a provider, multiply: a million sessions like one of yours \
at 1 Mbit/s each would upload 1 Tbit/s."""
ASSUMED = " An estimate: see \"About these estimates\" at the top for the assumptions."


def _kv_at(q: float, label: str) -> str:
    """KV bytes of the ``q``-quantile context per architecture, labelled ``context=label``."""
    context = quantile(q, "claude_code_request_context_tokens", "$__range", MODEL)
    per_token = f"max by (arch) (claude_code_kv_bytes_per_token{sel()})"
    return f'label_replace(scalar({context}) * {per_token}, "context", "{label}", "", "")'


def serving() -> dm.Dashboard:
    """Serving-side estimates: KV-cache bytes, transfer times, warm KV, upload."""
    kv_both = f"({_kv_at(0.5, 'p50')} or {_kv_at(0.9, 'p90')})"
    up_hist = "claude_code_request_upload_bytes"
    transfer_queries = [Q(f"{kv_both} * 8 / {g}e9", instant=True, fmt=pm.PromQueryFormat.TABLE)
                        for g in GBITS]
    about = row("About these estimates", [note("About these estimates", ESTIMATES, h=5)])
    kv = row(
        "KV cache per request (estimates)",
        [
            bars("KV bytes per token, reference architectures", "The constants behind every "
                 "KV figure (exporter setting kv_bytes_per_token): mla = DeepSeek-V3-like "
                 "(61 x 576 x 2 B = 70,272 B), gqa = Llama-3.1-405B-like (126 x 8 x 128 x 2 x "
                 "2 B = 516,096 B), the same for all models. Not Anthropic's models, whose shape "
                 "is not published.",
                 "decbytes",
                 Q(f"max by (arch) (claude_code_kv_bytes_per_token{sel()})", "{{arch}}",
                   instant=True), w=6, h=8),
            tabular("KV cache of the median and p90 context (model $model), and its transfer "
                    "time", "Context p50 / p90 of the selected range x bytes per token of each "
                    "reference architecture, and the time to move that cache over one link "
                    "(bytes x 8 / rate). One heavy month: 457k tokens -> 32 GB (mla) / 236 GB "
                    "(gqa); 0.64 s / 4.7 s at 400 Gb/s." + ASSUMED, "s",
                    Q(kv_both, instant=True, fmt=pm.PromQueryFormat.TABLE), *transfer_queries,
                    renames={"arch": "Architecture", "context": "Context",
                             "Value #A": "KV bytes",
                             **{f"Value #{chr(ord('B') + i)}": f"at {g} Gb/s"
                                for i, g in enumerate(GBITS)}},
                    units={"KV bytes": "decbytes"}, w=18, h=8),
            heat("KV cache per request ($arch, all models), per hour", "Requests per hour per "
                 "bucket of estimated KV-cache size (context x bytes per token of the chosen "
                 "architecture). This histogram has no model label." + ASSUMED, "decbytes",
                 Q(buckets("claude_code_request_kv_cache_bytes", ARCH), "{{le}}",
                   fmt=pm.PromQueryFormat.HEATMAP), w=24, h=8),
        ],
    )
    provider = row(
        "KV held and computed by the provider (estimates, all models)",
        [
            single("KV cache held warm now (estimate)", "Estimated KV bytes the provider keeps "
                   "warm for your sessions whose cache has not expired: each session's last "
                   "context x bytes per token (5-minute TTL, 1 hour where the session wrote "
                   "1-hour cache). A live gauge (not in a backfill)." + ASSUMED, "decbytes",
                   Q(f"sum by (arch) (claude_code_warm_kv_cache_bytes{sel()})", "{{arch}}",
                     instant=True), no_value="no active session", w=6, h=8),
            timeseries("KV computed by the provider per hour (estimate)", "Estimated KV bytes "
                       "the provider had to compute each hour: input + cache writes (the "
                       "prefill the cache did not save) x bytes per token." + ASSUMED,
                       "decbytes",
                       Q(f"sum by (arch) ({per_bar('claude_code_kv_recomputed_bytes_total')}) > 0",
                         "{{arch}}"), drawn_as_bars=True, time=HOURLY, w=18),
        ],
    )
    uploads = row(
        "Upload to the API (estimates, all models)",
        [
            single("Upload per active session, now", "Estimated request-body bits per second "
                   "of the last 5 minutes / sessions active in the last 5 minutes. A measured "
                   "heavy-use month: about 1 Mbit/s per session." + ASSUMED, "bps",
                   Q(f"sum(rate(claude_code_upload_bytes_total{sel()}[5m])) * 8 / "
                     f"sum(claude_code_active_sessions{sel(TTL_5M)} > 0)", instant=True),
                   no_value="no active session", w=6),
            single("Request body p50, selected range", "Median estimated request size "
                   "(context x upload_bytes_per_token). One heavy month: 1-2 MB." + ASSUMED,
                   "decbytes", Q(quantile(0.5, up_hist, "$__range"), instant=True), w=6),
            single("Request body p90, selected range", "90th percentile of the estimated "
                   "request size." + ASSUMED, "decbytes",
                   Q(quantile(0.9, up_hist, "$__range"), instant=True), w=6),
            single("Uploaded, selected range", "Estimated request-body bytes sent to the API in "
                   "the time range." + ASSUMED, "decbytes",
                   Q(f"sum({in_range('claude_code_upload_bytes_total')})", instant=True), w=6),
            timeseries("Uploaded per hour, per exporter (estimate)", "Estimated request-body "
                       "bytes sent to the API each hour, per exporter." + ASSUMED, "decbytes",
                       Q(f"{PER_EXPORTER} ({per_bar('claude_code_upload_bytes_total')}) > 0",
                         EXPORTER_LEGEND), drawn_as_bars=True, stacked=True, totals=True,
                       time=HOURLY),
            heat("Request body size per hour (estimate)", "Requests per hour per bucket of "
                 "estimated request size." + ASSUMED, "decbytes",
                 Q(buckets(up_hist), "{{le}}", fmt=pm.PromQueryFormat.HEATMAP), h=8),
        ],
    )
    return board(
        "claude-code-serving", "Claude Code / Serving-side estimates",
        "What Claude Code's requests mean on the serving side, estimated for public reference "
        "architectures (not Anthropic's): KV-cache bytes and transfer times, KV held warm and "
        "computed, upload to the API.",
        variables("model", "arch"), [about, kv, provider, uploads],
    )


def exporter() -> dm.Dashboard:
    """Exporter health: targets, lines read and rejected, lag, alerts."""
    by_target = "max by (job, instance, user)"
    targets = row(
        "Exporters (job $job)",
        [
            single("Exporters up", "Targets of the exporter jobs answering scrapes (up == 1). "
                   "Only jobs whose targets expose claude_code_exporter_build_info count: a "
                   "blackbox probe or any other job of the same Prometheus does not.", "short",
                   Q(f"sum(up{sel()})", instant=True), w=3, h=7),
            single("Exporters down", "Exporter targets not answering (up == 0): their figures "
                   "are stale and budget alerts cannot fire for them "
                   "(ClaudeCodeExporterDown).", "short",
                   Q(f"count(up{sel()} == 0) or vector(0)", instant=True),
                   thresholds=thresholds((None, "green"), (1, "red")), w=3, h=7),
            single("Newest request age", "Time since the newest request any selected exporter "
                   "has seen. Growing while you are working means the exporter is not "
                   "following the transcripts.", "s",
                   Q(f"time() - max(claude_code_last_request_timestamp_seconds{sel()})",
                     instant=True), w=4, h=7),
            tabular("Exporters", "One row per target: version, up, rows in the ledger (never "
                    "fewer: rows outlive the transcripts Claude Code deletes), transcript files "
                    "known, age of the newest request, scrape duration.", "short",
                    _table_q(f"max by (job, instance, user, version) "
                             f"(claude_code_exporter_build_info{sel()})"),
                    _table_q(f"{by_target} (up{sel()})"),
                    _table_q(f"{by_target} (claude_code_exporter_ledger_requests{sel()})"),
                    _table_q(f"{by_target} (claude_code_exporter_files_watched{sel()})"),
                    _table_q(f"time() - {by_target} "
                             f"(claude_code_last_request_timestamp_seconds{sel()})"),
                    _table_q(f"{by_target} (scrape_duration_seconds{sel()})"),
                    renames={"instance": "Instance", "user": "User", "version": "Version",
                             "Value #B": "Up", "Value #C": "Ledger rows",
                             "Value #D": "Files watched", "Value #E": "Newest request age",
                             "Value #F": "Scrape duration"},
                    hidden=("job", "Value #A"),
                    units={"Up": "short", "Ledger rows": "short", "Files watched": "short",
                           "Newest request age": "s", "Scrape duration": "s"},
                    mappings={"Up": {"0": "down", "1": "up"}}, w=14, h=7),
        ],
    )
    lines = row(
        "Transcript lines",
        [
            timeseries("Lines read per hour by result", "Transcript lines per hour: usage (a "
                       "new request), duplicate (a request already known), other (no usage), "
                       "rejected (malformed). The exporter's first scan, before Prometheus "
                       "first scraped it, is in no hour.", "short",
                       Q(f"round(sum by (result) "
                         f"({per_bar('claude_code_exporter_lines_total')})) > 0", "{{result}}"),
                       stacked=True, drawn_as_bars=True, totals=True, time=HOURLY, w=12),
            bars("Rejected lines since the exporter started", "Malformed lines the running "
                 "exporter rejected, by reason (only reasons with any). Rejected usage is "
                 "missing from every figure.", "short",
                 Q("round(sum by (reason) (claude_code_exporter_rejected_lines_total"
                   f"{sel()})) > 0", "{{reason}}", instant=True),
                 no_value="none", w=6),
            timeseries("Rejected lines per hour", "Malformed lines per hour by reason (hours "
                       "and reasons without any are left out). Rejections in every 5 minutes "
                       "for 15 minutes raise ClaudeCodeRejectedLinesRising.", "short",
                       Q(f"round(sum by (reason) "
                         f"({per_bar('claude_code_exporter_rejected_lines_total')})) > 0",
                         "{{reason}}"),
                       stacked=True, drawn_as_bars=True, time=HOURLY, no_value="none", w=6),
            timeseries("Transcript bytes read per hour", "Bytes of transcript read each hour, "
                       "per exporter.", "decbytes",
                       Q(f"{PER_EXPORTER} "
                         f"({per_bar('claude_code_exporter_bytes_read_total')}) > 0",
                         EXPORTER_LEGEND), drawn_as_bars=True, stacked=True, time=HOURLY,
                       w=18, h=7),
            single("Late updates, selected range", "Request upgrades that arrived after the "
                   "request had entered the histograms (counters took them, histograms kept "
                   "the earlier values).", "short",
                   Q(f"round(sum({in_range('claude_code_exporter_late_updates_total')}))",
                     instant=True), w=6, h=7),
        ],
    )
    alerts = row(
        "Alerts",
        [
            tabular("Claude Code alerts", "Pending and firing alerts of the shipped rules "
                    "(deploy/prometheus/rules), per exporter.", "none",
                    _table_q("max by (alertname, alertstate, severity, instance, user) "
                             f"(ALERTS{sel(CLAUDE_ALERTS)})"),
                    renames={"alertname": "Alert", "alertstate": "State",
                             "severity": "Severity", "instance": "Instance", "user": "User"},
                    hidden=("Value #A",), w=24, h=6),
        ],
    )
    return board(
        "claude-code-exporter", "Claude Code / Exporter health",
        "Health of claude-code-exporter: targets up and down, lines read and rejected, ledger "
        "rows, lag, late updates, alerts.",
        variables(), [targets, lines, alerts],
    )


def _team() -> dm.Dashboard:
    """The team dashboard of grafana/team.py, which builds on the helpers above."""
    from grafana.team import team  # noqa: PLC0415 -- grafana.team imports this module
    return team()


def _table_q(expr: str) -> Q:
    """An instant query in table format (one row per series, labels as columns)."""
    return Q(expr, instant=True, fmt=pm.PromQueryFormat.TABLE)


#: Dashboard file name -> builder. Further dashboards (modules of this package) add
#: their entry here.
DASHBOARDS: dict[str, Callable[[], dm.Dashboard]] = {
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
    for name, content in render_all().items():
        path = args.out / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == content:
            continue
        stale.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
    if args.check and stale:
        print(f"stale: {', '.join(stale)}; run python3 -m grafana.build", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
