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

Costs are exact integers in pico-dollars (1e-12 USD): a rate in USD per million
tokens is ``rate × 1e6`` pico-dollars per token, an integer for every list price
(at most six decimals). Integer sums do not depend on the grouping, so a view's
rows add up to the summary's total to the last digit; a cost is rounded once,
to 1e-6 USD, when shown.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from exporter.ledger import slots
from exporter.projections.periods import Range
from exporter.projections.pricing import Pricing
from exporter.projections.savings import reread_ratio, saved
from exporter.records import Source

Reader = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
"""Runs one read-only query with its parameters and returns every row (``Ledger.read``)."""

PICO_PER_USD: Final = 10**12
PICO_PER_MICRO: Final = 10**6
CONTEXT_SQL: Final = "(input + cache_read + cache_write_5m + cache_write_1h)"
NO_BUCKET: Final = -9  # a fact not split by gap bucket
_SUMS: Final = ("sum(input), sum(output), sum(cache_read), sum(cache_write_5m), "
                "sum(cache_write_1h), sum(web_search)")
_SLOT: Final = slots.SLOT_SECONDS
_THRESHOLDS: Final = slots.DEFAULT_THRESHOLDS


def usd(pico: int) -> float:
    """Pico-dollars as USD rounded to 1e-6 (half up): ``26.291159``, never float noise."""
    micro = (pico + PICO_PER_MICRO // 2) // PICO_PER_MICRO
    return micro / 1_000_000


@dataclass(frozen=True, slots=True)
class Usage:
    """Sums over some requests: counts, the five token types, web searches, cost."""

    requests: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    web_search: int = 0
    cost_pico: int = 0  # exact list-price cost of the priced requests, 1e-12 USD
    unpriced: int = 0  # all five token fields of requests whose model has no price
    saved_pico: int = 0  # the prompt cache's saving (exporter.projections.savings), 1e-12 USD

    def __add__(self, other: Usage) -> Usage:
        """Field-wise sum (spelled out: it runs once per fact)."""
        return Usage(
            self.requests + other.requests, self.input + other.input, self.output + other.output,
            self.cache_read + other.cache_read, self.cache_write_5m + other.cache_write_5m,
            self.cache_write_1h + other.cache_write_1h, self.web_search + other.web_search,
            self.cost_pico + other.cost_pico, self.unpriced + other.unpriced,
            self.saved_pico + other.saved_pico,
        )

    @property
    def context(self) -> int:
        """Prompt tokens: input + cache read + cache writes."""
        return self.input + self.cache_read + self.cache_write_5m + self.cache_write_1h

    @property
    def cache_write(self) -> int:
        """Cache writes, 5 minutes and 1 hour."""
        return self.cache_write_5m + self.cache_write_1h

    @property
    def tokens(self) -> int:
        """Every token: the prompt plus the output."""
        return self.context + self.output

    @property
    def cost_usd(self) -> float:
        """The cost rounded to 1e-6 USD."""
        return usd(self.cost_pico)

    @property
    def saved_usd(self) -> float:
        """The cache's saving rounded to 1e-6 USD (negative when writes outweighed reads)."""
        return usd(self.saved_pico)

    @property
    def reread_ratio(self) -> float:
        """Cache-read tokens per output token (0 without output)."""
        return reread_ratio(self.cache_read, self.output)

    @property
    def cache_read_share(self) -> float:
        """Cache read over prompt tokens (0 without any)."""
        return self.cache_read / self.context if self.context else 0.0

    def totals(self) -> dict[str, int | float]:
        """The ``T`` object of docs/figures.md."""
        return {
            "requests": self.requests,
            "input_tokens": self.input,
            "output_tokens": self.output,
            "cache_read_tokens": self.cache_read,
            "cache_write_5m_tokens": self.cache_write_5m,
            "cache_write_1h_tokens": self.cache_write_1h,
            "web_search_requests": self.web_search,
            "cost_usd": self.cost_usd,
            "unpriced_tokens": self.unpriced,
            "cache_savings_usd": self.saved_usd,
            "cache_reads_per_output_token": self.reread_ratio,
        }


ZERO: Final = Usage()


def total(usages: Iterable[Usage]) -> Usage:
    """The sum of some usages."""
    out = ZERO
    for u in usages:
        out = out + u
    return out


class Attrs(NamedTuple):
    """What a fact's requests share: session, project and price attributes."""

    session: str
    project: str
    model: str
    source: Source
    service_tier: str
    inference_geo: str
    speed: str
    long: int  # how many long-context thresholds the prompt exceeds


@dataclass(frozen=True, slots=True)
class Fact:
    """Sums over requests sharing a group key, attributes, gap bucket and price period."""

    key: Any  # the TimeKey's value (a day number, …), or None
    attrs: Attrs
    bucket: int  # exporter.ledger.slots bucket (-1 not main, 0 first, 1..4 by gap), or NO_BUCKET
    first: float
    last: float
    usage: Usage
    gap_ms: int  # sum of the gaps before the main requests, milliseconds (exact)


@dataclass(frozen=True, slots=True)
class TimeKey:
    """A grouping by time: ``sql(t)`` is its SQL given an SQL expression of epoch seconds.

    For slot sums, ``slot_time`` stands for the time of their requests, and
    ``mixed`` lists the slots whose requests the key splits (read one by one).
    """

    sql: Callable[[str], str]
    aligned: bool = True  # False: the key changes inside slots; use the requests only
    slot_time: str = f"slot * {_SLOT}"
    mixed: tuple[int, ...] = ()
    day_aligned: bool = False  # True: the key never changes inside a UTC day


@dataclass(frozen=True, slots=True)
class Selection:
    """Which requests a report covers: a scoped ledger view, a time range, filters."""

    read: Reader
    relation: str  # the ledger's scoped view (``Ledger.scope``) or ``requests``
    range: Range
    projects: tuple[str, ...] = ()  # exact project paths (see :func:`resolve_projects`)
    models: tuple[str, ...] = ()  # exact model ids
    sources: tuple[Source, ...] = ()
    slots: bool = False  # the ledger keeps usage slots (exporter.ledger.slots)
    days: bool = False  # … and their sums per UTC day
    slot_thresholds: tuple[int, ...] = _THRESHOLDS  # the long-context split of the slot sums
    slot_scope: str | None = None  # SQL condition on ``slots`` for the scope; None: all
    context: str = CONTEXT_SQL  # the prompt size: the ledger's indexed column when it has one

    def where(self, *extra: str, extra_params: Sequence[object] = ()) -> tuple[str, list[object]]:
        """The WHERE condition (and parameters) of this selection, plus ``extra`` terms.

        ``extra_params`` are the parameters of the ``?`` in ``extra``.
        """
        cond, params = self.range.sql()
        params.extend(extra_params)
        parts = [cond, *extra, *self._filters(params)]
        return " AND ".join(p for p in parts if p != "1") or "1", params

    def _filters(self, params: list[object]) -> list[str]:
        """Conditions for --project, --model and --source (adding their parameters)."""
        parts = []
        for column, values in (("project", self.projects), ("model", self.models)):
            if values:
                parts.append(f"{column} IN ({','.join('?' * len(values))})")
                params.extend(values)
        if self.sources:
            parts.append(f"source IN ({','.join(str(int(s)) for s in self.sources)})")
        return parts

    @property
    def filtered(self) -> bool:
        """Whether --project, --model or --source narrow the selection."""
        return bool(self.projects or self.models or self.sources)

    def rows(self, select: str, *extra: str, tail: str = "",
             params: Sequence[object] = (), join: str = "") -> list[tuple[Any, ...]]:
        """Run ``SELECT select FROM [join] relation AS r WHERE … tail`` over this selection.

        ``params`` are the parameters of the ``?`` in ``extra`` (``select``,
        ``tail`` and ``join`` take none); ``join`` ends in ``JOIN``.
        """
        cond, where_params = self.where(*extra, extra_params=params)
        sql = f"SELECT {select} FROM {join} {self.relation} AS r WHERE {cond} {tail}"
        return self.read(sql, where_params)

    def bounds(self) -> tuple[float, float] | None:
        """Times of the first and last selected request, or None when there is none."""
        first, last = self.largest("min(ts)"), self.largest("max(ts)")
        return None if first is None else (float(first), float(last))

    def largest(self, aggregate: str) -> Any:
        """One ``min(x)`` or ``max(x)`` alone in its query: SQLite then seeks x's index."""
        return self.rows(aggregate)[0][0]


def long_thresholds(pricing: Pricing) -> tuple[int, ...]:
    """Every long-context threshold of the price table (any period), ascending."""
    families = getattr(pricing, "families", None)  # price periods, when the table has them
    periods: list[Any]
    if families:
        periods = [p for fam in families.values() for p in fam.periods]
    else:
        periods = list(pricing.models.values())
    return tuple(sorted({p.long_context_threshold for p in periods if p.long_context}))


@dataclass(slots=True)
class Prices:
    """Prices price classes once each, in integer pico-dollars per token and per search."""

    pricing: Pricing
    thresholds: tuple[int, ...] = ()  # every long-context threshold in the table, ascending
    starts: tuple[float, ...] = ()  # every date any family's price changes, ascending
    _units: dict[tuple[Any, ...], tuple[int, ...] | None] = field(default_factory=dict)
    _dated: bool = False

    @classmethod
    def of(cls, pricing: Pricing) -> Prices:
        """Collect the thresholds and price dates the SQL must split requests by."""
        families = getattr(pricing, "families", None)  # price periods, when the table has them
        starts = sorted({s for fam in families.values() for s in fam.starts}) if families else []
        # A table with price periods takes each class's date (``at``); the older one has none.
        return cls(pricing, long_thresholds(pricing), tuple(starts), {}, bool(families))

    def fits_slots(self, stored: Sequence[int]) -> bool:
        """Whether slot sums can be priced: split by (at least) our thresholds, dates on 5 minutes.

        Slots split by more thresholds than the price table's answer too: a slot
        key's level then maps to ours (:meth:`relevel`).
        """
        return set(self.thresholds) <= set(stored) and all(s % _SLOT == 0 for s in self.starts)

    def relevel(self, stored: Sequence[int]) -> tuple[int, ...]:
        """Our long-context level for each level of slots split by ``stored`` thresholds.

        Level ``L`` of the slots means the prompt exceeds ``stored[L-1]`` and no
        higher stored threshold; ours counts our thresholds at or below it.
        """
        return (0, *(sum(t <= s for t in self.thresholds) for s in sorted(stored)))

    @property
    def fits_days(self) -> bool:
        """Whether day sums can be priced: every price date is a UTC midnight."""
        return all(s % 86_400 == 0 for s in self.starts)

    def long_sql(self) -> str:
        """SQL for a request's long-context level: how many thresholds its prompt exceeds."""
        if not self.thresholds:
            return "0"
        return "(" + " + ".join(f"({CONTEXT_SQL} > {t})" for t in self.thresholds) + ")"

    def period_sql(self, at: str) -> str:
        """SQL for the price period of epoch ``at``: how many price dates it is at or after."""
        if not self.starts:
            return "0"
        return "(" + " + ".join(f"({at} >= {s!r})" for s in self.starts) + ")"

    def units(self, attrs: Attrs, period: int, at: float) -> tuple[int, ...] | None:
        """Pico-dollars per input, output, cache read, 5m write, 1h write token and per search."""
        model, geo, tier, speed = attrs.model, attrs.inference_geo, attrs.service_tier, attrs.speed
        key = (model, geo, tier, speed, attrs.long, period)
        try:
            return self._units[key]
        except KeyError:
            pass
        when: dict[str, Any] = {"at": at} if self._dated else {}
        threshold = self.pricing.long_context_threshold(model, **when)
        long = (threshold in self.thresholds
                and attrs.long > self.thresholds.index(threshold))
        rates = self.pricing.rates(model, long_context=long, inference_geo=geo,
                                   service_tier=tier, speed=speed, **when)
        out = None
        if rates is not None:
            per_token = (rates.input, rates.output, rates.cache_read, rates.cache_write_5m,
                         rates.cache_write_1h)
            search = getattr(rates, "web_search_usd", 0.0)
            out = (*(round(r * 1_000_000) for r in per_token), round(search * PICO_PER_USD))
        self._units[key] = out
        return out

    def usage(self, attrs: Attrs, period: int, at: float, n: int,
              sums: Sequence[int]) -> Usage:
        """Price ``n`` requests of one class with these token and search sums."""
        inp, out, read, w5, w1, search = sums
        units = self.units(attrs, period, at)
        if units is None:
            return Usage(n, inp, out, read, w5, w1, search, 0, inp + out + read + w5 + w1)
        cost = sum(map(int.__mul__, sums, units))
        return Usage(n, inp, out, read, w5, w1, search, cost, 0, saved(sums, units))


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

    def __init__(self, selection: Selection, prices: Prices, *, by_class: bool = False,
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
               f"{self.prices.period_sql(table.start)}, min(first), max(last), sum(n), {_SUMS}, "
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
               f"{self.prices.period_sql(_BLOCKS.start)}, min(first), max(last), sum(n), {_SUMS}, "
               "sum(gap_ms) FROM slot_class_blocks AS s JOIN slot_classes c ON c.id = s.class "
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
        return [self._fact(r[0], Attrs("", r[1], r[2], _SOURCES[r[3]], r[4], r[5], r[6],
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
            f"{self.prices.period_sql('ts')}, min(ts), max(ts), count(*), {_SUMS}, "
            f"sum({slots.GAP_MS})",
            *extra, tail="GROUP BY " + ", ".join(map(str, range(1, 12))), join=join)
        return [self._fact(r[0], Attrs(r[1], r[2], r[3], _SOURCES[r[4]], r[5], r[6], r[7],
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
                kid: Attrs(sessions[sid], project, model, _SOURCES[source], tier, geo, speed,
                           self._level[long])
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


def by_name(usages: Mapping[str, Usage]) -> dict[str, Usage]:
    """Usages sorted by name (stable output)."""
    return {k: usages[k] for k in sorted(usages)}


# ---- --project and --model: names as users type them -> exact values -----------------
class FilterError(ValueError):
    """A ``--project``/``--model`` that matches nothing in the ledger; names what would."""


def _basename(path: str) -> str:
    """The last part of a project path (``/home/u/proj`` → ``proj``)."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def encoded(path: str) -> str:
    """Claude Code's directory name for a project (``/home/u/proj`` → ``-home-u-proj``)."""
    return "".join(c if c.isalnum() else "-" for c in path)


def resolve_projects(known: Iterable[str], names: Sequence[str]) -> tuple[str, ...]:
    """The project paths matching any name: a full path, its last part, or its directory name."""
    paths = sorted(set(known))
    out: list[str] = []
    for name in names:
        want = name.rstrip("/") or name
        hits = [p for p in paths if want in (p, p.rstrip("/"), _basename(p), encoded(p))]
        if not hits:
            raise FilterError(_no_match("--project", name, [_basename(p) for p in paths]))
        out.extend(h for h in hits if h not in out)
    return tuple(out)


def resolve_models(known: Iterable[str], names: Sequence[str]) -> tuple[str, ...]:
    """The model ids containing any name (case-insensitive): ``opus``, ``claude-sonnet-4-5``."""
    models = sorted(set(known))
    out: list[str] = []
    for name in names:
        hits = [m for m in models if name.lower() in m.lower()]
        if not hits:
            raise FilterError(_no_match("--model", name, models))
        out.extend(h for h in hits if h not in out)
    return tuple(out)


def _no_match(flag: str, name: str, choices: Sequence[str]) -> str:
    """A one-line message for a filter that matches nothing."""
    import difflib  # noqa: PLC0415 - only on this error path

    names = sorted(set(choices))
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    known = ", ".join(names[:8]) or "none yet"
    return f"{flag} {name!r} matches nothing in the ledger{hint} (known: {known})"


def known_values(selection: Selection, column: str) -> list[str]:
    """The distinct values of ``project`` or ``model`` in the scope (slot keys when kept)."""
    if selection.slots:
        return [r[0] for r in selection.read(f"SELECT DISTINCT {column} FROM slot_keys", [])]
    return [r[0] for r in selection.read(
        f"SELECT DISTINCT {column} FROM {selection.relation}", [])]
