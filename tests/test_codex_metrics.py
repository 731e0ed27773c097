"""Codex on /metrics and in backfill: its own families, exact; Claude Code's families unchanged.

A mixed home is the real Claude Code transcripts (../shared/fixtures/real) beside the
real Codex home (tests/fixtures/codex_real); the truth of the Codex home is its README's
"dedup" row (each turn once, wherever it was copied).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.cli.assemble import daemon_parts
from exporter.cli.config import load_settings
from exporter.cli.pipeline import codex_homes, transcript_dirs
from exporter.ingest.codex import KEY_PREFIX
from exporter.ingest.discover import projects_dirs
from exporter.ingest.formats import Root
from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger
from exporter.projections.backfill import BackfillOptions, serve_samples, write_history
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.pricing import RateTable
from exporter.projections.project_groups import folders_of
from exporter.records import Appearance, Parsed, Request, Source
from exporter.serve.daemon import Daemon
from grafana import codex_plan
from grafana.query import Prometheus, query_board
from tests.support.backfill import parse
from tests.support.clock import Clock
from tests.support.exposition import families, total
from tests.support.logs import Log
from tests.support.paths import ROOT
from tests.support.projection import GOLDEN_HISTORY, PROJECTED, T0, options, projection, req
from tests.support.prometheus import PromServer, require_binary
from tests.support.scan import counting_ledger

FIXTURE = ROOT / "tests" / "fixtures" / "codex_real"
GOLDEN = ROOT / "tests" / "golden"
TRUTH = {"requests": 1_013, "input": 4_526_178, "cache_read": 91_591_680, "output": 875_951,
         "reasoning": 64_770}
CODEX = "claude_code_codex_"
OWN = "claude_code_exporter_"
# After the fixture's last line (2026-07-14T07:07Z): its newest sessions are within the hour.
AFTER_CODEX = 1_784_013_000.0
TARGET = {"job": "claude-code", "instance": "ws-1:9477", "user": "alice"}
#: The dashboard's variables as a user leaves them (every target, model and project).
VARIABLES = {"job": "claude-code", "instance": ".*", "user": ".*", "model": ".*",
             "project": ".*"}
_NAME = re.compile(r"^(?:# (?:HELP|TYPE) )?([a-zA-Z_:][a-zA-Z0-9_:]*)")


#: Families of every agent: the exporter's own (lines of both agents' logs) and the projected
#: spend (a budget is money: docs/metrics.md, "Codex").
BOTH = (OWN, "claude_code_budget_projected_usd")


def claude_part(text: str) -> str:
    """The exposition without Codex's families and those of every agent (:data:`BOTH`)."""
    out = []
    for line in text.splitlines():
        m = _NAME.match(line)
        if m and not m.group(1).startswith((CODEX, *BOTH)):
            out.append(line)
    return "\n".join(out)


def codex_totals(text: str) -> dict[str, float]:
    """The Codex families' totals that the fixture's truth names."""
    fams = families(text)
    tokens = {t: total(fams, f"{CODEX}tokens", f"{CODEX}tokens_total", type=t)
              for t in ("input", "cache_read", "output", "reasoning")}
    return {"requests": total(fams, f"{CODEX}requests"), **tokens}


def scanned(tmp: Path, claude: Path | None, codex: Path | None) -> Ledger:
    """A settled ledger of a Claude Code tree and a Codex home (either may be left out)."""
    ledger = counting_ledger(tmp / "ledger.sqlite3")
    dirs = projects_dirs([claude]) if claude is not None else []
    others = [Root(codex, "codex")] if codex is not None else []
    Scanner(ledger, dirs, workers=1, others=others).scan()
    ledger.settle(force=True)
    return ledger


def started(ledger: Ledger, clock: float) -> str:
    """The exposition of a projection started from ``ledger`` at ``clock``."""
    proj, registry = projection(Clock(clock))
    try:
        proj.load(ledger)
        return generate_latest(registry).decode()
    finally:
        proj.shutdown()


