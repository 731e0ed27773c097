"""`report` over a mixed home (issue 36, item 5): Claude Code's figures unchanged, Codex's exact.

Real transcripts of both agents (tests/support/codex_mix.py): a Claude Code-only
ledger, and a ledger of both read by `report --agent`, by default (a line per
agent) and by every view (a row per agent).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from exporter.ledger.store import Ledger
from exporter.projections import agents, views
from exporter.projections.class_prices import ClassPrices
from exporter.projections.pricing import RateTable
from exporter.records import Appearance, Parsed
from exporter.report.tables import render_view, view_json
from tests.support import report_ledgers
from tests.support.codex_mix import CLAUDE, CODEX, codex_count, env, report
from tests.support.paths import ROOT
from tests.support.records import request

VIEWS = ("daily", "weekly", "monthly", "session", "project", "blocks", "skill", "plugin",
         "mcp", "agent")
# Codex's figures as the issue states them (the fixture's README, "dedup"), and counted here.
CODEX_TOTALS = {"requests": 1013, "input_tokens": 4_526_178, "cache_read_tokens": 91_591_680,
                "output_tokens": 875_951, "cache_write_5m_tokens": 0, "cache_write_1h_tokens": 0}
REASONING = 64_770


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three state dirs: Claude Code only, Codex only, both (each ledger read once here)."""
    base = tmp_path_factory.mktemp("mixed")
    states = {name: base / name for name in ("claude", "codex", "both")}
    report(states["claude"], "--json", codex=False)
    report(states["codex"], "--json", claude=False)
    report(states["both"], "--json")
    return states


def _json(state: Path, *flags: str, **parts: bool) -> dict[str, Any]:
    """`report --json` with ``flags``, parsed."""
    out: dict[str, Any] = json.loads(report(state, "--json", *flags, **parts))
    return out


@pytest.mark.parametrize("flags", [
    ("--json",), (), ("--full",),
    *((view, "--json") for view in VIEWS),
    *((view, "--csv") for view in ("daily", "session", "blocks", "skill")),
    ("daily",), ("session", "--breakdown"),
], ids=" ".join)
def test_claude_under_agent_claude_is_byte_identical_to_claude_only(
        homes: dict[str, Path], flags: tuple[str, ...]) -> None:
    """`--agent claude` on the mixed ledger prints, to the byte, what a Claude-only ledger does."""
    alone = report(homes["claude"], *flags, codex=False)
    mixed = report(homes["both"], *flags, "--agent", "claude")
    assert mixed == alone
    assert alone.strip()


def test_codex_figures_are_exact(homes: dict[str, Path]) -> None:
    """`--agent codex`: 1,013 turns; input net of cache, cache reads, output as counted here."""
    counted = codex_count()
    assert counted["turns"] == CODEX_TOTALS["requests"]
    assert counted["input_tokens"] - counted["cached_input_tokens"] == \
        CODEX_TOTALS["input_tokens"]
    assert counted["reasoning_output_tokens"] == REASONING
    for state in (homes["both"], homes["codex"]):
        doc = _json(state, "--agent", "codex")
        assert {k: doc["totals"][k] for k in CODEX_TOTALS} == CODEX_TOTALS
        # Codex alone keeps its line: reasoning and the context share are its own figures.
        (line,) = doc["by_agent"].values()
        assert line["reasoning_tokens"] == REASONING and line["context_window_share"]
        assert set(doc["by_model"]) == {"gpt-5.5", "gpt-5.6-luna", "gpt-5.6-sol",
                                        "gpt-5.6-terra"}
        assert doc["lines"]["usage"] == CODEX_TOTALS["requests"]
    only = _json(homes["codex"], claude=False)
    assert list(only["by_agent"]) == ["codex"]  # a Codex-only ledger: Codex's line alone


def test_json_splits_by_agent_where_both_are_held(homes: dict[str, Path]) -> None:
    """Default JSON on both: ``by_agent`` adds up; Codex gives reasoning and no cache writes."""
    doc = _json(homes["both"])
    claude_only = _json(homes["claude"], codex=False)
    by_agent = doc["by_agent"]
    assert list(by_agent) == ["claude", "codex"]
    codex = by_agent["codex"]
    assert {k: codex[k] for k in CODEX_TOTALS} == CODEX_TOTALS
    assert codex["reasoning_tokens"] == REASONING
    assert codex["cache_writes_measured"] is False
    claude = by_agent["claude"]
    assert claude["cache_writes_measured"] is True
    assert claude["reasoning_tokens"] is None
    assert {k: claude[k] for k in claude_only["totals"]} == claude_only["totals"]
    for key in ("requests", "input_tokens", "output_tokens", "cache_read_tokens",
                "cache_write_5m_tokens", "cache_write_1h_tokens", "unpriced_tokens"):
        assert claude[key] + codex[key] == doc["totals"][key], key


