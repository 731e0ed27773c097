"""The ledger's WAL stays bounded: a reader pins it only while it reads (round 3, #12)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from exporter.ledger.wal import JOURNAL_LIMIT
from exporter.sqlite import sqlite3
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.wait import poll

FAST = ("--rescan-seconds", "0.5")


def _append(path: Path, i: int) -> None:
    """Append one request to a transcript."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as fh:
        fh.write(jsonl(assistant(f"m{i}", f"r{i}", ts=f"2026-10-01T{i // 3600 % 24:02d}:"
                                 f"{i // 60 % 60:02d}:{i % 60:02d}.000Z", session=f"s{i % 7}")))


def _counted(serve: Serve, want: int) -> Callable[[], bool]:
    """A check: ``serve`` shows ``want`` requests."""
    return lambda: serve.requests() == want


def test_the_wal_shrinks_back_under_its_bound_once_a_reader_lets_go(tmp_path: Path) -> None:
    """A reader holds a snapshot while serve commits past the bound; let go, the WAL is cut back."""
    data, state = tmp_path / "projects", tmp_path / "state"
    _append(data / "p" / "s.jsonl", 0)
    serve = Serve(data, state, *FAST)
    ledger = state / "ledger.sqlite3"
    wal = ledger.with_name(ledger.name + "-wal")
    reader = sqlite3.connect(ledger, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM requests").fetchone()  # a snapshot, pinned
        n = 1
        while wal.stat().st_size <= JOURNAL_LIMIT and n < 400:  # one commit per round
            _append(data / "p" / f"s{n % 5}.jsonl", n)
            n += 1
            poll(_counted(serve, n), 30, f"{n} requests counted")
        assert wal.stat().st_size > JOURNAL_LIMIT, "the WAL never grew past its bound"
        reader.execute("COMMIT")  # the reader lets go
        _append(data / "p" / "s.jsonl", n)  # one more commit, as any follower makes
        poll(lambda: serve.requests() == n + 1, 30, "the last request counted")
        poll(lambda: wal.stat().st_size <= JOURNAL_LIMIT, 15, "the WAL cut back to its bound")
    finally:
        reader.close()
        assert serve.stop() == 0