def newest_claude(ledger: Ledger) -> float:
    """The time of the newest Claude Code request of a ledger."""
    ts: float = ledger.read("SELECT max(ts) FROM requests WHERE substr(key, 1, 6) != ?",
                            [KEY_PREFIX])[0][0]
    return ts


def test_claude_families_of_a_mixed_home_equal_a_claude_only_start(
        real_tree: Path, tmp_path: Path) -> None:
    """Started from a mixed ledger, Claude's families are a Claude-only start's, to the byte."""
    alone = scanned(tmp_path / "alone", real_tree, None)
    mixed = scanned(tmp_path / "mixed", real_tree, FIXTURE)
    now = newest_claude(alone) + 60  # Claude Code's sessions live: the gauges show them
    want, got = started(alone, now), started(mixed, now)
    assert CODEX not in want
    assert claude_part(got) == claude_part(want)
    assert codex_totals(got) == TRUTH


def test_codex_live_sessions_move_no_claude_gauge(real_tree: Path, tmp_path: Path) -> None:
    """A Codex session within the hour is no active session of Claude Code's gauges."""
    alone = scanned(tmp_path / "alone", real_tree, None)
    mixed = scanned(tmp_path / "mixed", real_tree, FIXTURE)
    want, got = started(alone, AFTER_CODEX), started(mixed, AFTER_CODEX)
    assert claude_part(got) == claude_part(want)
    assert 'claude_code_last_request_timestamp_seconds{source="main"}' in want


def test_codex_rows_of_a_first_pass_are_counted_with_their_reasoning(tmp_path: Path) -> None:
    """A projection fed a first pass (batches without row lists) reads the reasoning again."""
    ledger = counting_ledger(tmp_path / "ledger.sqlite3")
    proj, registry = projection(Clock(AFTER_CODEX))
    proj.load(ledger)
    Scanner(ledger, [], workers=1, others=[Root(FIXTURE, "codex")],
            on_applied=proj.apply).scan()
    proj.apply(ledger.settle(force=True))  # the settling turn after the pass
    text = generate_latest(registry).decode()
    proj.shutdown()
    assert codex_totals(text) == TRUTH
    assert total(families(text), f"{CODEX}request_context_tokens",
                 f"{CODEX}request_context_tokens_count") == TRUTH["requests"]
    assert "claude_code_requests_total" not in text  # no Claude Code row: no Claude series


def test_a_live_codex_home_grows_only_the_codex_families(
        real_tree: Path, tmp_path: Path) -> None:
    """An in-process serve over Claude Code and an empty Codex home; the sessions arrive live."""
    home = tmp_path / "codex"
    (home / "sessions").mkdir(parents=True)
    settings = load_settings(
        {"data_dirs": [real_tree], "codex_homes": [home], "state_dir": tmp_path / "state",
         "poll": True, "listen": "127.0.0.1:0", "rescan_seconds": 30.0,
         "settle_seconds": 0.0}, {})
    env: dict[str, str] = {}
    mono = Clock(1000.0)
    parts = daemon_parts(settings, transcript_dirs(settings, env), warn=print,
                         codex_homes=codex_homes(settings, env))
    daemon = Daemon(parts, Log(), registry=CollectorRegistry(), clock=Clock(AFTER_CODEX),
                    monotonic=mono)
    daemon.start()
    try:
        daemon.follower.step(daemon.stop_event)
        before = generate_latest(daemon.registry).decode()
        shutil.copytree(FIXTURE / "sessions", home / "sessions", dirs_exist_ok=True)
        mono.advance(30.0)  # the rescan finds the files
        daemon.follower.step(daemon.stop_event)
        assert daemon.projection is not None
        daemon.projection.apply(daemon.ledger.settle(force=True))
        after = generate_latest(daemon.registry).decode()
    finally:
        daemon.close()
    assert CODEX not in before
    assert claude_part(after) == claude_part(before)
    assert codex_totals(after) == TRUTH


