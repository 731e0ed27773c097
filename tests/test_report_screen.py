"""`report` as a person reads it: plain numbers, notes that say why, lines that end whole."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from exporter.cli.serve_command import page_url
from exporter.projections import views
from exporter.projections.class_prices import ClassPrices
from exporter.projections.figures import summary
from exporter.projections.pricing import RateTable
from exporter.report import glance
from exporter.report.summary import render_prices, render_text
from exporter.report.tables import render_limits, render_view
from tests.support import report_ledgers
from tests.support.net import LOOPBACK, free_port
from tests.support.process import Serve, stop
from tests.support.records import REPORT_KEYS, request
from tests.support.report_limits import limits_sample
from tests.support.wait import poll

T0 = 1_800_000_000.0
# Highlighting paints numbers, dates and words like True in these styles' colours.
_HIGHLIGHTED = re.compile(r"\x1b\[[0-9;]*(3[1-6]|9[1-6])m")


@pytest.fixture(scope="module")
def prices() -> ClassPrices:
    """The shipped prices."""
    return ClassPrices.of(RateTable.load())


def colour_console(width: int = 100) -> tuple[Console, io.StringIO]:
    """A console that draws colour (as on a terminal), writing into a buffer."""
    buffer = io.StringIO()
    return Console(file=buffer, width=width, force_terminal=True, color_system="standard"), buffer


def written_once(tmp: Path) -> Any:
    """A ledger holding one request that wrote the cache and never read it back."""
    return report_ledgers.real([request("w", T0, input=10, output=50, cache_write_5m=40_000)], tmp)


def test_numbers_are_not_coloured_by_highlighting(prices: ClassPrices, tmp_path: Path) -> None:
    """The default report, the full one, a view and limits print numbers in the text's colour."""
    reqs = [request("a", T0, output=500, cache_read=90_000), request("b", T0 + 60, output=5)]
    with report_ledgers.real(reqs, tmp_path) as led:
        sel = report_ledgers.select(led)
        whole = summary(sel, prices, kv_bytes_per_token={"mla": 70_272},
                        upload_bytes_per_token=4.0, lines={}, rejected={})
        shown = []
        console, buffer = colour_console()
        glance.render(whole, glance.glance(sel, prices, T0 + 120), console)
        render_text(whole, console)
        for name in ("daily", "blocks"):
            render_view(views.build(name, sel, prices, views.Options(now=T0 + 120)), console)
        shown.append(buffer.getvalue())
    console, buffer = colour_console()
    render_limits(limits_sample(), console)
    shown.append(buffer.getvalue())
    for out in shown:
        assert "\x1b[" in out  # colour is on: headers are bold
        assert not _HIGHLIGHTED.search(out), _HIGHLIGHTED.findall(out)


def test_a_negative_saving_says_why(prices: ClassPrices, tmp_path: Path) -> None:
    """Where the cache cost more than it saved, the figure says so instead of a bare minus."""
    with written_once(tmp_path) as led:
        sel = report_ledgers.select(led)
        whole = summary(sel, prices, kv_bytes_per_token={}, upload_bytes_per_token=4.0,
                        lines={}, rejected={})
        view = views.build("daily", sel, prices, views.Options(now=T0))
    assert whole.totals.saved_usd < 0
    out = io.StringIO()
    render_text(whole, Console(file=out, width=120))
    row = next(line for line in out.getvalue().splitlines() if "prompt cache" in line)
    assert "written, not yet read" in row
    assert any(line.startswith("cache saved: ") for line in out.getvalue().splitlines())
    out = io.StringIO()
    render_view(view, Console(file=out, width=200))
    lines = out.getvalue().splitlines()
    assert any("-$0." in line for line in lines)
    assert any(line.startswith("cache saved: ") and "negative" in line for line in lines)


