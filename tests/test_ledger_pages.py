"""The ledger file's page size: new ledgers take PAGE_SIZE, older files keep theirs."""

from __future__ import annotations

from pathlib import Path

from exporter.ingest.discover import projects_dirs
from exporter.ingest.scan import Scanner
from exporter.ledger.schema import PAGE_SIZE
from exporter.sqlite import sqlite3
from tests.support.scan import REAL_TOTALS, counting_ledger, totals


def _page_size(path: Path) -> int:
    """The page size in an SQLite file's header (bytes 16-17; 1 stands for 65536)."""
    size = int.from_bytes(path.read_bytes()[16:18], "big")
    return 65536 if size == 1 else size


def test_a_new_ledger_is_made_with_its_page_size(real_tree: Path, tmp_path: Path) -> None:
    """A fresh file gets PAGE_SIZE pages (not the default), kept through a pass and a reopen."""
    path = tmp_path / "l.db"
    ledger = counting_ledger(path)
    Scanner(ledger, projects_dirs([real_tree]), workers=1).scan()
    ledger.close()
    assert _page_size(path) == PAGE_SIZE > sqlite3.connect(":memory:").execute(
        "PRAGMA page_size").fetchone()[0]
    again = counting_ledger(path)
    assert totals(again.requests()) == REAL_TOTALS


def test_a_file_made_with_other_pages_keeps_them_and_counts_exactly(real_tree: Path,
                                                                    tmp_path: Path) -> None:
    """A ledger made with SQLite's default pages (as before) keeps 4096 and is exact."""
    path = tmp_path / "l.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA page_size=4096")
    db.execute("PRAGMA journal_mode=WAL")  # writes the header: the size is set for good
    db.close()
    ledger = counting_ledger(path)
    Scanner(ledger, projects_dirs([real_tree]), workers=1).scan()
    ledger.close()
    assert _page_size(path) == 4096
    assert totals(counting_ledger(path).requests()) == REAL_TOTALS