def test_backfill_writes_claude_families_unchanged_and_codex_families_exact(
        real_tree: Path, tmp_path: Path) -> None:
    """Backfilled from a mixed ledger, Claude's series are a Claude-only run's; Codex's exact."""
    out: dict[str, str] = {}
    for name, codex in (("alone", None), ("mixed", FIXTURE)):
        ledger = scanned(tmp_path / name, real_tree, codex)
        pricing = RateTable.load()  # grouped by the folders serve knows, as backfill does
        metrics = MetricsOptions(project_folders=frozenset(folders_of(ledger.read)))
        serve = serve_samples(ledger, pricing, metrics)  # the end is checked against it
        text = io.StringIO()
        write_history(ledger.requests(), pricing, metrics, text,
                      BackfillOptions(until=AFTER_CODEX), serve=serve)
        ledger.close()
        out[name] = text.getvalue()
    _, alone = parse(out["alone"])
    _, mixed = parse(out["mixed"])
    assert {k: v for k, v in mixed.items() if not k[0].startswith(CODEX)} == alone
    ends = {k[0] + k[1]: v[-1][1] for k, v in mixed.items() if k[0].startswith(CODEX)}
    assert sum(v for k, v in ends.items()
               if k.startswith(f"{CODEX}requests_total")) == TRUTH["requests"]
    for kind in ("input", "cache_read", "output", "reasoning"):
        assert sum(v for k, v in ends.items() if k.startswith(f"{CODEX}tokens_total")
                   and f'type="{kind}"' in k) == TRUTH[kind], kind


# ------------------------------------------------------------- a fixed mixed ledger
# Claude Code's: the history of tests/golden/exposition.txt (tests/test_metrics.py).
HISTORY = GOLDEN_HISTORY
# gpt-5.4 priced by a [pricing] entry (rates per million tokens); gpt-9-nova by nothing.
PRICES = {"models": {"gpt-5-4": {"input": 2.5, "cache_write_5m": 2.5, "cache_write_1h": 2.5,
                                 "cache_read": 0.25, "output": 15.0}}}
CODEX_ROOT = "/codex-home/sessions"
CODEX_HISTORY = [
    Request(f"{KEY_PREFIX}t1\x1f0\x1f{n}", T0 + 60 * n, "gpt-5.4", "t1", "/home/u/app",
            Source.MAIN, 1_000 * n, 200 + n, 40_000, 0, 0, reasoning=50 * n)
    for n in (1, 2, 3)
] + [Request(f"{KEY_PREFIX}t2\x1f0\x1f1", T0 + 7_200, "gpt-9-nova", "t2", "/home/u/other",
             Source.MAIN, 700, 90, 0, 0, 0, reasoning=0)]


def mixed_ledger(path: Path, requests: list[Request] | None = None) -> Ledger:
    """HISTORY (Claude Code's, under its root) and CODEX_HISTORY (under a Codex home)."""
    opts = options()
    ledger = Ledger(path, rules=opts.counting(RateTable.load()), settle_seconds=0.0)
    parsed = Parsed()
    rows = requests if requests is not None else [*HISTORY, *CODEX_HISTORY]
    for r in rows:
        parsed.add(r)
    parsed.counts.usage_lines = len(rows)
    seen = [Appearance(f"/transcripts/projects/p/{r.session}.jsonl", "/transcripts/projects",
                       r.session, (r.key,)) for r in rows if not r.key.startswith(KEY_PREFIX)]
    seen += [Appearance(f"{CODEX_ROOT}/2026/rollout-{r.session}.jsonl", CODEX_ROOT, r.session,
                        (r.key,), "codex") for r in rows if r.key.startswith(KEY_PREFIX)]
    ledger.apply(parsed, [], 0, seen)
    ledger.settle(force=True)
    return ledger


