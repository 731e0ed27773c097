"""Rows not yet in the value indexes: written aside, folded in by the thousand.

The value indexes (``schema.VALUE_INDEXES``: context, output and gap, which
exact percentiles walk) are ordered by value, so each live row lands on a page
of its own in each of them: three random pages a line whatever the batching,
most of what a live append cost the disk. A row an incremental
batch writes is therefore stored with ``indexed = 0``, outside them (the small
partial index ``requests_unindexed``, on the flag itself, finds it), and once
:data:`FOLD_ROWS` wait, one statement puts them all in: thousands of entries
then share the pages they land on. A raw pass's rows go straight in (it builds
the indexes once at its end).

Readers see every row either way: an index walk covers the folded rows, and
``exporter.projections.percentiles`` merges in the few waiting ones.
"""

from __future__ import annotations

from typing import Final

from exporter.sqlite import sqlite3

# Rows waiting before a fold. More share each fold's pages (the writes a row costs fall as
# the fold grows, until it covers every leaf); fewer cost each percentile less to merge
# (a reader sorts the waiting rows of its selection). At 2048, a year's ledger (~3,000
# leaves an index) writes ~1,400 pages a fold per index; a merge sorts at most 2047 values.
FOLD_ROWS: Final = 2048
WAITING: Final = "indexed = 0"  # the rows outside the value indexes (as requests_unindexed says)
FOLDED: Final = "indexed = 1"  # the rows in them (as the value indexes say: "= 1" lets a
# walk read the index alone, where a bare "indexed" would look up each row)


def waiting(db: sqlite3.Connection) -> int:
    """How many rows wait outside the value indexes (a walk of the small index)."""
    return int(db.execute(f"SELECT count(*) FROM requests WHERE {WAITING}").fetchone()[0])


def fold(db: sqlite3.Connection, *, at: int = FOLD_ROWS) -> int:
    """Put the waiting rows into the value indexes once ``at`` of them wait; how many went in.

    Runs in the caller's transaction (a batch's own, so a fold is never a
    commit of its own).
    """
    n = waiting(db)
    if n and n >= at:
        db.execute(f"UPDATE requests SET indexed = 1 WHERE {WAITING}")
        return n
    return 0
