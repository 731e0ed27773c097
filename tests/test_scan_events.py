"""Scanner passes in-process: event passes over named paths, rewrites, the injected clock."""

from __future__ import annotations

from pathlib import Path

from exporter.ingest.discover import projects_dirs
from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger
from tests.support.logs import Log
from tests.support.records import assistant, jsonl


def _tree(root: Path, dirs: int, files: int) -> list[Path]:
    """``dirs`` session directories of ``files`` one-request transcripts each."""
    out = []
    for d in range(dirs):
        where = root / "projects" / f"-p{d % 7}" / f"s{d}"
        where.mkdir(parents=True)
        for f in range(files):
            path = where / f"agent-{f}.jsonl"
            path.write_bytes(jsonl(assistant(f"m{d}_{f}", f"r{d}_{f}")))
            out.append(path)
    return out


def test_an_event_pass_stats_only_the_paths_it_is_given(tmp_path: Path) -> None:
    """2,000 files: a pass over one changed file checks one file; totals stay exact."""
    files = _tree(tmp_path, 200, 10)
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite3")
    scanner = Scanner(ledger, projects_dirs([tmp_path]), workers=1, log=Log())
    first = scanner.scan()
    assert (first.checked, first.new_requests, first.files) == (2000, 2000, 2000)
    with files[1234].open("ab") as fh:
        fh.write(jsonl(assistant("new1", "rn1")))
    event = scanner.scan(paths=[str(files[1234])])
    assert (event.checked, event.new_requests, event.files) == (1, 1, 2000)
    new_dir = tmp_path / "projects" / "-p0" / "fresh" / "subagents"
    new_dir.mkdir(parents=True)
    (new_dir / "agent-z.jsonl").write_bytes(jsonl(assistant("new2", "rn2")))
    (tmp_path / "projects" / ".." / "history.jsonl").write_bytes(b"{}\n")
    files[7].unlink()
    event = scanner.scan(paths=[str(new_dir.parent), str(tmp_path / "history.jsonl"),
                                str(files[7])])
    assert (event.checked, event.new_requests, event.files) == (1, 1, 2001)
    full = scanner.scan()
    assert (full.checked, full.new_requests, full.bytes_read) == (2000, 0, 0)
    assert ledger.count() == 2002
    assert ledger.counters("lines") == {"usage": 2002}  # each line read exactly once
    ledger.close()


def test_a_rewrite_in_place_is_reread_logged_and_counted_with_exact_totals(
    tmp_path: Path,
) -> None:
    """Lines inserted mid-file and tokens raised in place: every request and token counted."""
    projects = tmp_path / "projects" / "-p"
    projects.mkdir(parents=True)
    f = projects / "s.jsonl"
    recs = [assistant(f"m{i}", f"r{i}", usage={"input_tokens": 1, "output_tokens": 10})
            for i in range(100)]
    f.write_bytes(jsonl(*recs))
    log = Log()
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite3")
    scanner = Scanner(ledger, [tmp_path / "projects"], workers=1, log=log)
    scanner.scan()
    inserted = [assistant(f"x{i}", f"rx{i}") for i in range(20)]
    raised = [assistant(r["message"]["id"], r["requestId"],
                        usage={"input_tokens": 1, "output_tokens": 1000}) for r in recs]
    with f.open("r+b") as fh:  # same inode, same first 4 KiB (the first records), larger
        fh.write(jsonl(*recs[:30], *inserted, *raised[30:]))
    result = scanner.scan()
    got = {r.key: r for r in ledger.requests()}
    assert len(got) == 120
    assert sum(r.output for r in got.values()) == 30 * 10 + 70 * 1000 + 20 * 10
    assert result.rereads == 1
    assert [kw for lvl, e, kw in log.events if e == "transcript_reread"] == [
        {"path": str(f), "reason": "rewritten"}]
    ledger.close()


def test_the_clock_the_scanner_is_given_judges_future_timestamps(tmp_path: Path) -> None:
    """More than a day ahead of the injected clock, a request in time after: bad_timestamp."""
    projects = tmp_path / "projects" / "-p"
    projects.mkdir(parents=True)
    (projects / "s.jsonl").write_bytes(jsonl(
        assistant("now", "r1", ts="2030-01-01T00:00:00Z"),
        assistant("later", "r3", ts="2030-01-02T00:00:01Z"),
        assistant("far", "r4", ts="9999-12-31T23:59:59Z"),
        assistant("soon", "r2", ts="2030-01-01T23:00:00Z"),
    ))
    ledger = Ledger(tmp_path / "state" / "ledger.sqlite3")
    clock = 1893456000.0  # 2030-01-01T00:00:00Z
    Scanner(ledger, [tmp_path / "projects"], workers=1, log=Log(), clock=lambda: clock).scan()
    assert sorted(r.key.split("\x1f")[0] for r in ledger.requests()) == ["now", "soon"]
    assert ledger.counters("rejected") == {"bad_timestamp": 2}
    ledger.close()
