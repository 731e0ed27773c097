"""Codex's plan windows on the usage dashboard: its 5-hour and weekly windows over time.

Codex logs its account's rate-limit windows with its turns; the exporter
exposes them in families of their own (``claude_code_codex_plan_*``,
docs/plan-limits.md "Codex"), so the status line's plan row is unchanged.
These panels close the Codex row, gated by the ``agent`` variable as every
panel of that row (:data:`grafana.codex.SHOWN`).
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import stat
from grafana_foundation_sdk.builders import timeseries as ts

from grafana.codex import SHOWN
from grafana.panels import BUDGET, Q, sel, single, timeseries

USED = "claude_code_codex_plan_window_used_ratio"
RESETS = "claude_code_codex_plan_window_resets_at_seconds"
USED_TITLE = "Codex plan window used (dashed: 80 % and the limit)"
RESETS_TITLE = "Codex windows reset in"
PER_WINDOW = "max by (user, window)"  # one account per user label: its machines agree
SCOPE = ("From Codex's own logs (the rate limits each turn carries, docs/plan-limits.md "
         "\"Codex\"); a plan window is the account's: all models and projects. Empty unless "
         "the Agent variable includes Codex.")


def panels() -> list[ts.Panel | stat.Panel]:
    """Codex's windows used over time, and when each resets."""
    return [
        timeseries(USED_TITLE, "Official "
                   "utilisation of Codex's 5-hour and weekly windows, 0-100 %, as Codex logged "
                   "it with its latest turn; it drops to 0 when the window resets. " + SCOPE,
                   "percentunit", Q(f"{PER_WINDOW} ({USED}{sel()}){SHOWN}",
                                    "{{window}} {{user}}"),
                   lines=BUDGET, decimals=0, w=16, h=8),
        single(RESETS_TITLE, "Time until each Codex window resets, as Codex "
               "logged it. " + SCOPE, "s",
               Q(f"({PER_WINDOW} ({RESETS}{sel()}) - time()) > 0{SHOWN}", "{{window}}",
                 instant=True), no_value="reset", w=8, h=8),
    ]
