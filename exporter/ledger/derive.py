"""The end of a raw first pass: predecessors, gaps and owners of the rows, in SQL.

The same values the incremental path computes per batch
(:mod:`exporter.ledger.chains`), computed once for every row, or only for
what the pass's later batches left stale (:class:`exporter.ledger.staging.Pass`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final

from exporter.ledger.reader_thread import ReaderThread
from exporter.ledger.rows import IN_JSON
from exporter.ledger.staging import Pass
from exporter.records import gap_seconds
from exporter.sqlite import sqlite3

# Each appearance's predecessor: the latest earlier main request of its file, ``(ts, key)``
# order (None for a request that is not main). {files}: the files to chain.
_PREVS: Final = (
    "UPDATE appearances SET prev = p.prev FROM (SELECT a.request AS rid, a.file AS fid, "
    "CASE WHEN r.source = 0 THEN lag(r.ts) OVER (PARTITION BY a.file, r.source = 0 "
    "ORDER BY r.ts, r.key) END AS prev FROM appearances a "
    "JOIN requests r ON r.id = a.request{files}) AS p "
    "WHERE appearances.request = p.rid AND appearances.file = p.fid "
    "AND appearances.prev IS NOT p.prev")
# Each main request's gap: since the latest predecessor over its files (rounded as
# records.gap_seconds does: SQLite calls it). {rows}: the rows to set.
_GAPS: Final = (
    "UPDATE requests SET gap = m.gap FROM (SELECT a.request AS rid, CASE WHEN r.source = 0 "
    "AND max(a.prev) IS NOT NULL THEN gap_seconds(r.ts, max(a.prev)) END AS gap "
    "FROM appearances a JOIN requests r ON r.id = a.request{rows} GROUP BY a.request) AS m "
    "WHERE requests.id = m.rid AND requests.gap IS NOT m.gap")


def derive(db: sqlite3.Connection, reader: ReaderThread | None = None,
           state: Pass | None = None, *, meanwhile: Callable[[], None] | None = None) -> None:
    """Predecessors, gaps and owners of every row, from the rows and appearances.

    The gap of a main request is the time since the latest earlier main
    request, ``(ts, key)`` order, of any file holding it; its owner, of the
    sessions whose files hold it, the one whose last request is earliest
    (ties: the smaller id). Both as the incremental path defines them.

    ``state``: what the pass's batches chained already (:class:`Pass`); only
    what they left stale is computed again. Without it, everything is.
    ``meanwhile`` is called while the owners are still being read.

    Must be the first write of the caller's transaction (the owners are read
    on a second connection, ``reader``'s if given, which sees what was
    committed). Derived twice, the rows stay as they are: each value is a
    function of the rows' own fields, the appearances, files and sessions,
    which this leaves alone.
    """
    # The owners depend on appearances, files and sessions only, which the gap
    # statements leave alone: read on the reader thread meanwhile.
    own = reader is None
    reader = ReaderThread(db) if reader is None else reader
    owners = reader.ask(_owners, fresh=True)
    db.create_function("gap_seconds", 2, gap_seconds, deterministic=True)
    if state is None or state.broken:
        db.execute(_PREVS.format(files=""))
        db.execute(_GAPS.format(rows=""))
    else:
        # Files holding a row that moved after they were chained, or chained by two batches.
        stale = set(state.restaged)
        stale.update(r[0] for r in db.execute(
            f"SELECT file FROM appearances WHERE request IN {IN_JSON}",
            (json.dumps(sorted(state.moved)),)))
        rows = set(state.again)  # rows with files in several batches (moved ones among them)
        if stale:  # and the rows whose predecessor in a file chained again is another
            rows.update(r[0] for r in db.execute(
                _PREVS.format(files=f" WHERE a.file IN {IN_JSON}") + " RETURNING request",
                (json.dumps(sorted(stale)),)))
        # Any other row kept its time, its source and every predecessor: its gap stands.
        db.execute(_GAPS.format(rows=f" WHERE a.request IN {IN_JSON}"),
                   (json.dumps(sorted(rows)),))
    if meanwhile is not None:
        meanwhile()
    changed: list[tuple[int, str]] = reader.result(owners, db)
    if own:
        reader.close()
    db.executemany("UPDATE requests SET session = ? WHERE id = ?",
                   [(session, rid) for rid, session in changed])


# The owner of each row whose stored session is not it (see :func:`derive`).
# A row in one file is its session's; only rows in several are ranked (a window over all
# rows takes about twice as long).
_OWNERS: Final = (
    "WITH m AS MATERIALIZED (SELECT request FROM appearances GROUP BY request "
    "HAVING count(*) > 1) "
    "SELECT a.request, f.session FROM appearances a JOIN files f ON f.id = a.file "
    "JOIN requests r ON r.id = a.request WHERE r.session != f.session "
    "AND substr(r.key, 1, 6) != 'codex' || char(31) "
    "AND a.request NOT IN m "
    "UNION ALL SELECT o.request, o.session FROM (SELECT a.request, f.session, row_number() "
    "OVER (PARTITION BY a.request ORDER BY coalesce(s.last_ts, 0.0), f.session) AS n "
    "FROM m JOIN appearances a ON a.request = m.request JOIN files f ON f.id = a.file "
    "LEFT JOIN sessions s ON s.session = f.session) AS o "
    "JOIN requests r ON r.id = o.request WHERE o.n = 1 AND r.session != o.session "
    "AND substr(r.key, 1, 6) != 'codex' || char(31)")


def _owners(db: sqlite3.Connection) -> list[tuple[int, str]]:
    """(row id, owner) of every row whose stored session is not its owner."""
    return db.execute(_OWNERS).fetchall()
