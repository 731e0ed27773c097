"""The indexes a raw pass drops: the time's built at its end, the key's by the first write."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from exporter.ingest.discover import projects_dirs
from exporter.ingest.scan import Scanner
from exporter.ledger.schema import (
    KEY_AUTOINDEX,
    KEY_INDEX_NAME,
    PASS_INDEXES,
    REQUESTS,
    REQUESTS_INDEXES,
    WRITE_INDEXES,
    index_name,
)
from exporter.ledger.staging import STAGED, STAGED_SCHEMA, _staged
from exporter.ledger.store import Ledger
from exporter.records import Applied
from exporter.sqlite import sqlite3
from tests.support.scan import REAL_TOTALS, counting_ledger, killed_pass, totals


def _unique_key_indexes(ledger: Ledger) -> list[str]:
    """The names of the unique indexes on exactly the requests' key."""
    names = [row[1] for row in ledger.read("PRAGMA index_list(requests)") if row[2]]
    return sorted(n for n in names
                  if [c[2] for c in ledger.read(f"PRAGMA index_info({n})")] == ["key"])


def _indexes(ledger: Ledger, statements: tuple[str, ...]) -> list[str]:
    """Which of the indexes of ``statements`` the ledger has."""
    names = {row[0] for row in ledger.read("SELECT name FROM sqlite_master WHERE type = 'index'")}
    return sorted(names & {index_name(st) for st in statements})


def _held_back(real_tree: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of the real tree without its largest transcript: (tree, that file, its place)."""
    tree = tmp_path / "tree"
    shutil.copytree(real_tree, tree)
    largest = max(tree.rglob("*.jsonl"), key=lambda p: p.stat().st_size)
    aside = tmp_path / "aside.jsonl"
    largest.rename(aside)
    return tree, aside, largest


def _old_form(path: Path) -> Ledger:
    """A new ledger whose requests table has the key UNIQUE in its column, as before; open."""
    counting_ledger(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    db.execute("DROP TABLE requests")
    db.execute(REQUESTS.replace("key TEXT NOT NULL,", "key TEXT NOT NULL UNIQUE,"))
    for statement in REQUESTS_INDEXES:
        db.execute(statement)
    db.execute("COMMIT")
    db.close()
    ledger = counting_ledger(path)
    assert _unique_key_indexes(ledger) == [KEY_AUTOINDEX]
    return ledger


def _scan(ledger: Ledger, tree: Path, on_applied: Callable[[Applied], None] | None = None,
          ) -> None:
    """One pass over ``tree`` into ``ledger`` (``on_applied``: the incremental path)."""
    Scanner(ledger, projects_dirs([tree]), workers=1, on_applied=on_applied).scan()


def test_a_raw_pass_leaves_the_write_indexes_to_the_first_incremental_write(
        real_tree: Path, tmp_path: Path) -> None:
    """A pass drops the indexes its staging skips; it builds the time's, a first write the rest."""
    tree, aside, place = _held_back(real_tree, tmp_path)
    ledger = counting_ledger(tmp_path / "l.db")
    assert len(_indexes(ledger, (*PASS_INDEXES, *WRITE_INDEXES))) == 2  # a new ledger has them
    during: list[tuple[list[str], list[str]]] = []
    Scanner(ledger, projects_dirs([tree]), workers=1, batch_bytes=1).scan(
        progress=lambda _d, _t: during.append((_unique_key_indexes(ledger),
                                               _indexes(ledger, (*PASS_INDEXES, *WRITE_INDEXES)))))
    assert during and all(names == ([], []) for names in during)
    assert len(_indexes(ledger, PASS_INDEXES)) == len(PASS_INDEXES) == 1
    ledger.close()
    # an open builds neither, nor a pass with nothing new
    ledger = counting_ledger(tmp_path / "l.db")
    _scan(ledger, tree)
    assert (_unique_key_indexes(ledger), _indexes(ledger, WRITE_INDEXES)) == ([], [])
    aside.rename(place)
    _scan(ledger, tree)  # the held-back file: the incremental path's first write
    assert _unique_key_indexes(ledger) == [KEY_INDEX_NAME]
    assert len(_indexes(ledger, WRITE_INDEXES)) == len(WRITE_INDEXES) == 1
    assert totals(ledger.requests()) == REAL_TOTALS


def test_a_raw_pass_killed_midway_gets_its_indexes_back(real_tree: Path, tmp_path: Path) -> None:
    """The open that derives a killed raw pass builds the time's index; a later pass, the key's."""
    killed_pass(real_tree, tmp_path / "cut", kill_after=3)
    reopened = counting_ledger(tmp_path / "cut" / "l.db")
    assert len(_indexes(reopened, PASS_INDEXES)) == len(PASS_INDEXES)
    _scan(reopened, real_tree)
    assert _unique_key_indexes(reopened) == [KEY_INDEX_NAME]
    assert len(_indexes(reopened, WRITE_INDEXES)) == len(WRITE_INDEXES)
    assert totals(reopened.requests()) == REAL_TOTALS


def test_an_empty_ledger_of_the_old_form_is_made_anew_by_a_raw_pass(real_tree: Path,
                                                                    tmp_path: Path) -> None:
    """Its empty table becomes the current one (every other index; a key index of its own)."""
    tree, aside, place = _held_back(real_tree, tmp_path)
    ledger = _old_form(tmp_path / "l.db")
    _scan(ledger, tree)
    assert _unique_key_indexes(ledger) == []  # the first incremental write builds it
    indexes = {row[1] for row in ledger.read("PRAGMA index_list(requests)")}
    assert {index_name(st) for st in REQUESTS_INDEXES} <= indexes
    aside.rename(place)
    _scan(ledger, tree)
    assert _unique_key_indexes(ledger) == [KEY_INDEX_NAME]
    assert totals(ledger.requests()) == REAL_TOTALS


def test_a_filled_ledger_of_the_old_form_keeps_its_column_unique(real_tree: Path,
                                                                 tmp_path: Path) -> None:
    """Passes over a ledger of the old form that holds rows merge by its UNIQUE, adding none."""
    ledger = _old_form(tmp_path / "l.db")
    _scan(ledger, real_tree, on_applied=lambda _a: None)  # the incremental path: rows first
    _scan(ledger, real_tree)
    ledger.close()
    again = counting_ledger(tmp_path / "l.db")
    _scan(again, real_tree)
    assert _unique_key_indexes(again) == [KEY_AUTOINDEX]
    assert totals(again.requests()) == REAL_TOTALS


def test_keys_that_share_a_hash_are_told_apart() -> None:
    """A staged hash that another key shares finds only the row whose key it is."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute(REQUESTS)
    for statement in STAGED_SCHEMA:
        db.execute(statement)
    cols = "key, ts, model, session, project, source, input, output, cache_read, " \
           "cache_write_5m, cache_write_1h, service_tier, inference_geo, speed, " \
           "recorded_cost_usd"
    for rid, key in ((1, "a"), (2, "b")):
        db.execute(f"INSERT INTO requests (id, {cols}) VALUES "
                   "(?, ?, 1.0, 'm', 's', 'p', 0, 1, 1, 0, 0, 0, '', '', '', 0.0)", (rid, key))
    # "b"'s row filed under "a"'s hash, as a collision of the two would leave it.
    db.executemany(f"INSERT INTO {STAGED} (h, id) VALUES (?, ?)", [(hash("a"), 1),
                                                                     (hash("a"), 2)])
    assert _staged(db, ["a"]) == {"a": (1, 1.0, 0)}
    assert _staged(db, ["c"]) == {}
