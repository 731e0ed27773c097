"""Usage sums for `report`, from the ledger's slots or its requests, priced exactly.

Every table of `report` is a sum over requests grouped by something: a day, a
session, a model. SQLite does the grouping and summing; Python sees one
:class:`Fact` per group, *key* (session, project and the attributes that decide
a price: model, source, geo, tier, speed, long context) and price period, and
prices each distinct class once.

Two producers give the same facts:
- the ledger's usage slots (:mod:`exporter.ledger.slots`: sums per 5 minutes and key,
  kept with the rows), for whole slots, and their sums per UTC day and per
  16-day block (per key, per price class, per session) for whole days and
  blocks. A year's summary groups a few thousand block rows instead of sorting
  ~700k requests by text columns;
- the requests themselves, for the partial slots at the edges of a time range,
  and for everything when slots cannot answer (no slots yet, a time zone or a
  price date off the 5-minute grid, a long-context threshold other than the
  slots' own).

Each fact is priced exactly (:mod:`exporter.projections.class_prices`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from exporter.ledger import slots
from exporter.projections.class_prices import ClassPrices
from exporter.projections.periods import Range
from exporter.projections.selection import SUMS_SQL, Selection, TimeKey
from exporter.projections.usage import NO_BUCKET, Attrs, Fact
from exporter.records import Source

_SLOT: Final = slots.SLOT_SECONDS
_SOURCES: Final = tuple(Source)
_DAY_SLOTS: Final = slots.SLOTS_PER_DAY


@dataclass(frozen=True, slots=True)
class _Table:
    """A table of sums: its name, its time unit's column, and SQL for a unit's start."""

    name: str
    unit: str
    start: str


_SLOTS: Final = _Table("slots", "slot", f"slot * {_SLOT}")
_DAYS: Final = _Table("slot_days", "day", "day * 86400")
_BLOCK_DAYS: Final = slots.BLOCK_DAYS
_BLOCKS: Final = _Table("slot_blocks", "block", f"block * {_BLOCK_DAYS * 86_400}")


class Facts:
    """The selection's facts, from the slots where they can answer, else from requests."""

    def __init__(self, selection: Selection, prices: ClassPrices, *, by_class: bool = False,
                 keep_project: bool = False) -> None:
        """Facts of ``selection``, priced with ``prices``.

        ``by_class``: facts per price class only (their session and project are
        blank): fewer rows for views that need neither; ``keep_project``: per
        price class and project (the session blank).
        """
        self.sel = selection
        self.prices = prices
        self.by_class = by_class
        self.keep_project = keep_project
        self._keys: dict[int, Attrs] | None = None
        self._level = prices.relevel(selection.slot_thresholds)  # slot key level -> ours
        self._blocks: bool | None = None  # whether the block sums are kept (read once)

    @property
    def slotted(self) -> bool:
        """Whether whole slots come from the ledger's slot sums."""
        return self.sel.slots and self.prices.fits_slots(self.sel.slot_thresholds)

    def collect(self, key: TimeKey | None = None, *, buckets: bool = False) -> list[Fact]:
        """Facts grouped by ``key`` (or not by time), split by gap bucket if asked."""
        if not self.slotted or (key is not None and not key.aligned):
            return self._from_requests(key, buckets, ())
        interior, edges = self._split()
        out: list[Fact] = []
        if interior is not None:
            lo, hi = interior
            mixed = [m for m in (key.mixed if key else ())
                     if (lo is None or m >= lo) and (hi is None or m < hi)]
            if mixed:  # slots a key splits: from the requests, one index range per slot
                listed = f"json_each('{json.dumps(mixed)}')"
                out = self._from_table(_SLOTS, key, buckets, interior,
                                       f"slot NOT IN (SELECT value FROM {listed})")
                out.extend(self._from_requests(
                    key, buckets, (f"CAST(r.ts / {_SLOT} AS INTEGER) = j.value",),
                    join=f"{listed} AS j JOIN", on=True))
            else:
                for table, part in self._levels(interior, key):
                    out.extend(self._from_table(table, key, buckets, part))
        for edge in edges:
            out.extend(self._from_requests(key, buckets, edge))
        return out

    def _levels(self, interior: tuple[int | None, int | None], key: TimeKey | None,
                blocks: bool = True) -> list[tuple[_Table, tuple[int | None, int | None]]]:
        """Whole UTC days from the day sums, the rest of the whole slots from the slot sums.

        Without a time key (and ``blocks``), whole 16-day blocks from the block sums.
        """
        lo, hi = interior
        if not (self.sel.days and self.prices.fits_days and (key is None or key.day_aligned)):
            return [(_SLOTS, interior)]
        d_lo = None if lo is None else -(-lo // _DAY_SLOTS)
        d_hi = None if hi is None else hi // _DAY_SLOTS
        if d_lo is not None and d_hi is not None and d_lo >= d_hi:
            return [(_SLOTS, interior)]
        out = self._day_parts(d_lo, d_hi) if key is None and blocks else [(_DAYS, (d_lo, d_hi))]
        if lo is not None and d_lo is not None and lo < d_lo * _DAY_SLOTS:
            out.append((_SLOTS, (lo, d_lo * _DAY_SLOTS)))
        if hi is not None and d_hi is not None and d_hi * _DAY_SLOTS < hi:
            out.append((_SLOTS, (d_hi * _DAY_SLOTS, hi)))
        return out

    def _day_parts(self, d_lo: int | None, d_hi: int | None
                   ) -> list[tuple[_Table, tuple[int | None, int | None]]]:
        """Days ``[d_lo, d_hi)``: whole blocks from the block sums, the other days from days'.

        A block with a price date inside it (not at its start) is read by days.
        """
        if self._blocks is None:
            self._blocks = slots.read_version(self.sel.read) == slots.VERSION
        b_lo = None if d_lo is None else -(-d_lo // _BLOCK_DAYS)
        b_hi = None if d_hi is None else d_hi // _BLOCK_DAYS
        if not self._blocks or (b_lo is not None and b_hi is not None and b_lo >= b_hi):
            return [(_DAYS, (d_lo, d_hi))]
        width = _BLOCK_DAYS * 86_400
        cuts = sorted({int(t // width) for t in self.prices.starts if t % width
                       and (b_lo is None or t >= b_lo * width)
                       and (b_hi is None or t < b_hi * width)})
        out: list[tuple[_Table, tuple[int | None, int | None]]] = []
        start = b_lo
        for b in cuts:
            if start is None or start < b:
                out.append((_BLOCKS, (start, b)))
            out.append((_DAYS, (b * _BLOCK_DAYS, (b + 1) * _BLOCK_DAYS)))
            start = b + 1
        if start is None or b_hi is None or start < b_hi:
            out.append((_BLOCKS, (start, b_hi)))
        if d_lo is not None and b_lo is not None and d_lo < b_lo * _BLOCK_DAYS:
            out.append((_DAYS, (d_lo, b_lo * _BLOCK_DAYS)))
        if d_hi is not None and b_hi is not None and b_hi * _BLOCK_DAYS < d_hi:
            out.append((_DAYS, (b_hi * _BLOCK_DAYS, d_hi)))
        return out

    def _split(self) -> tuple[tuple[int | None, int | None] | None, list[tuple[str, ...]]]:
        """Whole slots ``[lo, hi)`` of the range (None: none), and the partial ones' conditions."""
        since, until = self.sel.range.since, self.sel.range.until
        lo = None if since is None else math.ceil(since / _SLOT)
        hi = None if until is None else math.floor(until / _SLOT)
        if lo is not None and hi is not None and lo >= hi:
            return None, [()]  # inside one or two partial slots: all from the requests
        edges: list[tuple[str, ...]] = []
        if since is not None and lo is not None and lo * _SLOT > since:
            edges.append((f"CAST(ts / {_SLOT} AS INTEGER) < {lo}",))
        if until is not None and hi is not None and hi * _SLOT < until:
            edges.append((f"CAST(ts / {_SLOT} AS INTEGER) >= {hi}",))
        return (lo, hi), edges

    def slot_where(self, interior: tuple[int | None, int | None],
                   table: _Table | None = None) -> tuple[str, list[object]]:
        """The WHERE condition on a sums table for its units ``[lo, hi)`` of this selection."""
        unit = (table or _SLOTS).unit
        lo, hi = interior
        parts: list[str] = []
        params: list[object] = []
        if lo is not None:
            parts.append(f"{unit} >= {int(lo)}")
        if hi is not None:
            parts.append(f"{unit} < {int(hi)}")
        if self.sel.slot_scope:
            parts.append(f"({self.sel.slot_scope})")
        if self.sel.filtered:
            filters = Selection(self.sel.read, "", Range(None, None, self.sel.range.zone),
                                self.sel.projects, self.sel.models, self.sel.sources)
            conds = filters._filters(params)
            parts.append(f"s.key IN (SELECT id FROM slot_keys WHERE {' AND '.join(conds)})")
        return " AND ".join(parts) or "1", params

    def _from_table(self, table: _Table, key: TimeKey | None, buckets: bool,
                    part: tuple[int | None, int | None], extra: str = "") -> list[Fact]:
        """Facts of whole slots or days, from their sums."""
        cond, params = self.slot_where(part, table)
        if extra:
            cond = f"{cond} AND {extra}"
        when = table.start if key is None or table is _DAYS else key.slot_time
        group = key.sql(when) if key else "NULL"
        sql = (f"SELECT {group}, s.key, {'bucket' if buckets else NO_BUCKET}, "
               f"{self.prices.period_sql(table.start)}, min(first), max(last), sum(n), {SUMS_SQL}, "
               f"sum(gap_ms) FROM {table.name} AS s WHERE {cond} GROUP BY 1, 2, 3, 4")
        if self.by_class and table is _BLOCKS and not (self.keep_project or self.sel.filtered):
            return self._class_blocks(cond, params, buckets)
        if self.by_class:
            return self._by_class(sql, params)
        keys = self.keys()
        return [self._fact(row[0], keys[row[1]], row[2:]) for row in self.sel.read(sql, params)]

    def _class_blocks(self, cond: str, params: list[object], buckets: bool) -> list[Fact]:
        """Facts per price class of whole blocks, from the class sums (no session, no project)."""
        sql = ("SELECT c.model, c.source, c.service_tier, c.inference_geo, c.speed, c.long, "
               f"{'bucket' if buckets else NO_BUCKET}, "
               f"{self.prices.period_sql(_BLOCKS.start)}, min(first), max(last), sum(n), "
               f"{SUMS_SQL}, sum(gap_ms) "
               "FROM slot_class_blocks AS s JOIN slot_classes c ON c.id = s.class "
               f"WHERE {cond} GROUP BY 1, 2, 3, 4, 5, 6, 7, 8")
        level = self._level
        return [self._fact(None, Attrs("", "", r[0], _SOURCES[r[1]], r[2], r[3], r[4],
                                       level[r[5]]), r[6:]) for r in self.sel.read(sql, params)]

    def _by_class(self, sql: str, params: list[object]) -> list[Fact]:
        """Fold the key rows of ``sql`` into price classes in SQL (few rows, text keys)."""
        names = ("g", "key", "b", "p", "f", "l", "n", "i", "o", "cr", "w5", "w1", "ws", "gm")
        sums = ", ".join(f"sum(x.{c})" for c in names[6:])
        project = "k.project" if self.keep_project else "''"
        outer = (f"WITH x({', '.join(names)}) AS MATERIALIZED ({sql}) "
                 f"SELECT x.g, {project}, k.model, k.source, k.service_tier, k.inference_geo, "
                 f"k.speed, k.long, x.b, x.p, min(x.f), max(x.l), {sums} FROM x "
                 "JOIN slot_keys k ON k.id = x.key GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10")
        level = self._level
        of = self.sel.project_of
        return [self._fact(r[0], Attrs("", of(r[1]), r[2], _SOURCES[r[3]], r[4], r[5], r[6],
                                       level[r[7]]), r[8:]) for r in self.sel.read(outer, params)]

    def _from_requests(self, key: TimeKey | None, buckets: bool, extra: Sequence[str],
                       join: str = "", on: bool = False) -> list[Fact]:
        """Facts from the requests (partial slots, or everything).

        ``join``/``on``: join a table of slot numbers ``j`` and seek each slot's rows.
        """
        if on:
            extra = (*extra, f"r.ts >= j.value * {_SLOT} - 1",
                     f"r.ts < (j.value + 1) * {_SLOT} + 1")
        bucket = slots.BUCKET if buckets else str(NO_BUCKET)
        who = ("'', project" if self.keep_project else "'', ''") if self.by_class else (
            "session, project")
        rows = self.sel.rows(
            f"{key.sql('ts') if key else 'NULL'}, {who}, model, source, "
            f"service_tier, inference_geo, speed, {self.prices.long_sql()}, {bucket}, "
            f"{self.prices.period_sql('ts')}, min(ts), max(ts), count(*), {SUMS_SQL}, "
            f"sum({slots.GAP_MS})",
            *extra, tail="GROUP BY " + ", ".join(map(str, range(1, 12))), join=join)
        of = self.sel.project_of
        return [self._fact(r[0], Attrs(r[1], of(r[2]), r[3], _SOURCES[r[4]], r[5], r[6], r[7],
                                       int(r[8])), r[9:]) for r in rows]

    def _fact(self, key: Any, attrs: Attrs, row: Sequence[Any]) -> Fact:
        """A fact from ``bucket, period, first, last, n, 6 sums, gap sum in ms``."""
        bucket, period, first, last, n, *rest = row
        sums = [int(v or 0) for v in rest[:6]]
        usage = self.prices.usage(attrs, int(period), float(first), int(n), sums)
        return Fact(key, attrs, int(bucket), float(first), float(last), usage, int(rest[6] or 0))

    def keys(self) -> dict[int, Attrs]:
        """Every slot key's attributes (a few thousand rows, read once)."""
        if self._keys is None:
            found = self.sel.read("SELECT id, session FROM slot_sessions", [])
            sessions: dict[int, str] = dict(found)
            self._keys = {
                kid: Attrs(sessions[sid], self.sel.project_of(project), model,
                           _SOURCES[source], tier, geo, speed, self._level[long])
                for kid, sid, project, model, source, tier, geo, speed, long in self.sel.read(
                    "SELECT id, sid, project, model, source, service_tier, inference_geo, "
                    "speed, long FROM slot_keys", [])
            }
        return self._keys

    # ---- per session: what the summary's session figures need ------------------------
    def sessions(self) -> dict[str, list[Any]]:
        """Each session's ``[requests, output, cache read, main requests with a gap, first, last]``.

        Summed in SQL per session (slot sums where they answer, requests at the
        edges): one row per session reaches Python, not one per key and bucket.
        """
        out: dict[str, list[Any]] = {}
        edges: list[tuple[str, ...]]
        if not self.slotted:
            edges = [()]
        else:
            interior, edges = self._split()
            if interior is not None:
                names: dict[int, str] = dict(self.sel.read(
                    "SELECT id, session FROM slot_sessions", []))
                for table, part in self._levels(interior, None):
                    cond, params = self.slot_where(part, table)
                    if table is _BLOCKS and not self.sel.filtered:  # the per-session sums
                        sql = ("SELECT sid, sum(n), sum(output), sum(cache_read), sum(gaps), "
                               "min(first), max(last) FROM slot_session_blocks AS s "
                               f"WHERE {cond} GROUP BY sid")
                    else:
                        sql = ("SELECT sid, sum(n), sum(output), sum(cache_read), "
                               "sum(CASE WHEN bucket > 0 THEN n ELSE 0 END), min(first), "
                               f"max(last) FROM {table.name} AS s WHERE {cond} GROUP BY sid")
                    rows = self.sel.read(sql, params)
                    for sid, *sums in rows:
                        _add_session(out, names[sid], sums)
        for edge in edges:
            rows = self.sel.rows(
                f"session, count(*), sum(output), sum(cache_read), "
                f"sum(source = {int(Source.MAIN)} AND gap IS NOT NULL), min(ts), max(ts)",
                *edge, tail="GROUP BY session")
            for name, *sums in rows:
                _add_session(out, name, sums)
        return out

    # ---- figures over windows: the busiest minute, the most sessions in 10 minutes -----
    def busiest_minute(self) -> int:
        """Most requests in one calendar minute (UTC-aligned)."""
        if not self.slotted:
            return self._busiest_raw("count(*)", 60, ())
        interior, edges = self._split()
        best = max((self._busiest_raw("count(*)", 60, e) for e in edges), default=0)
        minutes = ", ".join(f"sum(m{i})" for i in range(_SLOT // 60))
        for table, part in self._peak_levels(interior):
            if table is _DAYS:
                best = max(best, self._day_peak("minute", part))
                continue
            cond, params = self.slot_where(part, _SLOTS)
            rows = self.sel.read(f"SELECT max({minutes}) FROM slots AS s WHERE {cond} "
                                 "GROUP BY slot ORDER BY 1 DESC LIMIT 1", params)
            best = max(best, int(rows[0][0]) if rows else 0)
        return best

    def busiest_sessions_10m(self) -> int:
        """Most distinct sessions with a request in one aligned 10-minute window."""
        if not self.slotted:
            return self._busiest_raw("count(DISTINCT session)", 600, ())
        interior, edges = self._split()
        best = 0
        parts: list[str] = []
        params: list[object] = []
        for table, part in self._peak_levels(interior):
            if table is _DAYS:  # whole days: no window reaches outside them
                best = max(best, self._day_peak("sessions", part))
                continue
            cond, p = self.slot_where(part)
            parts.append(f"SELECT slot / 2 AS w, sid FROM slots AS s WHERE {cond}")
            params += p
        for edge in edges:
            cond, p = self.sel.where(*edge)
            parts.append(f"SELECT CAST(r.ts / 600 AS INTEGER), s.id FROM {self.sel.relation} "
                         f"AS r JOIN slot_sessions s ON s.session = r.session WHERE {cond}")
            params += p
        if parts:
            rows = self.sel.read(f"SELECT count(DISTINCT sid) FROM ({' UNION ALL '.join(parts)}) "
                                 "GROUP BY w ORDER BY 1 DESC LIMIT 1", params)
            best = max(best, int(rows[0][0]) if rows else 0)
        return best

    def _peak_levels(self, interior: tuple[int | None, int | None] | None
                     ) -> list[tuple[_Table, tuple[int | None, int | None]]]:
        """Like :meth:`_levels`, days only where their stored peaks answer (every request)."""
        if interior is None:
            return []
        if self.sel.slot_scope is not None or self.sel.filtered:
            return [(_SLOTS, interior)]
        return self._levels(interior, None, blocks=False)

    def _day_peak(self, column: str, part: tuple[int | None, int | None]) -> int:
        """The largest stored day peak over whole days ``[lo, hi)``."""
        lo, hi = part
        cond = " AND ".join([*([f"day >= {int(lo)}"] if lo is not None else []),
                             *([f"day < {int(hi)}"] if hi is not None else [])]) or "1"
        rows = self.sel.read(f"SELECT max({column}) FROM slot_day_peaks WHERE {cond}", [])
        return int(rows[0][0] or 0) if rows else 0

    def _busiest_raw(self, measure: str, width: int, extra: Sequence[str]) -> int:
        """The largest ``measure`` over aligned ``width``-second windows, from the requests."""
        rows = self.sel.rows(measure, *extra,
                             tail=f"GROUP BY CAST(ts / {width} AS INTEGER) ORDER BY 1 DESC LIMIT 1")
        return int(rows[0][0]) if rows else 0


def _add_session(out: dict[str, list[Any]], name: str, sums: Sequence[Any]) -> None:
    """Add one row of session sums (four counts, first, last) to ``out[name]``."""
    n, output, read, gaps, first, last = sums
    acc = out.get(name)
    if acc is None:
        out[name] = [int(n), int(output or 0), int(read or 0), int(gaps or 0), float(first),
                     float(last)]
        return
    acc[0] += int(n)
    acc[1] += int(output or 0)
    acc[2] += int(read or 0)
    acc[3] += int(gaps or 0)
    acc[4] = min(acc[4], float(first))
    acc[5] = max(acc[5], float(last))

