"""Backfill: the ledger's history as OpenMetrics, checked against serve, promtool and Prometheus."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from exporter.ingest.discover import projects_dirs
from exporter.ingest.scan import Scanner
from exporter.ledger import Ledger
from exporter.projections.backfill import (
    BackfillError,
    BackfillOptions,
    emission,
    serve_samples,
    write_history,
)
from exporter.projections.metrics import MetricsOptions
from exporter.projections.pricing import Pricing
from exporter.projections.timeline import COUNTER, Unit
from exporter.records import Request, Source
from exporter.synth import GenOptions, generate
from tests.ledgers import ledger_of, replica
from tests.promserver import PromServer, prometheus_config, require_binary

DAY = 86_400
START = datetime(2026, 10, 1, tzinfo=UTC).timestamp()
LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+) (\d+)")
TARGET = {"job": "claude-code", "instance": "ws-1:9477"}


def ingest(tree: Path, state: Path) -> Ledger:
    """Scan a generated tree into a fresh ledger (rollups kept, everything settled)."""
    ledger = Ledger(state / "ledger.sqlite3", rules=MetricsOptions().counting(Pricing.load()))
    Scanner(ledger, projects_dirs([tree]), workers=1).scan()
    ledger.settle(force=True)
    return ledger


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


def history(requests: list[Request], **opts: Any) -> str:
    """The backfill text of ``requests`` with test target labels."""
    out = io.StringIO()
    options = BackfillOptions(labels=TARGET, **opts)
    write_history(requests, Pricing.load(), MetricsOptions(), out, options,
                  now=requests[-1].ts + 2 * 3600)
    return out.getvalue()


def parse(text: str) -> tuple[dict[str, str], dict[tuple[str, str], list[tuple[int, float]]]]:
    """Family types and every series' (timestamp, value) points, checking the layout."""
    lines = text.splitlines()
    assert lines[-1] == "# EOF"
    types: dict[str, str] = {}
    points: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    family = ""
    for line in lines[:-1]:
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ")
            assert family not in types, f"{family} declared twice"
            types[family] = kind
            continue
        if line.startswith("#"):
            continue
        m = LINE.fullmatch(line)
        assert m, line
        name, labels, value, ts = m.groups()
        suffixes = ("_total",) if types[family] == "counter" else ("_bucket", "_count", "_sum")
        assert name in {family + s for s in suffixes}, f"{name} outside family {family}"
        points[(name, labels or "")].append((int(ts), float(value)))
    return types, points


def labels_of(text: str) -> dict[str, str]:
    """``{a="x",b="y"}`` → dict (test values have no escapes)."""
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


def startup(ledger: Ledger) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Counter and histogram samples serve exposes on start-up over ``ledger``."""
    return serve_samples(ledger, Pricing.load(), MetricsOptions())


def at(points: dict[tuple[str, str], list[tuple[int, float]]], ts: int) -> dict[Any, float]:
    """The value of every series at ``ts`` (series without a point there are left out)."""
    out = {}
    for (name, labels), series in points.items():
        for t, v in series:
            if t == ts:
                lab = {k: v2 for k, v2 in labels_of(labels).items() if k not in TARGET}
                out[(name, tuple(sorted(lab.items())))] = v
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
    """At each full hour, every series equals serve's projection of the requests before it."""
    _, points = parse(history(small))
    hours = sorted({t for series in points.values() for t, _ in series if t % 3600 == 0})
    assert len(hours) > 5
    for hour in hours[1::4]:
        def earlier(r: Request, h: int = hour) -> bool:
            return r.ts < h

        before = replica(small_ledger, tmp_path / f"{hour}.db", keep=earlier)
        want = startup(before) if before.count() else {}
        got = at(points, hour)
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
    write_history(reqs, Pricing.load(), MetricsOptions(), out, BackfillOptions(step=60),
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
        write_history(small, Pricing.load(), MetricsOptions(), io.StringIO(),
                      BackfillOptions(labels={"model": "x"}), now=small[-1].ts + 60)


def test_cli_writes_the_file_and_names_the_next_step(tmp_path: Path) -> None:
    """`backfill` ingests, writes FILE atomically, and the default labels name the target."""
    generate(tmp_path / "tree", GenOptions(seed=2, sessions=2))
    out = tmp_path / "history.om"
    done = subprocess.run(
        [sys.executable, "-m", "exporter.cli", "backfill", "--data-dir", str(tmp_path / "tree"),
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
    bad = subprocess.run([sys.executable, "-m", "exporter.cli", "backfill", "-o", str(out),
                          "--step", "0m"], capture_output=True, text=True, timeout=60,
                         check=False)
    assert bad.returncode == 2 and "duration" in bad.stderr


def report_day(tree: Path, state: Path, day: datetime) -> dict[str, Any]:
    """`report --json` totals of one UTC day (the ledger's figures)."""
    until = datetime.fromtimestamp(day.timestamp() + DAY, UTC)
    done = subprocess.run(
        [sys.executable, "-m", "exporter.cli", "report", "--json", "--data-dir", str(tree),
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
        [sys.executable, "-m", "exporter.cli", "backfill", "--data-dir", str(tree),
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
