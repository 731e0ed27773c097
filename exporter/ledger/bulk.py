"""The ledger's raw path: a first pass into an empty ledger, derived state computed once.

A first pass (a cold ``report``, a daemon's first start) brings every row at
once. The incremental path works out, per batch, each touched file's chain,
the gaps, the owners, the rollups and the slots, and rewrites rows a later
batch touches again. Here a batch writes its new rows, merges into those an
earlier batch of the pass stored (in SQL, by the rules of
:func:`exporter.records.merge`), their appearances, files and sessions (with
the checkpoints and line counters, in the caller's transaction). The key's
unique index is dropped for the pass (:func:`unkey`): the rows a batch
stages again are found through a table of hashes of this connection's own
(:data:`STAGED`). Only the incremental path reads it (and the appearances'
file index, ``WRITE_INDEXES``, dropped too): its first write builds both
(:func:`rekey`), so a command that only reads after its pass never sorts
them. The rows' time index (``PASS_INDEXES``), which the staging never
reads either, is built at the end, before anything reads it. A pass reads
each file whole in one batch, so the batch also chains its files: each
appearance's predecessor and each new row's gap, from the rows as they stand
after it. When the pass ends, :func:`derive` computes the rest once from
those tables: the owners (ranked over each request's sessions), what a later
batch left stale (a file holding a row it moved, the gap of a row in files of
several batches: :class:`Pass`), and the caller then rebuilds rollups and
slots from the rows. The result is the same as the incremental path's, since
both are functions of the rows and appearances alone.

Kill -9 safety: the ledger sets :data:`RAW_PASS` in its meta table in the
transaction that begins the pass (and drops the indexes) and clears it
in the one that derives. An
open that finds it set derives first, everything (what the pass remembered
of its stale chains died with it): the ledger held no request before the
pass, so the tables are the whole truth and nothing is lost or counted twice.

This module holds only SQL on a connection; the ledger owns transactions.
"""

from __future__ import annotations

import itertools
import json
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from exporter.ledger import slots
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
from exporter.records import (
    ATTRIBUTION,
    COUNT_SUMS,
    Appearance,
    CountClass,
    Parsed,
    Request,
    Source,
    gap_seconds,
)
from exporter.sqlite import sqlite3

if TYPE_CHECKING:  # the ledger imports this module
    from exporter.records import CountRow, Rules

RAW_PASS: Final = "raw_pass"  # meta name: a raw pass began and is not yet derived

_FIELDS: Final = Request._fields
_SOURCES: Final = tuple(Source)
_MAXED: Final = ("source", "input", "output", "cache_read", "cache_write_5m", "cache_write_1h",
                 "recorded_cost_usd", "web_search")
_DESCRIPTIVE: Final = ("ts", "model", "session", "project", "service_tier", "inference_geo",
                       "speed")
_TOKENS: Final = ("input", "cache_read", "cache_write_5m", "cache_write_1h")

# A request merged into the row a raw pass staged before under its key, found by id (the
# pass keeps no index on the key to conflict on), by the rules of records.merge: the
# descriptive fields of the earlier copy, the maximum of each count, the union of the
# roots; only when that changes something. Parameters: the columns, then the row's id.
_COLUMNS: Final = (*_FIELDS, "context", "roots")
_P: Final = {c: f"?{i}" for i, c in enumerate(_COLUMNS, 1)}
_WINS: Final = f"({_P['ts']} < ts OR ({_P['ts']} = ts AND {_P['session']} < session))"
_MERGE: Final = (
    "UPDATE requests SET "
    + ", ".join([*(f"{c} = CASE WHEN {_WINS} THEN {_P[c]} ELSE {c} END" for c in _DESCRIPTIVE),
                 # Attribution: the earlier copy's value, but never a blank over a name.
                 *(f"{c} = CASE WHEN {_P[c]} != '' AND ({c} = '' OR {_WINS}) THEN {_P[c]} "
                   f"ELSE {c} END" for c in ATTRIBUTION),
                 *(f"{c} = max({c}, {_P[c]})" for c in _MAXED),
                 "context = " + " + ".join(f"max({c}, {_P[c]})" for c in _TOKENS),
                 f"roots = roots | {_P['roots']}"])
    + f" WHERE id = ?{len(_COLUMNS) + 1} AND ("
    + " OR ".join([*(f"{_P[c]} > {c}" for c in _MAXED),
                   *(f"({_P[c]} != '' AND ({c} = '' OR ({_WINS} AND {_P[c]} != {c})))"
                     for c in ATTRIBUTION),
                   f"(roots | {_P['roots']}) != roots",
                   f"({_WINS} AND ({', '.join(_P[c] for c in _DESCRIPTIVE)}) "
                   f"!= ({', '.join(_DESCRIPTIVE)}))"])
    + ")"
)

