"""A budget covers both agents (issue 36): the dashboards' budget panels evaluated by promtool.

The recording rules and alerts have their promtool cases in
deploy/prometheus/tests/; here the committed dashboards' budget queries run in
promtool's PromQL engine over the same kind of series: an exporter with
Claude Code's and Codex's cost, one with Codex's only, one with Claude Code's
only (whose figure is the one the Claude-only query gave before).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.synth import GenOptions, generate
from tests.support.codex_mix import env
from tests.support.dashboards import DASHBOARD_DIR, panels
from tests.support.exposition import families
from tests.support.process import Serve
from tests.support.prometheus import require_binary
from tests.support.wait import poll

CLAUDE = 'claude_code_cost_usd_total{job="claude-code",instance="%s",model="m1",project="p1",' \
         'source="main",type="output"}'
CODEX = 'claude_code_codex_cost_usd_total{job="claude-code",instance="%s",model="m1",' \
        'project="p1",type="output"}'
#: (series, USD a minute): a both agents (90 USD/h), c Codex alone, k Claude Code alone.
SERIES = [(CLAUDE % "a:9477", 1.0), (CODEX % "a:9477", 0.5), (CODEX % "c:9477", 2.0),
          (CLAUDE % "k:9477", 1.5)]
#: Each exporter's spend after three hours.
SPENT = {"a:9477": 270.0, "c:9477": 360.0, "k:9477": 270.0}
BUDGET = 'claude_code_budget_usd{job="claude-code",instance="%s",period="%s"}'


def _resolved(expr: str) -> str:
    """A panel's query with Grafana's variables as a whole-range, every-exporter view."""
    for var, value in (("$__range", "1d"), ("$job", ".*"), ("$instance", ".*"),
                       ("$user", ".*"), ("$team", ".*")):
        expr = expr.replace(var, value)
    return expr


def _query(board: str, title: str, ref: str = "A") -> str:
    """The query ``ref`` of the panel titled ``title`` in a committed dashboard."""
    doc: dict[str, Any] = json.loads((DASHBOARD_DIR / board).read_text())
    panel = next(p for p in panels(doc) if p["title"] == title)
    return _resolved(next(t["expr"] for t in panel["targets"] if t["refId"] == ref))


def _promtool(tmp_path: Path, checks: list[tuple[str, list[tuple[str, float]]]]) -> str:
    """Run promtool's PromQL engine on ``checks`` ((expr, [(labels, value)])) at 3 h; its output."""
    series = [{"series": s, "values": f"0+{per_minute}x180"} for s, per_minute in SERIES]
    series += [{"series": BUDGET % (i, p), "values": f"{v}x180"}
               for i in SPENT for p, v in (("day", 300), ("month", 600))]
    tests = {"evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": expr, "eval_time": "3h",
                              "exp_samples": [{"labels": labels, "value": value}
                                              for labels, value in want]}
                             for expr, want in checks]}]}
    path = tmp_path / "panels-test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = subprocess.run([require_binary("promtool"), "test", "rules", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("title, window", [("Spent today", "1d"),
                                           ("Spent, last 30 days", "30d")])
def test_the_usage_dashboards_spend_is_every_agents(tmp_path: Path, title: str,
                                                    window: str) -> None:
    """"Spent today" and "Spent, last 30 days": both agents' cost, summed over the exporters."""
    expr = _query("claude-code-usage.json", title)
    assert "claude_code_codex_cost_usd_total" in expr
    claude_only = f"sum(increase(claude_code_cost_usd_total{{instance='k:9477'}}[{window}]))"
    out = _promtool(tmp_path, [(expr, [("{}", sum(SPENT.values()))]),
                               (claude_only, [("{}", SPENT["k:9477"])])])
    assert "SUCCESS" in out, out


@pytest.mark.parametrize("title, period", [("Today / daily budget", 300),
                                           ("30 days / monthly budget", 600)])
def test_the_budget_bars_compare_every_agents_spend(tmp_path: Path, title: str,
                                                    period: int) -> None:
    """The budget bars: each exporter's spend of both agents over its budget (k: Claude's alone)."""
    expr = _query("claude-code-usage.json", title)
    want = [(f'{{instance="{i}",job="claude-code"}}', spent / period)
            for i, spent in SPENT.items()]
    out = _promtool(tmp_path, [(f"round({expr}, 0.0001)",
                                [(labels, round(v, 4)) for labels, v in want])])
    assert "SUCCESS" in out, out


def test_the_team_dashboards_spend_is_every_agents(tmp_path: Path) -> None:
    """The team dashboard's spend (against the team budgets) counts Codex's cost too."""
    expr = _query("claude-code-team.json", "Spent, last 24 h")
    out = _promtool(tmp_path, [(expr, [("{}", sum(SPENT.values()))])])
    assert "SUCCESS" in out, out


def _summary(daemon: Serve, query: str = "") -> dict[str, Any]:
    """/api/summary.json for ``query``."""
    status, body = daemon.get(f"/api/summary.json?{query}")
    assert status == 200, body[:300]
    doc: dict[str, Any] = json.loads(body)
    return doc


def test_the_projection_gauge_page_and_report_pace_count_both_agents(tmp_path: Path) -> None:
    """The month's and day's projection: /metrics, the page and `report` agree; Codex's counts."""
    now = datetime.now(UTC).replace(microsecond=0)
    tree = tmp_path / "tree"
    truth = generate(tree, GenOptions(seed=7, sessions=2, requests_per_session=30,
                                      start=now - timedelta(days=5), malformed=False,
                                      codex_sessions=3))
    both = truth["totals"]["requests"] + truth["codex"]["totals"]["requests"]
    state = tmp_path / "state"
    daemon = Serve(tree, state, "--codex-home", str(tree / "codex"), env=env(tmp_path))
    try:
        poll(lambda: _summary(daemon, "since=")["totals"]["requests"] == both, 120, "ingested")
        page = _summary(daemon)["page"]["projected_usd"]
        claude = _summary(daemon, "agent=claude")["page"]["projected_usd"]
        gauge = {s.labels["period"]: s.value
                 for s in families(daemon.get("/metrics")[1].decode())[
                     "claude_code_budget_projected_usd"].samples}
        report = subprocess.run(
            [sys.executable, "-m", "exporter", "report", "--data-dir", str(tree), "--codex-home",
             str(tree / "codex"), "--state-dir", str(state), "--timezone", "UTC"],
            capture_output=True, text=True, timeout=120, check=True, env=env(tmp_path))
    finally:
        assert daemon.stop() == 0
    assert set(gauge) == {p for p, v in page.items() if v is not None} and gauge
    for period, value in gauge.items():
        assert value == pytest.approx(page[period], rel=1e-3), period
        assert claude[period] is not None and value > claude[period] * 1.01, period
    said = re.search(r"this month at this pace: \$([0-9,.]+)", report.stdout)
    if "month" in gauge:  # not on a month's first day
        assert said, report.stdout
        assert float(said.group(1).replace(",", "")) == pytest.approx(gauge["month"], abs=0.01)
