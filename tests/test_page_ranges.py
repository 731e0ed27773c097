"""The page's ranges (``since``, ``until``, ``tz`` as report takes them), hints, live plan panel."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import pytest

from bench.screenshot import demo_tree, dump_dom
from exporter.projections.model_names import short_model
from exporter.serve import page_html
from exporter.synth import GenOptions, generate
from tests.support.net import http_get
from tests.support.page_dom import Dom, parse
from tests.support.plan import record_now
from tests.support.process import Serve
from tests.support.statusline import payload
from tests.support.wait import poll

CHOICES = ("Today", "7 days", "30 days", "This month", "90 days", "a year", "All")
OLD_DAYS = 200  # the older tree: inside "a year", outside "90 days"


@pytest.fixture(scope="module")
def spread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, list[Path], Path]]:
    """A daemon over this week's sessions and, in a second root, sessions of 200 days ago."""
    root = tmp_path_factory.mktemp("ranges")
    recent, old, state = root / "recent", root / "old", root / "state"
    now = datetime.now(UTC)
    demo_tree(recent, now, days=6)
    generate(old, GenOptions(seed=77, sessions=2, requests_per_session=30, malformed=False,
                             start=(now - timedelta(days=OLD_DAYS)).replace(microsecond=0)))
    daemon = Serve([recent, old], state, env={"TZ": "UTC"})
    yield daemon, [recent, old], state
    assert daemon.stop() == 0


