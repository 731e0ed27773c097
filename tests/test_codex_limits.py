"""Codex's ``rate_limits`` as plan windows: parsed, judged, stored once, reported and exposed.

The real fixture (tests/fixtures/codex_real) is read by ``report limits`` as a
process and its last windows are checked against a count made here from the
files with the json module alone; generated Codex logs carry implausible and
malformed readings and copies of the same events; the exposition shows
Codex's windows in their own families and leaves the status line's as they were.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.ingest import scan
from exporter.ingest.codex import KEY_PREFIX
from exporter.ingest.formats import CODEX
from exporter.ledger import connections, plan_store, schema
from exporter.ledger.store import Ledger
from exporter.projections.class_prices import ClassPrices
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.periods import UTC_ZONE, Range
from exporter.projections.plan.windows import plan_figures
from exporter.projections.pricing import RateTable
from exporter.records import LimitSample, Parsed, Request, Source
from exporter.report import tables
from exporter.serve.plan_link import PlanLink
from exporter.sqlite import sqlite3
from tests.support import codex_plan
from tests.support.exposition import families
from tests.support.paths import ROOT
from tests.support.plan import T0, record, refreshes, store_requests
from tests.support.process import Serve
from tests.support.records import request
from tests.support.wait import poll

REAL = ROOT / "tests" / "fixtures" / "codex_real"
SESSION = "019f0000-0000-7000-8000-00000000c0de"
NAMES = {300: "five_hour", 10_080: "seven_day"}
YEAR_5107 = datetime(5107, 1, 1, tzinfo=UTC).timestamp()


# ------------------------------------------------------------------ helpers
def iso(t: float) -> str:
    """An ISO 8601 UTC time as Codex writes it."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def limits(pct5: Any, reset5: Any, pct7: Any = 10.0, reset7: Any = None) -> dict[str, Any]:
    """A ``rate_limits`` object as Codex writes it (limit "codex", both windows)."""
    return {"limit_id": "codex", "limit_name": None,
            "primary": {"used_percent": pct5, "window_minutes": 300, "resets_at": reset5},
            "secondary": {"used_percent": pct7, "window_minutes": 10_080,
                          "resets_at": reset7 if reset7 is not None else T0 + 6 * 86_400},
            "credits": None, "plan_type": None}


def token_count(t: float, total: int | None, rate: Any) -> dict[str, Any]:
    """A ``token_count`` event with cumulative totals ``total`` (None: no usage) and rate limits."""
    info = None
    if total is not None:
        usage = {"input_tokens": total, "cached_input_tokens": 0, "output_tokens": total // 10,
                 "reasoning_output_tokens": 0, "total_tokens": total + total // 10}
        info = {"total_token_usage": usage, "last_token_usage": usage,
                "model_context_window": 272_000}
    return {"timestamp": iso(t), "type": "event_msg",
            "payload": {"type": "token_count", "info": info, "rate_limits": rate}}


def rollout(home: Path, lines: list[dict[str, Any]], *, folder: str = "sessions",
            session: str = SESSION, t: float = T0) -> Path:
    """A Codex rollout file of ``lines`` after its session_meta and turn_context."""
    day = datetime.fromtimestamp(t, UTC)
    path = (home / folder / day.strftime("%Y/%m/%d")
            / f"rollout-{day.strftime('%Y-%m-%dT%H-%M-%S')}-{session}.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    head = [{"timestamp": iso(t), "type": "session_meta",
             "payload": {"id": session, "cwd": "/home/dev/app"}},
            {"timestamp": iso(t), "type": "turn_context",
             "payload": {"model": "gpt-5.5", "cwd": "/home/dev/app", "turn_id": session}}]
    path.write_text("".join(json.dumps(line) + "\n" for line in head + lines))
    return path


def report_limits(home: Path, state: Path) -> dict[str, Any]:
    """``report limits --json`` as a process over a Codex home; its JSON."""
    doc: dict[str, Any] = json.loads(report_text(home, state, "--json"))
    return doc


