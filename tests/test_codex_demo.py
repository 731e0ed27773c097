"""``serve --demo`` shows both agents (issue 36): a real demo process, its page and /metrics.

The demo writes a month of Claude Code sessions and a small Codex home
(exporter/synth/demo_codex.py) and follows both; its ``demo`` log line carries
the generator's truth for the Codex home, which the page's "By agent" card,
/api/summary.json and Codex's families on /metrics must equal.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.synth.demo_codex import codex_history, latest
from tests.support.codex_mix import env
from tests.support.exposition import families, total
from tests.support.net import LOOPBACK, free_port, http_get
from tests.support.page_dom import parse
from tests.support.process import Process
from tests.support.wait import poll

CODEX = "claude_code_codex_"


class Demo:
    """A real ``serve --demo`` on loopback and the truth its log line announces."""

    def __init__(self, base: Path) -> None:
        """Start it with ``HOME`` at ``base`` (no user's logs); wait for /healthz."""
        self.url = f"http://{LOOPBACK}:{free_port()}"
        self.proc = Process([sys.executable, "-m", "exporter", "serve", "--demo", "--listen",
                             self.url.removeprefix("http://"), "--log-format", "json"],
                            base / "serve.log", env=env(base))
        poll(lambda: self.proc.answers(self.url + "/healthz"), 120, "demo /healthz")
        self.event = next(e for e in self.proc.events() if e.get("event") == "demo")

    def get(self, path: str) -> bytes:
        """One GET's body (200 asserted)."""
        status, body = http_get(self.url + path, timeout=20)
        assert status == 200, (path, status, body[:300])
        return body

    def summary(self) -> dict[str, Any]:
        """/api/summary.json over the page's default range."""
        doc: dict[str, Any] = json.loads(self.get("/api/summary.json"))
        return doc


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """The demo, once its Codex home is in the ledger."""
    running = Demo(tmp_path_factory.mktemp("demo"))
    try:
        turns = running.event["codex_turns"]
        poll(lambda: running.summary().get("by_agent", {}).get("codex", {}).get("requests")
             == turns, 120, "the demo's Codex turns ingested")
        yield running
    finally:
        assert running.proc.stop() == 0, running.proc.log()


def test_the_demo_page_shows_both_agents(demo: Demo) -> None:
    """The page at / has the "By agent" card with Codex's turns as the generator wrote them."""
    html = demo.get("/").decode()
    dom = parse(html)
    assert "agents" in dom.sections
    assert "<h1>Claude Code and Codex usage</h1>" in html
    assert dom.figures["codex-requests"] == f"{demo.event['codex_turns']:,}"
    assert dom.figures["codex-cache-write"] == "not measured"
    assert int(dom.figures["claude-requests"].replace(",", "")) > 0


def test_the_demo_metrics_carry_both_agents(demo: Demo) -> None:
    """/metrics: Claude Code's families and Codex's, Codex's turns and cost those of the truth."""
    fams = families(demo.get("/metrics").decode())
    assert total(fams, "claude_code_requests") > 0
    assert total(fams, f"{CODEX}requests") == demo.event["codex_turns"]
    assert total(fams, f"{CODEX}cost_usd") == pytest.approx(demo.event["codex_cost_usd"],
                                                            abs=1e-6)
    by_agent = demo.summary()["by_agent"]
    assert by_agent["codex"]["cost_usd"] == pytest.approx(demo.event["codex_cost_usd"], abs=1e-6)
    assert set(by_agent) == {"claude", "codex"}


@pytest.mark.parametrize("seed", [0, 74, 999])
def test_the_demo_codex_home_is_never_ahead_of_now(tmp_path: Path, seed: int) -> None:
    """Every Codex turn of the demo is dated before now, also for a seed that runs long."""
    now = time.time()
    home, truth = codex_history(tmp_path, now, seed)
    assert home == tmp_path / "codex" and truth["totals"]["requests"] > 0
    assert now - 2 * 86_400 < latest(home) <= now
