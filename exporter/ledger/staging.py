"""A raw first pass's batches: rows staged into an empty ledger, chained file by file.

Each batch writes its new rows, merges into those an earlier batch of the
pass stored (in SQL, by the rules of :func:`exporter.records.merge`), their
appearances, files and sessions. The key's unique index is dropped for the
pass (:func:`drop_pass_indexes`): the rows a batch stages again are found
through a table of key hashes of this connection's own (:data:`STAGED`),
behind a Bloom filter (:class:`StagedKeys`). A pass reads each file whole in
one batch, so the batch also chains its files: each appearance's predecessor
and each new row's gap. What a later batch can make stale is noted in
:class:`Pass` for the end (:mod:`exporter.ledger.derive`).

This module holds only SQL on a connection; the caller owns transactions.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from exporter.ledger.rows import IN_JSON
from exporter.ledger.schema import (
    KEY_AUTOINDEX,
    KEY_INDEX,
    PASS_INDEXES,
    REQUESTS,
    REQUESTS_INDEXES,
    WRITE_INDEXES,
    has_index,
    index_name,
)
from exporter.records import ATTRIBUTION, Appearance, Parsed, Request, Source, gap_seconds
from exporter.sqlite import sqlite3

RAW_PASS: Final = "raw_pass"  # meta name: a raw pass began and is not yet derived

_FIELDS: Final = Request._fields
_MAXED: Final = ("source", "input", "output", "cache_read", "cache_write_5m", "cache_write_1h",
                 "recorded_cost_usd", "web_search", "reasoning", "context_window")
_DESCRIPTIVE: Final = ("ts", "model", "session", "project", "service_tier", "inference_geo",
                       "speed")
_TOKENS: Final = ("input", "cache_read", "cache_write_5m", "cache_write_1h")

# A request merged into the row a raw pass staged before under its key, found by id (the
# pass keeps no index on the key to conflict on), by the rules of records.merge: the
# descriptive fields of the earlier copy, the maximum of each count, the union of the
# roots; only when that changes something. Parameters: the columns, then the row's id.
_COLUMNS: Final = (*_FIELDS, "context", "roots")
_PARAM: Final = {c: f"?{i}" for i, c in enumerate(_COLUMNS, 1)}
# The incoming copy is the earlier one (its descriptive fields win).
_EARLIER: Final = (f"({_PARAM['ts']} < ts OR ({_PARAM['ts']} = ts "
                   f"AND {_PARAM['session']} < session))")
_MERGE: Final = (
    "UPDATE requests SET "
    + ", ".join([*(f"{c} = CASE WHEN {_EARLIER} THEN {_PARAM[c]} ELSE {c} END"
                   for c in _DESCRIPTIVE),
                 # Attribution: the earlier copy's value, but never a blank over a name.
                 *(f"{c} = CASE WHEN {_PARAM[c]} != '' AND ({c} = '' OR {_EARLIER}) "
                   f"THEN {_PARAM[c]} ELSE {c} END" for c in ATTRIBUTION),
                 *(f"{c} = max({c}, {_PARAM[c]})" for c in _MAXED),
                 "context = " + " + ".join(f"max({c}, {_PARAM[c]})" for c in _TOKENS),
                 f"roots = roots | {_PARAM['roots']}"])
    + f" WHERE id = ?{len(_COLUMNS) + 1} AND ("
    + " OR ".join([*(f"{_PARAM[c]} > {c}" for c in _MAXED),
                   *(f"({_PARAM[c]} != '' AND ({c} = '' OR ({_EARLIER} AND {_PARAM[c]} != {c})))"
                     for c in ATTRIBUTION),
                   f"(roots | {_PARAM['roots']}) != roots",
                   f"({_EARLIER} AND ({', '.join(_PARAM[c] for c in _DESCRIPTIVE)}) "
                   f"!= ({', '.join(_DESCRIPTIVE)}))"])
    + ")"
)

# What a raw pass staged, by the hash of its key (Python's hash of the text: the same for
# the whole pass, which runs in one process): the exact answer behind StagedKeys' "maybe",
# in a table of this connection's own, which SQLite keeps in memory up to its cache and
# spills past it (memory bounded however large the pass). The raw pass makes and drops it.
# One B-tree ordered by hash (no rowid table beside an index), each batch's rows inserted
# in that order.
STAGED: Final = "raw_staged"
STAGED_SCHEMA: Final = (
    "PRAGMA temp.cache_size=-16384",
    f"CREATE TEMP TABLE IF NOT EXISTS {STAGED} (h INTEGER NOT NULL, id INTEGER NOT NULL, "
    "PRIMARY KEY (h, id)) WITHOUT ROWID",
)


def drop_pass_indexes(db: sqlite3.Connection) -> None:
    """At the start of a raw pass (no request held): the indexes its staging never reads, dropped.

    A ledger made before the key had an index of its own (the column's
    UNIQUE) gets its empty requests table made again in the current form,
    with its other indexes. Then the key's index and ``WRITE_INDEXES`` are
    dropped (:func:`ensure_write_indexes` builds them at the first incremental
    write), and ``PASS_INDEXES`` (the pass's end builds them, as the next
    open's does after a kill).
    """
    if _has_autoindex(db):
        db.execute("DROP TABLE requests")
        for statement in (REQUESTS, *REQUESTS_INDEXES):
            db.execute(statement)
    for statement in (KEY_INDEX, *WRITE_INDEXES, *PASS_INDEXES):
        db.execute(f"DROP INDEX IF EXISTS {index_name(statement)}")


def ensure_write_indexes(db: sqlite3.Connection) -> None:
    """The indexes of the incremental path (the key's, ``WRITE_INDEXES``) where they are missing.

    Called at the start of every incremental write (in its transaction): a
    few schema lookups when they exist, a sort once after a raw pass.
    """
    if not _has_autoindex(db):
        db.execute(KEY_INDEX)
    for statement in WRITE_INDEXES:
        db.execute(statement)


def _has_autoindex(db: sqlite3.Connection) -> bool:
    """Whether the requests' key is unique by its column's UNIQUE (ledgers made before)."""
    return has_index(db, KEY_AUTOINDEX)


class StagedKeys:
    """The keys a raw pass has staged, or a few more: a fixed-size Bloom filter.

    A batch asks the ledger only about keys this may hold, in 1 MiB however
    long the history: a set of the keys themselves would grow with it.
    """

    _BITS: Final = 1 << 23

    def __init__(self) -> None:
        """An empty filter."""
        self._map = bytearray(self._BITS >> 3)

    def check_and_add(self, keys: Iterable[str]) -> list[str]:
        """Those of ``keys`` that may have been staged (every one that was); the rest noted.

        One pass over a batch's keys: a key the filter may hold needs the exact
        lookup, and its bits are set already; any other is new, and is noted
        here as staged (a batch that then fails only leaves a few false ones).
        """
        m = self._map
        mask = self._BITS - 1
        maybe = []
        for key in keys:
            h = hash(key)
            lo, hi = h & mask, (h >> 32) & mask
            if m[lo >> 3] >> (lo & 7) & 1 and m[hi >> 3] >> (hi & 7) & 1:
                maybe.append(key)
            else:
                m[lo >> 3] |= 1 << (lo & 7)
                m[hi >> 3] |= 1 << (hi & 7)
        return maybe


@dataclass(slots=True)
class Pass:
    """What a raw pass remembers of its own rows between batches (memory only).

    Each batch chains its files (predecessors, and the gaps of its new rows)
    from the rows as they stand after it; what a later batch can make stale
    is noted here, and :func:`derive` recomputes only that. A pass that is
    killed loses this, and the next open derives everything (``None``); one
    whose batch failed is ``broken`` and derives everything too.
    """

    keys: StagedKeys = field(default_factory=StagedKeys)  # the keys staged (or a few more)
    again: set[int] = field(default_factory=set)  # rows staged by more than one batch
    moved: set[int] = field(default_factory=set)  # ... main, whose time or source moved later
    files: set[int] = field(default_factory=set)  # files staged
    restaged: set[int] = field(default_factory=set)  # files staged by more than one batch
    broken: bool = False
    # The files table's ids by path, and the next free id (0: not read yet): a batch's new
    # files go in with one statement, not an upsert per file.
    paths: dict[str, int] = field(default_factory=dict)
    next_file: int = 0


# A new row: its context from its own token counts, its gap as its batch chained it, its
# id the next after the largest, given by SQLite: the rows go in in the order the batch
# assigned those ids, so the parameters are a Request's own fields with two appended
# (half the cost of a tuple built field by field), and the batch checks the ids after.
_INSERT: Final = (
    f"INSERT INTO requests ({', '.join(_FIELDS)}, context, roots) VALUES "
    f"({','.join(f'?{i}' for i in range(1, len(_FIELDS) + 1))}, "
    + " + ".join(f"?{_FIELDS.index(c) + 1}" for c in _TOKENS) + f", ?{len(_FIELDS) + 1})"
)


def stage(db: sqlite3.Connection, parsed: Parsed, appearances: Sequence[Appearance],
          bits: dict[str, int], state: Pass, *, due: float) -> tuple[int, int, list[str]]:
    """Write one batch's rows, appearances, files and sessions; (new, changed, new line keys).

    The new keys leave out parts, new rows billed on top of a request (source
    ``advisor``): no line's own request, so not in the line counts.

    ``bits`` maps each appearance's root to its ``requests.roots`` bit. Each
    file's predecessors and the new rows' gaps are chained here from the rows
    as they stand after the batch; owners, rollups and slots are left to
    :func:`derive`, and so is whatever a later batch makes stale (``state``).
    The rows it adds or merges into wait to settle until ``due`` (the end
    would otherwise mark every row, on the thread its chain waits on).
    """
    requests = parsed.requests
    one_root, common, masks = _root_masks(appearances, bits)
    # New rows take the next ids in batch order, as an insert without an id would; a key
    # the pass staged before is merged into its row (by id: the pass has no key index).
    first = db.execute("SELECT coalesce(max(id), 0) FROM requests").fetchone()[0] + 1
    stored = _staged(db, state.keys.check_and_add(requests))
    ids, fresh, older = _assign(requests, stored, first)
    now = _merged(requests, stored, state)
    prevs: list[tuple[int, int, float | None]] = []
    latest: dict[str, float] = {}
    best: dict[int, float] = {}  # the latest predecessor of each new main row, over its files
    for app, fid in zip(appearances, _files(db, appearances, state), strict=True):
        if fid in state.files:
            state.restaged.add(fid)  # its chain spans two batches: derived at the end
        state.files.add(fid)
        last = _chain(app.keys, fid, requests=requests, ids=ids, now=now, first=first,
                      prevs=prevs, best=best)
        if last is not None:
            latest[app.session] = max(latest.get(app.session, last), last)
    db.executemany(_INSERT, [
        # (Concatenation: one copy of the fields, where unpacking makes two.)
        req[:-1] + (gap_seconds(req.ts, best[rid]) if rid in best else None,  # noqa: RUF005
                    common if one_root else masks.get(req.key, 0))
        for rid, req in enumerate(fresh, first)])
    if fresh and db.execute("SELECT max(id) FROM requests").fetchone()[0] != first + len(fresh) - 1:
        raise sqlite3.IntegrityError("new rows did not take the ids chained to them")
    db.executemany(f"INSERT INTO {STAGED} (h, id) VALUES (?, ?)",
                   sorted([(hash(req.key), rid) for rid, req in enumerate(fresh, first)]))
    db.execute("INSERT INTO unsettled SELECT id, ? FROM requests WHERE id >= ?", (due, first))
    if now:  # rows of earlier batches this one merges into: settled after their last change
        db.execute(f"UPDATE unsettled SET due = ? WHERE request IN {IN_JSON}",
                   (due, json.dumps(sorted(now))))
    before = db.total_changes
    db.executemany(_MERGE, [
        (*req[:-1], None, req.context, common if one_root else masks.get(key, 0), rid)
        for key, req, rid in ((key, requests[key], rid) for key, rid in older)])
    changed = db.total_changes - before
    db.executemany("INSERT OR IGNORE INTO appearances (request, file, prev) VALUES (?, ?, ?)",
                   prevs)
    db.executemany("INSERT INTO sessions VALUES (?, ?) ON CONFLICT (session) DO UPDATE "
                   "SET last_ts = excluded.last_ts WHERE excluded.last_ts > last_ts",
                   latest.items())
    return len(fresh), changed, [req.key for req in fresh if req.source is not Source.ADVISOR]


def _root_masks(appearances: Sequence[Appearance],
                bits: dict[str, int]) -> tuple[bool, int, dict[str, int]]:
    """Whether the batch's files share one root; that root's bit; else each key's bitmask."""
    masks: dict[str, int] = {}
    one_root = len({app.root for app in appearances}) <= 1
    if not one_root:
        for app in appearances:
            bit = bits[app.root]
            for key in app.keys:
                masks[key] = masks.get(key, 0) | bit
    common = bits[appearances[0].root] if appearances and one_root else 0
    return one_root, common, masks


def _files(db: sqlite3.Connection, appearances: Sequence[Appearance], state: Pass) -> list[int]:
    """The file id of each appearance: files new to the ledger inserted with the next ids.

    A file it holds already keeps its id, and the smaller session (as the
    incremental path's upsert does).
    """
    if not state.next_file or state.broken:  # (a failed batch's ids were rolled back)
        state.paths = dict(db.execute("SELECT path, id FROM files"))
        state.next_file = max(state.paths.values(), default=0) + 1
    roots = dict(db.execute("SELECT path, id FROM roots"))
    fids: list[int] = []
    new: dict[str, list[Any]] = {}
    for app in appearances:
        fid = state.paths.get(app.path)
        if fid is None:
            fid = state.paths[app.path] = state.next_file
            state.next_file += 1
            new[app.path] = [fid, app.path, roots.get(app.root), app.session]
        elif (row := new.get(app.path)) is not None:
            row[3] = min(row[3], app.session)  # (a path twice in one batch)
        else:
            db.execute("UPDATE files SET session = ? WHERE id = ? AND session > ?",
                       (app.session, fid, app.session))
        fids.append(fid)
    db.executemany("INSERT INTO files (id, path, root, session) VALUES (?, ?, ?, ?)",
                   new.values())
    return fids


def _staged(db: sqlite3.Connection, keys: Sequence[str]) -> dict[str, tuple[int, float, int]]:
    """The rows this pass staged of some keys: (id, time, source) by key (others absent).

    Looked up by the keys' hashes in :data:`STAGED`; the row's own key settles
    a hash that two keys share.
    """
    if not keys:
        return {}
    wanted = set(keys)
    return {key: (rid, ts, source) for key, rid, ts, source in db.execute(
        f"SELECT r.key, r.id, r.ts, r.source FROM {STAGED} s JOIN requests r ON r.id = s.id "
        f"WHERE s.h IN {IN_JSON}", (json.dumps([hash(key) for key in keys]),))
        if key in wanted}


def _assign(requests: dict[str, Request], stored: dict[str, tuple[int, float, int]],
            first: int) -> tuple[dict[str, int], list[Request], list[tuple[str, int]]]:
    """Row ids of a batch's keys (new ones from ``first`` on); its new rows; its stored keys."""
    if not stored:
        return dict(zip(requests, itertools.count(first))), list(requests.values()), []
    ids = dict(zip((key for key in requests if key not in stored), itertools.count(first)))
    older = [(key, stored[key][0]) for key in requests if key in stored]
    ids.update(older)
    return ids, [req for key, req in requests.items() if key not in stored], older


def _merged(requests: dict[str, Request], stored: dict[str, tuple[int, float, int]],
            state: Pass) -> dict[int, tuple[float, int]]:
    """(time, source) of the batch's stored rows once merged with it, by row id.

    Time merges by minimum, source by maximum (exporter.records.merge). A main
    row that moves (in time, or out of the main source) is noted: the chains
    of its files in earlier batches are stale. A row stored as not main is in
    no chain (only main requests are chained), and never becomes main again
    (the source only grows): the chains it left were noted by the merge that
    made it so. Its time moving changes no chain.
    """
    now: dict[int, tuple[float, int]] = {}
    for key, (rid, ts, source) in stored.items():
        req = requests[key]
        now[rid] = merged = (min(ts, req.ts), max(source, int(req.source)))
        if source == 0 and merged != (ts, source):
            state.moved.add(rid)
    state.again.update(now)  # their gaps take files of other batches: derived at the end
    return now


def _chain(keys: Sequence[str], fid: int, *, requests: dict[str, Request], ids: dict[str, int],
           now: dict[int, tuple[float, int]], first: int,
           prevs: list[tuple[int, int, float | None]], best: dict[int, float]) -> float | None:
    """One file's predecessors (into ``prevs``) and its new rows' latest ones (``best``).

    Returns the latest time of the file's copies (its session's last request).
    """
    chain: list[tuple[float, str, int]] = []
    last: float | None = None
    for key in keys:
        req = requests.get(key)
        if req is None:
            continue  # (all are: the batch's own)
        rid = ids[key]
        ts = req.ts
        if last is None or ts > last:
            last = ts
        merged = now.get(rid)
        if merged is None:
            source: int = req.source
        else:
            ts, source = merged
        if source == 0:
            chain.append((ts, key, rid))
        else:
            prevs.append((rid, fid, None))
    chain.sort()
    prev: float | None = None
    for ts, _key, rid in chain:
        prevs.append((rid, fid, prev))
        if prev is not None and rid >= first and prev > best.get(rid, prev - 1.0):
            best[rid] = prev
        prev = ts
    return last
