"""Scopes and long histories: each root sees its own requests; a restart equals a fresh ingest."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger
from exporter.projections.backfill import exposed
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.pricing import RateTable
from exporter.synth import GenOptions, generate
from tests.support.paths import ROOT


def report(data: Path, state: Path) -> dict[str, Any]:
    """`report --json` over one data dir."""
    done = subprocess.run([sys.executable, "-m", "exporter", "report", "--json",
                           "--data-dir", str(data), "--state-dir", str(state)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def test_each_data_dir_reports_only_its_own_requests_also_once_deleted(tmp_path: Path) -> None:
    """Report A, then B, on one ledger: each shows its own; A's stay after its deletion."""
    state = tmp_path / "state"
    a = generate(tmp_path / "A", GenOptions(seed=1, sessions=2, requests_per_session=25))
    b = generate(tmp_path / "B", GenOptions(seed=2, sessions=3, requests_per_session=25))
    assert_totals(report(tmp_path / "A", state), a)
    assert_totals(report(tmp_path / "B", state), b)
    shutil.rmtree(tmp_path / "A" / "projects")
    (tmp_path / "A" / "projects").mkdir()
    assert_totals(report(tmp_path / "A", state), a)


def assert_totals(got: dict[str, Any], truth: dict[str, Any]) -> None:
    """The report's totals are the truth's: every count exact, the cost to the cent."""
    want = truth["totals"]
    for key, value in want.items():
        if key.endswith("_usd"):  # cost, cache savings: the report rounds to 1e-6 USD
            assert abs(got["totals"][key] - value) < 1e-5, key
        else:
            assert got["totals"][key] == value, key


def _scan(ledger: Ledger, root: Path) -> None:
    """One pass over a tree's projects, everything settled (as serve's start-up does)."""
    Scanner(ledger, [root / "projects"], workers=1).scan()
    ledger.settle(force=True)


def _exposition(ledger: Ledger, root: Path) -> dict[Any, float]:
    """Counter and histogram samples a serve over ``root`` would expose on start."""
    registry = CollectorRegistry()
    proj = Projection(RateTable.load(), MetricsOptions(), registry, roots=[root / "projects"])
    try:
        proj.load(ledger)
        return dict(exposed(registry, "claude_code"))
    finally:
        proj.shutdown()


def test_a_restart_after_months_of_deleted_history_equals_a_fresh_ingest(tmp_path: Path) -> None:
    """Months ingested one by one, each deleted after, expose what one fresh ingest does."""
    rules = MetricsOptions().counting(RateTable.load())
    live, whole = tmp_path / "live", tmp_path / "whole"
    long = Ledger(tmp_path / "long.db", rules=rules)
    for month in range(3):
        start = datetime(2026, 1 + month * 2, 3, tzinfo=UTC)
        options = GenOptions(seed=40 + month, sessions=3, requests_per_session=30, start=start)
        generate(tmp_path / f"m{month}", options)
        shutil.copytree(tmp_path / f"m{month}" / "projects", live / "projects")
        _scan(long, live)
        long.close()  # a restart between months
        long = Ledger(tmp_path / "long.db", rules=rules)
        shutil.rmtree(live / "projects")  # Claude Code's cleanup
        shutil.copytree(tmp_path / f"m{month}" / "projects", whole / "projects",
                        dirs_exist_ok=True)
    fresh = Ledger(tmp_path / "fresh.db", rules=rules)
    _scan(fresh, whole)
    got, want = _exposition(long, live), _exposition(fresh, whole)
    assert got == want and len(got) > 100
