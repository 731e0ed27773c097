"""The committed Grafana dashboards, and the panels and query variables of one of them."""

from __future__ import annotations

from typing import Any

from tests.support.paths import ROOT

DASHBOARD_DIR = ROOT / "grafana" / "dashboards"


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that queries data (rows and text excluded), including panels inside rows."""
    found = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            found += panel.get("panels", [])
        elif panel["type"] != "text":
            found.append(panel)
    return found


def query_variables(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's query variables."""
    return [v for v in board["templating"]["list"] if v["type"] == "query"]