def test_the_default_report_and_full_show_both_agents(homes: dict[str, Path]) -> None:
    """The one-screen report and --full: a column per agent, reasoning apart, no cache writes."""
    for flags in ((), ("--full",)):
        out = report(homes["both"], *flags)
        table = out[out.index("by agent"):]
        for shown in ("Claude Code", "Codex", "4.526M", "91.59M", "876k", "64.77k",
                      "not measured", "of it reasoning"):
            assert shown in table, (flags, shown)
        assert "by agent" not in report(homes["claude"], *flags, codex=False)


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_says_each_rows_agent(homes: dict[str, Path], view: str) -> None:
    """On both, a view's JSON and CSV rows name their agent; each agent's rows sum to its line."""
    key = "coding_agent" if view in ("skill", "plugin", "mcp", "agent") else "agent"
    by_agent = _json(homes["both"])["by_agent"]
    doc = _json(homes["both"], view)
    sums: dict[str, int] = {}
    for row in doc["rows"]:
        sums[row[key]] = sums.get(row[key], 0) + row["requests"]
    assert sums == {a: u["requests"] for a, u in by_agent.items()}
    rows = list(csv.DictReader(io.StringIO(report(homes["both"], view, "--csv"))))
    assert {r[key] for r in rows} == {"claude", "codex"}
    alone = _json(homes["claude"], view, codex=False)
    assert all(key not in row or view == "agent" for row in alone["rows"])


def test_codex_days_are_the_fixtures(homes: dict[str, Path]) -> None:
    """The daily view's Codex rows: the README's turns per UTC day (dedup)."""
    rows = _json(homes["both"], "daily")["rows"]
    codex = {r["period"]: r["requests"] for r in rows if r["agent"] == "codex"}
    assert codex == {"2026-06-30": 9, "2026-07-09": 40, "2026-07-13": 914, "2026-07-14": 50}


def test_an_unknown_agent_is_a_usage_error(tmp_path: Path) -> None:
    """`--agent gemini`: exit 2, naming the choices."""
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--agent", "gemini", "--data-dir",
         str(CLAUDE), "--codex-home", str(CODEX), "--state-dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT, env=env(tmp_path))
    assert done.returncode == 2
    assert "claude" in done.stderr and "codex" in done.stderr


def test_rows_of_a_v1_ledger_are_claude_codes_only(tmp_path: Path) -> None:
    """A v1 ledger's rows (in every roots scope) count as Claude Code's, never as Codex's."""
    path = tmp_path / "ledger.sqlite3"
    shutil.copy(ROOT / "tests" / "golden" / "ledger_v1.sqlite3", path)
    ledger = Ledger(path)
    try:
        (legacy,) = ledger.read("SELECT count(*) FROM requests")[0]
        parsed = Parsed()
        parsed.add(request("codex\x1fs\x1f1", 1.0e9, model="gpt-5.5", input=3, output=2))
        ledger.apply(parsed, [], 0, [Appearance("/codex/sessions/r.jsonl", "/codex", "s",
                                                ("codex\x1fs\x1f1",), agent="codex")])
        count = "SELECT count(*) FROM {} AS r"
        codex = agents.scope(ledger, ["/codex"], "codex")
        assert ledger.read(count.format(codex.relation)) == [(1,)]
        claude = agents.scope(ledger, ["/"], "claude")
        assert ledger.read(count.format(claude.relation)) == [(legacy,)]
    finally:
        ledger.close()


def test_each_agent_has_its_own_open_block() -> None:
    """Blocks on both agents: each agent's open block, named, and rows ordered and cut as one."""
    prices = ClassPrices.of(RateTable.load())
    t0 = 1_800_000_123.0
    parts = {}
    for agent, start in (("claude", t0), ("codex", t0 + 600)):
        reqs = [request(f"{agent}1", start, output=1000),
                request(f"{agent}2", start + 1800, output=1000)]
        sel = report_ledgers.select(report_ledgers.slotted(reqs))
        parts[agent] = views.build("blocks", sel, prices, views.Options(now=t0 + 3600))
    view = views.merged(parts, views.Options(now=t0 + 3600, limit=1), "oldest")
    assert [r.agent for r in view.rows] == ["claude"] and view.count == 2
    assert view.rest == parts["codex"].total and view.total.output == 4000
    assert set(view.actives) == {"claude", "codex"} and view.active == view.actives["codex"]
    doc = view_json(view)
    assert doc["rows"][0]["agent"] == "claude"
    assert doc["active_block_by_agent"]["codex"]["elapsed_seconds"] == 3000.0
    buffer = io.StringIO()
    render_view(view, Console(file=buffer, width=160, color_system=None))
    shown = buffer.getvalue()
    assert "Claude Code: open block: 1 h in" in shown and "Codex: open block: 50 min in" in shown
    assert "open, 4 h left" in shown


def test_codex_cache_writes_are_said_not_measured(homes: dict[str, Path]) -> None:
    """Codex logs no cache writes: `--agent codex` says "not measured" / "—", never a measured 0."""
    glance = report(homes["both"], "--agent", "codex")
    assert "cache write not measured" in " ".join(glance.split())
    full = report(homes["both"], "--agent", "codex", "--full")
    assert "not measured" in full
    assert _json(homes["both"], "--agent", "codex")["cache_writes_measured"] is False
    for flags in (("daily", "--agent", "codex"), ("daily",)):
        table = report(homes["both"], *flags)
        assert "cache write —: not measured (Codex logs no cache writes)" in table
        codex_rows = [line for line in table.splitlines() if line.strip().startswith("2026-07")]
        assert codex_rows and all(" — " in line for line in codex_rows)
    assert "not measured" not in report(homes["claude"], "daily", codex=False)
