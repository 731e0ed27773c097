"""The Codex row of the usage dashboard and its ``agent`` variable (docs/grafana.md, "Codex").

Codex CLI's turns have families of their own (``claude_code_codex_*``,
docs/metrics.md "Codex"); Claude Code's panels read Claude Code's families and
are not changed. The ``agent`` variable chooses which agents' figures the
dashboard shows; its values are bits (1: Claude Code, 2: Codex), so a query
can test one in PromQL: each Codex panel ends with ``and on() (vector($agent)
>= 2)``, which leaves it empty unless Codex is chosen.

The model and project variables list Claude Code's names (they read
``claude_code_requests_total``): the Codex panels do not apply them.
"""

from __future__ import annotations

from collections.abc import Callable

from grafana_foundation_sdk.builders import bargauge, heatmap, stat, table, text
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import timeseries as ts
from grafana_foundation_sdk.models import dashboard as dm

from grafana.panels import (
    Q,
    Time,
    in_range,
    per_bar,
    single,
    thresholds,
    timeseries,
)

HOURLY_TIME = Time(interval="1h")  # bars of one hour, as the usage dashboard's
COST = "claude_code_codex_cost_usd_total"
TOKENS = "claude_code_codex_tokens_total"
REQUESTS = "claude_code_codex_requests_total"
UNPRICED = "claude_code_codex_unpriced_tokens_total"
REASONING, OUTPUT = 'type="reasoning"', 'type="output"'
CACHE_READ, PROMPT = 'type="cache_read"', 'type=~"input|cache_read"'
BILLED = 'type!="reasoning"'  # input, cache_read, output: reasoning is a part of output
#: The agents to show: text and bits (1 Claude Code, 2 Codex).
AGENTS = (("Claude Code and Codex", "3"), ("Claude Code", "1"), ("Codex", "2"))
SHOWN = " and on() (vector($agent) >= 2)"  # the panel's series only when Codex is chosen
SCOPE = ("All models and projects: $model and $project list Claude Code's names and do "
         "not apply. Empty unless the Agent variable includes Codex.")


def every_agent(series: Callable[[str], str], claude: str) -> str:
    """``series`` of Claude Code's family ``claude`` and of Codex's cost, side by side.

    For a budget's spend, which is every agent's (the recording rules
    ``claude_code:cost_usd:increase1d`` and ``:increase30d`` sum the same way):
    Codex's series are marked ``agent="codex"`` so that none shares a label
    set with a Claude Code series (``or`` would drop it); a ``sum`` (by
    anything but ``agent``) adds them up. Without Codex series it is
    ``series(claude)``'s figure exactly.
    """
    return f'({series(claude)} or label_replace({series(COST)}, "agent", "codex", "", ""))'


def agent_variable() -> dash.CustomVariable:
    """``agent``: Claude Code and Codex (the default), Claude Code, or Codex."""
    options = [dm.VariableOption(selected=i == 0, text=text, value=value)
               for i, (text, value) in enumerate(AGENTS)]
    return (
        dash.CustomVariable("agent").label("Agent")
        .description("Whose figures to show: Claude Code's panels, and the Codex row "
                     "(Codex CLI sessions, the claude_code_codex_* families).")
        .values(",".join(f"{text} : {value}" for text, value in AGENTS))
        .current(options[0]).options(options)
    )


def row_title() -> str:
    """The Codex row's title."""
    return "Codex (Agent $agent; all models and projects)"


def panels() -> list[ts.Panel | stat.Panel | bargauge.Panel | heatmap.Panel | table.Panel
                      | text.Panel]:
    """Codex's cost, tokens by type, turns and reasoning, for the time range and per hour."""
    return [
        single("Codex spent, selected range", "Estimated list-price USD of Codex turns in the "
               "time range (reasoning is billed as output). " + SCOPE, "currencyUSD",
               Q(f"sum({in_range(COST)}){SHOWN}", instant=True), decimals=2, w=4, h=5),
        single("Codex turns, selected range", "Codex turns in the time range: each model call "
               "of a Codex session once, however many files copied it. " + SCOPE, "short",
               Q(f"round(sum({in_range(REQUESTS)})){SHOWN}", instant=True), w=4, h=5),
        single("Codex reasoning, selected range", "Output tokens Codex spent reasoning "
               "(reasoning_output_tokens), a part of its output tokens. " + SCOPE, "count:tok",
               Q(f"round(sum({in_range(TOKENS, REASONING)})){SHOWN}", instant=True), w=4, h=5),
        single("Reasoning share of Codex output", "Reasoning tokens / output tokens of Codex "
               "turns in the time range. " + SCOPE, "percentunit",
               Q(f"sum({in_range(TOKENS, REASONING)}) / sum({in_range(TOKENS, OUTPUT)})"
                 f"{SHOWN}", instant=True), decimals=1, w=4, h=5),
        single("Codex unpriced tokens", "Tokens of Codex models with no known price in the "
               "time range: missing from Codex's USD figures (add the model under [pricing]). "
               + SCOPE, "count:tok", Q(f"round(sum({in_range(UNPRICED)})){SHOWN}", instant=True),
               thresholds=thresholds((None, "green"), (1, "orange")), w=4, h=5),
        single("Codex cache-read share, selected range", "Cache reads / prompt tokens (uncached "
               "input + cache reads) of Codex turns. Codex reports no cache writes. " + SCOPE,
               "percentunit", Q(f"sum({in_range(TOKENS, CACHE_READ)}) / sum("
                                f"{in_range(TOKENS, PROMPT)}){SHOWN}", instant=True),
               decimals=1, w=4, h=5),
        timeseries("Codex cost per hour by model", "Estimated USD of Codex turns per hour, by "
                   "model. " + SCOPE, "currencyUSD",
                   Q(f"sum by (model) ({per_bar(COST)}) > 0{SHOWN}", "{{model}}"),
                   stacked=True, drawn_as_bars=True, totals=True, time=HOURLY_TIME, decimals=2,
                   h=9),
        timeseries("Codex tokens per hour by type", "Codex tokens per hour: uncached input, "
                   "cache_read and output (reasoning included); reasoning on its own in the "
                   "panel beside. " + SCOPE, "count:tok",
                   Q(f"round(sum by (type) ({per_bar(TOKENS, BILLED)})) > 0{SHOWN}", "{{type}}"),
                   stacked=True, drawn_as_bars=True, totals=True, time=HOURLY_TIME, h=9),
        timeseries("Codex turns per hour by model", "Codex turns per hour, by model. " + SCOPE,
                   "short", Q(f"round(sum by (model) ({per_bar(REQUESTS)})) > 0{SHOWN}",
                              "{{model}}"),
                   stacked=True, drawn_as_bars=True, totals=True, time=HOURLY_TIME, h=9),
        timeseries("Codex reasoning tokens per hour by model", "Output tokens Codex spent "
                   "reasoning, per hour, by model. " + SCOPE, "count:tok",
                   Q(f"round(sum by (model) ({per_bar(TOKENS, REASONING)})) > 0{SHOWN}",
                     "{{model}}"),
                   stacked=True, drawn_as_bars=True, totals=True, time=HOURLY_TIME, h=9),
    ]
