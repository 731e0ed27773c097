"""The landing page and /api/summary.json: in headless Chromium over a real daemon, and in parts."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from bench.screenshot import BUDGETS, console_messages, demo_tree, dump_dom
from exporter.projections.class_prices import ClassPrices
from exporter.projections.periods import UTC_ZONE
from exporter.projections.pricing import RateTable
from exporter.serve import page, page_figures, page_html, svg
from exporter.serve.http import BasicAuth, HttpServer, make_app, server_context
from exporter.serve.page_range import PageQuery
from tests.support.net import http_get
from tests.support.page_dom import parse as _parse
from tests.support.page_dom import sample_page
from tests.support.process import Serve
from tests.support.tls import self_signed

CHARTS = ("daily-cost", "cumulative-cost", "tokens", "by-model", "by-project",
          "budget-today", "budget-month")
TOKEN_ROWS = {"input": "input_tokens", "output": "output_tokens",
              "cache read": "cache_read_tokens", "cache write 5m": "cache_write_5m_tokens",
              "cache write 1h": "cache_write_1h_tokens"}


def _get(url: str, *, headers: dict[str, str] | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int, str]:
    """GET ``url`` (tests.support.net.http_get): (status, body text)."""
    status, body = http_get(url, headers=headers, timeout=20, context=context)
    return status, body.decode()


def _report(state: Path, data: Path, *flags: str) -> dict[str, Any]:
    """`report --json` beside the running serve (it reads serve's ledger)."""
    out = subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--json", "--data-dir", str(data),
         "--state-dir", str(state), "--timezone", "UTC", *flags],
        capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "TZ": "UTC"})
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _first_day(today: date) -> date:
    """The page's first day: 30 days back, or the month's first day if earlier."""
    first = date.fromordinal(today.toordinal() - page_figures.WINDOW_DAYS + 1)
    return min(first, today.replace(day=1))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, Path, Path]]:
    """A daemon over a week of generated sessions ending today, UTC, budgets, hashed projects."""
    root = tmp_path_factory.mktemp("page")
    tree, state = root / "tree", root / "state"
    demo_tree(tree, datetime.now(UTC), days=6)
    daemon = Serve(tree, state, *BUDGETS, "--project-label", "hash", env={"TZ": "UTC"})
    yield daemon, tree, state
    assert daemon.stop() == 0


def test_page_in_chromium_shows_the_ledger_totals(served: tuple[Serve, Path, Path]) -> None:
    """Chromium loads / with no console message; every chart is drawn; figures equal report's."""
    daemon, tree, state = served
    html, messages = dump_dom(daemon.url + "/")
    assert messages == []
    dom = _parse(html)
    for name in CHARTS:
        assert dom.charts.get(name, 0) > 0, (name, dom.charts)
    today = datetime.now(UTC).date()
    first = _first_day(today)
    days = today.toordinal() - first.toordinal() + 1
    assert dom.charts["daily-cost"] == days + 2  # a bar a day, the axis, the budget line
    recent = _report(state, tree, "--since", first.isoformat())
    totals = recent["totals"]
    assert dom.figures["requests"] == f"{totals['requests']:,}"
    assert dom.figures["sessions"] == f"{recent['sessions']:,}"
    assert dom.figures["cost-range"] == page_html.money(totals["cost_usd"])
    assert dom.figures["cache-read-share"] == f"{recent['cache_read_share']:.1%}"
    tokens = {row[0]: row[1] for row in dom.tables["tokens"][1:]}
    assert tokens == {label: f"{totals[key]:,}" for label, key in TOKEN_ROWS.items()}
    for figure, since in (("cost-today", today), ("cost-month", today.replace(day=1))):
        got = _report(state, tree, "--since", since.isoformat())["totals"]["cost_usd"]
        assert dom.figures[figure] == page_html.money(got), figure
    sizes = {row[0]: row[1:] for row in dom.tables["sizes"][1:]}
    assert sizes["context"] == [f"{recent['context_tokens'][k]:,}" for k in ("p50", "p90", "max")]


