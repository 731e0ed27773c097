"""`report limits` and the spool ingestion of `report`, as processes over a generated week.

A generated run (requests in the ledger, the status line's refreshes through
the real command into the spool, nothing ingested yet, as after days without
``serve``) is read by ``claude-code-exporter report limits``: it moves the
spool into the ledger itself, and shows every window instance with its cost
and its dollars per percent.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import statusline
from exporter.ingest import spool
from exporter.ledger import plan_store as store
from exporter.ledger.store import Ledger
from exporter.projections.pricing import RateTable
from exporter.report.tables import INSTANCE_FIELDS
from exporter.sqlite import sqlite3
from tests.support.paths import ROOT
from tests.support.plan import FIVE_HOURS, Run, generate, store_requests

DAY = 86_400.0


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Run]:
    """A state dir: a generated run that ended a day ago, its samples still in the spool."""
    state = tmp_path_factory.mktemp("plan-report") / "state"
    t0 = float(int(time.time() - 3 * DAY))
    run = generate(Run(2.40, 14.0, decimals=1), RateTable.load(), seed=3, t0=t0)
    env = {spool.STATE_DIR_ENV: str(state)}
    for at, doc in run.refreshes:  # the real status-line command, at the refresh's time
        out = io.BytesIO()
        statusline.main([], io.BytesIO(json.dumps(doc).encode()), out, env,
                        clock=functools.partial(float, at))
    ledger = Ledger(state / "ledger.sqlite3")
    store_requests(ledger, run.requests)
    ledger.close()
    return state, run


def report(state: Path, *args: str) -> str:
    """Run ``claude-code-exporter report`` as a process over the state dir; its stdout."""
    data = state.parent / "claude"
    (data / "projects").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE_CODE_EXPORTER")}
    env.update({"PYTHONPATH": str(ROOT), "TZ": "UTC"})
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "report", *args, "--state-dir", str(state),
         "--data-dir", str(data), "--timezone", "UTC"],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def samples(state: Path) -> int:
    """Distinct samples in the ledger (0 before any ingestion)."""
    conn = sqlite3.connect(f"file:{state / 'ledger.sqlite3'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM plan_samples").fetchone()[0] \
            if store.has_schema(conn) else 0
    finally:
        conn.close()


def test_report_ingests_the_spool_and_shows_every_window(week: tuple[Path, Run]) -> None:
    """The spool reaches the ledger through `report`, once; every instance, cost and $/% shown."""
    state, run = week
    assert samples(state) == 0  # recorded while no exporter ran
    doc = json.loads(report(state, "limits", "--json"))
    stored = samples(state)
    distinct = {json.dumps(d, sort_keys=True) for _, d in run.refreshes}
    assert stored == doc["samples"] == len(distinct)
    report(state, "limits", "--json")
    assert samples(state) == stored  # a second run adds nothing
    five = [i for i in doc["instances"] if i["window"] == "five_hour"]
    seven = [i for i in doc["instances"] if i["window"] == "seven_day"]
    assert len(five) == 5 and len(seven) == 1
    for inst in five:
        assert inst["usd_per_percent"] == pytest.approx(2.40, rel=0.02), inst
        assert inst["pairs"] >= 50 and not inst["open"]
        reset = inst["resets_at"]
        assert inst["start"] < reset
    assert seven[0]["usd_per_percent"] == pytest.approx(14.0, rel=0.02)
    assert seven[0]["open"]  # the weekly window resets four days from now
    # The cost inside each 5-hour instance is the cost of the requests generated in it.
    prices = RateTable.load()
    resets = sorted(int(d["rate_limits"]["five_hour"]["resets_at"]) for _, d in run.refreshes)
    for inst, reset in zip(five, sorted(set(resets)), strict=True):
        inside = [r for r in run.requests if reset - FIVE_HOURS <= r.ts < reset]
        want = sum(sum((prices.cost(r) or {}).values()) for r in inside)
        assert inst["cost_usd"] == pytest.approx(want, abs=1e-5), inst
    (current_five,) = [w for w in doc["windows"] if w["window"] == "five_hour"]
    assert current_five["used_percent"] == 0.0  # the last instance reset a day ago
    assert current_five["usd_per_percent"] == pytest.approx(2.40, rel=0.02)
    assert current_five["pairs"] == sum(i["pairs"] for i in five)


def test_limits_as_a_table_and_as_csv(week: tuple[Path, Run]) -> None:
    """The table names both windows and their estimate; the CSV has one line per instance."""
    state, _run = week
    text = report(state, "limits")
    assert "Plan limits" in text and "five_hour" in text and "seven_day" in text
    assert "1 % ≈ $2.4" in text or "1 % ≈ $2.3" in text
    reader = csv.DictReader(io.StringIO(report(state, "limits", "--csv")))
    lines = list(reader)
    assert reader.fieldnames == list(INSTANCE_FIELDS)
    assert [row["window"] for row in lines] == ["five_hour"] * 5 + ["seven_day"]
    assert all(float(row["cost_usd"]) > 0 for row in lines)
    since = lines[3]["start"]
    later: list[dict[str, Any]] = json.loads(
        report(state, "limits", "--json", "--since", since))["instances"]
    assert [i["window"] for i in later] == ["five_hour", "five_hour", "seven_day"]
    assert all(set(i) == set(INSTANCE_FIELDS) for i in later)


def test_limits_without_samples_says_how_to_record_them(tmp_path: Path) -> None:
    """No status line configured: the view says how to set it up; JSON has no windows.

    The CSV is its header alone, the instance keys of the JSON.
    """
    state = tmp_path / "state"
    Ledger(state / "ledger.sqlite3").close()
    assert "statusline" in report(state, "limits")
    doc = json.loads(report(state, "limits", "--json"))
    assert doc["windows"] == [] and doc["instances"] == [] and doc["samples"] == 0
    assert report(state, "limits", "--csv").splitlines() == [",".join(INSTANCE_FIELDS)]


def test_limits_show_each_windows_pace(week: tuple[Path, Run]) -> None:
    """Each window's pace: the open weekly one projected at reset, the ended 5-hour one not."""
    state, _run = week
    doc = json.loads(report(state, "limits", "--json"))
    by_name = {w["window"]: w for w in doc["windows"]}
    weekly, five = by_name["seven_day"], by_name["five_hour"]
    assert weekly["pace"] in ("on_track", "limit_ahead", "limit_reached")
    assert weekly["projected_percent"] >= weekly["used_percent"]
    assert weekly["pace_percent_per_hour"] >= 0
    assert (weekly["limit_at"] is None) is (weekly["pace"] == "on_track")
    assert five["pace"] == "not_enough_data" and five["projected_percent"] is None
    text = report(state, "limits")
    assert "projected at reset" in text and "not enough data" in text
