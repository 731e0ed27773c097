"""Codex's plan windows on the page (issue 36, item 4): beside the status line's, with dollars.

A real ``serve`` on loopback follows a Codex home whose turns move its windows
(tests/support/codex_plan.py) beside a Claude Code transcript, and then the
real Codex fixture; the page and /api/summary.json are read over HTTP. The
dollars per 1 % are computed in the test from genai-prices and the written
readings alone. A Claude-only page and JSON are compared with what the code
before this change rendered (tests/golden/page_claude_plan.*).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from exporter.projections.plan.pace import Pace
from exporter.serve import page_figures, page_html
from grafana import codex_plan
from grafana.query import Prometheus, query_board
from tests.support.codex_plan import codex_home, expected_usd_per_percent
from tests.support.page_dom import parse, sample_page
from tests.support.paths import ROOT
from tests.support.process import Serve
from tests.support.prometheus import PromServer, prometheus_config, static_job
from tests.support.wait import poll

REAL = ROOT / "tests" / "fixtures" / "codex_real"
GOLDEN = ROOT / "tests" / "golden"
#: The dashboard's variables as a user leaves them (every target, model and project).
VARIABLES = {"job": "claude-code", "instance": ".*", "user": ".*", "model": ".*",
             "project": ".*"}


def _env(base: Path, home: Path) -> dict[str, str]:
    """The serve's environment: its own HOME and Codex home, UTC."""
    out = {k: v for k, v in os.environ.items()
           if not k.startswith(("CLAUDE_CODE_EXPORTER", "CODEX_HOME"))}
    return {**out, "HOME": str(base), "CODEX_HOME": str(home), "TZ": "UTC"}


def _doc(daemon: Serve) -> dict[str, Any]:
    """/api/summary.json over the whole range."""
    status, body = daemon.get("/api/summary.json?since=")
    assert status == 200, body[:300]
    doc: dict[str, Any] = json.loads(body)
    return doc


@pytest.fixture(scope="module")
def moving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, list[Any], float]]:
    """``serve`` over a Codex home whose last turn was a minute ago, once all is ingested."""
    base = tmp_path_factory.mktemp("moving")
    start = time.time() - 2760.0
    turns, five_reset, _week = codex_home(base / "codex", base / "claude", start)
    daemon = Serve(base / "claude", base / "state", "--codex-home", str(base / "codex"),
                   env=_env(base, base / "codex"))
    try:
        poll(lambda: _doc(daemon)["totals"]["requests"] == len(turns) + 1
             and "codex_plan_windows" in _doc(daemon)["page"], 60, "both agents and the windows")
        yield daemon, turns, five_reset
    finally:
        daemon.stop()


def test_the_page_shows_codex_windows_with_their_dollars(
        moving: tuple[Serve, list[Any], float]) -> None:
    """The plan panel's Codex part: used, reset, none at 100 %, $ per 1 % and a pace."""
    daemon, turns, five_reset = moving
    status, body = daemon.get("/")
    assert status == 200
    html = body.decode()
    dom = parse(html)
    assert "plan" in dom.sections and 'data-agent-plan="codex"' in html
    assert dom.figures["used-codex-five_hour"] == "40%"
    assert dom.figures["used-codex-seven_day"] == "8%"
    assert dom.figures["exhausted-codex-five_hour"] == "0"
    want = expected_usd_per_percent(turns)
    assert dom.figures["usd-per-percent-codex-five_hour"].startswith(
        f"1 % ≈ {page_html.money(want)}, the window ≈ {page_html.money(100 * want)}")
    assert dom.figures["pace-codex-five_hour"].startswith("Projected at reset: ")
    assert dom.charts["plan-codex-five_hour"] == 2
    reset = datetime.fromtimestamp(five_reset, UTC).strftime("%H:%M")
    assert f" {reset} (in " in dom.figures["resets-codex-five_hour"]