# What a raw pass staged, by the hash of its key (Python's hash of the text: the same for
# the whole pass, which runs in one process): the exact answer behind Keys' "maybe", in a
# table of this connection's own, which SQLite keeps in memory up to its cache and spills
# past it (memory bounded however large the pass). Ledger.bulk makes and drops it. 16 MiB
# hold ~5 months of heavy use (a month: ~57k keys, ~2.7 MB with the index) in memory.
# One B-tree ordered by hash (no rowid table beside an index), each batch's rows inserted
# in that order: 0.07 against 0.12 s of the writer's time over a month.
STAGED: Final = "raw_staged"
STAGED_SCHEMA: Final = (
    "PRAGMA temp.cache_size=-16384",
    f"CREATE TEMP TABLE IF NOT EXISTS {STAGED} (h INTEGER NOT NULL, id INTEGER NOT NULL, "
    "PRIMARY KEY (h, id)) WITHOUT ROWID",
)


def unkey(db: sqlite3.Connection) -> None:
    """At the start of a raw pass (no request held): the indexes its staging never reads, dropped.

    A ledger made before the key had an index of its own (the column's
    UNIQUE) gets its empty requests table made again in the current form,
    with its other indexes. Then the key's index and ``WRITE_INDEXES`` are
    dropped (:func:`rekey` builds them at the first incremental write), and
    ``PASS_INDEXES`` (the end's first transaction builds them, the ledger's
    ``_unowned``, as the next open's derive does after a kill).
    """
    if _has_autoindex(db):
        db.execute("DROP TABLE requests")
        for statement in (REQUESTS, *REQUESTS_INDEXES):
            db.execute(statement)
    for statement in (KEY_INDEX, *WRITE_INDEXES, *PASS_INDEXES):
        db.execute(f"DROP INDEX IF EXISTS {index_name(statement)}")


def rekey(db: sqlite3.Connection) -> None:
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