def report_text(home: Path, state: Path, *flags: str) -> str:
    """``report limits`` as a process over a Codex home; its stdout."""
    empty = state.parent / "claude"
    (empty / "projects").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CLAUDE_CODE_EXPORTER", "CODEX_HOME"))}
    env.update({"PYTHONPATH": str(ROOT), "TZ": "UTC", "HOME": str(state.parent)})
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "report", "limits", *flags, "--state-dir",
         str(state), "--data-dir", str(empty), "--codex-home", str(home), "--timezone", "UTC"],
        capture_output=True, text=True, env={**env, "COLUMNS": "100"}, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def stored(state: Path, query: str) -> list[tuple[Any, ...]]:
    """Rows of a query on the state dir's ledger, read-only."""
    conn = sqlite3.connect(f"file:{state / 'ledger.sqlite3'}?mode=ro", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def real_readings() -> list[tuple[float, tuple[tuple[str, float, float], ...]]]:
    """Every window reading of the real fixture: (event time, sorted (name, %, reset)).

    Read with the json module alone, as the format notes describe it.
    """
    out = []
    for path in sorted(REAL.rglob("rollout-*.jsonl")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            line = json.loads(raw)
            payload = line.get("payload") or {}
            rate = payload.get("rate_limits") if payload.get("type") == "token_count" else None
            if not rate or rate.get("limit_id") != "codex":
                continue
            windows = tuple(sorted(
                (NAMES[w["window_minutes"]], float(w["used_percent"]), float(w["resets_at"]))
                for w in (rate.get("primary"), rate.get("secondary")) if w))
            if windows:
                t = datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()
                out.append((t, windows))
    return out


# ------------------------------------------------------------------- tests
def test_real_fixture_last_windows_appear_in_report_limits(tmp_path: Path) -> None:
    """`report limits --json` shows the fixture's newest Codex windows, counted independently."""
    readings = real_readings()
    assert len(readings) == 685  # the format notes: 643 + 42 events with both windows
    doc = report_limits(REAL, tmp_path / "state")
    codex = doc["agents"]["codex"]
    assert codex["samples"] == len({w for _t, w in readings})  # copies stored once
    assert doc["samples"] == 0 and doc["windows"] == []  # no status line: Claude's as before
    for name in ("five_hour", "seven_day"):
        figures = [(pct, reset) for _t, w in readings for n, pct, reset in w if n == name]
        instances: dict[int, list[tuple[float, float]]] = {}
        for pct, reset in figures:
            instances.setdefault(round(reset / 60) * 60, []).append((pct, reset))
        newest = instances[max(instances)]
        row = next(r for r in codex["windows"] if r["window"] == name)
        last_reset = max(reset for _pct, reset in newest)
        assert row["resets_at"] == datetime.fromtimestamp(last_reset, UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        assert row["used_percent"] == 0.0  # long reset by now
        assert row["windows_exhausted"] == sum(
            1 for found in instances.values() if max(p for p, _r in found) >= 100)
        conn = connections.reader(tmp_path / "state" / "ledger.sqlite3")
        try:  # just before that reset: the newest instance's highest figure
            at = plan_figures(conn, last_reset - 1).agents["codex"].windows[name]
        finally:
            conn.close()
        assert at.used_ratio == max(p for p, _r in newest) / 100
        listed = [(i["resets_at"], i["peak_percent"]) for i in codex["instances"]
                  if i["window"] == name]  # every instance, by reset
        assert listed == [(datetime.fromtimestamp(max(r for _p, r in instances[k]), UTC)
                           .strftime("%Y-%m-%dT%H:%M:%SZ"), max(p for p, _r in instances[k]))
                          for k in sorted(instances)]
    assert codex["rejected"] == dict.fromkeys(
        ("bad_record", "implausible_percent", "implausible_reset", "window_cap"), 0)


def bad_and_good(home: Path) -> None:
    """A session whose readings are good, implausible, malformed, empty, or without usage."""
    reset = T0 + 3 * 3600
    rollout(home, [
        token_count(T0 + 60, 1000, limits(12.0, reset)),
        token_count(T0 + 120, 2000, limits(13.0, YEAR_5107)),  # a reset in the year 5107
        token_count(T0 + 180, 3000, limits(999.9, reset)),  # 999.9 % used
        token_count(T0 + 240, 4000, limits("lots", reset)),  # malformed
        token_count(T0 + 300, 5000, None),  # rate_limits: null says nothing
        token_count(T0 + 360, 6000, {"limit_id": "premium", "primary": None,
                                     "secondary": None, "credits": {"balance": "0"}}),
        token_count(T0 + 420, None, limits(20.0, reset)),  # info null: still a reading
    ])


def test_implausible_readings_are_rejected_and_counted(tmp_path: Path) -> None:
    """Year-5107 resets, 999.9 % and malformed readings: counted, never shown; turns unchanged."""
    home = tmp_path / "codex"
    bad_and_good(home)
    doc = report_limits(home, tmp_path / "state")
    codex = doc["agents"]["codex"]
    assert codex["rejected"] == {"bad_record": 1, "implausible_percent": 1,
                                 "implausible_reset": 1, "window_cap": 0}
    assert codex["samples"] == 2  # 12 % and 20 %
    assert stored(tmp_path / "state", "SELECT max(max_pct) FROM plan_windows "
                  "WHERE agent = 'codex' AND window = 'five_hour'") == [(20.0,)]
    assert stored(tmp_path / "state", "SELECT max(reported_resets_at) FROM plan_windows") \
        < [(T0 + 7 * 86_400,)]
    assert stored(tmp_path / "state", "SELECT count(*) FROM requests") == [(6,)]  # every turn
    shown = report_text(home, tmp_path / "state")
    assert "Codex plan limits (from its logs, 2 readings)" in shown
    assert "five_hour: 0 % used, reset at 2026-09-21 17:13, 0 reached 100 %" in shown
    assert "readings refused: 1 bad record, 1 implausible percent, 1 implausible reset" in shown


def test_copies_of_an_event_are_stored_once(tmp_path: Path) -> None:
    """Archived and fork copies (re-dated) and a second report store each reading once."""
    home = tmp_path / "codex"
    reset = T0 + 3 * 3600
    events = [token_count(T0 + 60 * i, 1000 * i, limits(10.0 + i, reset)) for i in range(1, 6)]
    rollout(home, events)
    rollout(home, events, folder="archived_sessions")
    fork = [{**e, "timestamp": iso(T0 + 900 + i)} for i, e in enumerate(events)]
    rollout(home, fork, session="019f0000-0000-7000-8000-00000000f02c", t=T0 + 900)
    state = tmp_path / "state"
    first = report_limits(home, state)["agents"]["codex"]
    again = report_limits(home, state)["agents"]["codex"]
    assert first["samples"] == again["samples"] == 5
    assert stored(state, "SELECT count(*) FROM plan_samples") == [(5,)]
    assert stored(state, "SELECT min(first_seen) FROM plan_samples") == [(T0 + 60,)]  # the original
    assert stored(state, "SELECT window, max_pct FROM plan_windows WHERE window = 'five_hour'") \
        == [("five_hour", 15.0)]


KILLED_PASS = """
import os, signal, sys
from pathlib import Path
from exporter.ingest.formats import CODEX, Root
from exporter.ingest.scan import Scanner
from tests.support.scan import counting_ledger
calls = 0
def progress(done, total):
    global calls
    calls += 1
    if calls == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)  # a crash between two committed batches
Scanner(counting_ledger(Path(sys.argv[1]) / "ledger.sqlite3"), [], workers=1, batch_bytes=1,
        others=[Root(Path(sys.argv[2]), CODEX)]).scan(progress=progress)
raise SystemExit("the pass was not killed")
"""


@pytest.mark.parametrize("kill_after", [2, 3])
def test_a_kill_mid_ingest_loses_and_doubles_nothing(tmp_path: Path, kill_after: int) -> None:
    """SIGKILL between committed batches, then a report: readings and rejections as a clean run."""
    home = tmp_path / "codex"
    bad_and_good(home)
    reset = T0 + 3 * 3600
    for i in range(3):  # more files: more batches to be killed between
        rollout(home, [token_count(T0 + 600 + i, 1000, limits(40.0 + i, reset))],
                session=f"019f0000-0000-7000-8000-0000000000{i:02d}", t=T0 + 600 + i)
    clean = report_limits(home, tmp_path / "clean")["agents"]
    del clean["codex"]["sample_age_seconds"]  # from the report's own clock
    state = tmp_path / "killed"
    state.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", KILLED_PASS, str(state), str(home),
                           str(kill_after)], env=env, capture_output=True, timeout=120,
                          check=False)
    assert proc.returncode == -9, proc.stderr.decode()
    committed = stored(state, "SELECT count(*) FROM plan_samples")[0][0]
    assert 0 < committed < 5  # killed with part of the readings stored
    after = report_limits(home, state)["agents"]
    del after["codex"]["sample_age_seconds"]
    assert after == clean
    assert clean["codex"]["samples"] == 5


def test_a_worker_batch_carries_its_readings(tmp_path: Path) -> None:
    """A worker's batch, pickled to the parent, keeps its readings and rejections."""
    home = tmp_path / "codex"
    bad_and_good(home)
    work = [(str(p), None) for p in sorted(home.rglob("*.jsonl"))]
    batch = scan.read_files(work, T0 + 86_400, agents=((str(home), CODEX),))
    back = pickle.loads(pickle.dumps(batch))
    assert back.parsed.limits == batch.parsed.limits and len(back.parsed.limits) == 2
    assert back.parsed.limit_rejected == batch.parsed.limit_rejected
    assert sum(back.parsed.limit_rejected.values()) == 3


def test_plan_tables_made_before_v5_gain_the_agent(tmp_path: Path) -> None:
    """The status line's rows of older plan tables are kept, as Claude's, under the new keys."""
    conn = sqlite3.connect(tmp_path / "old.sqlite3", isolation_level=None)
    conn.execute("CREATE TABLE plan_windows (window TEXT NOT NULL, resets_at INTEGER NOT NULL, "
                 "max_pct REAL NOT NULL, first_seen REAL NOT NULL, last_seen REAL NOT NULL, "
                 "reported_resets_at INTEGER NOT NULL, PRIMARY KEY (window, resets_at)) "
                 "WITHOUT ROWID")
    conn.execute("CREATE TABLE plan_levels (window TEXT NOT NULL, resets_at INTEGER NOT NULL, "
                 "pct REAL NOT NULL, first_seen REAL NOT NULL, "
                 "PRIMARY KEY (window, resets_at, pct)) WITHOUT ROWID")
    conn.execute("INSERT INTO plan_windows VALUES ('five_hour', 60, 40.0, 1.0, 2.0, 61)")
    conn.execute("INSERT INTO plan_levels VALUES ('five_hour', 60, 40.0, 1.0)")
    assert not plan_store.has_schema(conn)
    plan_store.ensure_schema(conn)
    assert plan_store.has_schema(conn)
    assert conn.execute("SELECT * FROM plan_windows").fetchall() == [
        ("five_hour", 60, 40.0, 1.0, 2.0, 61, "claude")]
    assert conn.execute("SELECT agent FROM plan_levels").fetchall() == [("claude",)]
    schema.migrate_plan(conn)  # a second time: nothing to do
    conn.close()


# ------------------------------------------------------------ exposition
NOW = T0 + 6 * 3600
CODEX_READINGS = (LimitSample("codex", (("five_hour", 30.0, NOW + 3600),
                                        ("seven_day", 8.0, NOW + 86_400)), NOW - 60, NOW - 30),)


@pytest.fixture
def scrapes(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A Claude ledger with status-line samples scraped as serve does, then with Codex readings."""
    pricing = RateTable.load()
    opts = MetricsOptions(budgets={"day": 20.0}, version="test")
    ledger = Ledger(tmp_path / "ledger.sqlite3", rules=opts.counting(pricing), clock=lambda: NOW)
    requests = [request(f"r{i}", T0 + 600 * i, input=1_000_000)
                for i in range(10)]
    store_requests(ledger, requests)
    ledger.settle(force=True)
    record(tmp_path, refreshes(requests, pricing, usd_5h=0.5, usd_7d=5.0))
    registry = CollectorRegistry()
    proj = Projection(pricing, opts, registry, clock=lambda: NOW, files_watched=lambda: 1)
    proj.load(ledger)
    ticks = itertools.count(0.0, 10.0)  # each scrape computes the figures afresh
    link = PlanLink.on_projection(proj, tmp_path / "ledger.sqlite3", tmp_path, pricing,
                                  clock=lambda: NOW, monotonic=lambda: next(ticks))
    try:
        link.tick()
        before = generate_latest(registry).decode()
        ledger.apply(Parsed(limits={("codex", s.windows): s for s in CODEX_READINGS}), [], 0)
        yield before, generate_latest(registry).decode()
    finally:
        link.close()
        proj.inst.shutdown()
        ledger.close()


def test_codex_windows_have_their_own_families_and_claude_s_bytes_stay(
        scrapes: tuple[str, str]) -> None:
    """Claude-only: no Codex family; with Codex readings, every other line is byte-identical."""
    before, after = scrapes
    assert "codex" not in before
    assert [line for line in after.splitlines() if "codex" not in line] == before.splitlines()
    fams = families(after)
    used = {s.labels["window"]: s.value
            for s in fams["claude_code_codex_plan_window_used_ratio"].samples}
    assert used == {"five_hour": 0.3, "seven_day": 0.08}
    resets = {s.labels["window"]: s.value
              for s in fams["claude_code_codex_plan_window_resets_at_seconds"].samples}
    assert resets == {"five_hour": NOW + 3600, "seven_day": NOW + 86_400}
    assert [s.value for s in fams["claude_code_codex_plan_window_samples"].samples
            if s.name.endswith("_total")] == [1.0]
    assert [s.value for s in fams["claude_code_codex_plan_sample_age_seconds"].samples] == [30.0]
    claude = families(before)["claude_code_plan_window_used_ratio"].samples  # the status line's
    assert {s.labels["window"] for s in claude} == {"five_hour", "seven_day"}


def codex_series(serve: Serve, family: str) -> dict[str, float]:
    """A Codex plan family's values by window label ("" for none) from one real scrape."""
    fam = serve.scrape().get(family)
    return {} if fam is None else {s.labels.get("window", ""): float(s.value)
                                   for s in fam.samples if not s.name.endswith("_created")}


def test_serve_exposes_codex_windows_as_they_are_logged(tmp_path: Path) -> None:
    """A real serve over a Codex home: its windows in /metrics, and a live append moves them."""
    home = tmp_path / "codex"
    path = rollout(home, [token_count(time.time() - 60, 1000, limits(12.0, time.time() + 3600))])
    claude = tmp_path / "claude"
    (claude / "projects").mkdir(parents=True)
    env = {"HOME": str(tmp_path), "CODEX_HOME": str(home)}
    serve = Serve(claude, tmp_path / "state", "--codex-home", str(home), env=env)
    try:
        used = "claude_code_codex_plan_window_used_ratio"
        poll(lambda: codex_series(serve, used).get("five_hour") == 0.12, 30, "Codex 5-hour")
        with path.open("a") as fh:  # Codex logs its next turn
            fh.write(json.dumps(token_count(time.time(), 2000,
                                            limits(31.0, time.time() + 3600))) + "\n")
        poll(lambda: codex_series(serve, used).get("five_hour") == 0.31, 30, "the append")
        samples = codex_series(serve, "claude_code_codex_plan_window_samples")
        assert samples == {"": 2.0}
        assert "claude_code_plan_window_used_ratio" not in serve.scrape()  # no status line
    finally:
        serve.stop()


def test_report_limits_of_a_claude_only_ledger_has_no_agents_key(tmp_path: Path) -> None:
    """Without Codex readings `report limits --json` is the status line's alone, as before."""
    home = tmp_path / "codex"
    home.mkdir()
    doc = report_limits(home, tmp_path / "state")
    assert "agents" not in doc


BIG = "1" + "0" * 400  # no float holds it
HOSTILE = (
    '{"primary": {"used_percent": ' + BIG + ', "window_minutes": 300, "resets_at": 1}}',
    '{"primary": {"used_percent": 1, "window_minutes": 300, "resets_at": -' + BIG + '}}',
    '{"primary": {"used_percent": 1, "window_minutes": ' + BIG + ', "resets_at": 1}}',
    '{"primary": {"used_percent": 1e400, "window_minutes": 300, "resets_at": 1}}',
    '{"primary": {"used_percent": true, "window_minutes": 300, "resets_at": 1}}',
    '{"primary": []}', '"codex"', '[' * 500 + ']' * 500,
    '{"limit_id": "Not A Name", "primary": null}',
)


@pytest.mark.parametrize("rate", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_reading_is_one_counted_rejection(tmp_path: Path, rate: str) -> None:
    """Whatever ``rate_limits`` holds, the parser counts one rejection and keeps the turn.

    (A value nested past msgspec's depth limit makes the whole line undecodable:
    counted as a rejected line, as any such line is.)
    """
    home = tmp_path / "codex"
    path = rollout(home, [token_count(T0 + 60, 1000, None)])
    text = path.read_text().replace('"rate_limits": null', '"rate_limits": ' + rate)
    path.write_text(text)
    batch = scan.read_files([(str(path), None)], T0 + 86_400, agents=((str(home), CODEX),))
    assert batch.parsed.limit_rejected == {("codex", "bad_record"): 1}
    assert batch.parsed.limits == {} and len(batch.parsed.requests) == 1


# ------------------------------------------------- Codex's dollars (item 4, the page's part too)
def test_codex_usd_per_percent_is_its_turns_cost_over_the_points_moved(tmp_path: Path) -> None:
    """`report limits --json`: a Codex instance's cost and $ per 1 % from Codex's turns alone.

    Computed here from genai-prices and the written readings; a Claude Code
    request inside the same hours (costlier than every Codex turn) counts in neither.
    """
    state = tmp_path / "state"
    start = time.time() - 2760.0
    turns, five_reset, _week = codex_plan.codex_home(tmp_path / "codex", tmp_path / "claude",
                                                     start)
    doc = report_limits(tmp_path / "codex", state)
    codex = doc["agents"]["codex"]
    five = next(i for i in codex["instances"] if i["window"] == "five_hour")
    want = codex_plan.expected_usd_per_percent(turns)
    assert five["usd_per_percent"] == pytest.approx(want, abs=1e-6)
    assert five["cost_usd"] == pytest.approx(codex_plan.window_cost(turns), abs=1e-6)
    assert five["pairs"] == 4 and five["peak_percent"] == 40.0 and five["open"] is True
    now = next(w for w in codex["windows"] if w["window"] == "five_hour")  # the look-back's
    assert now["usd_per_percent"] == pytest.approx(want, abs=1e-6)
    assert now["window_usd"] == pytest.approx(100 * want, abs=1e-4)
    assert now["pace"] in ("on_track", "limit_ahead")
    assert five["resets_at"] == datetime.fromtimestamp(five_reset, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    shown = report_text(tmp_path / "codex", state)
    assert "    1 % ≈ $" in shown and "Cost: Codex's turns at list price" in shown


def test_report_limits_csv_lists_codex_instances_under_an_agent_column(tmp_path: Path) -> None:
    """`report limits --csv` with Codex readings: an agent column first, Codex's instances too."""
    start = time.time() - 2760.0
    codex_plan.codex_home(tmp_path / "codex", tmp_path / "claude", start)
    rows = list(csv.DictReader(io.StringIO(
        report_text(tmp_path / "codex", tmp_path / "state", "--csv"))))
    assert [(r["agent"], r["window"], r["peak_percent"]) for r in rows] == [
        ("codex", "five_hour", "40.0"), ("codex", "seven_day", "8.0")]
    assert float(rows[0]["usd_per_percent"]) > 0 and rows[0]["open"] == "true"


def test_a_reading_replayed_after_its_reset_moves_no_estimate(tmp_path: Path) -> None:
    """Readings of a window first seen after it reset (a copied history) give no $ per 1 %."""
    home = tmp_path / "codex"
    reset = T0 + 3600
    replay = [token_count(T0 + 7200 + k, 1000 * (k + 1), limits(10.0 * (k + 1), reset))
              for k in range(4)]  # all after the reset, the figure rising
    rollout(home, replay)
    codex = report_limits(home, tmp_path / "state")["agents"]["codex"]
    five = next(i for i in codex["instances"] if i["window"] == "five_hour")
    assert five["peak_percent"] == 40.0 and five["usd_per_percent"] is None


def test_codex_turns_never_count_in_claude_s_windows(tmp_path: Path) -> None:
    """In a mixed ledger the status line's $ per 1 %, pace and instance costs are Claude's alone."""
    pricing = RateTable.load()
    claude = [request(f"r{i}", T0 + 600 * i, input=1_000_000) for i in range(10)]
    codex = [Request(f"{KEY_PREFIX}s\x1f0\x1f{i}", T0 + 600 * i + 300, "gpt-5.5", "s", "/w",
                     Source.MAIN, 2_000_000, 100_000, 0, 0, 0) for i in range(10)]
    seen = {}
    for name, requests in (("alone", claude), ("mixed", claude + codex)):
        state = tmp_path / name
        state.mkdir()
        ledger = Ledger(state / "ledger.sqlite3", clock=lambda: NOW)
        store_requests(ledger, requests)
        ledger.close()
        record(state, refreshes(claude, pricing, usd_5h=0.5, usd_7d=5.0))
        plan_store.ingest_spool(state / "ledger.sqlite3", state)
        conn = connections.reader(state / "ledger.sqlite3")
        try:
            view = tables.limits_view(conn, ClassPrices.of(pricing),
                                      Range(None, None, UTC_ZONE), NOW)
        finally:
            conn.close()
        seen[name] = (view.figures.windows, [(i.cost_usd, i.estimate) for i in view.instances])
    estimate = seen["alone"][0]["five_hour"].estimate
    assert estimate is not None and estimate.usd_per_percent  # an estimate to compare
    assert seen["mixed"] == seen["alone"]


def test_backfill_replays_the_codex_plan_windows(tmp_path: Path) -> None:
    """`backfill` writes Codex's plan series: every reading counted once, each window drawn."""
    from tests.support.backfill import parse

    readings = real_readings()
    out = tmp_path / "hist.om"
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "backfill", "--data-dir", str(REAL), "--state-dir",
         str(tmp_path / "state"), "-o", str(out), "--step", "5m"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**{k: v for k, v in os.environ.items()
                if not k.startswith(("CLAUDE_CODE_EXPORTER", "CODEX_HOME"))},
             "PYTHONPATH": str(ROOT), "TZ": "UTC", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    types, points = parse(out.read_text())
    assert types["claude_code_codex_plan_window_samples"] == "counter"
    (counted,) = [p for (name, _l), p in points.items()
                  if name == "claude_code_codex_plan_window_samples_total"]
    assert counted[-1][1] == len({w for _t, w in readings})  # copies counted once
    for window in ("five_hour", "seven_day"):
        used = next(p for (name, labels), p in points.items()
                    if name == "claude_code_codex_plan_window_used_ratio" and window in labels)
        values = [v for _t, v in used]
        # The newest instance's figure at each step, 0 once reset (as serve's gauge): some
        # figures of the window show, none above the readings' highest.
        highest = max(pct for _t, w in readings for n, pct, _r in w if n == window) / 100
        assert 0 < max(values) <= highest and min(values) >= 0
    assert not any(name.startswith("claude_code_plan_") for name, _l in points)  # no status line