def test_the_open_block_note_breaks_between_phrases(prices: ClassPrices) -> None:
    """At 80 columns each line of the open block's note is whole: nothing wraps mid-sentence."""
    reqs = [request("a", T0, output=1000, cache_read=50_000), request("b", T0 + 1800, output=900)]
    sel = report_ledgers.select(report_ledgers.slotted(reqs))
    view = views.build("blocks", sel, prices, views.Options(now=T0 + 3600))
    out = io.StringIO()
    render_view(view, Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    note = lines[next(i for i, line in enumerate(lines) if line.startswith("open block")):]
    assert [line.split(":")[0].strip() for line in note[:3]] == [
        "open block", "burn rate", "projected at its end"]
    assert all(len(line) <= 80 for line in lines)


def test_limits_note_breaks_between_sentences() -> None:
    """The limits footnote is written sentence by sentence, each line under 80 columns."""
    out = io.StringIO()
    render_limits(limits_sample(), Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    tail = lines[-3:]
    assert tail[0].startswith("Cost: ") and tail[0].endswith(".")
    assert tail[2].endswith("(docs/plan-limits.md).")
    assert all(len(line) <= 80 for line in lines)


# ---- the command, as a separate process ---------------------------------------------------
def cli(*args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """The CLI as a separate process writing into a pipe ``columns`` wide."""
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "exporter", *args], capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def test_report_is_one_screen_and_full_is_one_flag_away(real_tree: Path, tmp_path: Path) -> None:
    """Plain `report` fits a screen; `--full` adds the analysis; `--json` keeps every key."""
    base = ("report", "--data-dir", str(real_tree), "--state-dir", str(tmp_path))
    short, full, doc = cli(*base), cli(*base, "--full"), cli(*base, "--json")
    assert short.returncode == full.returncode == doc.returncode == 0, short.stderr
    assert len(short.stdout.splitlines()) <= 30
    assert "$28.51" in short.stdout and "KV cache" not in short.stdout
    assert "KV cache per request" in full.stdout and "Cache expiry" in full.stdout
    assert set(json.loads(doc.stdout)) >= REPORT_KEYS
    assert "--full" in cli("report", "--help").stdout
    wrong = cli(*base[:1], "daily", *base[1:], "--full")
    assert wrong.returncode == 2 and "--full is the summary's" in wrong.stderr


def test_serve_names_the_page_it_serves(tmp_path: Path) -> None:
    """At start `serve` logs the page's URL (INFO); off a terminal the log stays all JSON."""
    (tmp_path / "data").mkdir()
    server = Serve(tmp_path / "data", tmp_path / "state")
    try:
        events = poll(lambda: [e for e in server.events() if e.get("event") == "page"], 30,
                      "the page line")
        assert events[0]["url"] == server.url + "/" and events[0]["level"] == "info"
    finally:
        assert server.stop() == 0
    assert all(line.startswith("{") for line in server.log().splitlines())


def test_serve_on_a_terminal_prints_the_page_in_a_plain_line(tmp_path: Path) -> None:
    """Started in a terminal, `serve` prints one plain line with the page's address."""
    (tmp_path / "data").mkdir()
    port = free_port()
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--data-dir", str(tmp_path / "data"),
         "--state-dir", str(tmp_path / "state"), "--listen", f"{LOOPBACK}:{port}"],
        stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary, start_new_session=True)
    os.close(secondary)
    seen = bytearray()
    want = f"claude-code-exporter: open http://{LOOPBACK}:{port}/ to see your usage".encode()

    def said() -> bool:
        ready, _, _ = select.select([primary], [], [], 0.2)
        if ready:
            seen.extend(os.read(primary, 65536))
        return want in seen

    try:
        poll(said, 30, "the plain page line")
    finally:
        assert stop(proc, group=True) == 0, seen.decode(errors="replace")
        os.close(primary)


@pytest.mark.parametrize(("host", "tls", "url"), [
    ("127.0.0.1", False, "http://127.0.0.1:9477/"), ("0.0.0.0", False, "http://127.0.0.1:9477/"),
    ("::", True, "https://[::1]:9477/"), ("::1", False, "http://[::1]:9477/"),
    ("exporter.example", True, "https://exporter.example:9477/"),
])
def test_page_url_is_one_a_person_can_open(host: str, tls: bool, url: str) -> None:
    """A wildcard bind is named by its loopback address; IPv6 literals go in brackets."""
    assert page_url(host, 9477, tls=tls) == url


def test_the_open_block_is_the_one_holding_now(prices: ClassPrices) -> None:
    """A request dated ahead of the clock neither hides the open block nor reads as ended."""
    reqs = [request("a", T0, output=1000), request("b", T0 + 1800, output=10),
            request("ahead", T0 + 20 * 3600, output=5)]
    sel = report_ledgers.select(report_ledgers.slotted(reqs))
    seen = glance.glance(sel, prices, T0 + 3600)
    assert seen.block is not None and seen.block.start == T0 and seen.last_block_end is None
    later = glance.glance(sel, prices, T0 + 6 * 3600)
    assert later.block is None and later.last_block_end == T0 + 5 * 3600


def test_the_default_report_names_unpriced_models_in_two_lines(prices: ClassPrices,
                                                               tmp_path: Path) -> None:
    """By default the most used unpriced model gets a line, the rest one; --full names each."""
    reqs = [request("a", T0, model="claude-nova-9", output=50),
            request("b", T0 + 1, model="claude-nova-10", output=60),
            request("c", T0 + 2, model="claude-nova-11", output=70)]
    with report_ledgers.real(reqs, tmp_path) as led:
        whole = summary(report_ledgers.select(led), prices, kv_bytes_per_token={},
                        upload_bytes_per_token=4.0, lines={}, rejected={})
    out = io.StringIO()
    render_prices(whole, prices.pricing, Console(file=out, width=80), brief=True)
    said = [line for line in out.getvalue().splitlines() if "unpriced" in line]
    assert len(said) == 2 and "'claude-nova-11'" in said[0]
    assert said[1] == ("  unpriced: 110 tokens of 2 more models (report --full says how to "
                       "price each)")
    out = io.StringIO()
    render_prices(whole, prices.pricing, Console(file=out, width=80))
    assert sum("unpriced:" in line for line in out.getvalue().splitlines()) == 3
