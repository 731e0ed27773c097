"""Backfill: the ledger's history as OpenMetrics, checked against serve, promtool and Prometheus."""

from __future__ import annotations

import io
import itertools
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.ingest.discover import projects_dirs
from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger
from exporter.projections.backfill import (
    BackfillError,
    BackfillOptions,
    emission,
    write_blocks,
    write_history,
)
from exporter.projections.metrics import MetricsOptions
from exporter.projections.pricing import RateTable
from exporter.projections.timeline import COUNTER, Unit
from exporter.records import Request, Source
from exporter.synth import GenOptions, generate
from tests.support.backfill import TARGET, at, history, labels_of, parse, startup
from tests.support.dashboards import DASHBOARD_DIR
from tests.support.ledgers import ledger_of, replica
from tests.support.prometheus import PromServer, prometheus_config, require_binary
from tests.support.scan import ingest

DAY = 86_400
START = datetime(2026, 10, 1, tzinfo=UTC).timestamp()


@pytest.fixture(scope="module")
def small_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    """The ledger of a small generated tree (a few sessions, every quirk)."""
    root = tmp_path_factory.mktemp("small")
    generate(root / "tree", GenOptions(seed=11, sessions=5))
    ledger = ingest(root / "tree", root / "state")
    yield ledger
    ledger.close()


@pytest.fixture(scope="module")
def small(small_ledger: Ledger) -> list[Request]:
    """Its requests in time order, with the ledger's gaps."""
    return small_ledger.requests()


def in_force(points: dict[tuple[str, str], list[tuple[int, float]]], ts: int) -> dict[Any, float]:
    """The value of every series at ``ts``: its latest point at or before ``ts`` (a step function).

    A series is written only where it changes (and near changes), so between
    two points it holds the earlier one's value.
    """
    out = {}
    for (name, labels), series in points.items():
        before = [v for t, v in series if t <= ts]
        if before:
            lab = {k: v2 for k, v2 in labels_of(labels).items() if k not in TARGET}
            out[(name, tuple(sorted(lab.items())))] = before[-1]
    return out


def test_layout_is_openmetrics_for_promtool(small: list[Request]) -> None:
    """One TYPE per family, _total counter samples, increasing timestamps, monotone values."""
    types, points = parse(history(small))
    assert types["claude_code_requests"] == "counter"
    assert types["claude_code_request_context_tokens"] == "histogram"
    assert not any(f.startswith("claude_code_exporter_") for f in types)
    for (name, labels), series in points.items():
        times = [t for t, _ in series]
        assert times == sorted(set(times)), f"{name}{labels} timestamps not increasing"
        assert all(t % 60 == 0 for t in times)
        if not name.endswith("_sum"):
            values = [v for _, v in series]
            assert values == sorted(values), f"{name}{labels} went down"
        assert labels_of(labels).items() >= TARGET.items()


def test_end_values_equal_what_serve_exposes_at_startup(small: list[Request],
                                                         small_ledger: Ledger) -> None:
    """The last point of every series is serve's start-up value: same names, labels, values."""
    _, points = parse(history(small))
    last = max(t for series in points.values() for t, _ in series)
    assert at(points, last) == startup(small_ledger)


def test_every_anchor_equals_a_projection_of_the_requests_before_it(
    small: list[Request], small_ledger: Ledger, tmp_path: Path,
) -> None:
    """At each full hour, every series in force equals serve's projection of earlier requests."""
    _, points = parse(history(small))
    hours = sorted({t for series in points.values() for t, _ in series if t % 3600 == 0})
    assert len(hours) > 5
    for hour in hours[1::4]:
        def earlier(r: Request, h: int = hour) -> bool:
            return r.ts < h

        before = replica(small_ledger, tmp_path / f"{hour}.db", keep=earlier)
        want = startup(before) if before.count() else {}
        got = in_force(points, hour)
        assert {k: got[k] for k in want if k in got} == want
        assert set(want) <= set(got)


