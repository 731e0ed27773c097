"""The ledger: idempotent merges, atomic batches, refusing foreign files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from exporter.ingest.parse import parse_lines
from exporter.ledger import Ledger, LedgerError
from exporter.records import Checkpoint
from tests.conftest import assistant, jsonl


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
