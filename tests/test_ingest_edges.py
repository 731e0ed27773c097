"""Ingest edges, round 3: lone surrogates, a clock behind, symlinked folders, same-size rewrites."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry

from exporter.ingest.parse import parse_lines
from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.pricing import RateTable
from tests.support.logs import Log
from tests.support.records import assistant, jsonl
from tests.support.trees import linked_tree


def _line(rec: dict[str, object], old: str, new: str) -> bytes:
    """One compact JSON line of ``rec`` with the text ``old`` replaced by raw ``new`` bytes."""
    return json.dumps(rec, separators=(",", ":")).replace(old, new).encode() + b"\n"


def test_lone_surrogate_escapes_are_mended_counted_and_stored(tmp_path: Path) -> None:
    """A JavaScript string cut mid-emoji keeps its request; the ledger stores U+FFFD."""
    projects = tmp_path / "projects" / "-p"
    projects.mkdir(parents=True)
    cut_text = _line(assistant("a", "r1"), '"text":"hi"', '"text":"ab\\ud83d"')
    cut_cwd = _line(assistant("b", "r2", cwd="/w/CWD"), "CWD", "x\\udc00y")
    pair = _line(assistant("c", "r3"), '"text":"hi"', '"text":"\\ud83d\\ude00 and \\\\ud83d"')
    (projects / "s.jsonl").write_bytes(cut_text + cut_cwd + pair)
    parsed = parse_lines(cut_text + cut_cwd + pair)
    assert (len(parsed.requests), dict(parsed.counts.rejected)) == (3, {})
    assert dict(parsed.counts.mended) == {"lone_surrogate": 2}
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite3")
    log = Log()
    Scanner(ledger, [tmp_path / "projects"], workers=1, log=log).scan()
    assert ("info", "transcript_lines_mended", {"lines": 2}) in log.events
    got = {r.key.split("\x1f")[0]: r for r in ledger.requests()}
    assert sorted(got) == ["a", "b", "c"]
    assert got["b"].project == "/w/x\ufffdy"
    assert ledger.counters("mended") == {"lone_surrogate": 2}
    assert ledger.counters("lines") == {"usage": 3}
    ledger.close()


def test_a_same_size_rewrite_anywhere_is_read_again_and_a_touch_is_not(tmp_path: Path) -> None:
    """2,960 of 3,000 requests rewritten in place, same length: all counted; a touch reads none."""
    projects = tmp_path / "projects" / "-p"
    projects.mkdir(parents=True)
    f = projects / "s.jsonl"
    f.write_bytes(jsonl(*(assistant(f"a{i:05}", f"r{i:05}") for i in range(3000))))
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite3")
    scanner = Scanner(ledger, [tmp_path / "projects"], workers=1, log=Log())
    scanner.scan()
    size = f.stat().st_size
    with f.open("r+b") as fh:  # same inode, same length: only the middle is new
        fh.write(jsonl(*(assistant(f"a{i:05}" if i < 20 or i > 2979 else f"b{i:05}", f"r{i:05}")
                         for i in range(3000))))
    assert f.stat().st_size == size
    result = scanner.scan()
    assert (result.rereads, ledger.count()) == (1, 3000 + 2960)
    f.touch()  # the same bytes, a new mtime: checked, not read
    assert (scanner.scan().bytes_read, ledger.counters("lines")["usage"]) == (0, 5960)
    assert ledger.checkpoints()[str(f)].mtime_ns == f.stat().st_mtime_ns  # checked once
    ledger.close()


def test_symlinked_folders_and_files_are_read_each_real_file_once(tmp_path: Path) -> None:
    """Linked project folders and files are read, each file once, also by event passes."""
    projects, p1 = linked_tree(tmp_path)
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite3")
    scanner = Scanner(ledger, [projects], workers=1, log=Log())
    assert sorted(Path(p).relative_to(projects).as_posix() for p in scanner.files()) == [
        "p1/s1.jsonl", "p1/s1/subagents/agent-x.jsonl", "p2/lone.jsonl", "p2/s2.jsonl"]
    scanner.scan()
    assert (ledger.count(), ledger.counters("lines")) == (5, {"usage": 5})
    with (p1 / "s1.jsonl").open("ab") as fh:
        fh.write(jsonl(assistant("a6", "r6")))
    with (projects / "p2" / "s2.jsonl").open("ab") as fh:
        fh.write(jsonl(assistant("a7", "r7")))
    # Watches follow links: events name files by the link they were reached through.
    event = scanner.scan(paths=[str(projects / "p1" / "s1.jsonl"),
                                str(projects / "alias" / "s2.jsonl")])
    assert (event.new_requests, scanner.scan().bytes_read) == (2, 0)
    assert (ledger.count(), ledger.counters("lines")) == (7, {"usage": 7})
    ledger.close()


def test_lines_ahead_of_a_clock_behind_are_read_once_it_catches_up(tmp_path: Path) -> None:
    """A clock 2 days behind: 10 appended requests wait, and all count once it is right."""
    projects = tmp_path / "projects" / "-p"
    projects.mkdir(parents=True)
    f = projects / "s.jsonl"
    f.write_bytes(jsonl(assistant("old", "r0", ts="2030-01-01T00:00:00Z")))
    real = 1893456000.0 + 3 * 86_400  # 2030-01-04T00:00:00Z
    clock = [real - 2 * 86_400]
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite3")
    log = Log()
    scanner = Scanner(ledger, [tmp_path / "projects"], workers=1, log=log, clock=lambda: clock[0])
    scanner.scan()
    with f.open("ab") as fh:  # written by a host whose clock is right
        fh.write(jsonl(*(assistant(f"n{i}", f"rn{i}", ts=f"2030-01-04T00:00:{i:02}Z")
                         for i in range(10))))
    first = scanner.scan()
    assert (ledger.count(), ledger.counters("rejected"), first.ahead) == (1, {}, 10)
    assert scanner.scan().ahead == 10  # read again on every pass: the file need not change
    assert ("warning", "transcript_lines_ahead_of_clock", {"path": str(f), "lines": 10}) \
        in log.events
    clock[0] = real + 60  # the clock is fixed (a restart reads from the same checkpoint)
    result = Scanner(ledger, [tmp_path / "projects"], workers=1, log=log,
                     clock=lambda: clock[0]).scan()
    assert (result.ahead, result.new_requests, ledger.count()) == (0, 10, 11)
    assert ledger.counters("lines") == {"usage": 11} and ledger.counters("rejected") == {}
    ledger.close()


def test_an_absurd_or_contradicted_future_line_is_rejected_not_waited_for(
    tmp_path: Path,
) -> None:
    """Year 9999 alone, or 2 days ahead with a request in time after it: bad_timestamp now."""
    projects = tmp_path / "projects" / "-p"
    projects.mkdir(parents=True)
    now = 1893456000.0  # 2030-01-01T00:00:00Z
    (projects / "a.jsonl").write_bytes(jsonl(
        assistant("in", "r1", ts="2030-01-01T00:00:00Z"),
        assistant("ahead", "r2", ts="2030-01-03T00:00:00Z"),
        assistant("in2", "r3", ts="2030-01-01T00:00:01Z")))
    (projects / "b.jsonl").write_bytes(jsonl(
        assistant("in3", "r4", ts="2030-01-01T00:00:00Z"),
        assistant("far", "r5", ts="9999-12-31T23:59:59Z")))
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite3")
    result = Scanner(ledger, [tmp_path / "projects"], workers=1, log=Log(),
                     clock=lambda: now).scan()
    assert (result.ahead, ledger.count(), ledger.counters("rejected")) == (
        0, 3, {"bad_timestamp": 2})
    ledger.close()


def test_mended_lines_are_a_metric_at_start_and_live(tmp_path: Path) -> None:
    """/metrics counts mended lines: 0 from the start, those in the ledger, then a live batch's."""
    projects = tmp_path / "projects" / "-p"
    projects.mkdir(parents=True)
    f = projects / "s.jsonl"
    f.write_bytes(_line(assistant("a", "r1"), '"text":"hi"', '"text":"ab\\ud83d"'))
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite3")
    name = "claude_code_exporter_mended_lines_total"
    fresh = CollectorRegistry()
    Projection(RateTable.load(), MetricsOptions(), fresh).load(ledger)
    assert fresh.get_sample_value(name, {"kind": "lone_surrogate"}) == 0
    Scanner(ledger, [tmp_path / "projects"], workers=1, log=Log()).scan()
    registry = CollectorRegistry()
    projection = Projection(RateTable.load(), MetricsOptions(), registry)
    projection.load(ledger)
    assert registry.get_sample_value(name, {"kind": "lone_surrogate"}) == 1
    with f.open("ab") as out:
        out.write(_line(assistant("b", "r2"), '"text":"hi"', '"text":"\\udc00"'))
    Scanner(ledger, [tmp_path / "projects"], workers=1, log=Log(),
            on_applied=projection.apply).scan()
    assert registry.get_sample_value(name, {"kind": "lone_surrogate"}) == 2
    ledger.close()
