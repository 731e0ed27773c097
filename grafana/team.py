"""The team dashboard: per person, per team, and for the whole organisation.

Built with the helpers of ``grafana/build.py`` (same variables, panel kinds and
layout) plus a ``team`` variable. Written to ``grafana/dashboards/claude-code-team.json``
by ``python3 -m grafana.build``.

Every query reads the exporters' own series (and ``up``), never a recording
rule, so the dashboard works unchanged on a Prometheus that scrapes the
exporters and on a long-term store fed by remote write (VictoriaMetrics,
Mimir, Thanos), whether the writer is a central Prometheus that evaluates the
rules or agents that evaluate none. The queries are PromQL that MetricsQL
(VictoriaMetrics) accepts as is; ``tests/test_teams.py`` runs each of them on
both engines. Where a shipped team rule computes the same figure
(``deploy/prometheus/rules/claude-code-team.yml``), the query repeats its
definition:

- a person's budget is the largest budget set on any of their machines;
- a team's budget is the sum of its members' budgets;
- ratios sum numerators and denominators over the team first.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from grafana import build as b
from grafana import codex

TEAM = 'team=~"$team"'
RANGE = "[$__range]"
TABLE = pm.PromQueryFormat.TABLE
COST = "claude_code_cost_usd_total"
TOKENS = "claude_code_tokens_total"
REQUESTS = "claude_code_requests_total"

def thresholds(*steps: tuple[float | None, str]) -> dash.ThresholdsConfig:
    """Absolute thresholds; the first step's value is None (minus infinity)."""
    return (
        dash.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in steps])
    )


#: Cache-read share colours: under half the prompt read from the cache is the
#: line of the shipped ClaudeCodeCacheReadShareLow alert.
SHARE = thresholds((None, "red"), (0.5, "orange"), (0.8, "green"))


def tsel(*extra: str) -> str:
    """A label selector: the target and team filters plus ``extra`` matchers."""
    return b.sel(TEAM, *extra)


def spend(by: str, window: str) -> str:
    """USD spent in ``window`` (a range such as ``[1d]``), summed ``by`` labels.

    Every agent's (Claude Code's and Codex's, codex.every_agent), as the team
    rules count it against the budgets.
    """
    both = codex.every_agent(lambda metric: f"increase({metric}{tsel()}{window})", COST)
    return f"sum by ({by}) ({both})" if by else f"sum({both})"


def budget(by: str) -> str:
    """The daily budget of each group: per person the largest of their machines', summed."""
    per_person = f"max by (team, user) (claude_code_budget_usd{tsel(b.DAY)} > 0)"
    return f"sum by ({by}) ({per_person})" if by else f"sum({per_person})"


def read_share(by: str, window: str) -> str:
    """Cache reads / all prompt tokens in ``window``, both summed ``by`` labels first."""
    grouping = f" by ({by})" if by else ""
    read = f"sum{grouping} (increase({TOKENS}{tsel(b.CACHE_READ)}{window}))"
    prompt = f"sum{grouping} (increase({TOKENS}{tsel(b.PROMPT_TYPES)}{window}))"
    return f"{read} / ({prompt} > 0)"


def read_share_rate(by: str) -> str:
    """The cache-read share per ``$__rate_interval``, for graphs."""
    read = f"sum by ({by}) (rate({TOKENS}{tsel(b.CACHE_READ)}[$__rate_interval]))"
    prompt = f"sum by ({by}) (rate({TOKENS}{tsel(b.PROMPT_TYPES)}[$__rate_interval]))"
    return f"{read} / ({prompt} > 0)"


def sharing() -> str:
    """Per exporter: how many exporters of its job hold exactly its token total.

    1 is normal. 2 or more: the ledgers count the same requests (a synced
    ``~/.claude``), as the ``claude_code:identical_ledgers:count`` rule finds.
    """
    ledger = f"sum without (model, project, source, type) ({TOKENS}{tsel()}) > 0"
    return (f'count_values without () ("ledger_tokens", {ledger})\n'
            f"  * on (job, ledger_tokens) group_left ()\n"
            f'count_values by (job) ("ledger_tokens", {ledger})')


