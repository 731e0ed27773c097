"""The prompt's share of Codex's context window (issue 36, item 3), on the real fixture.

Each Codex turn states its model's window (``model_context_window``); the
prompt is the turn's input (cached part included). ``report --json`` gives the
share's p50, p90 and max over Codex's turns under ``by_agent.codex``, ``report
--full`` says it in a line; both are checked against a count made here from
the fixture's files alone (each distinct turn once, as its README dedups).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.support.codex_count import distinct_turns
from tests.support.codex_mix import CODEX, report


def _percentile(values: list[float], p: int) -> float:
    """Nearest rank: ``v[ceil(p/100 · n) − 1]`` of the sorted values."""
    return values[min(max(math.ceil(p * len(values) / 100), 1), len(values)) - 1]


def independent_shares(home: Path = CODEX) -> list[float]:
    """Each distinct turn's prompt / stated window, read from the rollouts alone, sorted."""
    return sorted(info["last_token_usage"]["input_tokens"] / info["model_context_window"]
                  for info in distinct_turns(home) if info.get("model_context_window"))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`report --json` over the real Claude Code transcripts and the real Codex rollouts."""
    out: dict[str, Any] = json.loads(report(tmp_path_factory.mktemp("mixed") / "state",
                                            "--json"))
    return out


def test_the_share_is_that_of_the_files(mixed: dict[str, Any]) -> None:
    """by_agent.codex.context_window_share: p50, p90 and max of the independent count."""
    shares = independent_shares()
    assert len(shares) == 1013  # every turn of the fixture states its window
    got = mixed["by_agent"]["codex"]["context_window_share"]
    want = {"p50": _percentile(shares, 50), "p90": _percentile(shares, 90), "max": shares[-1],
            "turns": len(shares)}
    assert got == pytest.approx(want, abs=1e-6)
    assert got["max"] > 1  # a real prompt past the stated window: shown, not clipped


def test_claude_code_states_no_window(mixed: dict[str, Any]) -> None:
    """Claude Code's logs state no window: its share is null, not a zero."""
    assert mixed["by_agent"]["claude"]["context_window_share"] is None


def test_report_full_says_the_share(tmp_path: Path) -> None:
    """`report --full` has a line with the share's p50, p90 and max over Codex's turns."""
    text = report(tmp_path / "state", "--full")
    shares = independent_shares()
    line = next(x for x in text.splitlines() if "prompt / context window:" in x)
    for p in (50, 90):
        assert f"p{p} {_percentile(shares, p):.0%}" in line, line
    assert f"max {shares[-1]:.0%}" in line and "1,013 turns" in line, line
