"""Transcript strings are data: model ids, project folders and session ids as hostile output.

Issue "round 3", items 3 and 10: a model id ``[/bold]`` once made every text
report exit 1 (rich markup), ``[link=…]`` rendered a clickable link, escape
sequences in a project folder reached the terminal, and ``--csv`` wrote
``=HYPERLINK(…)`` cells a spreadsheet runs. Each test runs ``report`` as a
process over a real transcript holding such strings.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from exporter import shown
from exporter.cli.logs import make_logger
from exporter.ingest.discover import projects_dirs
from exporter.ledger.store import Ledger
from exporter.projections.class_prices import ClassPrices
from exporter.projections.periods import UTC_ZONE
from exporter.projections.pricing import RateTable
from exporter.serve import page, page_figures
from tests.support.paths import ROOT
from tests.support.records import assistant, jsonl

BOLD = "[/bold]"
LINK = "[link=http://evil.example]m[/link]"
TITLE = "x\x1b]0;pwned\x07\x1b[2J"  # set the window title, clear the screen
FORMULA = '=HYPERLINK("http://evil.example","x")'
OSC8 = "/home/u/\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"
CMD = "=cmd|' /C calc'!A0"
VIEWS = ("daily", "weekly", "monthly", "session", "project", "blocks")
ATTRIBUTION_VIEWS = ("skill", "plugin", "mcp", "agent")
RAW = ("\x1b", "\x07", "\x9b", "\x9d")  # ESC, BEL, CSI and OSC in their one-byte C1 forms


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A projects dir whose lines carry hostile model ids, project folders and a session id."""
    root = tmp_path_factory.mktemp("hostile")
    where = root / "projects" / "-home-u-p"
    where.mkdir(parents=True)
    (where / "s1.jsonl").write_bytes(jsonl(
        assistant("m1", "r1", model=BOLD, attributionSkill=BOLD + TITLE),
        assistant("m2", "r2", model=LINK, attributionMcpServer=LINK, attributionPlugin=FORMULA),
        assistant("m4", "r4", model="-1+2", cwd=OSC8, session="s\x1b[31mred\u202e",
                  attributionAgent=OSC8, effort=CMD),
        assistant("m5", "r5", model="\uff1dSUM(A1)", cwd="@SUM(1+1)"),
    ))
    (where / "s2.jsonl").write_bytes(jsonl(  # its own session: the project is its first's
        assistant("m3", "r3", model=TITLE + "\x9b31m" + FORMULA, cwd=CMD + "\x1b[2J",
                  session="s2")))
    return root / "projects", root / "state"


def report(tree: Path, state: Path, *args: str, colour: bool = False,
           ) -> subprocess.CompletedProcess[str]:
    """``claude-code-exporter report ARGS`` as a process; a forced colour terminal if asked."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CLAUDE_CODE_EXPORTER") and k not in ("FORCE_COLOR", "NO_COLOR")}
    env.update({"PYTHONPATH": str(ROOT), "TZ": "UTC", "COLUMNS": "200"})
    if colour:
        env["FORCE_COLOR"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "exporter", "report", *args, "--data-dir", str(tree),
         "--state-dir", str(state), "--timezone", "UTC"],
        capture_output=True, text=True, env=env, timeout=300, check=False)


@pytest.mark.parametrize("view", ("summary", *VIEWS, *ATTRIBUTION_VIEWS))
def test_every_text_view_shows_hostile_names_as_text(hostile: tuple[Path, Path],
                                                     view: str) -> None:
    """Each text view exits 0, prints markup literally and control characters as escapes."""
    extra = ("--breakdown",) if view != "summary" else ()
    proc = report(*hostile, view, *extra)
    assert proc.returncode == 0, proc.stderr
    for raw in RAW:
        assert raw not in proc.stdout
    assert BOLD in proc.stdout
    assert "\\x1b" in proc.stdout  # shown, not sent
    if view not in ("project",):  # the project view names projects, not models
        assert LINK in proc.stdout


@pytest.mark.parametrize("view", ("summary", "project", "session"))
def test_a_colour_terminal_gets_only_the_reports_own_styles(hostile: tuple[Path, Path],
                                                            view: str) -> None:
    """On a colour terminal no link, title, clear-screen or foreign colour comes from the data."""
    extra = ("--breakdown",) if view != "summary" else ()
    proc = report(*hostile, view, *extra, colour=True)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" in proc.stdout  # the report's own bold and dim: the terminal is in colour
    for raw in ("\x1b]", "\x1b[2J", "\x1b[31m", "\x07", "\x9b", "\u202e"):
        assert raw not in proc.stdout, repr(raw)


@pytest.mark.parametrize("view", ("project", "session", *ATTRIBUTION_VIEWS))
def test_csv_cells_are_never_formulas_nor_terminal_codes(hostile: tuple[Path, Path],
                                                         view: str) -> None:
    """No CSV cell starts a formula (ASCII or full width) or holds a control character."""
    named = view in ATTRIBUTION_VIEWS  # rows named by a skill, plugin, MCP server or agent
    for flags in ((), ("--breakdown",), *((("--breakdown-by", "effort"),) if named else ())):
        proc = report(*hostile, view, "--csv", *flags)
        assert proc.returncode == 0, proc.stderr
        for raw in RAW:
            assert raw not in proc.stdout
        cells = [c for row in csv.reader(io.StringIO(proc.stdout)) for c in row]
        starts = [c for c in cells if c[:1] in shown.FORMULA_START]
        assert starts == [], starts
        if not named:
            assert any(c.startswith("'=cmd|") for c in cells)
            assert any(c.startswith("'-1+2") for c in cells)
            assert any(c.startswith("'@SUM") for c in cells) == (view == "project")
        elif flags[:1] == ("--breakdown-by",):  # the effort CMD, a cell of its own
            assert any(c.startswith("'=cmd|") for c in cells)
        if view == "plugin":
            assert any(c.startswith("'=HYPERLINK") for c in cells)


def test_a_filter_error_names_the_ledgers_models_visibly(hostile: tuple[Path, Path]) -> None:
    """``--model`` matching nothing lists the known models on stderr with escapes, exit 2."""
    proc = report(*hostile, "daily", "--model", "nothing-like-it")
    assert proc.returncode == 2
    assert "matches nothing" in proc.stderr and "\\x1b" in proc.stderr
    for raw in RAW:
        assert raw not in proc.stderr


def test_visible_escapes_controls_and_leaves_text_alone() -> None:
    r"""Controls, C1, bidi overrides and lone surrogates become escapes; text and ``\`` stay."""
    assert shown.visible("opus-4-6 ünïcode 日本 \\x") == "opus-4-6 ünïcode 日本 \\x"
    assert shown.visible("a\x1b[2J\x07\x9b\u202e\ud800\t") == \
        "a\\x1b[2J\\x07\\x9b\\u202e\\ud800\\x09"


def test_csv_cell_neutralises_formulas_but_not_numbers() -> None:
    """Formula starters get a ``'``; negative numbers stay numbers; other strings as they are."""
    assert shown.csv_cell("=1+1") == "'=1+1"
    assert shown.csv_cell("\uff20A1") == "'\uff20A1"
    assert shown.csv_cell("\tx") == "\\x09x"  # the tab is shown as an escape, so never a start
    assert shown.csv_cell(-0.5) == -0.5 and shown.csv_cell(-3) == -3
    assert shown.csv_cell(None) is None and shown.csv_cell("") == ""
    assert shown.csv_cell("2026-10-01") == "2026-10-01"


