"""Conversations in an incremental batch: each file's chain, the requests' gaps and owners.

The gap of a main request is the time since the latest earlier main request,
(ts, key) order, of any file holding it; its owner, of the sessions whose
files hold it, the one whose last request is earliest (ties: the smaller id).
Both are functions of the appearances and sessions alone, so file, scan and
id order cannot change them. Everything here works on the :class:`Batch` in
memory; :mod:`exporter.ledger.merge` writes each row once afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.ledger import rows as stored_rows
from exporter.ledger.batch import Batch
from exporter.ledger.schema import LEGACY_FILE
from exporter.records import CODEX_KEY_PREFIX as CODEX_KEY
from exporter.records import Source, gap_seconds
from exporter.sqlite import sqlite3


def chain(db: sqlite3.Connection, batch: Batch) -> None:
    """Each touched file's main chain, the appearances' predecessors, and the gaps.

    Only the part of a chain from the batch's earliest change on is read and
    recomputed (a file growing by one line costs one line): a change is a
    request new to the file, or one whose time or source moved (at its old
    and its new place).
    """
    legacy = db.execute("SELECT id FROM files WHERE path = ?", (LEGACY_FILE,)).fetchone()
    # The legacy pseudo-file is no conversation: its predecessors were fixed at migration.
    files = batch.files - {legacy[0] if legacy else -1}
    rows = batch.rows
    holders = _holders(db, sorted(rid for rid in {*batch.seen, *batch.moved}
                                  if rid in batch.known))
    points: dict[int, list[tuple[float, str]]] = {}  # per file: where its chain changed
    fresh: dict[int, list[int]] = {}  # per file: requests new to it
    for rid, fids in batch.seen.items():
        for fid in fids - holders.get(rid, set()):
            batch.new_appearances.append((rid, fid))
            fresh.setdefault(fid, []).append(rid)
            points.setdefault(fid, []).append((rows[rid].ts, rows[rid].key))
    for rid in batch.moved:
        was, now = batch.known[rid], rows[rid]
        for fid in holders.get(rid, set()):
            points.setdefault(fid, []).extend(((was.ts, was.key), (now.ts, now.key)))
    changed: set[int] = set(batch.moved) | set(batch.new_ids)
    for fid in files:
        if fid in points:
            _rechain(db, fid, min(points[fid]), fresh.get(fid, []), batch=batch, changed=changed)
    _gaps(db, batch, changed)


def _holders(db: sqlite3.Connection, stored: Sequence[int]) -> dict[int, set[int]]:
    """The files that hold each of some stored rows."""
    holders: dict[int, set[int]] = {}
    for part in stored_rows.chunks(stored):
        marks = ",".join("?" * len(part))
        for rid, fid in db.execute(
                f"SELECT request, file FROM appearances WHERE request IN ({marks})", part):
            holders.setdefault(rid, set()).add(fid)
    return holders


def _rechain(db: sqlite3.Connection, fid: int, lo: tuple[float, str], fresh: list[int], *,
             batch: Batch, changed: set[int]) -> None:
    """Recompute one file's predecessors from ``lo`` (ts, key) on.

    Members before ``lo`` neither moved nor are new, so their stored values
    are current: the latest main one among them starts the chain.
    """
    ts0, key0 = lo
    start = db.execute(
        "SELECT r.ts FROM appearances a JOIN requests r ON r.id = a.request "
        "WHERE a.file = ? AND r.source = 0 AND (r.ts < ? OR (r.ts = ? AND r.key < ?)) "
        "ORDER BY r.ts DESC, r.key DESC LIMIT 1", (fid, ts0, ts0, key0)).fetchone()
    members: dict[int, tuple[float, str, int, float | None]] = {
        rid: (ts, key, source, prev) for rid, prev, ts, key, source in db.execute(
            "SELECT a.request, a.prev, r.ts, r.key, r.source FROM appearances a "
            "JOIN requests r ON r.id = a.request WHERE a.file = ? "
            "AND (r.ts > ? OR (r.ts = ? AND r.key >= ?))", (fid, ts0, ts0, key0))}
    for rid in fresh:
        members.setdefault(rid, (0.0, "", 0, None))
    rows = batch.rows
    order = []
    for rid, stored in members.items():
        row = rows.get(rid)
        # The batch's values win over the stored ones.
        ts, key, source = (row.ts, row.key, int(row.source)) if row else stored[:3]
        prev = stored[3]
        if source == Source.MAIN:
            order.append((ts, key, rid, prev))
        elif prev is not None:
            batch.prevs[(rid, fid)] = None
            changed.add(rid)
    order.sort()
    last: float | None = start[0] if start else None
    for ts, _key, rid, prev in order:
        if last != prev:
            batch.prevs[(rid, fid)] = last
            changed.add(rid)
        last = ts


def _gaps(db: sqlite3.Connection, batch: Batch, rids: set[int]) -> None:
    """The gaps of requests whose chains moved: from the max predecessor over their files."""
    prevs: dict[int, list[float | None]] = {}
    for (rid, _fid), prev in batch.prevs.items():
        prevs.setdefault(rid, []).append(prev)
    stored = [rid for rid in rids if rid in batch.known or rid not in batch.rows]
    for part in stored_rows.chunks(sorted(stored)):  # their other files' predecessors
        marks = ",".join("?" * len(part))
        for rid, fid, prev in db.execute(
            f"SELECT request, file, prev FROM appearances WHERE request IN ({marks})", part
        ):
            if (rid, fid) not in batch.prevs:
                prevs.setdefault(rid, []).append(prev)
    _bring_in(db, batch, [rid for rid in rids if rid not in batch.rows])
    for rid in rids:
        row = batch.rows[rid]
        found = [p for p in prevs.get(rid, ()) if p is not None]
        gap = (gap_seconds(row.ts, max(found))
               if row.source is Source.MAIN and found else None)
        if gap != row.gap:
            batch.rows[rid] = row._replace(gap=gap)


def _bring_in(db: sqlite3.Connection, batch: Batch, missing: Sequence[int]) -> None:
    """Add stored rows the batch did not carry, but whose gap or owner may move, to it."""
    for rid, row in stored_rows.by_id(db, missing).items():
        batch.rows[rid] = batch.known[rid] = row
        batch.ids[row.key] = rid
        batch.masks.setdefault(rid, batch.before.setdefault(rid, stored_rows.roots_mask(db, rid)))


def own(db: sqlite3.Connection, batch: Batch) -> None:
    """Give each request held by several sessions its original conversation's id.

    The owner is the conversation a resume copied from, not the copy: it
    depends on the sessions' last times only.
    """
    sessions = _sessions_holding(db, batch)
    several = {rid: s for rid, s in sessions.items() if len(s) > 1}
    names = sorted({s for ss in several.values() for s in ss})
    last: dict[str, float] = {}
    for part in stored_rows.chunks(names):
        marks = ",".join("?" * len(part))
        last.update(db.execute(
            f"SELECT session, last_ts FROM sessions WHERE session IN ({marks})", part))
    _bring_in(db, batch, [rid for rid in several if rid not in batch.rows])
    for rid, ss in sessions.items():
        owner = (min(ss, key=lambda s: (last.get(s, 0.0), s)) if len(ss) > 1
                 else next(iter(ss)))
        row = batch.rows[rid]
        if row.key.startswith(CODEX_KEY):
            continue  # a Codex turn's session is its thread's, whichever files hold it
        if owner != row.session:
            batch.rows[rid] = row._replace(session=owner)


def _sessions_holding(db: sqlite3.Connection, batch: Batch) -> dict[int, set[str]]:
    """The sessions whose files hold each request whose owner may change."""
    sessions: dict[int, set[str]] = {}
    for rid, fids in batch.seen.items():
        sessions[rid] = {batch.file_session[f] for f in fids}
    shared: set[int] = set(batch.known)  # they may have other, stored files
    for session in batch.grown:  # a session grew: its shared requests may change hands
        shared.update(r[0] for r in db.execute(
            "SELECT a.request FROM files f JOIN appearances a ON a.file = f.id "
            "WHERE f.session = ? AND EXISTS (SELECT 1 FROM appearances b "
            "JOIN files g ON g.id = b.file WHERE b.request = a.request "
            "AND g.session != f.session AND g.path != ?)", (session, LEGACY_FILE)))
    for part in stored_rows.chunks(sorted(shared)):
        marks = ",".join("?" * len(part))
        for rid, session in db.execute(
            "SELECT a.request, f.session FROM appearances a JOIN files f ON f.id = a.file "
            f"WHERE a.request IN ({marks}) AND f.path != ?", (*part, LEGACY_FILE),
        ):
            sessions.setdefault(rid, set()).add(session)
    return sessions