def test_summary_json_is_report_json(served: tuple[Serve, Path, Path]) -> None:
    """/api/summary.json carries report --json's object for the page's 30 days, plus the page's."""
    daemon, tree, state = served
    status, body = _get(daemon.url + "/api/summary.json")
    assert status == 200
    got = json.loads(body)
    first = datetime.fromisoformat(got["range"]["since"]).date().isoformat()
    want = _report(state, tree, "--since", first)
    page_part = got.pop("page")
    want["by_session"] = []  # no session ids: the scrape has none either
    assert got == want
    daily = page_part["daily_cost_usd"]
    assert daily[0]["day"] == first == _first_day(datetime.now(UTC).date()).isoformat()
    assert daily[-1]["day"] == datetime.now(UTC).date().isoformat()
    assert sum(d["cost_usd"] for d in daily) == pytest.approx(want["totals"]["cost_usd"], abs=1e-5)
    assert page_part["budget_usd"] == {"day": 120.0, "month": 1500.0}
    projects = page_part["by_project_cost_usd"]  # under --project-label hash, as the scrape
    assert projects and all(len(p["project"]) == 12 for p in projects)
    assert "web_frontend" not in body


def test_console_check_sees_a_console_error() -> None:
    """The console check is not vacuous: a page that logs an error is caught."""
    _, messages = dump_dom("data:text/html,<script>console.error('page-broken')</script>")
    assert any("page-broken" in m for m in messages)
    assert console_messages("[1:2:INFO:CONSOLE(1)] \"x\"\nplain line") == [
        "[1:2:INFO:CONSOLE(1)] \"x\""]


def test_page_behind_tls_and_basic_auth(tmp_path: Path) -> None:
    """The HTTP app puts / and /api/summary.json behind its TLS and basic auth like /metrics."""
    cert, key = self_signed(tmp_path)
    app = make_app(CollectorRegistry(), lambda: (True, {}), "t", BasicAuth("me", "pw"),
                   routes=page.routes(sample_page, "t"))
    srv = HttpServer(app, "127.0.0.1", 0, server_context(cert, key))
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        base = f"https://127.0.0.1:{srv.port}"
        good = {"Authorization": "Basic " + base64.b64encode(b"me:pw").decode()}
        for path, mark in (("/", "<svg"), ("/api/summary.json", '"totals"')):
            assert _get(base + path, context=ctx)[0] == 401
            status, body = _get(base + path, headers=good, context=ctx)
            assert status == 200 and mark in body
        assert _get(base + "/metrics", headers=good, context=ctx)[0] == 200
    finally:
        srv.close()


def test_page_is_cached_and_rebuilt_off_the_request_path() -> None:
    """Cached within the TTL, then served stale while one rebuild runs, fresh after a pause."""
    calls: list[float] = []
    jobs: list[Callable[[], None]] = []
    now = [0.0]

    def source(query: PageQuery) -> page_figures.PageData:
        calls.append(now[0])
        return sample_page(query, requests=len(calls))

    handlers = page.routes(source, "t", ttl=2.0, clock=lambda: now[0], spawn=jobs.append)

    def requests_shown() -> str:
        html = b"".join(handlers["/"]({"PATH_INFO": "/"}, lambda *a: None)).decode()
        return _parse(html).figures["requests"]

    assert requests_shown() == "1" and calls == [0.0]  # the first request waits
    body = b"".join(handlers["/api/summary.json"]({"PATH_INFO": "/"}, lambda *a: None))
    assert json.loads(body)["totals"]["requests"] == 1
    now[0] = 1.9
    assert requests_shown() == "1" and jobs == []
    now[0] = 2.0
    assert requests_shown() == "1" and requests_shown() == "1"  # stale, one rebuild queued
    assert len(jobs) == 1 and calls == [0.0]
    jobs.pop()()
    assert calls == [0.0, 2.0] and requests_shown() == "2" and jobs == []
    now[0] = 12.0  # 10 s old: a visit after a pause waits for fresh figures
    assert requests_shown() == "3" and calls == [0.0, 2.0, 12.0] and jobs == []


def test_bars_scale_to_the_largest_value() -> None:
    """Bar heights are proportional to the values; a budget line sits at its value."""
    chart = svg.bars("b", "t", [("a", 1.0), ("b", 4.0)], fmt=str, limit=2.0, height=126)
    dom = _parse(chart)
    assert dom.charts["b"] == 4  # axis, two bars, the limit line
    heights = [float(part.split('height="')[1].split('"')[0])
               for part in chart.split("<rect")[1:]]
    assert heights == [22.0, 88.0]  # plot height 88 (126 - 12 - 26)
    assert 'class="limit"' in chart and 'y1="56"' in chart  # 12 + 88 - 44
    assert "<script" not in chart


def test_meter_clamps_and_turns_red() -> None:
    """A meter never draws past its track, and is red from 90 %."""
    over = svg.meter("m", "t", 1.7, width=200)
    assert 'class="fill" x="0" y="0" width="200"' in over and svg.PALETTE[3] in over
    assert svg.PALETTE[2] in svg.meter("m", "t", 0.5)