def test_console_log_lines_show_a_hostile_path_visibly() -> None:
    """A console log line naming a transcript path with an escape sequence shows it escaped."""
    out = io.StringIO()
    make_logger("info", "console", out).warning("transcript_unreadable",
                                                path="/p/a\x1b[2J\x1b]0;t\x07b", detail="x")
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()
    assert "path=/p/a\\x1b[2J\\x1b]0;t\\x07b" in out.getvalue()


@pytest.mark.parametrize("view", ("summary", "daily", "project", "session"))
def test_a_100k_model_id_or_folder_is_one_cut_cell_not_pages(tmp_path: Path, view: str) -> None:
    """A 100,000-character model id and project folder: cut with ``…``; every figure whole."""
    where = tmp_path / "projects" / "-home-u-p"
    where.mkdir(parents=True)
    long = "y" * 100_000
    (where / "s1.jsonl").write_bytes(jsonl(
        *(assistant(f"m{i}", f"r{i}", model="claude-" + long, cwd="/home/u/" + long)
          for i in range(3)),
        assistant("m9", "r9")))
    extra = ("--breakdown",) if view != "summary" else ()
    proc = report(tmp_path / "projects", tmp_path / "state", view, *extra)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) < 20_000 and "y…" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if "y…" in line and " 3 " in line]
    assert rows, proc.stdout  # the long name's row, its request count whole beside it


def test_the_page_escapes_names_and_its_json_keeps_them_exactly(tmp_path: Path) -> None:
    """HTML: names escaped, controls visible, long names cut; JSON: the exact string, escaped."""
    where = tmp_path / "projects" / "-home-u-p"
    where.mkdir(parents=True)
    hostile = "<script>alert(1)</script>\x1b[2J" + BOLD
    ts = datetime.fromtimestamp(time.time() - 3600, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    (where / "s1.jsonl").write_bytes(jsonl(
        assistant("m1", "r1", ts=ts, model=hostile, cwd="/home/u/" + hostile),
        assistant("m2", "r2", ts=ts, model="claude-" + "z" * 5000)))
    assert report(tmp_path / "projects", tmp_path / "state", "--json").returncode == 0
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite3")
    try:
        source = page_figures.LedgerSource(ledger, projects_dirs([tmp_path / "projects"]),
                                           ClassPrices.of(RateTable.load()), UTC_ZONE, budgets={})
        handlers = page.routes(source, "t")
        html = b"".join(handlers["/"]({}, lambda *a: None)).decode()
        body = b"".join(handlers["/api/summary.json"]({}, lambda *a: None))
    finally:
        ledger.close()
    assert "<script" not in html and "\x1b" not in html and "z" * 100 not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[2J[/bold]" in html
    assert b"\x1b" not in body and hostile in json.loads(body)["by_model"]