class Keys:
    """The keys a raw pass has staged, or a few more: a fixed-size Bloom filter.

    A batch asks the ledger only about keys this may hold (a month: ~5k of
    62k, and a false one in ~5,000 keys; a year: one in ~60), in 1 MiB
    however long the history: a set of the keys themselves would grow with
    it (~8 MB a month).
    """

    _BITS: Final = 1 << 23

    def __init__(self) -> None:
        """An empty filter."""
        self._map = bytearray(self._BITS >> 3)

    def note(self, keys: Iterable[str]) -> list[str]:
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

    keys: Keys = field(default_factory=Keys)  # the keys staged (or a few more)
    again: set[int] = field(default_factory=set)  # rows staged by more than one batch
    moved: set[int] = field(default_factory=set)  # ... main, whose time or source moved later
    files: set[int] = field(default_factory=set)  # files staged
    restaged: set[int] = field(default_factory=set)  # files staged by more than one batch
    broken: bool = False
    # The files table's ids by path, and the next free id (0: not read yet): a batch's new
    # files go in with one statement, not an upsert per file (1,794 a month).
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
          bits: dict[str, int], state: Pass, *, due: float) -> tuple[int, int, int]:
    """Write one batch's rows, appearances, files and sessions; (new, changed, new parts).

    New parts are the new rows billed on top of a request (source ``advisor``):
    no line's own request, so not in the line counts.

    ``bits`` maps each appearance's root to its ``requests.roots`` bit. Each
    file's predecessors and the new rows' gaps are chained here from the rows
    as they stand after the batch; owners, rollups and slots are left to
    :func:`derive`, and so is whatever a later batch makes stale (``state``).
    The rows it adds or merges into wait to settle until ``due`` (the end
    would otherwise mark every row, on the thread its chain waits on).
    """
    requests = parsed.requests
    masks: dict[str, int] = {}
    one_root = len({app.root for app in appearances}) <= 1
    if not one_root:
        for app in appearances:
            bit = bits[app.root]
            for key in app.keys:
                masks[key] = masks.get(key, 0) | bit
    common = bits[appearances[0].root] if appearances and one_root else 0
    # New rows take the next ids in batch order, as an insert without an id would; a key
    # the pass staged before is merged into its row (by id: the pass has no key index).
    first = db.execute("SELECT coalesce(max(id), 0) FROM requests").fetchone()[0] + 1
    stored = _staged(db, state.keys.note(requests))
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
        db.execute(f"UPDATE unsettled SET due = ? WHERE request IN {_IN_JSON}",
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
    return len(fresh), changed, sum(req.source is Source.ADVISOR for req in fresh)


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
        f"WHERE s.h IN {_IN_JSON}", (json.dumps([hash(key) for key in keys]),))
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
    made it so. Its time moving changes no chain (a month: 569 such moves,
    130 files whose chaining again changed nothing).
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
_IN_JSON: Final = "(SELECT value FROM json_each(?))"