def test_plan_windows_from_the_status_line_samples(tmp_path: Path) -> None:
    """Where the status line fed samples, the page shows both windows with their resets."""
    from exporter.ingest import spool
    from exporter.ledger.plan_store import ingest_samples
    from exporter.ledger.store import Ledger

    t0, resets = 1_790_000_000.0, 1_790_018_000
    payload = {"session_id": "s1", "model": {"id": "claude-opus-4-6"}, "version": "2.1.90",
               "rate_limits": {"five_hour": {"used_percentage": 42.0, "resets_at": resets},
                               "seven_day": {"used_percentage": 91.0,
                                             "resets_at": resets + 400_000}},
               "context_window": {"used_percentage": 20, "context_window_size": 200_000},
               "cost": {"total_cost_usd": 0.5}}
    spool.append(str(tmp_path), [spool.sample_record(payload, t0)])
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    try:
        ingest_samples(ledger._db)
        source = page_figures.LedgerSource(ledger, [tmp_path], ClassPrices.of(RateTable.load()),
                                           UTC_ZONE, budgets={}, clock=lambda: t0 + 60)
        data = source()
    finally:
        ledger.close()
    assert [(w.name, w.used_ratio, w.resets_at) for w in data.plan] == [
        ("five_hour", 0.42, resets), ("seven_day", 0.91, resets + 400_000)]
    dom = _parse(page_html.render(data, "t"))
    assert dom.charts["plan-five_hour"] == 2 and dom.charts["plan-seven_day"] == 2
    assert "42% used" in page_html.render(data, "t").replace("</b>", "").replace("<b>", "")
    assert dom.figures["resets-five_hour"] == "today 19:13 (in 4 h 59 min)"  # not ISO 8601
    assert dom.figures["resets-seven_day"] == "Sat 26 Sep 10:20 (in 4 d 20 h)"
    # A minute into the 5-hour window: no projection. The week is 31 % through at 91 %.
    assert dom.figures["pace-five_hour"].startswith("Pace: not enough data")
    assert dom.figures["pace-seven_day"].startswith("Projected at reset: ")
    assert "runs out" in dom.figures["pace-seven_day"]
    five, seven = data.to_json()["page"]["plan_windows"]
    assert (five["pace"], five["projected_ratio"], five["limit_at"]) == (
        "not_enough_data", None, None)
    assert seven["pace"] == "limit_ahead" and seven["projected_ratio"] > 1
    assert seven["limit_at"] < seven["resets_at"]  # ISO 8601 in UTC: ordered as text


def test_plan_panel_says_on_track_runs_out_reached_and_not_enough_data() -> None:
    """Each pace state reads as a sentence on the page and as fields in the JSON."""
    from exporter.projections.plan import pace

    now = 1_790_000_000.0
    reset = now + 3 * 3600
    windows = (
        page_figures.Window("a_track", 0.3, reset, pace.Pace(pace.ON_TRACK, 55.0, None, 8.0)),
        page_figures.Window("b_ahead", 0.6, reset,
                            pace.Pace(pace.LIMIT_AHEAD, 150.0, now + 5400, 30.0)),
        page_figures.Window("c_reached", 1.0, reset,
                            pace.Pace(pace.LIMIT_REACHED, 100.0, now - 600, None)),
        page_figures.Window("d_new", 0.01, reset, pace.Pace(pace.NOT_ENOUGH)),
    )
    data = dataclasses.replace(sample_page(), now=now, plan=windows)
    dom = _parse(page_html.render(data, "t"))
    assert dom.figures["pace-a_track"] == "Projected at reset: 55%, on track"
    assert dom.figures["pace-b_ahead"] == (
        "Projected at reset: 150%, runs out today 15:43 (in 1 h 30 min) at this pace")
    assert dom.figures["pace-c_reached"] == "Limit reached today 14:03 (10 min ago)"
    assert dom.figures["pace-d_new"] == "Pace: not enough data yet (the window's first 5 %)"
    got = {w["window"]: (w["pace"], w["projected_ratio"], w["limit_at"])
           for w in data.to_json()["page"]["plan_windows"]}
    assert got == {"a_track": ("on_track", 0.55, None),
                   "b_ahead": ("limit_ahead", 1.5, "2026-09-21T15:43:20Z"),
                   "c_reached": ("limit_reached", 1.0, "2026-09-21T14:03:20Z"),
                   "d_new": ("not_enough_data", None, None)}
