"""Projects by Claude Code's project folder: worktrees of a repository are one project (item 9)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger
from exporter.projections.backfill import exposed
from exporter.projections.labels import LabelPolicy
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.pricing import RateTable
from exporter.projections.project_groups import ProjectGroups, encode
from tests.support.paths import REAL, ROOT

SPOTTER = "/home/USER/projects/spotter"
WORKTREES = tuple(f"{SPOTTER}-worktrees/spotter-{w}" for w in ("gqc", "dov", "4te"))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the command line as a process."""
    return subprocess.run([sys.executable, "-m", "exporter", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_worktrees_filed_under_the_repositorys_folder_are_its_project() -> None:
    """The three worktrees' cwds belong to the folder's path; a cwd with its own folder stays."""
    groups = ProjectGroups("folder", [encode(SPOTTER), encode("/home/u/other"), "-home-u"])
    assert {groups.of(cwd) for cwd in WORKTREES} == {SPOTTER}
    assert groups.of(f"{SPOTTER}/sub/dir") == SPOTTER  # a cd inside the repository
    assert groups.of("/home/u/other") == "/home/u/other"  # its own folder: the longest
    assert groups.of("/home/u/elsewhere") == "/home/u"  # only inside a session started in ~
    assert groups.of("/srv/none") == "/srv/none"  # no folder encodes it: its own project
    assert ProjectGroups("cwd", [encode(SPOTTER)]).of(WORKTREES[0]) == WORKTREES[0]


def test_folder_names_encode_as_claude_code_does() -> None:
    """Every character but ASCII letters and digits is a dash; one outside the BMP is two."""
    assert encode("/home/u/data_eng.v2") == "-home-u-data-eng-v2"
    assert encode("/home/u/café") == "-home-u-caf-"
    assert encode("/a/\U0001f600b") == "-a---b"
    groups = ProjectGroups("folder", ["-a---b"])
    assert groups.of("/a/\U0001f600b/c") == "/a/\U0001f600b"


def test_a_new_folder_regroups_later_cwds() -> None:
    """A folder learned later gives the cwd it encodes its own project."""
    groups = ProjectGroups("folder", ["-home-u"])
    assert groups.of("/home/u/proj") == "/home/u"
    groups.learn([encode("/home/u/proj")])
    assert groups.of("/home/u/proj") == "/home/u/proj"


@pytest.mark.parametrize("policy", ["basename", "full", "hash", "none"])
def test_a_label_never_shows_more_than_the_policy_allows_of_the_cwd(policy: str) -> None:
    """The label is the policy applied to the project path, a leading part of the cwd."""
    groups = ProjectGroups("folder", [encode(SPOTTER)])
    got = LabelPolicy(policy, groups=groups).project(WORKTREES[1])
    want = {"basename": "spotter", "full": SPOTTER, "none": "",
            "hash": hashlib.sha256(SPOTTER.encode()).hexdigest()[:12]}[policy]
    assert got == want
    assert WORKTREES[1].startswith(SPOTTER)


def _report(*extra: str, state: Path) -> dict[str, Any]:
    """`report project --json` over the real transcripts."""
    done = cli("report", "project", "--json", "--data-dir", str(REAL), "--state-dir",
               str(state), *extra)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def test_report_shows_the_real_worktrees_as_one_project(tmp_path: Path) -> None:
    """The real transcripts: one project of 529 requests; three by cwd; filters by either name."""
    state = tmp_path / "state"
    rows = _report(state=state)["rows"]
    assert [(r["project"], r["requests"]) for r in rows] == [(SPOTTER, 529)]
    by_cwd = _report("--project-grouping", "cwd", state=state)["rows"]
    assert sorted(r["project"] for r in by_cwd) == sorted(WORKTREES)
    assert sum(r["requests"] for r in by_cwd) == 529
    assert _report("--project", "spotter", state=state)["totals"]["requests"] == 529
    one = _report("--project", "spotter-gqc", state=state)
    assert one["totals"]["requests"] == next(
        r["requests"] for r in by_cwd if r["project"].endswith("gqc"))


def _labels(ledger: Ledger, grouping: str) -> set[str]:
    """The project label values of claude_code_requests a serve would expose at start."""
    registry = CollectorRegistry()
    proj = Projection(RateTable.load(), MetricsOptions(project_grouping=grouping), registry)
    try:
        proj.load(ledger)
        return {dict(labels)["project"] for (name, labels) in exposed(registry, "claude_code")
                if name == "claude_code_requests_total" and "project" in dict(labels)}
    finally:
        proj.shutdown()


def test_metrics_label_the_real_worktrees_as_one_project(tmp_path: Path) -> None:
    """/metrics at start and after a live batch: project="spotter" (by cwd: three labels)."""
    rules = MetricsOptions().counting(RateTable.load())
    ledger = Ledger(tmp_path / "ledger.db", rules=rules)
    try:
        Scanner(ledger, [REAL / "projects"], workers=1).scan()
        assert _labels(ledger, "folder") == {"spotter"}
        assert _labels(ledger, "cwd") == {"spotter-gqc", "spotter-dov", "spotter-4te"}
    finally:
        ledger.close()
    live = Ledger(tmp_path / "live.db", rules=rules)
    registry = CollectorRegistry()
    proj = Projection(RateTable.load(), MetricsOptions(), registry)
    try:
        proj.load(live)  # empty: no folder known until the batches bring them
        Scanner(live, [REAL / "projects"], workers=1, on_applied=proj.apply).scan()
        got = {dict(labels).get("project") for (name, labels) in exposed(registry, "claude_code")
               if name == "claude_code_requests_total"}
        assert got == {"spotter"}
    finally:
        proj.shutdown()
        live.close()


def test_backfill_of_the_real_worktrees_agrees_with_serve(tmp_path: Path) -> None:
    """`backfill` labels the history as serve's projection does (its own check passes)."""
    out = tmp_path / "hist.om"
    done = cli("backfill", "--data-dir", str(REAL), "--state-dir", str(tmp_path / "state"),
               "-o", str(out), "--until", "2026-03-01")
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert 'project="spotter"' in text and 'project="spotter-gqc"' not in text


def test_the_page_names_the_real_worktrees_as_one_project(tmp_path: Path) -> None:
    """The page ranks projects as /metrics labels them: one "spotter" (by cwd: three)."""
    from exporter.projections.class_prices import ClassPrices
    from exporter.projections.periods import UTC_ZONE
    from exporter.serve.page_figures import LedgerSource
    from exporter.serve.page_range import PageQuery

    ledger = Ledger(tmp_path / "ledger.db")
    try:
        Scanner(ledger, [REAL / "projects"], workers=1).scan()
        prices = ClassPrices.of(RateTable.load())

        def projects(grouping: str) -> set[str]:
            source = LedgerSource(ledger, [REAL], prices, UTC_ZONE, budgets={},
                                  project_grouping=grouping)
            data = source(PageQuery(since="2026-01-01", ranged=True))
            return {name for name, _ in data.by_project}

        assert projects("folder") == {"spotter"}
        assert projects("cwd") == {"spotter-gqc", "spotter-dov", "spotter-4te"}
    finally:
        ledger.close()