def derive(db: sqlite3.Connection, beside: Beside | None = None,
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
    on a second connection, ``beside``'s if given, which sees what was
    committed). Derived twice, the rows stay as they are: each value is a
    function of the rows' own fields, the appearances, files and sessions,
    which this leaves alone.
    """
    # The owners depend on appearances, files and sessions only, which the gap
    # statements leave alone: read beside them.
    own = beside is None
    beside = Beside(db) if beside is None else beside
    owners = beside.ask(_owners, fresh=True)
    db.create_function("gap_seconds", 2, gap_seconds, deterministic=True)
    if state is None or state.broken:
        db.execute(_PREVS.format(files=""))
        db.execute(_GAPS.format(rows=""))
    else:
        # Files holding a row that moved after they were chained, or chained by two batches.
        stale = set(state.restaged)
        stale.update(r[0] for r in db.execute(
            f"SELECT file FROM appearances WHERE request IN {_IN_JSON}",
            (json.dumps(sorted(state.moved)),)))
        rows = set(state.again)  # rows with files in several batches (moved ones among them)
        if stale:  # and the rows whose predecessor in a file chained again is another
            rows.update(r[0] for r in db.execute(
                _PREVS.format(files=f" WHERE a.file IN {_IN_JSON}") + " RETURNING request",
                (json.dumps(sorted(stale)),)))
        # Any other row kept its time, its source and every predecessor: its gap stands.
        db.execute(_GAPS.format(rows=f" WHERE a.request IN {_IN_JSON}"),
                   (json.dumps(sorted(rows)),))
    if meanwhile is not None:
        meanwhile()
    changed: list[tuple[int, str]] = beside.result(owners, db)
    if own:
        beside.close()
    db.executemany("UPDATE requests SET session = ? WHERE id = ?",
                   [(session, rid) for rid, session in changed])


# The owner of each row whose stored session is not it (see :func:`derive`).
# A row in one file is its session's; only rows in several are ranked (a window over all
# took twice as long: 0.25 against 0.14 s on a month of 67k appearances).
_OWNERS: Final = (
    "WITH m AS MATERIALIZED (SELECT request FROM appearances GROUP BY request "
    "HAVING count(*) > 1) "
    "SELECT a.request, f.session FROM appearances a JOIN files f ON f.id = a.file "
    "JOIN requests r ON r.id = a.request WHERE r.session != f.session "
    "AND a.request NOT IN m "
    "UNION ALL SELECT o.request, o.session FROM (SELECT a.request, f.session, row_number() "
    "OVER (PARTITION BY a.request ORDER BY coalesce(s.last_ts, 0.0), f.session) AS n "
    "FROM m JOIN appearances a ON a.request = m.request JOIN files f ON f.id = a.file "
    "LEFT JOIN sessions s ON s.session = f.session) AS o "
    "JOIN requests r ON r.id = o.request WHERE o.n = 1 AND r.session != o.session")


def _owners(db: sqlite3.Connection) -> list[tuple[int, str]]:
    """(row id, owner) of every row whose stored session is not its owner."""
    return db.execute(_OWNERS).fetchall()


_MISSING: Final = object()
_STOP: Final = object()


class Beside(threading.Thread):
    """Reads on a second connection of the ledger's file, while the caller's connection writes.

    SQLite runs the two on two cores (Python's driver releases the GIL while a
    statement steps). A read sees what was committed when it was asked for
    with ``fresh`` (a new snapshot), or the snapshot of the read before. The
    caller asks only for reads of tables its own transaction has not changed
    (nor will before it takes the result), so they give what they would on its
    connection. The writes stay on the caller's connection, in its
    transaction, so a kill still leaves nothing half-done. A read the thread
    could not do (an in-memory ledger, an error) is done on the caller's
    connection when its result is taken. One thread and one connection serve
    every read, so their memory is reused rather than held twice.
    """

    def __init__(self, db: sqlite3.Connection) -> None:
        """Start the thread (its connection opens with the first read)."""
        super().__init__(name="ledger-beside", daemon=True)
        self._path = next((row[2] for row in db.execute("PRAGMA database_list")
                           if row[1] == "main"), "")
        self._asked: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._reads: list[Callable[[sqlite3.Connection], Any]] = []
        self._values: list[Any] = []
        self._done: list[threading.Event] = []
        self._failed = threading.Event()
        self.start()

    def ask(self, read: Callable[[sqlite3.Connection], Any], *, fresh: bool = False) -> int:
        """Queue a read (``fresh``: in a new snapshot); its number for :meth:`result`."""
        self._reads.append(read)
        self._values.append(_MISSING)
        self._done.append(threading.Event())
        if self._failed.is_set() or not self._path:
            self._done[-1].set()  # the caller's connection does it
        else:
            self._asked.put((len(self._reads) - 1, fresh))
        return len(self._reads) - 1

    def result(self, i: int, db: sqlite3.Connection) -> Any:
        """The ``i``-th read's result: from the thread, or done now on ``db``."""
        self._done[i].wait()
        value = self._values[i]
        return self._reads[i](db) if value is _MISSING else value

    def close(self) -> None:
        """End the thread once the reads asked for are done (their results stay)."""
        self._asked.put(_STOP)
        self.join()

    def run(self) -> None:
        """In the thread: each read in turn, its result published as soon as it is known."""
        reader: sqlite3.Connection | None = None
        try:
            while (item := self._asked.get()) is not _STOP:
                i, fresh = item
                if reader is None:
                    reader = sqlite3.connect(self._path, timeout=5.0, isolation_level=None,
                                             check_same_thread=False)
                    reader.execute("PRAGMA query_only = ON")
                    # The reads scan their tables once: a small cache keeps the peak memory
                    # down (the file's pages are in the OS's cache anyway). It also bounds
                    # each sort's memory (SQLite spills a larger one to a temporary file):
                    # with 8 MiB the cold report of the month peaked ~13 MiB higher.
                    reader.execute("PRAGMA cache_size=-4096")
                if fresh and reader.in_transaction:
                    reader.execute("COMMIT")
                if not reader.in_transaction:
                    reader.execute("BEGIN")  # one snapshot until a fresh read
                self._values[i] = self._reads[i](reader)
                self._done[i].set()
        except Exception:  # the caller's connection does what is left (and meets any error)
            self._failed.set()
        finally:
            if reader is not None:
                reader.close()
            for done in self._done:
                done.set()


