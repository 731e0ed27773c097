"""The metric rollups the ledger keeps with its rows: counter sums per class, histograms.

Counters count a request as soon as it is stored (``rollup_counts``: sums per
roots bitmask and counting class). Histograms count it once it *settled*: no
change for the ledger's ``settle_seconds`` (``unsettled`` holds those still
waiting, ``rollup_hist`` the buckets), so a request whose lines still grow is
observed once, with its final values. The counting rules (:class:`Rules`) say
what a request counts as; a ledger opened under other rules counts every row
again (:func:`rebuild`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.ledger import rows as stored_rows
from exporter.ledger.batch import Batch
from exporter.ledger.classes import count_classes
from exporter.ledger.rows import COLUMNS, request_of
from exporter.records import COUNT_SUMS, CountClass, CountRow, HistRow, HistSeries, Request, Rules
from exporter.sqlite import sqlite3

_Hists = dict[tuple[int, HistSeries, int], float]


@dataclass(frozen=True, slots=True)
class Rollups:
    """Every stored rollup row (the state a projection starts from), and the roots' bits."""

    counts: list[CountRow]
    hists: list[HistRow]
    roots: dict[str, int]


class _Increments:
    """Counter increments being summed: per roots bitmask and class, time bounds and sums."""

    def __init__(self) -> None:
        """Nothing added yet."""
        self.acc: dict[tuple[int, CountClass], list[Any]] = {}

    def add(self, mask: int, cls: CountClass, ts: float, sums: tuple[int, ...],
            sign: int = 1) -> None:
        """Add (``sign`` -1: take away) one request's sums."""
        acc = self.acc.get((mask, cls))
        if acc is None:
            self.acc[(mask, cls)] = [ts, ts, *(sign * v for v in sums)]
        else:
            acc[0], acc[1] = min(acc[0], ts), max(acc[1], ts)
            for i, v in enumerate(sums, 2):
                acc[i] += sign * v

    def rows(self) -> list[CountRow]:
        """The increments as rollup rows."""
        return [(mask, cls, acc[0], acc[1], tuple(acc[2:]))
                for (mask, cls), acc in self.acc.items()]


def add_batch(db: sqlite3.Connection, rules: Rules, batch: Batch, due: float) -> None:
    """Add the batch's increments to the counter rollups; its new and changed rows wait ``due``."""
    ids = batch.ids
    inc = _Increments()
    waiting: list[tuple[int, float]] = []
    for req in batch.new:
        rid = ids[req.key]
        inc.add(batch.masks[rid], rules.count_class(req), req.ts, rules.sums(req))
        waiting.append((rid, due))
    changed: set[int] = set()
    for old, new in batch.upgraded:
        rid = ids[new.key]
        changed.add(rid)
        cls = rules.count_class(new)
        before, after = batch.before.get(rid, 0), batch.masks[rid]
        if before == after:  # the growth lands where the request counts now
            inc.add(after, cls, new.ts, tuple(
                n - o for n, o in zip(rules.sums(new, 0), rules.sums(old, 0), strict=True)))
        else:  # seen under a new root as well: the whole request moves to its new bitmask
            inc.add(before, cls, old.ts, rules.sums(old), -1)  # one class for both halves
            inc.add(after, cls, new.ts, rules.sums(new))
        waiting.append((rid, due))
    for rid, known in batch.known.items():
        before, after = batch.before.get(rid, 0), batch.masks[rid]
        if rid not in changed and before != after:
            cls = rules.count_class(batch.rows[rid])
            inc.add(before, cls, known.ts, rules.sums(known), -1)
            inc.add(after, cls, known.ts, rules.sums(known))
    if batch.upgraded:
        settled = _settled(db, [ids[new.key] for _, new in batch.upgraded])
        batch.late = len(settled)
        waiting = [(rid, d) for rid, d in waiting if rid not in settled]
        if settled:
            stored_rows.add_to_counter(db, "late_updates", "", len(settled))
    db.executemany("INSERT OR REPLACE INTO unsettled VALUES (?, ?)", waiting)
    batch.counts = inc.rows()
    write_counts(db, batch.counts)


