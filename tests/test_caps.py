"""Tables and the page's JSON are capped: the costliest rows, then one "other" row summing the rest.

Issue "round 3", item 14: 20,000 distinct model ids made ``/api/summary.json``
megabytes and a text report millions of lines. Here 120 models over 250
projects, as processes where the output is a process's: every capped list
still adds up to the totals, and ``--json``/``--csv`` still list every row.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from exporter.ingest.discover import projects_dirs
from exporter.ledger.store import Ledger
from exporter.projections import caps
from exporter.projections.class_prices import ClassPrices
from exporter.projections.periods import UTC_ZONE
from exporter.projections.pricing import RateTable
from exporter.projections.usage import Usage
from exporter.serve import page, page_figures
from tests.support.paths import ROOT
from tests.support.records import assistant, jsonl

MODELS, PROJECTS = 120, 250


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """250 requests of the last hours: request i uses model i % 120 and project i."""
    root = tmp_path_factory.mktemp("caps")
    start = time.time() - 2 * 3600
    for i in range(PROJECTS):  # each project in its own folder, as Claude Code files them
        where = root / "projects" / f"-home-u-p{i:03d}"
        where.mkdir(parents=True)
        (where / f"s{i % 7}.jsonl").write_bytes(jsonl(assistant(
            f"m{i}", f"r{i}", model=f"claude-many-{i % MODELS:03d}", cwd=f"/home/u/p{i:03d}",
            session=f"s{i % 7}",
            ts=datetime.fromtimestamp(start + i, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"))))
    return root / "projects", root / "state"


def report(tree: Path, state: Path, *args: str) -> str:
    """``claude-code-exporter report ARGS`` as a process (160 columns); its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE_CODE_EXPORTER")}
    env.update({"PYTHONPATH": str(ROOT), "TZ": "UTC", "COLUMNS": "160"})
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "report", *args, "--data-dir", str(tree),
         "--state-dir", str(state), "--timezone", "UTC"],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def requests_of(out: str, label: str) -> list[int]:
    """The requests cell of each table line whose first cell starts with ``label``.

    Figures are right-aligned: the cell ends where its table's ``requests`` title ends.
    """
    found, end = [], 0
    for line in out.splitlines():
        if re.search(r"\brequests\b", line) and line.lstrip().split()[0] != "requests":
            end = line.index("requests") + len("requests")  # a table's header line
        elif end and line.lstrip().startswith(label):
            found.append(int(line[:end].split()[-1].replace(",", "")))
    return found


def test_the_summary_shows_the_costliest_models_and_one_other_row(
        many: tuple[Path, Path]) -> None:
    """By model: 20 rows, then ``other (100 more)``; their requests add up to the total."""
    out = report(*many, "--full")
    shown = requests_of(out, "claude-many-")
    other = requests_of(out, caps.other_label(MODELS - caps.SUMMARY_MODELS))
    assert len(shown) == caps.SUMMARY_MODELS and len(other) == 1
    assert sum(shown) + other[0] == PROJECTS
    unpriced = [line for line in out.splitlines() if line.startswith("  unpriced:")]
    assert len(unpriced) == caps.UNPRICED_LINES + 1
    assert f"of {MODELS - caps.UNPRICED_LINES} more models" in unpriced[-1]


def test_view_tables_cap_rows_breakdowns_and_model_names(many: tuple[Path, Path]) -> None:
    """project: 200 rows and an other row; daily --breakdown: 10 models, an other, +K more."""
    out = report(*many, "project")
    assert len(requests_of(out, "p")) == caps.VIEW_ROWS["project"]
    other = requests_of(out, caps.other_label(PROJECTS - caps.VIEW_ROWS["project"]))
    assert sum(requests_of(out, "p")) + other[0] == PROJECTS == requests_of(out, "total")[0]
    daily = report(*many, "daily", "--breakdown")
    days = len(requests_of(daily, "20"))
    assert len(requests_of(daily, "└ many-")) == caps.BREAKDOWN_MODELS * days
    assert sum(requests_of(daily, "└ ")) == PROJECTS  # the models and the others add up
    assert re.search(r"\+\d+ more", daily)


def test_json_and_csv_list_every_row(many: tuple[Path, Path]) -> None:
    """``--json`` and ``--csv`` are for programs: every project and every model."""
    doc = json.loads(report(*many, "project", "--json"))
    assert len(doc["rows"]) == doc["row_count"] == PROJECTS
    rows = list(csv.DictReader(io.StringIO(report(*many, "project", "--csv"))))
    assert len(rows) == PROJECTS
    assert len(json.loads(report(*many, "--json"))["by_model"]) == MODELS


def test_summary_json_caps_models_and_projects_and_still_adds_up(
        many: tuple[Path, Path]) -> None:
    """/api/summary.json: 50 models and 50 projects, and the rest summed beside them."""
    tree, state = many
    report(*many, "--json")  # the ledger, ingested
    ledger = Ledger(state / "ledger.sqlite3")
    try:
        source = page_figures.LedgerSource(ledger, projects_dirs([tree]),
                                           ClassPrices.of(RateTable.load()), UTC_ZONE, budgets={})
        doc: dict[str, Any] = json.loads(b"".join(
            page.routes(source, "t")["/api/summary.json"]({}, lambda *a: None)))
    finally:
        ledger.close()
    assert len(doc["by_model"]) == caps.API_ROWS
    rest = doc["by_model_other"]
    assert rest["models"] == MODELS - caps.API_ROWS
    for key in ("requests", "output_tokens", "unpriced_tokens"):
        assert sum(u[key] for u in doc["by_model"].values()) + rest[key] == doc["totals"][key]
    projects = doc["page"]["by_project_cost_usd"]
    assert len(projects) == caps.API_ROWS
    assert doc["page"]["by_project_other"]["projects"] == PROJECTS - caps.API_ROWS


def test_costliest_keeps_order_when_it_fits_and_ranks_by_cost_when_not() -> None:
    """Under the cap nothing moves; over it the costliest come first and the rest is summed."""
    groups = {"a": Usage(requests=1, cost_pico=1), "b": Usage(requests=2, cost_pico=5),
              "c": Usage(requests=4, cost_pico=3)}
    assert caps.costliest(groups, 3).shown == tuple(groups.items())
    capped = caps.costliest(groups, 2)
    assert [name for name, _ in capped.shown] == ["b", "c"]
    assert capped.more == 1 and capped.rest.requests == 1