_DIMS: Final = "roots, model, project, source, inference_geo, service_tier, speed, gap IS NULL"
_SUMS: Final = "count(*), " + ", ".join(f"sum({c})" for c in COUNT_SUMS[1:])


def count_classes(db: sqlite3.Connection, rules: Rules) -> list[CountRow]:
    """The counter rollups of every row: sums per roots bitmask and class.

    From the slots' day sums when they can tell every class apart
    (:func:`_classes_of_days`: a few thousand rows a month, 0.015 against
    0.17 s for the rows of a heavy month), else from the rows.
    """
    of_days = _classes_of_days(db, rules)
    return of_days if of_days is not None else _classes_of_rows(db, rules)


def _classes_of_rows(db: sqlite3.Connection, rules: Rules) -> list[CountRow]:
    """:func:`count_classes` from the rows.

    SQL groups the rows by the fields a class takes as they are; a class
    depends on a request's context, time and gap only through thresholds
    (:class:`exporter.records.Rules`), so a group whose least and greatest
    values fall in one class is one class whole, and only a group that
    straddles a threshold is classed row by row.
    """
    acc = _Classes()
    add = acc.add
    levels, params = _levels(db, rules)
    groups = db.execute(
        f"SELECT {_DIMS}, min(context), max(context), min(ts), max(ts), min(gap), max(gap), "
        f"{_SUMS} FROM requests GROUP BY {_DIMS}{levels}", params).fetchall()
    straddle: set[tuple[Any, ...]] = set()
    for group in groups:
        lo_ctx, hi_ctx, lo_ts, hi_ts, lo_gap, hi_gap, *sums = group[8:]
        cls = rules.klass(_probe(group, lo_ctx, lo_ts, lo_gap))
        if cls == rules.klass(_probe(group, hi_ctx, hi_ts, hi_gap)):
            add(group[0], cls, lo_ts, hi_ts, sums)
        else:
            straddle.add(tuple(group[:8]))
    if straddle:  # one walk over the rows for every such group (each lookup would be one)
        for row in db.execute(f"SELECT {_DIMS}, {', '.join(_FIELDS)} FROM requests"):
            if row[:8] in straddle:
                req = _request(row[8:])
                add(row[0], rules.klass(req), req.ts, req.ts, rules.sums(req))
    return acc.rows()


class _Classes:
    """Counter rollup rows being summed: per roots bitmask and class, time bounds and sums."""

    def __init__(self) -> None:
        """No class yet."""
        self._acc: dict[tuple[int, CountClass], list[Any]] = {}

    def add(self, mask: int, cls: CountClass, first: float, last: float,
            sums: Sequence[int]) -> None:
        """Count ``sums`` (first to last) under ``mask`` and ``cls``."""
        row = self._acc.get((mask, cls))
        if row is None:
            self._acc[(mask, cls)] = [first, last, *sums]
        else:
            row[0], row[1] = min(row[0], first), max(row[1], last)
            for i, v in enumerate(sums, 2):
                row[i] += v

    def rows(self) -> list[CountRow]:
        """Every class counted, as the ledger stores it."""
        return [(mask, cls, row[0], row[1], tuple(row[2:]))
                for (mask, cls), row in self._acc.items()]