def team_variable() -> dash.QueryVariable:
    """The ``team`` target label, with "All" (``.*``, which also matches no label)."""
    return (
        dash.QueryVariable("team").label("Team").datasource(b.DS)
        .description("The `team` target label (scrape config, agent external_labels or "
                     "OTLP resource attribute).")
        .query('label_values(up{job=~"$job"}, team)')
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(True).include_all(True).all_value(".*")
        .current(dm.VariableOption(selected=True, text=["All"], value=["$__all"]))
    )


def organisation() -> b.Row:
    """Headline figures over everything selected."""
    return b.row("Organisation", [
        b.single("Spent, selected range", "Estimated list-price USD of every selected person "
                 "and team in the dashboard's time range.", "currencyUSD",
                 b.Q(spend("", RANGE), instant=True)),
        b.single("Spent, last 24 h", "Estimated USD of the last 24 hours (rolling), all "
                 "selected exporters.", "currencyUSD", b.Q(spend("", "[1d]")), sparkline=True),
        b.single("Daily budget", "Sum of the people's daily budgets; a person's budget is the "
                 "largest budget_day_usd set on any of their machines (as the rule "
                 "claude_code:team_budget_usd:sum). No value: no budget set.", "currencyUSD",
                 b.Q(budget(""))),
        b.single("People active, selected range", "People (the `user` label) with at least "
                 "one request in the time range.", "short",
                 b.Q(f"count(round(sum by (user) (increase({REQUESTS}{tsel()}{RANGE}))) > 0)",
                     instant=True)),
        b.single("Cache-read share, selected range", "Cache reads / all prompt tokens in the "
                 "time range, over everything selected (normally 85-97 % for agent work).",
                 "percentunit", b.Q(read_share("", RANGE), instant=True), thresholds=SHARE),
        b.single("Exporters down", "Targets not answering scrapes (up == 0): their people's "
                 "figures are stale and their raw totals drop out of the tables until they "
                 "are back (no history is lost: the ledger keeps it).", "short",
                 b.Q(f"count(up{tsel()} == 0) or vector(0)"),
                 thresholds=thresholds((None, "green"), (1, "red"))),
    ])


def teams() -> b.Row:
    """One line per team: spend, budget, people, cache behaviour."""
    return b.row("Teams", [
        b.tabular("Teams", "Per team: spend in the range and in the last 24 h, the daily "
                  "budget (sum of the members' budgets), the share of it used, people and "
                  "exporters, and the cache-read share in the range.", "currencyUSD",
                  b.Q(spend("team", RANGE), instant=True, fmt=TABLE),
                  b.Q(spend("team", "[1d]"), instant=True, fmt=TABLE),
                  b.Q(budget("team"), instant=True, fmt=TABLE),
                  b.Q(f"{spend('team', '[1d]')} / {budget('team')}", instant=True, fmt=TABLE),
                  b.Q(f"count by (team) (count by (team, user) (up{tsel()}))", instant=True,
                      fmt=TABLE),
                  b.Q(f"count by (team) (up{tsel()})", instant=True, fmt=TABLE),
                  b.Q(read_share("team", RANGE), instant=True, fmt=TABLE),
                  renames={"Value #A": "Spent (range)", "Value #B": "Spent (24 h)",
                           "Value #C": "Daily budget", "Value #D": "Budget used (24 h)",
                           "Value #E": "People", "Value #F": "Exporters",
                           "Value #G": "Cache-read share"},
                  units={"Budget used (24 h)": "percentunit", "People": "short",
                         "Exporters": "short", "Cache-read share": "percentunit"}, w=24, h=8),
        b.bars("Daily budget used, per team", "Last 24 h spend / the team's daily budget. Over "
               "100 %: the rule-based alert ClaudeCodeTeamDailyBudgetExceeded fires after "
               "15 minutes.", "percentunit",
               b.Q(f"{spend('team', '[1d]')} / {budget('team')}", "{{team}}"),
               thresholds=b.BUDGET, maximum=1),
        b.timeseries("Spend rate by team (USD/h)", "Estimated USD per hour, by team.",
                     "currencyUSD",
                     b.Q(f"sum by (team) (rate({COST}{tsel()}[$__rate_interval])) * 3600",
                         "{{team}}"), w=8, stacked=True),
        b.timeseries("Cache-read share by team", "Cache reads / all prompt tokens per team. A "
                     "drop (cache collapse) means prompts are being re-written to the cache: "
                     "changed system prompts or tools, sessions resumed after the cache "
                     "expired. The dashed line is the alert's 50 %.", "percentunit",
                     b.Q(read_share_rate("team"), "{{team}}"), w=8,
                     lines=thresholds((None, "red"), (0.5, "green"))),
    ])


