"""The raw pass's owners, read on a second connection or (in memory) on the first: the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from exporter.ingest.scan import Scanner
from exporter.ledger.derive import derive
from exporter.ledger.store import Ledger
from exporter.sqlite import sqlite3
from exporter.synth import GenOptions, generate

_STATE = ("SELECT r.id, r.session, r.gap, a.file, a.prev FROM requests r "
          "JOIN appearances a ON a.request = r.id ORDER BY 1, 4")


def _underived(db: sqlite3.Connection) -> None:
    """Forget what :func:`derive` works out (every owner then changes)."""
    db.execute("UPDATE requests SET session = '', gap = NULL")
    db.execute("UPDATE appearances SET prev = NULL")


def _derived(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """Derive in one transaction, commit, and return the derived columns."""
    db.execute("BEGIN IMMEDIATE")
    derive(db)
    db.execute("COMMIT")
    return db.execute(_STATE).fetchall()


def test_owners_are_the_same_on_a_file_and_in_memory(tmp_path: Path) -> None:
    """A file ledger (owners read in a thread) and a memory copy (read inline) derive alike."""
    tree = tmp_path / "tree"
    generate(tree, GenOptions(seed=5, sessions=6, requests_per_session=80))
    path = tmp_path / "l.db"
    ledger = Ledger(path)
    Scanner(ledger, [tree / "projects"], workers=1).scan()  # a raw pass: derived at its end
    ledger.close()
    file_db = sqlite3.connect(path, isolation_level=None)
    want = file_db.execute(_STATE).fetchall()
    assert len({row[1] for row in want}) > 1 and any(row[2] is not None for row in want)
    _underived(file_db)
    memory = sqlite3.connect(":memory:", isolation_level=None)
    file_db.backup(memory)
    assert _derived(file_db) == want
    assert _derived(memory) == want
