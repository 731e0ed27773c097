"""A report's scope is its roots': line counts, rejections and project names (issue 35, item 4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger
from exporter.sqlite import sqlite3
from exporter.synth import GenOptions, generate
from tests.support.paths import ROOT


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the command line as a process."""
    return subprocess.run([sys.executable, "-m", "exporter", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def report(data: Path, state: Path, *extra: str) -> dict[str, Any]:
    """`report --json` over one data dir (or several, in ``extra``)."""
    done = cli("report", "--json", "--data-dir", str(data), "--state-dir", str(state), *extra)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def assert_lines(got: dict[str, Any], truth: dict[str, Any]) -> None:
    """The report's line counts and rejections are exactly the tree's."""
    assert got["lines"] == truth["lines"]
    assert got["rejected_lines"] == truth["rejected_lines"]
    assert got["rejected_by_reason"] == truth["rejected_by_reason"]


def _trees(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two independent trees, A and B, with rejected lines of every reason (B: advisor parts)."""
    a = generate(tmp_path / "A", GenOptions(seed=11, sessions=2, requests_per_session=25))
    b = generate(tmp_path / "B", GenOptions(seed=12, sessions=3, requests_per_session=30,
                                             iterations=True))
    return a, b


def test_line_counts_and_rejections_are_the_scoped_roots_only(tmp_path: Path) -> None:
    """After B joined A's ledger, a report on A shows A's lines and rejections, not both trees'."""
    a, b = _trees(tmp_path)
    state = tmp_path / "state"
    assert_lines(report(tmp_path / "A", state), a)
    assert_lines(report(tmp_path / "B", state), b)
    assert_lines(report(tmp_path / "A", state), a)  # B's are no longer A's
    both = report(tmp_path / "A", state, "--data-dir", str(tmp_path / "B"))
    assert both["lines"] == {k: a["lines"][k] + b["lines"][k] for k in a["lines"]}
    assert both["rejected_lines"] == a["rejected_lines"] + b["rejected_lines"]


def test_an_unknown_project_names_the_scoped_projects_only(tmp_path: Path) -> None:
    """`--project nosuch` lists the projects of the roots asked for, not of every root."""
    _trees(tmp_path)
    state = tmp_path / "state"
    names = {}
    for tree in ("A", "B"):
        rows = report(tmp_path / tree, state, "project")["rows"]
        names[tree] = {row["project"].rstrip("/").rsplit("/", 1)[-1] for row in rows}
    only_b = names["B"] - names["A"]
    assert only_b, names
    done = cli("report", "--data-dir", str(tmp_path / "A"), "--state-dir", str(state),
               "--project", "nosuch")
    assert done.returncode == 2
    known = done.stderr.split("known: ", 1)[1]
    assert all(name not in known for name in only_b), done.stderr
    assert any(name in known for name in names["A"]), done.stderr


def _downgrade_to_v3(path: Path) -> None:
    """Make the ledger what schema v3 wrote: no per-root counters, version 3."""
    db = sqlite3.connect(path)
    try:
        db.execute("DROP TABLE root_counters")
        db.execute("PRAGMA user_version = 3")
        db.commit()
    finally:
        db.close()


def test_a_v3_ledger_of_one_root_keeps_its_counts_in_that_roots_scope(tmp_path: Path) -> None:
    """Migrating a one-root v3 ledger gives that root every line it counted, exactly."""
    a, _ = _trees(tmp_path)
    state = tmp_path / "state"
    report(tmp_path / "A", state)
    _downgrade_to_v3(state / "ledger.sqlite3")
    assert_lines(report(tmp_path / "A", state), a)  # migrated: A's, as counted before
    got = report(tmp_path / "B", state)  # B read after: its own lines only
    assert got["lines"]["other"] > 0
    assert report(tmp_path / "A", state)["lines"] == a["lines"]


def test_a_v3_ledger_of_two_roots_keeps_its_counts_unattributed(tmp_path: Path) -> None:
    """Counts a v3 ledger kept for two roots go to no single root: in the whole ledger's only."""
    a, b = _trees(tmp_path)
    state = tmp_path / "state"
    report(tmp_path / "A", state)
    report(tmp_path / "B", state)
    _downgrade_to_v3(state / "ledger.sqlite3")
    scoped = report(tmp_path / "A", state)
    assert scoped["lines"] == {"usage": 0, "duplicate": 0, "other": 0, "rejected": 0}
    both = report(tmp_path / "A", state, "--data-dir", str(tmp_path / "B"))
    assert both["lines"] == {k: a["lines"][k] + b["lines"][k] for k in a["lines"]}
    ledger = Ledger(state / "ledger.sqlite3")
    try:
        assert ledger.counters("lines") == both["lines"]
    finally:
        ledger.close()


def _scan(ledger: Ledger, *roots: Path, workers: int) -> None:
    """One pass over the roots' projects, in worker processes when ``workers`` > 1."""
    Scanner(ledger, [r / "projects" for r in roots], workers=workers,
            parallel_min_bytes=0).scan()


def test_every_roots_counts_add_up_to_the_ledgers_whatever_the_batches_mix(
    tmp_path: Path,
) -> None:
    """A raw pass of A, then one pass of A and B together: each root has its exact lines."""
    a, b = _trees(tmp_path)
    ledger = Ledger(tmp_path / "ledger.db")
    try:
        _scan(ledger, tmp_path / "A", workers=1)  # a raw pass (empty ledger)
        _scan(ledger, tmp_path / "A", tmp_path / "B", workers=2)  # incremental, mixed batches
        for root, truth in (("A", a), ("B", b)):
            scope = [tmp_path / root / "projects"]
            assert ledger.counters("lines", scope) == truth["lines"]
            assert ledger.counters("rejected", scope) == truth["rejected_by_reason"]
        both = [tmp_path / "A" / "projects", tmp_path / "B" / "projects"]
        for name in ("lines", "rejected", "bytes_read", "iterations", "mended"):
            assert ledger.counters(name, both) == ledger.counters(name), name
            per_root = {label: n for label, n in ledger.read(
                "SELECT label, sum(value) FROM root_counters WHERE name = ? GROUP BY label",
                (name,))}
            assert per_root == ledger.counters(name), name
    finally:
        ledger.close()