def people() -> b.Row:
    """One line per person (all their machines), top spenders, copies."""
    per_person = "team, user"
    return b.row("People", [
        b.tabular("People", "Per person, all their machines: spend in the range and in the "
                  "last 24 h, their daily budget (the largest set on any of their machines), "
                  "the share of it used, machines, requests and cache-read share in the "
                  "range.", "currencyUSD",
                  b.Q(spend(per_person, RANGE), instant=True, fmt=TABLE),
                  b.Q(spend(per_person, "[1d]"), instant=True, fmt=TABLE),
                  b.Q(budget(per_person), instant=True, fmt=TABLE),
                  b.Q(f"{spend(per_person, '[1d]')} / {budget(per_person)}", instant=True,
                      fmt=TABLE),
                  b.Q(f"count by (team, user) (up{tsel()})", instant=True, fmt=TABLE),
                  b.Q(f"round(sum by (team, user) (increase({REQUESTS}{tsel()}{RANGE})))",
                      instant=True, fmt=TABLE),
                  b.Q(read_share(per_person, RANGE), instant=True, fmt=TABLE),
                  renames={"Value #A": "Spent (range)", "Value #B": "Spent (24 h)",
                           "Value #C": "Daily budget", "Value #D": "Budget used (24 h)",
                           "Value #E": "Machines", "Value #F": "Requests (range)",
                           "Value #G": "Cache-read share"},
                  units={"Budget used (24 h)": "percentunit", "Machines": "short",
                         "Requests (range)": "short", "Cache-read share": "percentunit"},
                  w=24, h=10),
        b.bars("Top spenders, selected range", "The ten people with the highest estimated USD "
               "in the time range.", "currencyUSD",
               b.Q(f"topk(10, {spend(per_person, RANGE)})", "{{user}} ({{team}})",
                   instant=True), w=12, h=8),
        b.tabular("Exporters sharing a ledger", "Per exporter: its total tokens ever counted "
                  "and how many exporters of the job hold exactly that total. 1 is normal. 2 or "
                  "more: those exporters read the same transcripts (a ~/.claude synced "
                  "between machines) and the team figures count their requests that many "
                  "times; alert ClaudeCodeIdenticalLedgers. Fix: point one exporter away from "
                  "the synced copy.", "short",
                  b.Q(sharing(), instant=True, fmt=TABLE),
                  renames={"Value #A": "Exporters with this total",
                           "ledger_tokens": "Tokens ever counted"},
                  w=12, h=8),
    ])


def models() -> b.Row:
    """Tokens and cost by model across everything selected."""
    return b.row("Models across the organisation", [
        b.timeseries("Tokens by model (tok/s)", "All tokens per second by model, every person "
                     "and team selected.", "count:tok/s",
                     b.Q(f"sum by (model) (rate({TOKENS}{tsel()}[$__rate_interval]))",
                         "{{model}}"), stacked=True),
        b.bars("Tokens by model, selected range", "All tokens by model in the time range.",
               "count:tok", b.Q(f"round(sum by (model) (increase({TOKENS}{tsel()}{RANGE})))",
                                "{{model}}", instant=True), w=6),
        b.bars("Cost by model, selected range", "Estimated USD by model in the time range "
               "(models without a price are missing here; see the usage dashboard).",
               "currencyUSD",
               b.Q(f"sum by (model) (increase({COST}{tsel()}{RANGE}))", "{{model}}",
                   instant=True), w=6),
    ])


def team() -> dm.Dashboard:
    """Team: per-person and per-team tables, top spenders, budgets, cache collapse, models."""
    return b.board(
        "claude-code-team", "Claude Code / Team",
        "Claude Code across many machines: spend and budgets per person and per team, top "
        "spenders, cache-read share per team, tokens by model for the organisation. Works on "
        "Prometheus and on VictoriaMetrics (or any store fed by remote write).",
        [*b.variables(), team_variable()], [organisation(), teams(), people(), models()],
    )
