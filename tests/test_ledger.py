"""The ledger: idempotent merges, atomic batches, refusing foreign files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.ingest.parse import parse_lines
from exporter.ledger.opening import SCHEMA_VERSION
from exporter.ledger.store import Ledger, LedgerError
from exporter.records import Checkpoint
from exporter.sqlite import sqlite3
from tests.support.records import assistant, jsonl
from tests.support.scan import counting_ledger


def _cp(path: str = "/x.jsonl", offset: int = 10) -> Checkpoint:
    return Checkpoint(path, 1, 2, offset, offset, 4, "ab", 5)


def test_applying_the_same_lines_twice_changes_nothing(tmp_path: Path) -> None:
    """Merging is idempotent: the second application only counts duplicates."""
    ledger = Ledger(tmp_path / "l.db")
    data = jsonl(assistant("a"), assistant("b"))
    first = ledger.apply(parse_lines(data), [_cp()], len(data))
    second = ledger.apply(parse_lines(data), [_cp()], len(data))
    assert len(first.new) == 2 and not second.new and not second.upgraded
    assert ledger.count() == 2
    assert ledger.counters("lines") == {"usage": 2, "duplicate": 2}
    assert ledger.counters("bytes_read") == {"": 2 * len(data)}


def test_upgrade_reports_old_and_new_values(tmp_path: Path) -> None:
    """A later line with a larger output upgrades the row and says from what."""
    ledger = Ledger(tmp_path / "l.db")
    ledger.apply(parse_lines(jsonl(assistant(usage={"output_tokens": 3}))), [], 0)
    applied = ledger.apply(parse_lines(jsonl(assistant(usage={"output_tokens": 300}))), [], 0)
    ((old, new),) = applied.upgraded
    assert (old.output, new.output) == (3, 300)
    assert ledger.requests()[0].output == 300


def test_rows_and_checkpoints_survive_reopen(tmp_path: Path) -> None:
    """What was committed is there after closing and opening again."""
    ledger = Ledger(tmp_path / "l.db")
    ledger.apply(parse_lines(jsonl(assistant("a"))), [_cp()], 5)
    ledger.close()
    again = Ledger(tmp_path / "l.db")
    assert again.count() == 1 and again.checkpoints()["/x.jsonl"] == _cp()


def test_failed_batch_leaves_nothing(tmp_path: Path) -> None:
    """A batch that fails midway is rolled back whole (rows, checkpoints, counters)."""
    ledger = Ledger(tmp_path / "l.db")
    bad = Checkpoint("/y", 1, 2, 3, 4, 5, "f", 6)
    with pytest.raises(LedgerError):
        # A checkpoint with a value SQLite cannot bind aborts the transaction late.
        ledger.apply(parse_lines(jsonl(assistant("a"))), [bad, _cp(offset=object())], 5)  # type: ignore[arg-type]
    assert ledger.count() == 0 and ledger.checkpoints() == {} and ledger.counters("lines") == {}


def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    """An SQLite database of another program is never modified."""
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    before = path.read_bytes()
    with pytest.raises(LedgerError, match="another program"):
        Ledger(path)
    assert path.read_bytes() == before


def test_garbage_file_is_refused(tmp_path: Path) -> None:
    """A file that is not SQLite gives a clear error, not a reset."""
    path = tmp_path / "l.db"
    path.write_bytes(b"this is not a database, just text" * 200)
    with pytest.raises(LedgerError, match="cannot use ledger"):
        Ledger(path)
    assert path.read_bytes().startswith(b"this is not")


def test_since_until_window(tmp_path: Path) -> None:
    """requests() keeps since <= ts < until."""
    ledger = Ledger(tmp_path / "l.db")
    ledger.apply(
        parse_lines(
            jsonl(
                assistant("a", ts="2026-01-01T00:00:00Z"), assistant("b", ts="2026-01-02T00:00:00Z")
            )
        ),
        [],
        0,
    )
    t2 = ledger.requests()[1].ts
    assert [r.key for r in ledger.requests(since=t2)] == ["b\x1freq_1"]
    assert [r.key for r in ledger.requests(until=t2)] == ["a\x1freq_1"]


def test_new_ledger_is_private(tmp_path: Path) -> None:
    """A new state directory is 0700 and the ledger file 0600, whatever the umask."""
    import os

    old = os.umask(0o022)
    try:
        Ledger(tmp_path / "state" / "ledger.sqlite3").close()
    finally:
        os.umask(old)
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "state" / "ledger.sqlite3").stat().st_mode & 0o777 == 0o600


# ---- v2: provenance, scopes, gaps by conversation, migration ---------------------------
def _write(path: Path, *records: dict[str, object]) -> None:
    """Append transcript records to ``path`` (creating its directory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as fh:
        fh.write(jsonl(*records))


def _scan(ledger: Ledger, *roots: Path) -> None:
    """One ingestion pass over ``roots`` into ``ledger``."""
    from exporter.ingest.scan import Scanner

    Scanner(ledger, list(roots), workers=1).scan()


def _main(msg: str, minute: int, session: str) -> dict[str, object]:
    """A main-chain record at 12:MM of one day."""
    return assistant(msg, f"r{msg}", ts=f"2026-10-01T12:{minute:02d}:00.000Z", session=session)


def test_scope_counts_only_requests_seen_under_its_roots(tmp_path: Path) -> None:
    """Two roots in one ledger: each scope sees its own requests, also after deletion."""
    ledger = Ledger(tmp_path / "l.db")
    a, b = tmp_path / "A" / "projects", tmp_path / "B" / "projects"
    _write(a / "p" / "s1.jsonl", _main("a1", 1, "s1"), _main("a2", 2, "s1"))
    _write(b / "p" / "s2.jsonl", _main("b1", 3, "s2"))
    _scan(ledger, a)
    _scan(ledger, b)
    for roots, want in (([a], 2), ([b], 1), ([a, b], 3), ([tmp_path / "A"], 2), (None, 3)):
        view = ledger.scope(roots)
        assert ledger.read(f"SELECT count(*) FROM {view}") == [(want,)], roots
    import shutil

    shutil.rmtree(a)
    _scan(ledger, a)
    assert ledger.read(f"SELECT count(*) FROM {ledger.scope([a])}") == [(2,)]
    names = [r[1] for r in ledger.read(f"PRAGMA table_info({ledger.scope([b])})")]
    assert names == [r[1] for r in ledger.read("PRAGMA table_info(requests)")]


def test_read_refuses_writes(tmp_path: Path) -> None:
    """Ledger.read runs queries only: a write statement is refused and changes nothing."""
    ledger = Ledger(tmp_path / "l.db")
    ledger.apply(parse_lines(jsonl(assistant("a"))), [], 0)
    with pytest.raises(LedgerError, match=r"readonly|read-only|query_only"):
        ledger.read("DELETE FROM requests")
    assert ledger.count() == 1


def _resumed_tree(root: Path, first: str, second: str) -> None:
    """An original session and a resumed copy that replays its first two requests."""
    original = [_main("m1", 0, first), _main("m2", 2, first), _main("m3", 40, first)]
    _write(root / "p" / f"{first}.jsonl", *original)
    replay = [{**rec, "sessionId": second} for rec in original[:2]]
    _write(root / "p" / f"{second}.jsonl", *replay, _main("n1", 30, second),
           _main("n2", 31, second))


@pytest.mark.parametrize("ids", [("aaaa", "zzzz"), ("zzzz", "aaaa")])
@pytest.mark.parametrize("order", ["together", "copy_first", "original_first"])
def test_gaps_follow_the_conversation_in_any_order(tmp_path: Path, ids: tuple[str, str],
                                                   order: str) -> None:
    """A resumed session's first new request is timed from the last replayed one."""
    staging, tree = tmp_path / "staging", tmp_path / "projects"
    _resumed_tree(staging, *ids)
    ledger = Ledger(tmp_path / "l.db")
    copy = staging / "p" / f"{ids[1]}.jsonl"
    original = staging / "p" / f"{ids[0]}.jsonl"
    groups = {"together": [[copy, original]], "copy_first": [[copy], [original]],
              "original_first": [[original], [copy]]}[order]
    (tree / "p").mkdir(parents=True)
    for group in groups:  # files arrive in this order, a pass after each arrival
        for f in group:
            f.rename(tree / "p" / f.name)
        _scan(ledger, tree)
    gaps = dict(ledger.read("SELECT key, gap FROM requests"))
    assert {k.split("\x1f")[0]: v for k, v in gaps.items()} == {
        "m1": None, "m2": 120.0, "m3": 2280.0, "n1": 1680.0, "n2": 60.0}


def test_web_searches_are_kept(tmp_path: Path) -> None:
    """usage.server_tool_use.web_search_requests lands in the ledger, max-merged."""
    ledger = Ledger(tmp_path / "l.db")
    usage = {"input_tokens": 1, "output_tokens": 2, "server_tool_use": {"web_search_requests": 3}}
    ledger.apply(parse_lines(jsonl(assistant("w", usage=usage))), [], 0)
    ledger.apply(parse_lines(jsonl(assistant("w", usage={**usage, "server_tool_use": None}))),
                 [], 0)
    assert ledger.read("SELECT web_search FROM requests") == [(3,)]


V1_FIXTURE = Path(__file__).parent / "golden" / "ledger_v1.sqlite3"


def test_v1_ledger_is_migrated_in_place_losing_nothing(tmp_path: Path) -> None:
    """A ledger written by the v1 build opens as v2 with every total, counter and gap."""
    import json
    import shutil

    path = tmp_path / "ledger.sqlite3"
    shutil.copy(V1_FIXTURE, path)
    want = json.loads((V1_FIXTURE.parent / "ledger_v1_report.json").read_text())
    ledger = Ledger(path)
    t = want["totals"]
    assert ledger.read(
        "SELECT count(*), sum(input), sum(output), sum(cache_read), sum(cache_write_5m), "
        "sum(cache_write_1h), count(DISTINCT session) FROM requests"
    ) == [(t["requests"], t["input_tokens"], t["output_tokens"], t["cache_read_tokens"],
           t["cache_write_5m_tokens"], t["cache_write_1h_tokens"], want["sessions"])]
    assert ledger.counters("lines") == want["lines"]
    assert ledger.counters("rejected") == want["rejected_by_reason"]
    gaps = [g for (g,) in ledger.read("SELECT gap FROM requests WHERE source = 0")]
    from exporter.projections.counting import gap_bucket

    buckets = {b: sum(gap_bucket(g) == b for g in gaps) for b in want["requests_by_gap"]}
    assert buckets == want["requests_by_gap"]
    assert ledger.read(f"SELECT count(*) FROM {ledger.scope([tmp_path / 'x'])}") == [
        (t["requests"],)]  # provenance unknown: in every scope
    assert len(ledger.checkpoints()) > 0
    ledger.close()
    again = Ledger(path)  # opening a v2 ledger again migrates nothing
    assert again.read("PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert again.count() == t["requests"]


def test_a_migrated_ledger_exposes_the_totals_of_a_fresh_ingest(tmp_path: Path) -> None:
    """A serve on a migrated v1 ledger shows every counter a fresh v2 ingest of its tree does."""
    import shutil

    from prometheus_client import CollectorRegistry

    from exporter.ingest.scan import Scanner
    from exporter.projections.backfill import exposed
    from exporter.projections.metrics import MetricsOptions, Projection
    from exporter.projections.pricing import RateTable
    from exporter.synth import GenOptions, generate

    rules = MetricsOptions().counting(RateTable.load())
    shutil.copy(V1_FIXTURE, tmp_path / "v1.db")
    migrated = Ledger(tmp_path / "v1.db", rules=rules)
    tree = tmp_path / "tree"  # the tree the fixture was made from (same generator, same seed)
    generate(tree, GenOptions(seed=11, sessions=3, requests_per_session=40))
    fresh = Ledger(tmp_path / "v2.db", rules=rules)
    Scanner(fresh, [tree / "projects"], workers=1).scan()
    fresh.settle(force=True)

    def counters(ledger: Ledger) -> dict[Any, float]:
        registry = CollectorRegistry()
        proj = Projection(RateTable.load(), MetricsOptions(), registry, roots=[tree / "projects"])
        proj.load(ledger)
        out = exposed(registry, "claude_code")
        proj.shutdown()
        # v1 timed a resumed session's first new request as "first": only gaps may differ
        return {k: v for k, v in out.items() if "gap" not in k[0]}

    got, want = counters(migrated), counters(fresh)
    assert got == want and len(got) > 50


def test_a_clean_close_is_trusted_only_while_the_file_is_unchanged(tmp_path: Path) -> None:
    """The clean-close stamp spares the full check, but a file changed since is checked."""
    path = tmp_path / "l.db"
    ledger = Ledger(path)
    ledger.apply(parse_lines(jsonl(*(assistant(f"m{i}") for i in range(300)))), [], 0)
    marker = path.with_name(path.name + ".clean")
    assert not marker.exists()  # an open ledger is no clean file
    ledger.close()
    assert marker.exists()
    Ledger(path).close()  # unchanged: opens (and stamps again)
    data = bytearray(path.read_bytes())
    for at in range(4096 * 2, len(data) - 64, 4096):
        data[at + 8 : at + 200] = b"\xab" * 192
    path.write_bytes(bytes(data))  # same size, other bytes, newer mtime
    with pytest.raises(LedgerError, match=r"malformed|corrupt"):
        Ledger(path)


def test_owners_move_when_a_session_grows_past_its_copy(tmp_path: Path) -> None:
    """Shared requests belong to the session whose last request is earliest, at every pass."""
    tree = tmp_path / "projects"
    _resumed_tree(tree, "aaaa", "zzzz")  # zzzz replays m1, m2 and goes on to 12:31

    ledger = counting_ledger(tmp_path / "l.db")
    _scan(ledger, tree)

    def owner(msg: str) -> str:
        rows = ledger.read("SELECT session FROM requests WHERE key = ?", (f"{msg}\x1fr{msg}",))
        return str(rows[0][0])

    assert owner("m1") == "zzzz"  # aaaa ends at 12:40, after its copy: the copy is older
    _write(tree / "p" / "zzzz.jsonl", _main("n3", 50, "zzzz"))  # the copy now ends later
    _scan(ledger, tree)  # a batch that carries n3 only: m1 and m2 change hands without it
    assert (owner("m1"), owner("m2"), owner("n1")) == ("aaaa", "aaaa", "zzzz")