def test_golden_codex_exposition(tmp_path: Path) -> None:
    """A fixed mixed ledger's exposition equals its golden file (UPDATE_GOLDEN=1 rewrites it).

    Its Claude Code families are those of the Claude-only golden, to the byte.
    """
    registry = CollectorRegistry()
    proj = Projection(RateTable.load(PRICES), options(), registry, clock=Clock(T0 + 100),
                      files_watched=lambda: 3, budget_projected=lambda: PROJECTED)
    proj.load(mixed_ledger(tmp_path / "l.db"))
    text = generate_latest(registry).decode()
    proj.shutdown()
    golden = GOLDEN / "exposition_codex.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()
    assert claude_part(text) == claude_part((GOLDEN / "exposition.txt").read_text())
    fams = families(text)
    assert total(fams, f"{CODEX}tokens", f"{CODEX}tokens_total", type="reasoning") == 300
    assert total(fams, f"{CODEX}requests") == 4
    # No family whose meaning does not carry to Codex: cache writes, gaps by cache TTL, advisor.
    assert not re.search(rf"^{CODEX}(cache_write|requests_after_gap|prompt_tokens_after_gap)",
                         text, re.M)


def test_compatibility_families_hold_claude_code_rows_only(tmp_path: Path) -> None:
    """With --compat native and genai, Claude Code's own names carry no Codex turn."""
    texts = []
    for name, rows in (("alone", HISTORY), ("mixed", [*HISTORY, *CODEX_HISTORY])):
        proj, registry = projection(compat=("native", "genai"))
        proj.load(mixed_ledger(tmp_path / f"{name}.db", rows))
        texts.append(generate_latest(registry).decode())
        proj.shutdown()
    alone, mixed = texts
    assert "claude_code_token_usage_tokens_total" in alone and "gen_ai_client" in alone
    assert claude_part(mixed) == claude_part(alone)
    assert total(families(mixed), f"{CODEX}requests") == len(CODEX_HISTORY)


def test_a_claude_ledger_exposes_no_codex_family(tmp_path: Path) -> None:
    """Claude Code's rows alone: the exposition is the golden one (no Codex family, no label)."""
    proj, registry = projection()
    ledger = Ledger(tmp_path / "l.db", rules=options().counting(RateTable.load()))
    parsed = Parsed()
    for r in [req("a", T0)]:
        parsed.add(r)
    ledger.apply(parsed, [], 0, [Appearance("/t/projects/p/s1.jsonl", "/t/projects", "s1",
                                            ("a",))])
    ledger.settle(force=True)
    proj.load(ledger)
    text = generate_latest(registry).decode()
    proj.shutdown()
    assert CODEX not in text and "agent=" not in text


@pytest.mark.parametrize("policy", ["basename", "none"])
def test_codex_models_have_their_own_cap(tmp_path: Path, policy: str) -> None:
    """Codex's model names do not use up Claude Code's model cap (nor the other way round)."""
    from exporter.projections.labels import MAX_CODEX_MODELS, MAX_MODELS

    ledger = Ledger(tmp_path / "l.db", rules=options().counting(RateTable.load()))
    claude = [req(f"c{i}", T0 + i, model=f"claude-x-{i}") for i in range(MAX_MODELS)]
    codex = [Request(f"{KEY_PREFIX}s\x1f0\x1f{i}", T0 + i, f"gpt-x-{i}", "s", "/w",
                     Source.MAIN, 1, 1, 1, 0, 0) for i in range(MAX_CODEX_MODELS + 2)]
    parsed = Parsed()
    for r in [*claude, *codex]:
        parsed.add(r)
    ledger.apply(parsed, [], 0, [
        Appearance("/t/projects/p/s1.jsonl", "/t/projects", "s1", tuple(r.key for r in claude)),
        Appearance("/c/sessions/r.jsonl", "/c/sessions", "s", tuple(r.key for r in codex),
                   "codex")])
    ledger.settle(force=True)
    proj, registry = projection(project_label=policy)
    proj.load(ledger)
    text = generate_latest(registry).decode()
    proj.shutdown()
    claude_models = set(re.findall(r'^claude_code_requests_total\{model="([^"]+)"', text, re.M))
    codex_models = set(re.findall(rf'^{CODEX}requests_total\{{model="([^"]+)"', text, re.M))
    assert claude_models == {f"claude-x-{i}" for i in range(MAX_MODELS)}
    assert len(codex_models) == MAX_CODEX_MODELS + 1 and "other" in codex_models


