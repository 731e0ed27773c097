"""Counter rollups of every row at once: sums per roots bitmask and counting class.

What a first pass and new counting rules need (:func:`count_classes`): the
incremental path adds a batch's own increments instead
(:mod:`exporter.ledger.rollups`). A class depends on a request's context,
time and gap only through thresholds (:class:`exporter.records.Rules`), so
groups of rows are classed at their edges, not row by row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from exporter.ledger import slots
from exporter.ledger.rows import FIELDS, request_of
from exporter.records import COUNT_SUMS, CountClass, CountRow, Request, Rules, Source
from exporter.sqlite import sqlite3

_SOURCES: Final = tuple(Source)

_DIMS: Final = "roots, model, project, source, inference_geo, service_tier, speed, gap IS NULL"
_SUMS: Final = "count(*), " + ", ".join(f"sum({c})" for c in COUNT_SUMS[1:])


def count_classes(db: sqlite3.Connection, rules: Rules) -> list[CountRow]:
    """The counter rollups of every row: sums per roots bitmask and class.

    From the slots' day sums when they can tell every class apart
    (:func:`_classes_of_days`: a few thousand rows a month, not every row),
    else from the rows.
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
        cls = rules.count_class(_probe(group, lo_ctx, lo_ts, lo_gap))
        if cls == rules.count_class(_probe(group, hi_ctx, hi_ts, hi_gap)):
            add(group[0], cls, lo_ts, hi_ts, sums)
        else:
            straddle.add(tuple(group[:8]))
    if straddle:  # one walk over the rows for every such group (each lookup would be one)
        for row in db.execute(f"SELECT {_DIMS}, {', '.join(FIELDS)} FROM requests"):
            if row[:8] in straddle:
                req = request_of(row[8:])
                add(row[0], rules.count_class(req), req.ts, req.ts, rules.sums(req))
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
        acc.add(row[0], rules.count_class(_probe(row, contexts[level], first, gap)), first, last,
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
