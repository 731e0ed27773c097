"""One incremental batch into the ledger: rows merged by key, provenance, chains, rollups, slots.

Rows are keyed by request key and merged by :func:`exporter.records.merge`
(per-field maximum, earliest time), which is idempotent: reading the same line
twice changes nothing. Everything a row depends on (merge, roots, gap, owner)
is computed first, in memory (:class:`~exporter.ledger.batch.Batch`), then
each row is written once. All of it runs in the caller's transaction, with
the files' checkpoints and the line counters (:func:`finish`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from exporter.ledger import (
    attr_days,
    chains,
    rollups,
    root_counts,
    slot_bins,
    slot_sums,
    slots,
    unindexed,
)
from exporter.ledger import rows as stored_rows
from exporter.ledger.agent_limits import store as store_limits
from exporter.ledger.batch import Batch
from exporter.ledger.rows import COLUMNS, FIELDS
from exporter.ledger.scopes import folder_of
from exporter.ledger.staging import ensure_write_indexes
from exporter.records import (
    Appearance,
    Applied,
    Checkpoint,
    LineResult,
    Parsed,
    Request,
    RootLines,
    Rules,
    Source,
    merge,
)
from exporter.sqlite import sqlite3

_GAP: Final = Request._fields.index("gap")
_SESSION: Final = Request._fields.index("session")


def apply(db: sqlite3.Connection, parsed: Parsed, checkpoints: Sequence[Checkpoint],
          bytes_read: int, appearances: Sequence[Appearance], *, rules: Rules | None,
          clock: Callable[[], float], settle_seconds: float,
          by_root: RootLines | None = None) -> Applied:
    """Merge one parsed batch, its provenance, checkpoints and line counts (caller's transaction).

    The indexes only this path reads (a row by its key, appearances by their
    file) are built first if a raw pass left them unbuilt.
    """
    ensure_write_indexes(db)
    batch = _merge(db, parsed)
    _provenance(db, appearances, batch)
    chains.chain(db, batch)
    chains.own(db, batch)
    _write_rows(db, batch)
    if rules is not None:
        rollups.add_batch(db, rules, batch, clock() + settle_seconds)
        rollups.settle_due(db, rules, batch, clock())
    elif batch.ids:
        stored_rows.set_meta(db, "rollups", "")  # stale: rebuilt by the next writer with rules
    # The report's slots (and attribution day sums): appended rows by their own values,
    # rewritten rows' slots (session-days) summed again, each touched day summed once.
    touched = {slots.slot_of(ts) for ts in batch.slot_times}
    slot_sums.update(db, batch.new_ids, touched, [
        *(_bin_row(known, batch.before[rid], -1) for rid, known in batch.changed.items()),
        *(_bin_row(batch.rows[rid], batch.masks[rid], 1) for rid in batch.changed)])
    attr_days.update(db, batch.new_ids, [(r.session, r.ts) for rid, known in
                     batch.changed.items() for r in (known, batch.rows[rid])])
    store_limits(db, parsed)  # plan windows from the logs (Codex's rate_limits)
    unindexed.fold(db)  # (once enough rows wait)
    finish(db, batch, parsed, checkpoints, bytes_read=bytes_read, new_keys=[  # not parts
        batch.rows[rid].key for rid in batch.new_ids
        if batch.rows[rid].source is not Source.ADVISOR], appearances=appearances,
        by_root=by_root)
    return batch.applied()


def finish(db: sqlite3.Connection, batch: Batch, parsed: Parsed,
           checkpoints: Sequence[Checkpoint], *, bytes_read: int, new_keys: Sequence[str],
           appearances: Sequence[Appearance], by_root: RootLines | None) -> None:
    """The batch's checkpoints and line counters, global and per root.

    ``new_keys``: its new requests that a line carried (not parts billed on
    top); ``by_root``: its line counts split by root (exporter.ledger.root_counts).
    """
    added = len(new_keys)
    batch.folders = {folder for app in appearances if (folder := folder_of(app.path, app.root))}
    db.executemany(
        "INSERT OR REPLACE INTO checkpoints (path, dev, ino, size, offset, fp_len, fingerprint, "
        "mtime_ns, carry) VALUES (?,?,?,?,?,?,?,?,?)",
        [(c.path, c.dev, c.ino, c.size, c.offset, c.fp_len, c.fingerprint, c.mtime_ns, c.carry)
         for c in checkpoints])
    counts = parsed.counts
    batch.lines = {
        LineResult.USAGE: added, LineResult.DUPLICATE: counts.usage_lines - added,
        LineResult.OTHER: counts.other,
        LineResult.REJECTED: sum(counts.rejected.values()),
    }
    batch.rejected, batch.iterations = dict(counts.rejected), dict(counts.iterations)
    batch.mended, batch.bytes_read = dict(counts.mended), bytes_read
    rows = [*(("lines", result, n) for result, n in batch.lines.items()),
            ("bytes_read", "", batch.bytes_read),
            *(("mended", kind, n) for kind, n in batch.mended.items()),
            *(("rejected", reason, n) for reason, n in batch.rejected.items()),
            *(("iterations", kind, n) for kind, n in batch.iterations.items())]
    for name, label, n in (row for row in rows if row[2]):
        stored_rows.add_to_counter(db, name, label, n)
    root_counts.add(db, by_root, new_keys, appearances, whole=counts, bytes_read=bytes_read)


def root_bit(db: sqlite3.Connection, root: str, batch: Batch, agent: str = "claude") -> int:
    """The bit of a transcript root in ``requests.roots``, noted in the batch's result."""
    bit = batch.roots[root] = stored_rows.root_bit(db, root, agent)
    batch.agents[root] = agent
    return bit


def _merge(db: sqlite3.Connection, parsed: Parsed) -> Batch:
    """Merge the batch's requests with the stored rows, in memory; assign new ids."""
    old = stored_rows.by_key(db, list(parsed.requests))
    out = Batch()
    next_id = int(db.execute("SELECT coalesce(max(id), 0) FROM requests").fetchone()[0]) + 1
    for key, req in parsed.requests.items():
        prev = old.get(key)
        if prev is None:
            rid, next_id = next_id, next_id + 1
            out.ids[key] = rid
            out.rows[rid] = req._replace(gap=None)
            out.masks[rid] = 0
            out.new_ids.append(rid)
            continue
        rid, known, mask = prev
        out.ids[key] = rid
        out.known[rid] = known
        out.masks[rid] = out.before[rid] = mask
        merged = merge(known, req)._replace(gap=known.gap, session=known.session)
        out.rows[rid] = merged
        if merged != known and (merged.ts, merged.source) != (known.ts, known.source):
            out.moved.add(rid)  # its place in the conversation changed
    return out


def _provenance(db: sqlite3.Connection, appearances: Sequence[Appearance], batch: Batch) -> None:
    """Files, roots bits and sessions' last times of the batch's appearances (in memory)."""
    for app in appearances:
        bit = root_bit(db, app.root, batch, app.agent)
        fid = _file_id(db, app, batch)
        ids = [batch.ids[k] for k in app.keys if k in batch.ids]
        for rid in ids:
            batch.masks[rid] |= bit
            batch.seen.setdefault(rid, set()).add(fid)
        if ids:
            batch.files.add(fid)
            latest = max(batch.rows[rid].ts for rid in ids)
            batch.sessions[app.session] = max(batch.sessions.get(app.session, latest), latest)
    for session, last in batch.sessions.items():
        before = db.total_changes
        db.execute("INSERT INTO sessions VALUES (?, ?) ON CONFLICT (session) DO UPDATE "
                   "SET last_ts = excluded.last_ts WHERE excluded.last_ts > last_ts",
                   (session, last))
        if db.total_changes != before:
            batch.grown.add(session)
    for part in stored_rows.chunks(sorted(batch.moved)):  # a moved row re-chains its files
        marks = ",".join("?" * len(part))
        batch.files.update(r[0] for r in db.execute(
            f"SELECT file FROM appearances WHERE request IN ({marks})", part))


def _file_id(db: sqlite3.Connection, app: Appearance, batch: Batch) -> int:
    """The id of an appearance's file (added if new; its session the smaller seen)."""
    known = db.execute("SELECT id, session FROM files WHERE path = ?", (app.path,)).fetchone()
    if known is None:
        fid = int(db.execute(
            "INSERT INTO files (path, root, session) VALUES "
            "(?, (SELECT id FROM roots WHERE path = ?), ?) RETURNING id",
            (app.path, app.root, app.session)).fetchone()[0])
        batch.fresh_files.add(fid)
    else:
        fid = int(known[0])
        if app.session < known[1]:
            db.execute("UPDATE files SET session = ? WHERE id = ?", (app.session, fid))
    batch.file_session[fid] = min(app.session, known[1]) if known else app.session
    return fid


def _write_rows(db: sqlite3.Connection, batch: Batch) -> None:
    """Write every new and changed row once, and the new or moved appearances."""
    inserts = []
    for rid in batch.new_ids:
        row = batch.rows[rid]
        inserts.append((rid, *row, row.context, batch.masks[rid]))
    updates = []
    for rid, known in batch.known.items():
        row = batch.rows[rid]
        mask = batch.masks[rid]
        if row != known or mask != batch.before[rid]:
            updates.append((*row[1:], row.context, mask, rid))
            batch.slot_times.update((known.ts, row.ts))
            batch.changed[rid] = known
    # New rows wait outside the value indexes (exporter.ledger.unindexed).
    db.executemany(
        f"INSERT INTO requests (id, {COLUMNS}, context, roots, indexed) "
        f"VALUES ({','.join('?' * (len(FIELDS) + 3))}, 0)", inserts)
    db.executemany(
        f"UPDATE requests SET {', '.join(f'{c} = ?' for c in FIELDS[1:])}, context = ?, "
        "roots = ? WHERE id = ?", updates)
    fresh = set(batch.new_appearances)
    db.executemany("INSERT OR IGNORE INTO appearances (request, file, prev) VALUES (?, ?, ?)",
                   [(rid, fid, batch.prevs.get((rid, fid))) for rid, fid in fresh])
    db.executemany("UPDATE appearances SET prev = ? WHERE request = ? AND file = ?",
                   [(prev, rid, fid) for (rid, fid), prev in batch.prevs.items()
                    if (rid, fid) not in fresh])
    batch.new = [batch.rows[rid] for rid in batch.new_ids]
    batch.upgraded = [(known, batch.rows[rid]) for rid, known in batch.changed.items()
                      if _line_fields(batch.rows[rid]) != _line_fields(known)]


def _line_fields(req: Request) -> tuple[Any, ...]:
    """What lines can change in a request: not its gap nor its owner (the ledger's to set)."""
    return req[:_SESSION] + req[_SESSION + 1 : _GAP]


def _bin_row(row: Request, roots: int, sign: int) -> slot_bins.BinRow:
    """What :func:`slot_bins.shift_bins` needs of one version of a row."""
    return (row.ts, roots, row.input, row.cache_read, row.cache_write_5m, row.cache_write_1h,
            row.output, row.gap, int(row.source), sign)