# A slot_days row with its key's fields, in _DIMS order (the gap bucket for ``gap IS NULL``).
_OF_DAYS: Final = (
    "SELECT d.roots, k.model, k.project, k.source, k.inference_geo, k.service_tier, k.speed, "
    "d.bucket, k.long, d.first, d.last, d.n, d.input, d.output, d.cache_read, "
    "d.cache_write_5m, d.cache_write_1h, d.web_search FROM slot_days d "
    "JOIN slot_keys k ON k.id = d.key")


def _classes_of_days(db: sqlite3.Connection, rules: Rules) -> list[CountRow] | None:
    """:func:`count_classes` from the slots' day sums; None when they cannot tell.

    A day row (one UTC day, key, roots and gap bucket) is one class whole
    when every cut of the rules falls on the row's edges: each context cut
    is one of the thresholds its key's long-context level counts, each time
    cut a UTC midnight, each gap cut a bucket's edge (a request that is not
    main has no gap). The slots must be this layout's, which the ledger keeps
    with its rows in the same transaction.
    """
    if slots.version(db) != slots.VERSION:
        return None
    thresholds = sorted(slots.stored_thresholds(db))  # (stored sorted: the levels' order)
    models = [m for (m,) in db.execute("SELECT DISTINCT model FROM slot_keys")]
    for model in models:
        sizes, times, gap_cuts = rules.cuts(model)
        if (not set(sizes) <= set(thresholds) or any(t % 86_400 for t in times)
                or not set(gap_cuts) <= set(slots.BUCKET_EDGES)):
            return None
    # A value inside each long-context level and gap bucket: the class is the same for all.
    contexts = [0, *(t + 1 for t in thresholds)]
    gaps: list[float | None] = [None, *map(float, slots.BUCKET_EDGES),
                                slots.BUCKET_EDGES[-1] + 1.0]
    acc = _Classes()
    for row in db.execute(_OF_DAYS):
        bucket, level, first, last = row[7:11]
        gap = gaps[bucket] if bucket > 0 else None
        acc.add(row[0], rules.klass(_probe(row, contexts[level], first, gap)), first, last,
                row[11:])
    return acc.rows()


def _levels(db: sqlite3.Connection, rules: Rules) -> tuple[str, list[Any]]:
    """SQL grouping terms (and their parameters) that split rows at the rules' cuts."""
    ctx: list[str] = []
    tss: list[str] = []
    ctx_params: list[Any] = []
    ts_params: list[Any] = []
    gaps: set[float] = set()
    for (model,) in db.execute("SELECT DISTINCT model FROM requests"):
        sizes, times, gap_cuts = rules.cuts(model)
        gaps.update(gap_cuts)
        if sizes:
            ctx.append("WHEN ? THEN " + " + ".join("(context > ?)" for _ in sizes))
            ctx_params += [model, *sizes]
        if times:
            tss.append("WHEN ? THEN " + " + ".join("(ts >= ?)" for _ in times))
            ts_params += [model, *times]
    # (A constant integer in GROUP BY would name a column: absent terms are left out.)
    terms = [*([f"CASE model {' '.join(ctx)} ELSE 0 END"] if ctx else []),
             *([f"CASE model {' '.join(tss)} ELSE 0 END"] if tss else []),
             *(["(" + " + ".join("(gap > ?)" for _ in gaps) + ")"] if gaps else [])]
    params = [*ctx_params, *ts_params, *sorted(gaps)]
    return "".join(f", {t}" for t in terms), params


def _probe(group: Sequence[Any], context: int, ts: float, gap: float | None) -> Request:
    """A request with a group's fields (``_DIMS`` order) and one edge's context, time, gap."""
    _mask, model, project, source, geo, tier, speed = group[:7]
    return Request("", ts, model, "", project, _SOURCES[source], context, 0, 0, 0, 0, tier,
                   geo, speed, 0.0, 0, gap=gap)


def _request(row: Sequence[Any]) -> Request:
    """A Request from a row in ``Request`` field order (source as stored: an integer)."""
    return Request._make((*row[:5], _SOURCES[row[5]], *row[6:]))
