"""Ledgers for report tests: requests in, a Selection out, with or without usage slots.

``real`` goes through the ledger itself (one transcript file per session, so
gaps follow each session's main chain). ``slotted`` is an in-memory table in
the ledger's shape with the usage slots rebuilt over it: report figures must
not depend on which of the two answers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from exporter.ledger import slot_sums, slots
from exporter.ledger.schema import create_slot_tables
from exporter.ledger.store import Ledger
from exporter.projections.periods import UTC_ZONE, Range
from exporter.projections.selection import Selection
from exporter.records import Appearance, Parsed, Request, Source, gap_seconds
from exporter.sqlite import sqlite3

ROOT = "/transcripts/projects"
_COLUMNS = ", ".join(Request._fields)  # the ledger's requests columns (gap last)


def session_gaps(requests: Iterable[Request]) -> dict[str, float | None]:
    """Each main request's gap since its session's previous main request, by key."""
    last: dict[str, float] = {}
    out: dict[str, float | None] = {}
    main = sorted((r for r in requests if r.source is Source.MAIN), key=lambda r: (r.ts, r.key))
    for req in main:
        prev = last.get(req.session)
        out[req.key] = None if prev is None else gap_seconds(req.ts, prev)
        last[req.session] = req.ts
    return out


@contextmanager
def real(requests: Sequence[Request], tmp: Path) -> Iterator[Ledger]:
    """A ledger file holding ``requests``, each session in its own transcript file."""
    ledger = Ledger(tmp / "ledger.sqlite3")
    parsed = Parsed()
    keys: dict[str, list[str]] = defaultdict(list)
    for req in requests:
        parsed.add(req)
        keys[req.session].append(req.key)
    apps = [Appearance(f"{ROOT}/p/{s}.jsonl", ROOT, s, tuple(k)) for s, k in keys.items()]
    ledger.apply(parsed, [], 0, apps)
    try:
        yield ledger
    finally:
        ledger.close()


def slotted(requests: Sequence[Request],
            thresholds: Sequence[int] | None = None) -> sqlite3.Connection:
    """An in-memory ``requests`` table (gaps per session) with its usage slots.

    ``thresholds``: the long-context split of the slots (default: the slots' own).
    """
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE TABLE requests ({_COLUMNS}, roots INTEGER NOT NULL DEFAULT 1)")
    db.execute("CREATE INDEX requests_ts ON requests (ts)")
    gaps = session_gaps(requests)
    marks = ",".join("?" * len(Request._fields))
    db.executemany(f"INSERT INTO requests ({_COLUMNS}) VALUES ({marks})",
                   [(*r[:-1], gaps.get(r.key)) for r in requests])
    create_slot_tables(db)
    slot_sums.rebuild(db)
    if thresholds is not None:
        slot_sums.use_thresholds(db, thresholds)
    return db


def reader(db: sqlite3.Connection) -> Any:
    """``Ledger.read`` for a bare connection."""
    def read(sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return db.execute(sql, params).fetchall()
    return read


def select(source: Ledger | sqlite3.Connection, rng: Range | None = None,
           **filters: Any) -> Selection:
    """A Selection over a ledger (raw requests) or a slotted connection."""
    rng = rng or Range(None, None, UTC_ZONE)
    if isinstance(source, Ledger):
        return Selection(source.read, source.scope(None), rng, **filters)
    return Selection(reader(source), "requests", rng, slots=True, days=True,
                     slot_thresholds=slots.stored_thresholds(source), **filters)
