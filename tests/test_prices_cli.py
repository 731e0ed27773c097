"""Which prices a report used, and what to do about a model without one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT
from tests.support.records import assistant, jsonl


def _report(tree: Path, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``report`` over ``tree`` as a process, with a wide terminal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE_CODE_EXPORTER")}
    env.update({"PYTHONPATH": str(ROOT), "COLUMNS": "160"})
    return subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--data-dir", str(tree),
         "--state-dir", str(state), *args],
        capture_output=True, text=True, env=env, timeout=120, check=False)


def _tree(tmp_path: Path) -> Path:
    """One priced and one unknown model's request."""
    project = tmp_path / "claude" / "projects" / "-home-u-proj"
    project.mkdir(parents=True)
    (project / "s1.jsonl").write_bytes(jsonl(
        assistant("msg_1", "req_1"),
        assistant("msg_2", "req_2", ts="2026-10-01T12:01:00.000Z", model="claude-nova-9")))
    return tmp_path / "claude"


def test_text_report_names_the_price_data_and_prices_nothing_at_zero(tmp_path: Path) -> None:
    """The summary ends with the price source and a line on how to price the unknown model."""
    done = _report(_tree(tmp_path), tmp_path / "state")
    assert done.returncode == 0, done.stderr
    tail = done.stdout.splitlines()[-2:]
    assert tail[0].startswith("Prices: genai-prices "), tail
    assert "unpriced:" in tail[1] and "'claude-nova-9'" in tail[1], tail
    assert "pip install -U genai-prices" in tail[1], tail


def test_json_report_carries_the_price_source(tmp_path: Path) -> None:
    """``report --json`` says which price data its costs come from."""
    done = _report(_tree(tmp_path), tmp_path / "state", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["prices"]["package"] == "genai-prices"
    assert doc["prices"]["version"] and doc["prices"]["data_date"]
    assert doc["totals"]["unpriced_tokens"] > 0 and doc["totals"]["cost_usd"] > 0