def _report(state: Path, dirs: list[Path], *flags: str) -> dict[str, Any]:
    """`report --json` over ``dirs`` beside the running serve (it reads serve's ledger)."""
    out = subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--json",
         *(a for d in dirs for a in ("--data-dir", str(d))), "--state-dir", str(state),
         "--timezone", "UTC", *flags],
        capture_output=True, text=True, timeout=120, check=True, env={**os.environ, "TZ": "UTC"})
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _report_error(state: Path, *flags: str) -> str:
    """What `report` says of flags it refuses (its stderr, after ``error: ``)."""
    out = subprocess.run([sys.executable, "-m", "exporter", "report", "--state-dir", str(state),
                          *flags], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    return out.stderr.strip().split("error: ", 1)[1]


def _load(url: str) -> Dom:
    """The page at ``url`` as Chromium built it; no console message."""
    html, messages = dump_dom(url)
    assert messages == [], messages
    return parse(html)


def _flags(dom: Dom) -> list[str]:
    """``report`` flags for the exact range the page says it shows."""
    return [a for key in ("since", "until") if key in dom.range
            for a in (f"--{key}", dom.range[key])]


def test_each_range_choice_in_chromium_is_reports_range(spread: tuple[Serve, list[Path], Path],
                                                        ) -> None:
    """Every range link on the page, followed in Chromium, shows report's figures for it."""
    daemon, dirs, state = spread
    links = _load(daemon.url + "/").links
    assert set(CHOICES) <= set(links), links
    requests = {}
    for label in CHOICES:
        dom = _load(urljoin(daemon.url + "/", links[label]))
        want = _report(state, dirs, *_flags(dom))["totals"]
        assert dom.figures["requests"] == f"{want['requests']:,}", label
        assert dom.figures["cost-range"] == page_html.money(want["cost_usd"]), label
        assert "empty-range" not in dom.notes, label
        requests[label] = want["requests"]
    now = datetime.now(UTC)
    week = _load(urljoin(daemon.url + "/", links["7 days"])).range["since"]
    assert abs(datetime.fromisoformat(week) - (now - timedelta(days=7))) < timedelta(minutes=5)
    assert requests["a year"] == requests["All"] > requests["90 days"] == requests["30 days"]
    assert requests["7 days"] == requests["30 days"] >= requests["Today"] > 0


def test_from_to_range_and_json_are_reports(spread: tuple[Serve, list[Path], Path]) -> None:
    """A from–to range (as the form sends it) on / and on the JSON is report's for those dates."""
    daemon, dirs, state = spread
    first = (datetime.now(UTC) - timedelta(days=OLD_DAYS + 1)).date().isoformat()
    last = (datetime.now(UTC) - timedelta(days=OLD_DAYS - 3)).date().isoformat()
    query = f"?since={first}&until={last}&tz=UTC"
    dom = _load(daemon.url + "/" + query)
    want = _report(state, dirs, "--since", first, "--until", last)
    assert dom.figures["requests"] == f"{want['totals']['requests']:,}" != "0"
    status, body = http_get(daemon.url + "/api/summary.json" + query, timeout=20)
    assert status == 200
    got = json.loads(body)
    page = got.pop("page")
    want["by_session"] = []  # no session ids on the page
    assert got == want
    assert page["daily_cost_usd"][0]["day"] == first
    assert page["daily_cost_usd"][-1]["day"] == last  # a date-only until is the whole day
    zoned = _load(daemon.url + "/" + query.replace("tz=UTC", "tz=America/New_York"))
    other = _report(state, dirs, "--since", first, "--until", last,
                    "--timezone", "America/New_York")  # the last --timezone wins
    assert zoned.range["since"] == other["range"]["since"] != want["range"]["since"]
    assert zoned.figures["requests"] == f"{other['totals']['requests']:,}"


def test_empty_range_offers_the_range_with_data(spread: tuple[Serve, list[Path], Path]) -> None:
    """A range between the two trees is empty: the page says so and links the range with data."""
    daemon, dirs, state = spread
    now = datetime.now(UTC)
    gap = f"?since={(now - timedelta(days=150)).date()}&until={(now - timedelta(days=100)).date()}"
    dom = _load(daemon.url + "/" + gap)
    assert dom.figures["requests"] == "0" and "empty-range" in dom.notes
    offered = _load(urljoin(daemon.url + "/", dom.links["offer"]))
    assert "empty-range" not in offered.notes
    everything = _report(state, dirs)["totals"]["requests"]
    assert offered.figures["requests"] == f"{everything:,}"


@pytest.mark.parametrize(("query", "flags"), [
    ("since=bogus", ("--since", "bogus")),
    ("tz=Europe/Berln", ("--timezone", "Europe/Berln")),
    ("since=2026-02-02&until=2026-02-01", ("--since", "2026-02-02", "--until", "2026-02-01")),
])
def test_a_bad_range_is_a_400_with_reports_message(
        spread: tuple[Serve, list[Path], Path], query: str, flags: tuple[str, ...]) -> None:
    """A range report refuses is a 400 on / and the JSON, with report's own message."""
    daemon, _, state = spread
    message = _report_error(state, *flags)
    status, body = http_get(daemon.url + "/?" + query, timeout=20)
    assert status == 400 and html.escape(message) in body.decode()
    status, body = http_get(daemon.url + "/api/summary.json?" + query, timeout=20)
    assert status == 400 and json.loads(body) == {"error": message}


@pytest.mark.parametrize("query", [
    "since=99999999w", "until=-99999999999999999999d", "days=365", "since=7d&since=8d",
    "since=" + "1" * 65, "x=" + "y" * 600, "a=1&b=2&c=3&d=4&e=5", "since=%ff%fe",
    "since=" + quote("<script>alert(1)</script>"),
])
def test_hostile_queries_are_refused_escaped(spread: tuple[Serve, list[Path], Path],
                                             query: str) -> None:
    """Out-of-calendar ages, unknown or repeated or long parameters: a 400, markup escaped."""
    daemon = spread[0]
    status, body = http_get(daemon.url + "/?" + query, timeout=20)
    assert status == 400, (query, body[:300])
    assert b"<script>alert" not in body and b'data-note="bad-range"' in body
    status, body = http_get(daemon.url + "/api/summary.json?" + query, timeout=20)
    assert status == 400 and set(json.loads(body)) == {"error"}, (query, body[:300])
    assert daemon.health()[0] == 200


def test_page_names_models_as_the_report_does(spread: tuple[Serve, list[Path], Path]) -> None:
    """The cost-by-model chart names each model by the report's short name (sonnet-4-5)."""
    daemon, dirs, state = spread
    html, _ = dump_dom(daemon.url + "/?since=")
    chart = html.split('data-chart="by-model"', 1)[1].split("</svg>", 1)[0]
    shown = set(re.findall(r"<title>([^<:]+): ", chart))
    models = _report(state, dirs)["by_model"]
    assert shown == {short_model(m) for m in models}
    assert all(not s.startswith("claude-") for s in shown)


def test_plan_panel_appears_after_the_first_sample_without_a_restart(tmp_path: Path) -> None:
    """A serve started before the status line shows the panel after its first sample, live."""
    tree, state = tmp_path / "tree", tmp_path / "state"
    demo_tree(tree, datetime.now(UTC), days=1)
    state.mkdir(mode=0o700)
    daemon = Serve(tree, state, env={"TZ": "UTC"})
    try:
        assert "plan" not in _load(daemon.url + "/").sections
        resets = datetime.now(UTC).timestamp() + 2 * 3600 + 10 * 60 + 30
        doc = payload(five=35.0, seven=17.0)
        doc["rate_limits"]["five_hour"]["resets_at"] = int(resets)
        record_now(state, doc)

        def windows() -> list[Any]:
            body = http_get(daemon.url + "/api/summary.json", timeout=10)[1]
            found: list[Any] = json.loads(body)["page"]["plan_windows"]
            return found

        poll(windows, 20, "plan windows in /api/summary.json")
        html, messages = dump_dom(daemon.url + "/")
        assert messages == [] and "plan" in parse(html).sections
        dom = parse(html)
        assert re.fullmatch(r"(today|tomorrow) \d\d:\d\d \(in 2 h 10 min\)",
                            dom.figures["resets-five_hour"]), dom.figures
    finally:
        assert daemon.stop() == 0