def test_codex_usd_per_percent_is_its_cost_over_the_points_moved(
        moving: tuple[Serve, list[Any], float]) -> None:
    """/api/summary.json: Codex's turns' cost between change points / the points moved.

    The Claude Code request inside the same hours costs more than every Codex
    turn together: counted, the figure would be far off.
    """
    daemon, turns, five_reset = moving
    page = _doc(daemon)["page"]
    five, week = page["codex_plan_windows"]
    assert (five["window"], week["window"]) == ("five_hour", "seven_day")
    assert five["used_ratio"] == 0.4 and five["windows_exhausted"] == 0
    assert five["resets_at"] == datetime.fromtimestamp(five_reset, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    assert five["usd_per_percent"] == pytest.approx(expected_usd_per_percent(turns), abs=1e-6)
    assert five["pace"] in ("on_track", "limit_ahead") and five["projected_ratio"] > 0.4
    assert page["plan_windows"] == []  # no status line: Claude Code's part as before


def _real_exhausted() -> dict[str, int]:
    """Instances of each Codex window that reached 100 % in the real fixture, with json alone."""
    peaks: dict[tuple[int, int], float] = {}
    for path in sorted(REAL.rglob("rollout-*.jsonl")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            payload = json.loads(raw).get("payload") or {}
            rate = payload.get("rate_limits") if payload.get("type") == "token_count" else None
            if not rate or rate.get("limit_id") != "codex":
                continue
            for w in (rate.get("primary"), rate.get("secondary")):
                if w:
                    key = (w["window_minutes"], round(w["resets_at"] / 60))
                    peaks[key] = max(peaks.get(key, 0.0), float(w["used_percent"]))
    return {name: sum(1 for (m, _r), p in peaks.items() if m == minutes and p >= 100)
            for name, minutes in (("five_hour", 300), ("seven_day", 10_080))}


def test_the_real_fixture_s_codex_windows_are_on_the_page(tmp_path: Path) -> None:
    """The real rollouts: both windows shown (long reset, so 0 %), their 100 % instances counted."""
    (tmp_path / "claude" / "projects").mkdir(parents=True)
    daemon = Serve(tmp_path / "claude", tmp_path / "state", "--codex-home", str(REAL),
                   env=_env(tmp_path, REAL))
    try:
        poll(lambda: _doc(daemon)["totals"]["requests"] == 1013, 120, "the fixture ingested")
        windows = {w["window"]: w for w in _doc(daemon)["page"]["codex_plan_windows"]}
        dom = parse(daemon.get("/")[1].decode())
    finally:
        daemon.stop()
    exhausted = _real_exhausted()
    assert exhausted == {"five_hour": 3, "seven_day": 0}
    for name in ("five_hour", "seven_day"):
        assert windows[name]["used_ratio"] == 0.0
        assert windows[name]["windows_exhausted"] == exhausted[name]
        assert dom.figures[f"used-codex-{name}"] == "0%"
        assert dom.figures[f"exhausted-codex-{name}"] == str(exhausted[name])


def _claude_plan_page() -> page_figures.PageData:
    """A Claude-only page with two status-line windows (one with a pace)."""
    now = 1_790_000_000.0
    return dataclasses.replace(sample_page(), now=now, plan=(
        page_figures.Window("five_hour", 0.42, now + 3600,
                            Pace("limit_ahead", 130.0, now + 1800, 30.0)),
        page_figures.Window("seven_day", 0.1, now + 86_400)))


def test_a_claude_only_page_and_json_are_as_before() -> None:
    """Without Codex windows the page and its JSON are byte-identical to the earlier code's."""
    data = _claude_plan_page()
    html = page_html.render(data, "test")
    doc = json.dumps(data.to_json(), sort_keys=True, indent=1) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        (GOLDEN / "page_claude_plan.html").write_text(html)
        (GOLDEN / "page_claude_plan.json").write_text(doc)
    assert html == (GOLDEN / "page_claude_plan.html").read_text()
    assert doc == (GOLDEN / "page_claude_plan.json").read_text()
    assert "codex" not in html and "codex_plan_windows" not in data.to_json()["page"]


def test_the_usage_dashboard_draws_codex_windows_when_chosen(
        moving: tuple[Serve, list[Any], float], tmp_path: Path) -> None:
    """A real Prometheus scraping the serve: the Codex plan panels draw its windows, gated.

    With the Agent variable on Claude Code alone they are empty.
    """
    daemon, _turns, _reset = moving
    board = json.loads((ROOT / "grafana" / "dashboards" / "claude-code-usage.json").read_text())
    board["time"] = {"from": "now-15m", "to": "now"}  # as a user picks it: seconds of history
    target = daemon.url.split("://", 1)[1]
    config = prometheus_config([static_job("claude-code", [target])], interval="1s")
    prom = PromServer(config, tmp_path / "prom").start()
    used, resets = codex_plan.USED_TITLE, codex_plan.RESETS_TITLE

    def draw(agent: str) -> dict[str, list[float]]:
        _, panels = query_board(board, Prometheus(prom.url), datetime.now(UTC),
                                {**VARIABLES, "agent": agent})
        return {p.title: p.values() for p in panels}

    try:  # the range query's steps reach the samples once a few scrapes are in
        poll(lambda: draw("3")[used], 60, "the Codex plan panel drawn")
        drawn = {agent: draw(agent) for agent in ("3", "1")}
    finally:
        prom.stop()
    assert {0.4, 0.08} <= set(drawn["3"][used])
    assert len(drawn["3"][resets]) == 2 and all(v > 0 for v in drawn["3"][resets])
    assert drawn["1"][used] == [] and drawn["1"][resets] == []


def test_serve_exposes_codex_s_projection_for_its_alerts(
        moving: tuple[Serve, list[Any], float]) -> None:
    """/metrics: Codex's projected figure at reset, the page's, in its own family."""
    daemon, _turns, _reset = moving
    fams = daemon.scrape()
    projected = {s.labels["window"]: s.value
                 for s in fams["claude_code_codex_plan_window_projected_ratio"].samples}
    page = {w["window"]: w for w in _doc(daemon)["page"]["codex_plan_windows"]}
    assert projected["five_hour"] > 0.4
    assert projected["five_hour"] == pytest.approx(page["five_hour"]["projected_ratio"], abs=0.01)
    assert "claude_code_plan_window_projected_ratio" not in fams  # no status line
