"""The page over a mixed home (issue 36, item 5): both agents side by side, and ``?agent=``.

A real ``serve`` on loopback follows real Claude Code transcripts and real Codex
rollouts (tests/support/codex_mix.py); the page and /api/summary.json are read
over HTTP and compared with `report` and the independent count.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.codex_mix import CLAUDE, CODEX, agent_links, codex_count, env, report
from tests.support.page_dom import parse
from tests.support.process import Serve
from tests.support.wait import poll

EVERYTHING = "since="  # the page's whole range, as ``?since=`` asks
BOTH = 1013 + 529  # Codex turns (the fixture README) and Claude Code requests (report's)


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """``serve`` following both agents, once every request is in its ledger."""
    base = tmp_path_factory.mktemp("page")
    daemon = Serve(CLAUDE, base / "state", "--codex-home", str(CODEX), env=env(base))
    try:
        poll(lambda: _doc(daemon)["totals"]["requests"] == BOTH, 120, "both agents ingested")
        yield daemon
    finally:
        daemon.stop()


def _doc(daemon: Serve, query: str = EVERYTHING) -> dict[str, Any]:
    """/api/summary.json for ``query``."""
    status, body = daemon.get(f"/api/summary.json?{query}")
    assert status == 200, body[:300]
    doc: dict[str, Any] = json.loads(body)
    return doc


def _page(daemon: Serve, query: str = EVERYTHING) -> str:
    """The page's HTML for ``query``."""
    status, body = daemon.get(f"/?{query}")
    assert status == 200, body[:300]
    return body.decode()


@pytest.fixture(scope="module")
def claude_alone(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`report --json` over the Claude Code part alone: the figures ``?agent=claude`` must show."""
    state = tmp_path_factory.mktemp("alone") / "state"
    out: dict[str, Any] = json.loads(report(state, "--json", codex=False))
    return out


def test_the_page_shows_both_agents(serve: Serve, claude_alone: dict[str, Any]) -> None:
    """The agent panel: Codex's figures exact, Claude Code's as a report of it alone."""
    html = _page(serve)
    dom = parse(html)
    assert "agents" in dom.sections
    counted = codex_count()
    want = {"codex-requests": counted["turns"],
            "codex-input": counted["input_tokens"] - counted["cached_input_tokens"],
            "codex-cache-read": counted["cached_input_tokens"],
            "codex-output": counted["output_tokens"],
            "codex-reasoning": counted["reasoning_output_tokens"],
            "claude-requests": claude_alone["totals"]["requests"],
            "claude-input": claude_alone["totals"]["input_tokens"],
            "claude-output": claude_alone["totals"]["output_tokens"]}
    assert {k: dom.figures[k] for k in want} == {k: f"{v:,}" for k, v in want.items()}
    assert dom.figures["codex-cache-write"] == "not measured"
    assert dom.figures["claude-reasoning"] == "—"
    assert "<h1>Claude Code and Codex usage</h1>" in html
    doc = _doc(serve)
    assert doc["by_agent"]["codex"]["reasoning_tokens"] == counted["reasoning_output_tokens"]
    assert doc["by_agent"]["codex"]["cache_writes_measured"] is False
    assert doc["page"]["agent"] is None
    assert list(doc["page"]["agents"]) == ["claude", "codex"]


def test_the_agent_parameter_filters_the_page(serve: Serve,
                                              claude_alone: dict[str, Any]) -> None:
    """``?agent=codex`` and ``?agent=claude``: every card that agent's, as `report --agent`."""
    codex = _doc(serve, f"{EVERYTHING}&agent=codex")
    assert codex["totals"]["requests"] == 1013
    assert codex["totals"]["cache_read_tokens"] == 91_591_680
    assert "by_agent" not in codex and codex["page"]["agent"] == "codex"
    claude = _doc(serve, f"{EVERYTHING}&agent=claude")
    assert claude["totals"] == claude_alone["totals"]
    assert claude["by_model"] == claude_alone["by_model"]
    html = _page(serve, f"{EVERYTHING}&agent=codex")
    dom = parse(html)
    assert dom.figures["requests"] == "1,013"
    assert "<h1>Codex usage</h1>" in html
    links, current = agent_links(html)
    assert current == "codex" and set(links) == {"all", "claude", "codex"}
    assert "agent=claude" in links["claude"] and "agent" not in links["all"]
    assert all("agent=codex" in href for href in dom.links.values())  # ranges keep the agent


@pytest.mark.parametrize("query", ["agent=gemini", "agent=%3Cscript%3E"])
def test_an_unknown_agent_is_refused_and_shown_escaped(serve: Serve, query: str) -> None:
    """An agent the page does not know: a 400 naming the choices; the value never runs."""
    status, body = serve.get(f"/?{query}")
    assert status == 400
    assert b"claude, codex" in body and b"<script>" not in body


def test_a_claude_only_page_has_no_agent_panel(tmp_path: Path) -> None:
    """Without Codex logs the page is as it was: no panel, no agent in the JSON."""
    daemon = Serve(CLAUDE, tmp_path / "state", env=env(tmp_path))
    try:
        poll(lambda: _doc(daemon)["totals"]["requests"] == 529, 120, "Claude Code ingested")
        html = _page(daemon)
        assert "agents" not in parse(html).sections
        assert "<h1>Claude Code usage</h1>" in html
        doc = _doc(daemon)
        assert "by_agent" not in doc and "agent" not in doc["page"]
    finally:
        daemon.stop()


def test_codex_alone_has_no_cache_writes_on_the_page(serve: Serve) -> None:
    """``?agent=codex``: the tokens card says cache writes are not measured instead of two zeros."""
    rows = parse(_page(serve, f"{EVERYTHING}&agent=codex")).tables["tokens"]
    assert ["cache write", "not measured"] in rows
    assert not any(row[0].startswith("cache write 5m") for row in rows)
    both = parse(_page(serve)).tables["tokens"]
    assert any(row[0] == "cache write 5m" for row in both)