def test_a_change_is_written_with_the_step_before_and_after() -> None:
    """Emission: the old value before a change, a flat point after, anchors and both ends."""
    unit = Unit("f", COUNTER, (), [0.0])
    for step in (10, 11, 30):
        unit.steps.append(step)
        unit.log.append(float(step))
    assert list(emission(unit, None, 70, 60)) == [9, 10, 11, 12, 29, 30, 31, 60, 70]
    assert list(emission(unit, 25, 70, 60)) == [25, 29, 30, 31, 60, 70]
    assert list(emission(unit, None, 14, 1)) == list(range(9, 15))
    assert list(unit.at(9)) == [0.0] and list(unit.at(12)) == [11.0]


def test_since_keeps_counters_cumulative(small: list[Request]) -> None:
    """With --since, the first point carries the total so far, not zero."""
    since = small[len(small) // 2].ts
    _, points = parse(history(small, since=since))
    first = min(t for series in points.values() for t, _ in series)
    assert first >= since
    got = sum(v for (name, _), s in points.items() if name == "claude_code_requests_total"
              for t, v in s if t == first)
    assert got == sum(1 for r in small if r.ts < first) > 0


def test_tied_main_requests_get_serve_startup_gaps(tmp_path: Path) -> None:
    """Two main requests of one session at the same millisecond: the second's gap is 0."""
    t0 = START + 123.0
    made = [Request(k, ts, "claude-opus-4-6", "s1", "/p", Source.MAIN, 5, 10, 100, 20, 0)
            for k, ts in (("a", t0), ("b", t0 + 400), ("c", t0 + 400), ("d", t0 + 400))]
    ledger = ledger_of(tmp_path / "l.db", made)
    reqs = ledger.requests()
    out = io.StringIO()
    write_history(reqs, RateTable.load(), MetricsOptions(), out, BackfillOptions(step=60),
                  now=reqs[-1].ts + 7200, serve=startup(ledger))  # checks the end against serve
    text = out.getvalue()
    _, points = parse(text)
    lt_5m = [s for (name, lab), s in points.items()
             if name == "claude_code_requests_after_gap_total" and 'gap="lt_5m"' in lab]
    assert lt_5m[0][-1][1] == 2  # c and d follow b by 0 s


def test_bad_options_are_refused(small: list[Request]) -> None:
    """An anchor that is not a multiple of the step, or a clashing label, is an error."""
    with pytest.raises(BackfillError, match="multiple"):
        history(small, step=60, anchor=90)
    with pytest.raises(BackfillError, match="clash"):
        write_history(small, RateTable.load(), MetricsOptions(), io.StringIO(),
                      BackfillOptions(labels={"model": "x"}), now=small[-1].ts + 60)


def test_cli_writes_the_file_and_names_the_next_step(tmp_path: Path) -> None:
    """`backfill` ingests, writes FILE atomically, and the default labels name the target."""
    generate(tmp_path / "tree", GenOptions(seed=2, sessions=2))
    out = tmp_path / "history.om"
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "backfill", "--data-dir", str(tmp_path / "tree"),
         "--state-dir", str(tmp_path / "state"), "--output", str(out), "--until", "2026-10-03",
         "--label", "user=alice", "--log-level", "error"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "promtool tsdb create-blocks-from openmetrics" in done.stdout
    assert not out.with_name("history.om.partial").exists()
    _, points = parse(out.read_text())
    some = labels_of(next(iter(points))[1])
    assert (some["job"], some["instance"], some["user"]) == ("claude-code", "127.0.0.1:9477",
                                                             "alice")
    bad = subprocess.run([sys.executable, "-m", "exporter", "backfill", "-o", str(out),
                          "--step", "0m"], capture_output=True, text=True, timeout=60,
                         check=False)
    assert bad.returncode == 2 and "duration" in bad.stderr


def report_day(tree: Path, state: Path, day: datetime) -> dict[str, Any]:
    """`report --json` totals of one UTC day (the ledger's figures)."""
    until = datetime.fromtimestamp(day.timestamp() + DAY, UTC)
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--json", "--data-dir", str(tree),
         "--state-dir", str(state), "--since", day.isoformat(), "--until", until.isoformat(),
         "--log-level", "error"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    totals: dict[str, Any] = json.loads(done.stdout)["totals"]
    return totals


@pytest.mark.slow
def test_prometheus_on_the_blocks_gives_the_ledger_figures_of_a_day(tmp_path: Path) -> None:
    """The real promtool builds blocks; increase() over a past day in Prometheus is `report`."""
    promtool = require_binary("promtool")
    tree, state = tmp_path / "tree", tmp_path / "state"
    truth = generate(tree, GenOptions(seed=5, sessions=30))  # ~60 h from 2026-10-01
    out = tmp_path / "history.om"
    subprocess.run(
        [sys.executable, "-m", "exporter", "backfill", "--data-dir", str(tree),
         "--state-dir", str(state), "-o", str(out), "--until", "2026-10-06",
         "--log-level", "error"], check=True, timeout=300, capture_output=True,
    )
    blocks = tmp_path / "blocks"
    made = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                           "--max-block-duration=744h", str(out), str(blocks)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert made.returncode == 0, made.stderr + made.stdout
    assert any((b / "meta.json").exists() for b in blocks.iterdir())
    day = datetime(2026, 10, 2, tzinfo=UTC)
    want = report_day(tree, state, day)
    assert want["requests"] > 500
    end = str(int(day.timestamp()) + DAY)
    with PromServer(prometheus_config([]), tmp_path / "prom", storage=blocks,
                    extra_args=["--storage.tsdb.retention.time=100y"]) as prom:

        def value(expr: str, ts: str = end) -> float:
            result = prom.api("query", {"query": expr, "time": ts})["result"]
            assert len(result) == 1, (expr, result)
            return float(result[0]["value"][1])

        assert value("sum(increase(claude_code_requests_total[1d]))") == want["requests"]
        for kind in ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h"):
            got = value(f'sum(increase(claude_code_tokens_total{{type="{kind}"}}[1d]))')
            assert got == want[f"{kind}_tokens"], kind
        cost = value("sum(increase(claude_code_cost_usd_total[1d]))")
        assert round(cost, 2) == round(want["cost_usd"], 2)
        assert abs(cost - want["cost_usd"]) < 1e-6
        count = value("sum(increase(claude_code_request_context_tokens_count[1d]))")
        assert count == want["requests"]
        total = value('sum(claude_code_requests_total{job="claude-code"})', "1791244800")
        assert total == truth["totals"]["requests"]


def test_anchors_are_held_near_changes_and_flat_series_get_two_points() -> None:
    """Emission with a hold: anchors only within the hold of a change; a flat series: both ends."""
    unit = Unit("f", COUNTER, (), [0.0])
    for step, value in ((100, 1.0), (101, 1.0), (400, 2.0)):  # 101 logs no change
        unit.steps.append(step)
        unit.log.append(value)
    assert list(emission(unit, None, 1000, 60, 90)) == [
        99, 100, 101, 120, 180, 360, 399, 400, 401, 420, 480, 1000]
    flat = Unit("g", COUNTER, (), [0.0])
    flat.steps.append(50)
    flat.log.append(0.0)
    assert list(emission(flat, None, 1000, 60, 90)) == [49, 1000]


RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "rules"
#: Grafana's variables as a dashboard with its default range (24 h) and "All" selected sends them.
VARIABLES = {"__rate_interval": "1m", "__range": "1d", "__interval": "1h", "job": ".*",
             "instance": ".*", "user": ".*", "team": ".*", "project": ".*", "model": ".*",
             "arch": ".*", "agent": "3"}  # agent: Claude Code and Codex (grafana/codex.py)
LIVE_ONLY = '"ledger_tokens"'  # the identical-ledger detector (rule and panel); test_teams
AT_END = "${__to:date:seconds}"  # Grafana's end of range: the evaluation time, set per query
LONG_WINDOW = re.compile(r"\[(?:[2-9]|\d\d+)d\]|\[\d+w\]")  # ranges of 2 days and more
RECORDED = re.compile(r"(claude_code:[a-z0-9_:]+)(\{[^}]*\})?")


def recording_rules() -> dict[str, str]:
    """Every shipped recording rule: recorded name -> expression."""
    out: dict[str, str] = {}
    for path in sorted(RULES.glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    out[rule["record"]] = " ".join(rule["expr"].split())
    return out


def inline(expr: str, rules: dict[str, str]) -> str:
    """``expr`` with every recorded series replaced by its rule (blocks hold no recorded series)."""
    for _ in range(4):  # rules read other rules' series, at most a few levels deep
        expr = RECORDED.sub(lambda m: f"({rules[m.group(1)]})" if m.group(1) in rules
                            else m.group(0), expr)
    return expr


def dashboard_queries() -> list[str]:
    """Every panel query of the shipped dashboards, variables substituted."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str) and node["expr"]:
                found.append(node["expr"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted(DASHBOARD_DIR.glob("*.json")):
        walk(json.loads(path.read_text()))
    out = []
    for text in found:
        expr = text
        expr = expr.replace(AT_END, "\0")  # kept for answer(), which knows the time
        for name, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
            expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
        out.append(expr.replace("\0", AT_END))
    return sorted(set(out))


def answer(prom: PromServer, expr: str, ts: float) -> dict[str, float]:
    """The non-zero, non-NaN values of ``expr`` at ``ts`` by label set ("no data" = {})."""
    expr = expr.replace(AT_END, f"{ts:.3f}")
    data = prom.api("query", {"query": expr, "time": f"{ts:.3f}"})
    rows: list[tuple[dict[str, str], str]]
    if data["resultType"] == "scalar":
        rows = [({}, data["result"][1])]
    else:
        rows = [(r["metric"], r["value"][1]) for r in data["result"]]
    out = {}
    for metric, text in rows:
        value = float(text)
        if value and not math.isnan(value):
            out[json.dumps(metric, sort_keys=True)] = value
    return out


@pytest.mark.slow
def test_dashboards_and_rules_answer_alike_over_held_and_dense_blocks(tmp_path: Path) -> None:
    """Every dashboard query and recording rule answers as over the dense file, 20x bigger.

    Two short bursts of use seven weeks apart, then two quiet months: the
    activity covers under a tenth of the span. Both files go through
    ``write_blocks`` (the real promtool) into two real Prometheus servers.
    """
    promtool = require_binary("promtool")
    trees = []
    for i, start in enumerate((datetime(2026, 3, 2, 9, tzinfo=UTC),
                               datetime(2026, 4, 20, 9, tzinfo=UTC))):
        generate(tmp_path / f"t{i}", GenOptions(seed=31 + i, sessions=1, start=start))
        trees.append(tmp_path / f"t{i}")
    pricing = RateTable.load()
    ledger = Ledger(tmp_path / "ledger.sqlite3", rules=MetricsOptions().counting(pricing))
    Scanner(ledger, projects_dirs(trees), workers=1).scan()
    ledger.settle(force=True)
    requests = ledger.requests()
    serve = startup(ledger)
    ledger.close()
    until = datetime(2026, 6, 20, tzinfo=UTC).timestamp()
    active_hours = len({int(r.ts // 3600) for r in requests})
    assert active_hours * 3600 < (until - requests[0].ts) / 10

    def written(hold: int | None) -> tuple[int, Path]:
        opts = BackfillOptions(until=until, hold=hold, labels=TARGET)
        out = io.StringIO()
        write_history(requests, pricing, MetricsOptions(), out, opts, now=until, serve=serve)
        blocks = tmp_path / f"blocks-{hold}"
        write_blocks(requests, pricing, MetricsOptions(), blocks, opts, promtool=promtool,
                     now=until, serve=serve, workdir=tmp_path)
        return len(out.getvalue()), blocks

    held_size, held = written(BackfillOptions().hold)
    dense_size, dense = written(None)
    assert dense_size >= 20 * held_size, (dense_size, held_size)

    rules = recording_rules()
    # The identical-ledger detector is live, not a history figure: it compares exporters'
    # instant counter totals, and held blocks sample a series only near its changes
    # (docs/backfill.md), so its rule and panel are left out here (tests/test_teams.py).
    queries = [q for q in (*dashboard_queries(), *rules.values()) if LIVE_ONLY not in q]
    assert len(rules) >= 10 and len(queries) > 50
    queries = [inline(q, rules) for q in queries]
    first, last = requests[0].ts, requests[-1].ts
    burst2 = next(r.ts for r in requests if r.ts > first + 20 * DAY)
    times = [first + 600, first + 3 * 3600 + 37, burst2 + 2 * 3600, last + 90, last + 20 * 3600,
             first + 20 * DAY]  # the last one: seven days into the quiet stretch
    config = prometheus_config([])
    retention = ["--storage.tsdb.retention.time=100y"]
    compared = 0
    with PromServer(config, tmp_path / "p1", storage=held, extra_args=retention) as a, \
            PromServer(config, tmp_path / "p2", storage=dense, extra_args=retention) as b:
        for ts in times:
            for expr in queries:
                want = answer(b, expr, ts)
                got = answer(a, expr, ts)
                assert got.keys() == want.keys(), (expr, ts, got, want)
                # Windows longer than the hold (a day) may start in quiet time, where held
                # blocks have no anchor: Prometheus extrapolates, within 5 % (docs/backfill.md).
                rel = 0.05 if LONG_WINDOW.search(expr) else 1e-12
                for key, value in want.items():
                    assert got[key] == pytest.approx(value, rel=rel), (expr, ts, key)
                compared += len(want)
        quiet = answer(b, "sum(increase(claude_code_requests_total[1d]))", times[-1])
        assert quiet == {} and answer(a, "sum(claude_code_requests_total)", times[-1]) == {}
    assert compared > 200


def test_cli_blocks_runs_promtool_and_leaves_no_text(tmp_path: Path) -> None:
    """`backfill --blocks DIR` makes TSDB blocks with promtool and leaves no OpenMetrics file."""
    require_binary("promtool")
    generate(tmp_path / "tree", GenOptions(seed=2, sessions=2))
    blocks = tmp_path / "blocks"
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "backfill", "--data-dir", str(tmp_path / "tree"),
         "--state-dir", str(tmp_path / "state"), "--blocks", str(blocks), "--until",
         "2026-11-03", "--log-level", "error"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"wrote blocks into {blocks}" in done.stdout
    metas = [json.loads(m.read_text()) for m in blocks.glob("*/meta.json")]
    assert len(metas) >= 2  # October and the quiet weeks up to November 3rd: two 486 h blocks
    assert all(m["maxTime"] - m["minTime"] <= 486 * 3600 * 1000 for m in metas)
    assert sum(m["stats"]["numSamples"] for m in metas) > 1000
    assert not list(tmp_path.glob("backfill-*")) and not list(tmp_path.rglob("*.om"))
    both = subprocess.run([sys.executable, "-m", "exporter", "backfill", "-o", "x.om",
                           "--blocks", str(blocks)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert both.returncode == 2
    alone = subprocess.run([sys.executable, "-m", "exporter", "backfill", "--blocks",
                            str(tmp_path / "b2"), "--state-dir", str(tmp_path / "s2")],
                           capture_output=True, text=True, timeout=60, check=False,
                           env={**os.environ, "PATH": str(tmp_path / "nothing")})
    assert alone.returncode == 2 and "promtool on PATH" in alone.stderr
    assert not (tmp_path / "s2").exists()  # refused before opening a ledger


# ------------------------------------------------------------------ plan limits
PLAN_T0 = 1_790_000_040.0  # a minute boundary + 40 s
FIVE_H = 5 * 3600


def plan_refreshes() -> list[tuple[float, dict[str, Any]]]:
    """Status-line payloads over two 5-hour windows: a limit reached, a stale session, a reset.

    Also a repeat of the same figures, a refresh without ``rate_limits`` (before
    the first response), and a second instance after the first one's reset.
    """
    from tests.support.plan import payload

    reset_a, reset_b, week = PLAN_T0 + FIVE_H + 20, PLAN_T0 + 2 * FIVE_H + 600, PLAN_T0 + 6 * DAY

    def doc(at: float, five: float | None, reset: float, seven: float | None,
            session: str = "sess-a") -> tuple[float, dict[str, Any]]:
        windows: dict[str, tuple[float, int]] = {}
        if five is not None:
            windows["five_hour"] = (five, int(reset))
        if seven is not None:
            windows["seven_day"] = (seven, int(week))
        return at, payload(at, windows, session=session, context=42.0, cost=1.25)

    return [
        doc(PLAN_T0, None, 0, None),  # the session's first refresh: no figures yet
        doc(PLAN_T0 + 100, 10.0, reset_a, 5.0),
        doc(PLAN_T0 + 130, 10.0, reset_a, 5.0),  # the same figures again
        doc(PLAN_T0 + 3000, 40.0, reset_a, 9.0),
        doc(PLAN_T0 + 3050, 30.0, reset_a, 8.0, "sess-b"),  # stale: another session
        doc(PLAN_T0 + 9000, 100.0, reset_a, 20.0),  # the limit
        doc(PLAN_T0 + 9500, 103.0, reset_a, 21.0),
        doc(PLAN_T0 + FIVE_H + 4000, 3.0, reset_b, 22.0),  # after the reset: a new instance
        doc(PLAN_T0 + FIVE_H + 7000, 12.0, reset_b, 25.0),
    ]


def plan_ledger(state: Path, refreshes: list[tuple[float, dict[str, Any]]]) -> Ledger:
    """A ledger holding ``refreshes`` as the real status-line command records them."""
    import functools

    from exporter.cli import statusline
    from exporter.ingest import spool
    from exporter.ledger.plan_store import ingest_samples

    for t, d in refreshes:
        statusline.main([], io.BytesIO(json.dumps(d).encode()), io.BytesIO(),
                        {spool.STATE_DIR_ENV: str(state)}, clock=functools.partial(float, t))
    ledger = Ledger(state / "ledger.sqlite3")
    if refreshes:
        ingest_samples(ledger._db)
    return ledger


def plan_shown(ledger: Ledger, now: float) -> dict[Any, float]:
    """The plan series serve shows at ``now`` over ``ledger`` (its figures, as /metrics has)."""
    from exporter.projections.plan.windows import plan_figures

    fig = plan_figures(ledger._db, now)
    out: dict[Any, float] = {}
    if fig.samples:
        out[("claude_code_plan_window_samples_total", ())] = float(fig.samples)
    for name, win in fig.windows.items():
        lab = (("window", name),)
        out[("claude_code_plan_window_used_ratio", lab)] = win.used_ratio
        out[("claude_code_plan_window_resets_at_seconds", lab)] = win.resets_at
        out[("claude_code_plan_windows_exhausted_total", lab)] = float(win.exhausted)
    return out


def test_plan_history_is_what_serve_showed_at_every_boundary(tmp_path: Path) -> None:
    """At each minute, the backfilled plan series equal serve's figures over the samples so far.

    Gauges are written from their first value on (no 0 before it); the window
    falls to 0 at its reset time, between two samples; counters only grow.
    """
    from exporter.projections.plan.windows import plan_history

    refreshes = plan_refreshes()
    ledger = plan_ledger(tmp_path / "all", refreshes)
    until = PLAN_T0 + 2 * FIVE_H + 3600
    out = io.StringIO()
    write_history([], RateTable.load(), MetricsOptions(), out,
                  BackfillOptions(labels=TARGET, until=until), plan=plan_history(ledger.read))
    ledger.close()
    types, points = parse(out.getvalue())
    assert types["claude_code_plan_window_used_ratio"] == "gauge"
    assert types["claude_code_plan_window_samples"] == "counter"
    checked = 0
    for t in sorted({int(when) // 60 * 60 + 60 for when, _ in refreshes}
                    | {int(PLAN_T0 + FIVE_H) // 60 * 60 + d for d in (0, 60, 120)}
                    | {int(until) // 60 * 60}):
        seen = plan_ledger(tmp_path / f"at-{t}", [r for r in refreshes if r[0] < t])
        want = plan_shown(seen, t)
        seen.close()
        got = {k: v for k, v in in_force(points, t).items() if "plan" in k[0]}
        # A counter is born at 0 the step before its first change (docs/backfill.md).
        born = {k for k, v in got.items() if k not in want and k[0].endswith("_total") and not v}
        assert {k: v for k, v in got.items() if k not in born} == want, t
        checked += bool(want)
    assert checked >= 8
    (used,) = [p for k, p in points.items()
               if k[0] == "claude_code_plan_window_used_ratio" and "five_hour" in k[1]]
    assert used[0][1] == 0.1 and min(v for _, v in used) == 0.0  # born at 10 %, reset to 0
    # Within a day of a change a gauge has a point at least every 4 minutes: graphs are lines.
    assert max(b[0] - a[0] for a, b in itertools.pairwise(used)) <= 240
    (exhausted,) = [p for k, p in points.items()
                    if k[0] == "claude_code_plan_windows_exhausted_total" and "five_hour" in k[1]]
    assert exhausted[-1][1] == 1 and all(a[1] <= b[1] for a, b in itertools.pairwise(exhausted))


def test_backfill_without_samples_writes_no_plan_series(small: list[Request]) -> None:
    """A ledger the status line never fed: no plan family in the file."""
    from exporter.projections.plan.windows import PlanHistory

    out = io.StringIO()
    write_history(small, RateTable.load(), MetricsOptions(), out, BackfillOptions(labels=TARGET),
                  now=small[-1].ts + 3600, plan=PlanHistory())
    assert "plan_window" not in out.getvalue()


def test_cli_backfill_ingests_the_spool_and_writes_the_plan_history(tmp_path: Path) -> None:
    """Samples recorded while no exporter ran: `backfill` moves them in and writes their history."""
    import functools

    from exporter.cli import statusline
    from exporter.ingest import spool

    generate(tmp_path / "tree", GenOptions(seed=2, sessions=2))
    state = tmp_path / "state"
    refreshes = plan_refreshes()
    for t, d in refreshes:
        statusline.main([], io.BytesIO(json.dumps(d).encode()), io.BytesIO(),
                        {spool.STATE_DIR_ENV: str(state)}, clock=functools.partial(float, t))
    out = tmp_path / "history.om"
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "backfill", "--data-dir", str(tmp_path / "tree"),
         "--state-dir", str(state), "--output", str(out), "--log-level", "error"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert done.returncode == 0, done.stderr
    types, points = parse(out.read_text())
    assert types["claude_code_plan_window_used_ratio"] == "gauge"
    ((_, counted),) = [(k, p) for k, p in points.items()
                       if k[0] == "claude_code_plan_window_samples_total"]
    distinct = {json.dumps(d, sort_keys=True) for _, d in refreshes}
    assert len(distinct) == len(refreshes) - 1  # the same figures twice are one sample
    assert counted[-1][1] == len(distinct)
    assert types["claude_code_requests"] == "counter"  # and the requests' history beside it