def write_counts(db: sqlite3.Connection, rows: Sequence[CountRow]) -> None:
    """Add counter increments to the stored rollups."""
    dims = ", ".join(CountClass._fields)
    sums = ", ".join(COUNT_SUMS)
    marks = ",".join("?" * (3 + len(CountClass._fields) + len(COUNT_SUMS)))
    db.executemany(
        f"INSERT INTO rollup_counts (roots, {dims}, first_ts, last_ts, {sums}) "
        f"VALUES ({marks}) ON CONFLICT (roots, {dims}) DO UPDATE SET "
        "first_ts = min(first_ts, excluded.first_ts), "
        "last_ts = max(last_ts, excluded.last_ts), "
        f"{', '.join(f'{c} = {c} + excluded.{c}' for c in COUNT_SUMS)}",
        [(mask, *cls, first, last, *values) for mask, cls, first, last, values in rows])


def _write_hists(db: sqlite3.Connection, rows: Sequence[HistRow]) -> None:
    """Add histogram increments to the stored rollups."""
    db.executemany(
        "INSERT INTO rollup_hist VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT "
        "(roots, name, model, source, arch, bucket) DO UPDATE SET value = value + "
        "excluded.value",
        [(mask, *series, bucket, value) for mask, series, bucket, value in rows])


def _settled(db: sqlite3.Connection, ids: Sequence[int]) -> set[int]:
    """Which of ``ids`` are already in the histograms."""
    waiting: set[int] = set()
    for part in stored_rows.chunks(ids):
        marks = ",".join("?" * len(part))
        waiting.update(r[0] for r in db.execute(
            f"SELECT request FROM unsettled WHERE request IN ({marks})", part))
    return set(ids) - waiting


def settle_due(db: sqlite3.Connection, rules: Rules, batch: Batch, now: float | None) -> None:
    """Move the requests due by ``now`` (None: all) into the histogram rollups.

    Observations count under the roots the request had when it settled.
    """
    where = "" if now is None else "WHERE due <= ?"
    due = [r[0] for r in db.execute(f"SELECT request FROM unsettled {where}",
                                     () if now is None else (now,))]
    acc: _Hists = {}
    for part in stored_rows.chunks(due):
        marks = ",".join("?" * len(part))
        for row in db.execute(
            f"SELECT roots, {COLUMNS} FROM requests WHERE id IN ({marks})", part
        ):
            _observe(rules, row[0], request_of(row[1:]), acc)
        db.execute(f"DELETE FROM unsettled WHERE request IN ({marks})", part)
    hists = [(mask, series, bucket, value) for (mask, series, bucket), value in acc.items()]
    _write_hists(db, hists)
    batch.hists.extend(hists)


def rebuild(db: sqlite3.Connection, rules: Rules) -> None:
    """Count every row again under ``rules`` (new rules, or stale), in the caller's transaction."""
    db.execute("DELETE FROM rollup_counts")
    db.execute("DELETE FROM rollup_hist")
    hists: _Hists = {}
    last = 0
    while True:  # settled rows in id pages: a year of rows never sits in memory at once
        rows = db.execute(f"SELECT id, roots, {COLUMNS} FROM requests WHERE id > ? AND "
                          "id NOT IN (SELECT request FROM unsettled) ORDER BY id LIMIT 20000",
                          (last,)).fetchall()
        if not rows:
            break
        last = rows[-1][0]
        for row in rows:
            _observe(rules, row[1], request_of(row[2:]), hists)
    write_counts(db, count_classes(db, rules))
    _write_hists(db, [(m, s, b, v) for (m, s, b), v in hists.items()])
    stored_rows.set_meta(db, "rollups", rules.fingerprint)


def read(read: Callable[[str], list[tuple[Any, ...]]], roots: dict[str, int]) -> Rollups:
    """Every stored rollup row: O(classes x root sets + series x buckets)."""
    dims = ", ".join(CountClass._fields)
    counts: list[CountRow] = [
        (r[0], CountClass(*r[1:10]), r[10], r[11], tuple(r[12:]))
        for r in read(f"SELECT roots, {dims}, first_ts, last_ts, "
                      f"{', '.join(COUNT_SUMS)} FROM rollup_counts ORDER BY first_ts")
    ]
    hists: list[HistRow] = [
        (r[0], HistSeries(*r[1:5]), r[5], r[6])
        for r in read("SELECT roots, name, model, source, arch, bucket, value FROM rollup_hist")
    ]
    return Rollups(counts, hists, roots)


def _observe(rules: Rules, mask: int, req: Request, acc: _Hists) -> None:
    """Fold one settled request's histogram observations into ``acc``."""
    for series, bucket, value in rules.observations(req):
        acc[(mask, series, bucket)] = acc.get((mask, series, bucket), 0) + 1
        acc[(mask, series, -1)] = acc.get((mask, series, -1), 0) + value