# ------------------------------------------------------------- the usage dashboard
def recent_history(now: float) -> list[Request]:
    """HISTORY and CODEX_HISTORY moved to end three hours before ``now``."""
    shift = now - 3 * 3600 - (T0 + 7_200)
    return [r._replace(ts=r.ts + shift) for r in [*HISTORY, *CODEX_HISTORY]]


def backfilled_prometheus(tmp: Path, now: int) -> PromServer:
    """A real Prometheus over the backfilled history of a recent mixed ledger."""
    promtool = require_binary("promtool")
    ledger = mixed_ledger(tmp / "l.db", recent_history(now))
    text = io.StringIO()
    write_history(ledger.requests(), RateTable.load(PRICES), MetricsOptions(), text,
                  BackfillOptions(until=now, labels=TARGET))
    ledger.close()
    history = tmp / "history.om"
    history.write_text(text.getvalue())
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                    "--max-block-duration=744h", str(history), str(tmp / "blocks")],
                   check=True, capture_output=True, timeout=300)
    storage = tmp / "tsdb"
    storage.mkdir()
    for block in (tmp / "blocks").iterdir():
        shutil.move(str(block), storage / block.name)
    return PromServer("scrape_configs: []\n", tmp / "prometheus", storage=storage,
                      extra_args=["--storage.tsdb.retention.time=100y"])


def test_the_usage_dashboard_draws_codex_only_when_chosen(tmp_path: Path) -> None:
    """Over a backfilled mixed history, the Codex row has Codex's figures with Codex chosen.

    With Claude Code alone it is empty, and Claude Code's panels are the same either way.
    """
    now = int(time.time()) // 60 * 60
    board = json.loads((ROOT / "grafana" / "dashboards" / "claude-code-usage.json").read_text())
    drawn: dict[str, dict[str, list[float]]] = {}
    with backfilled_prometheus(tmp_path, now) as prom:
        for agent in ("3", "1"):
            _, panels = query_board(board, Prometheus(prom.url), datetime.fromtimestamp(now, UTC),
                                    {**VARIABLES, "agent": agent})
            drawn[agent] = {p.title: p.values() for p in panels if p.kind not in ("row", "text")}
    # Codex's plan panels read its rate-limit windows, which a backfill has no history of:
    # tests/test_codex_plan_page.py draws them over a live scrape.
    plan = {codex_plan.USED_TITLE, codex_plan.RESETS_TITLE}
    codex = {t for t in drawn["3"] if "Codex" in t and t not in plan}
    assert len(codex) == 10
    assert all(drawn["3"][t] for t in codex), [t for t in codex if not drawn["3"][t]]
    assert not any(drawn["1"][t] for t in codex)
    # The same values (Prometheus sums series in no fixed order: the last bit may differ).
    assert {t: pytest.approx(v, rel=1e-12) for t, v in drawn["3"].items() if t not in codex} \
        == {t: v for t, v in drawn["1"].items() if t not in codex}
    assert sum(1 for t, v in drawn["1"].items() if v and t not in codex) >= 10  # Claude's drawn
    assert drawn["3"]["Codex turns, selected range"] == [4.0]
    assert drawn["3"]["Codex reasoning, selected range"] == [300.0]
