"""Real Codex sessions (tests/fixtures/codex_real): exact against an independent count, ccusage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from exporter.cli.commands import main
from tests.support.codex_count import count_turns
from tests.support.ledgers import ledger_value
from tests.support.paths import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "codex_real"
# The three forks of a parent that is not in the fixture (its file was too large to store):
# the only place its history survives is their copies of it, which ccusage drops.
ORPHAN_FORKS = "sessions/2026/07/13/rollout-2026-07-13T10-4*-019f595c-*.jsonl"


def _report(home: Path, state: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    """``report --json`` in-process over one Codex home given as a data dir (no Claude roots)."""
    assert main(["report", "--json", "--data-dir", str(home), "--state-dir", str(state),
                 "--timezone", "UTC", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _complete_home(tmp: Path) -> Path:
    """The fixture without the forks whose parent is missing: every copied turn's original here."""
    home = tmp / "home"
    shutil.copytree(FIXTURE / "sessions", home / "sessions")
    for fork in home.glob(ORPHAN_FORKS):
        fork.unlink()
    return home


def test_every_turn_once_equals_the_independent_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Turns and tokens equal an independent count of each usage record once, copies and all."""
    truth = count_turns(FIXTURE)
    got = _report(FIXTURE, tmp_path / "state", capsys)["totals"]
    assert got["requests"] == truth["turns"] == 1013
    assert got["input_tokens"] == truth["input_tokens"] - truth["cached_input_tokens"]
    assert got["cache_read_tokens"] == truth["cached_input_tokens"]
    assert got["output_tokens"] == truth["output_tokens"]
    assert got["cache_write_5m_tokens"] == got["cache_write_1h_tokens"] == 0
    reasoning = ledger_value(tmp_path / "state" / "ledger.sqlite3",
                             "SELECT sum(reasoning) FROM requests")
    assert reasoning == truth["reasoning_output_tokens"] == 64_770


def test_parents_present_every_day_equals_ccusage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With every fork's parent present, each UTC day equals ccusage 20.0.24's ``codex daily``."""
    peer = json.loads((FIXTURE / "ccusage_codex_daily_parents_present.json").read_text())
    got = _report(_complete_home(tmp_path), tmp_path / "state", capsys, "daily")
    ours = {row["period"]: row for row in got["rows"]}
    assert sorted(ours) == [day["date"] for day in peer["daily"]]
    for day in peer["daily"]:
        row = ours[day["date"]]
        assert (row["input_tokens"], row["cache_read_tokens"], row["output_tokens"]) == (
            day["inputTokens"], day["cacheReadTokens"], day["outputTokens"]), day["date"]
    assert got["totals"]["input_tokens"] + got["totals"]["cache_read_tokens"] + got[
        "totals"]["output_tokens"] == peer["totals"]["totalTokens"]


def test_orphan_fork_copies_are_the_only_difference_from_ccusage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On the whole fixture we count the missing parent's history once; ccusage drops it."""
    peer = json.loads((FIXTURE / "ccusage_codex_daily.json").read_text())["totals"]
    whole = _report(FIXTURE, tmp_path / "whole", capsys)["totals"]
    complete = _report(_complete_home(tmp_path), tmp_path / "complete", capsys)["totals"]
    orphans = tmp_path / "orphans"
    for fork in FIXTURE.glob(ORPHAN_FORKS):
        (orphans / "sessions").mkdir(parents=True, exist_ok=True)
        shutil.copy(fork, orphans / "sessions" / fork.name)
    copies = count_turns(orphans)

    def tokens(t: dict[str, int]) -> int:
        return t["input_tokens"] + t["cache_read_tokens"] + t["output_tokens"]

    # The forks' own turns are in ccusage's figure; the parent's copied history is not.
    assert tokens(whole) - peer["totalTokens"] == 45_270_998
    assert tokens(whole) - tokens(complete) == copies["input_tokens"] + copies["output_tokens"]
