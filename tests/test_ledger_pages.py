"""The ledger file's page size: new ledgers take PAGE_SIZE, older files are rewritten once."""

from __future__ import annotations

from pathlib import Path

from exporter.ingest.discover import projects_dirs
from exporter.ingest.scan import Scanner
from exporter.ledger.opening import REPAGE_FAILED
from exporter.ledger.schema import PAGE_SIZE
from exporter.sqlite import sqlite3
from tests.support.ledgers import page_size
from tests.support.scan import REAL_TOTALS, counting_ledger, totals


def test_a_new_ledger_is_made_with_itspage_size(real_tree: Path, tmp_path: Path) -> None:
    """A fresh file gets 4 KiB pages, kept through a pass and a reopen."""
    path = tmp_path / "l.db"
    ledger = counting_ledger(path)
    Scanner(ledger, projects_dirs([real_tree]), workers=1).scan()
    ledger.close()
    assert page_size(path) == PAGE_SIZE == 4096
    again = counting_ledger(path)
    assert totals(again.requests()) == REAL_TOTALS


def _made_with_16k_pages(real_tree: Path, path: Path) -> None:
    """A ledger of the real fixtures as builds before v6 made it: 16 KiB pages."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA page_size=16384")
    db.execute("PRAGMA journal_mode=WAL")  # writes the header: the size is set for good
    db.close()
    ledger = counting_ledger(path)
    Scanner(ledger, projects_dirs([real_tree]), workers=1).scan()
    ledger.close()
    assert page_size(path) == 16384


def test_a_file_made_with_16k_pages_is_rewritten_once_and_counts_exactly(
        real_tree: Path, tmp_path: Path) -> None:
    """A ledger with 16 KiB pages gets PAGE_SIZE ones at its writer's next open, losing nothing."""
    path = tmp_path / "l.db"
    _made_with_16k_pages(real_tree, path)
    ledger = counting_ledger(path)
    assert ledger.read("PRAGMA journal_mode") == [("wal",)]
    ledger.close()
    assert page_size(path) == PAGE_SIZE
    again = counting_ledger(path)
    assert totals(again.requests()) == REAL_TOTALS
    assert again.read("PRAGMA integrity_check") == [("ok",)]


def test_a_reader_in_the_file_puts_the_rewrite_off(real_tree: Path, tmp_path: Path) -> None:
    """With another connection in the file, the writer opens it as it is; the next open rewrites."""
    path = tmp_path / "l.db"
    _made_with_16k_pages(real_tree, path)
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM requests").fetchone()
    ledger = counting_ledger(path)
    assert totals(ledger.requests()) == REAL_TOTALS
    ledger.close()
    reader.close()
    assert page_size(path) == 16384
    counting_ledger(path).close()
    assert page_size(path) == PAGE_SIZE


def test_a_rewrite_that_failed_once_is_not_tried_again(real_tree: Path, tmp_path: Path) -> None:
    """A 16 KiB ledger whose rewrite failed (noted in meta) keeps its pages, exact."""
    path = tmp_path / "l.db"
    _made_with_16k_pages(real_tree, path)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("INSERT INTO meta VALUES (?, 'disk full')", (REPAGE_FAILED,))
    db.close()
    ledger = counting_ledger(path)
    assert totals(ledger.requests()) == REAL_TOTALS
    ledger.close()
    assert page_size(path) == 16384
