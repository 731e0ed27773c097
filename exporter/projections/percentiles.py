"""Exact nearest-rank percentiles of a selection, from the ledger's histograms or its indexes.

:class:`Histograms` answers from the ledger's value histograms (the range's
bins, then one bin's walk of the value's index); :func:`kth` walks the whole
selection's index (``ORDER BY … LIMIT 1 OFFSET k``) where the histograms
cannot answer. :func:`percentile` is the same nearest-rank rule over a sorted list.
Both walk the rows folded into the value indexes and merge in the few still
waiting outside them (exporter.ledger.unindexed).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from exporter.ledger import slots
from exporter.ledger.unindexed import FOLDED, WAITING
from exporter.projections.periods import Range
from exporter.projections.selection import Selection
from exporter.records import Source

N = TypeVar("N", int, float)
MAIN_SQL: Final = f"source = {int(Source.MAIN)}"


def percentile(sorted_values: Sequence[N], p: float) -> N | int:
    """Return the nearest-rank percentile ``v[ceil(p/100 * n) - 1]``; 0 if empty."""
    n = len(sorted_values)
    if n == 0:
        return 0
    # p * n first: for integer p the product is exact and the division rounds correctly.
    rank = math.ceil(p * n / 100)
    return sorted_values[min(max(rank, 1), n) - 1]


def kth(selection: Selection, expr: str, *extra: str, p: int, n: int) -> Any:
    """The nearest-rank ``p``-th percentile of ``expr`` over ``n`` selected rows (0 if none).

    ``ORDER BY … LIMIT 1 OFFSET k`` walks the ledger's index on ``expr``, from
    the nearer end (p90 is the 10 % from the top); exact, and only rows still
    waiting outside the index reach Python (:func:`walk`). A time range
    holding a small part of the history (under 1/32, the crossover measured
    on a year: a covering walk passes index entries far
    faster than a sort looks rows up) is sorted instead (``+expr`` keeps SQLite
    off the index): a walk would pass every request outside the range.
    """
    if n <= 0:
        return 0
    rank = min(max(-(-p * n // 100), 1), n)  # ceil(p * n / 100), exact in integers
    order, offset = ("", rank - 1) if rank <= n - rank else (" DESC", n - rank)
    key = "1"
    if selection.range.since is not None or selection.range.until is not None:
        every = selection.read("SELECT max(rowid) FROM requests", [])[0][0] or 0
        if n * 32 < every:
            key = f"+{expr}"
    if key != "1":  # a sort of the range's rows: every row, folded or not
        rows = selection.rows(expr, f"{expr} IS NOT NULL", *extra,
                              tail=f"ORDER BY {key}{order} LIMIT 1 OFFSET {offset}")
        return rows[0][0] if rows else 0

    def run(more: str, tail: str) -> list[Any]:
        return [r[0] for r in selection.rows(expr, f"{expr} IS NOT NULL", *extra, more,
                                             tail=tail)]

    return walk(run, offset, descending=bool(order), merge=selection.unindexed)


Run = Callable[[str, str], list[Any]]
"""``run(condition, tail)``: the value of each selected row also meeting ``condition``,
with ``tail`` (ORDER BY … LIMIT …) after the WHERE."""


def walk(run: Run, offset: int, *, descending: bool, merge: bool) -> Any:
    """The ``offset``-th selected value in order (from the top if ``descending``); 0 if none.

    The folded rows are walked in the value's index (``ORDER BY 1`` is the
    value). With ``merge``, the rows waiting outside the index (at most
    ``FOLD_ROWS``) are merged in: the answer is among them and the
    ``len(waiting) + 1`` folded values up to the same place, since at most
    that many waiting values come before it.
    """
    order = " DESC" if descending else ""
    if not merge:  # a ledger without waiting rows (made before they were kept apart)
        rows = run("1", f"ORDER BY 1{order} LIMIT 1 OFFSET {offset}")
        return rows[0] if rows else 0
    waiting = sorted(run(WAITING, ""), reverse=descending)
    skip = max(0, offset - len(waiting))
    walked = run(FOLDED, f"ORDER BY 1{order} LIMIT {offset - skip + 1} OFFSET {skip}")
    merged = list(heapq.merge(walked, waiting, reverse=descending))
    return merged[offset - skip] if offset - skip < len(merged) else 0


_DAY: Final = 86_400
_BLOCK: Final = slots.HIST_BLOCK_DAYS
# exporter.ledger.slots histograms: the value as the ledger's index holds it, and which rows count.
_HIST_ROWS: Final = {slots.OUTPUT_HIST: ("output", ()),
                     slots.GAP_HIST: ("gap", (MAIN_SQL, "gap IS NOT NULL"))}


@dataclass(frozen=True, slots=True)
class Histograms:
    """Exact nearest-rank percentiles of a selection from the ledger's value histograms.

    The range's whole 16-day blocks and whole UTC days come from ``slot_hist``
    (one row per bin), its partial days from the requests (counted into the same
    bins); the bin holding the rank is then walked in the ledger's (value, ts)
    index, restricted to the range and scope. Work: the range's bins plus one
    bin's share of the history, whatever the history's length.
    """

    sel: Selection
    own: tuple[str, ...] = ()  # the rows the context and output bins count (slots.OWN)

    @classmethod
    def of(cls, selection: Selection, own: tuple[str, ...] = ()) -> Histograms | None:
        """The selection's histograms, or None where the ledger cannot answer by them.

        Needs slots of this layout and no ``--project``/``--model``/``--source``
        filter (the histograms are per roots bitmask only). ``own``: the
        condition leaving advisor consultations out, where the selection has any.
        """
        if not selection.slots or selection.filtered:
            return None
        if slots.read_version(selection.read) != slots.VERSION:
            return None
        return cls(selection, own)

    def _value(self, measure: int) -> tuple[str, tuple[str, ...]]:
        """The SQL of the measure's value and the conditions of the rows it counts."""
        if measure == slots.CONTEXT_HIST:
            return self.sel.context, self.own
        if measure == slots.OUTPUT_HIST:
            return "output", self.own
        return _HIST_ROWS[measure]

    def counts(self, measure: int) -> list[tuple[int, int]]:
        """``(bin, requests)`` of the selection, ascending (bins without requests left out)."""
        since, until = self.sel.range.since, self.sel.range.until
        d_lo = None if since is None else math.ceil(since / _DAY)
        d_hi = None if until is None else math.floor(until / _DAY)
        found: dict[int, int] = {}
        edges: list[tuple[float | None, float | None]] = []
        if d_lo is not None and d_hi is not None and d_lo >= d_hi:
            edges.append((since, until))  # inside one day or two partial ones
        else:
            self._stored(measure, d_lo, d_hi, found)
            if since is not None and d_lo is not None and d_lo * _DAY > since:
                edges.append((since, d_lo * _DAY))
            if until is not None and d_hi is not None and d_hi * _DAY < until:
                edges.append((d_hi * _DAY, until))
        value, extra = self._value(measure)
        binned = slots.bin_sql(f"CAST(round({value} * 1000) AS INTEGER)"
                               if measure == slots.GAP_HIST else value)
        for lo, hi in edges:
            cond, params = Range(lo, hi, self.sel.range.zone).sql()
            sql = (f"SELECT {binned}, count(*) FROM {self.sel.relation} AS r "
                   f"WHERE {' AND '.join((cond, *extra))} GROUP BY 1")
            for b, n in self.sel.read(sql, params):
                found[int(b)] = found.get(int(b), 0) + int(n)
        return sorted(found.items())

    def _stored(self, measure: int, d_lo: int | None, d_hi: int | None,
                found: dict[int, int]) -> None:
        """Add the stored bins of whole days ``[d_lo, d_hi)``: blocks where whole, else days."""
        b_lo = None if d_lo is None else -(-d_lo // _BLOCK)
        b_hi = None if d_hi is None else d_hi // _BLOCK
        spans: list[str] = []
        if b_lo is not None and b_hi is not None and b_lo >= b_hi:
            spans.append(_units(0, d_lo, d_hi))
        else:
            spans.append(_units(1, b_lo, b_hi))
            if d_lo is not None and b_lo is not None and d_lo < b_lo * _BLOCK:
                spans.append(_units(0, d_lo, b_lo * _BLOCK))
            if d_hi is not None and b_hi is not None and b_hi * _BLOCK < d_hi:
                spans.append(_units(0, b_hi * _BLOCK, d_hi))
        scope = f" AND ({self.sel.slot_scope})" if self.sel.slot_scope else ""
        # One SELECT per span (not an OR): each is a range of the primary key.
        parts = " UNION ALL ".join(f"SELECT bin, n FROM slot_hist WHERE measure = {int(measure)} "
                                   f"AND {span}{scope}" for span in spans)
        sql = f"SELECT bin, sum(n) FROM ({parts}) GROUP BY bin"
        for b, n in self.sel.read(sql, []):
            found[int(b)] = found.get(int(b), 0) + int(n)

    def ranks(self, measure: int, percents: Sequence[int]) -> list[int | float]:
        """The nearest-rank ``p``-th percentile of the measure for each ``p`` (0 if none).

        ``p = 100`` is the largest value.
        """
        bins = self.counts(measure)
        n = sum(c for _, c in bins)
        if n == 0:
            return [0 for _ in percents]
        out: list[int | float] = []
        for p in percents:
            rank = min(max(-(-p * n // 100), 1), n)  # ceil(p * n / 100), exact in integers
            below = 0
            for b, count in bins:
                if below + count >= rank:
                    out.append(self._in_bin(measure, b, count, rank - below - 1))
                    break
                below += count
        return out

    def _in_bin(self, measure: int, b: int, count: int, offset: int) -> int | float:
        """The ``offset``-th smallest selected value of bin ``b`` (holding ``count`` of them)."""
        value, extra = self._value(measure)
        lo, hi = slots.bin_bounds(b)
        bounds: tuple[str, ...]
        if measure == slots.GAP_HIST:  # gaps are seconds; the bins whole milliseconds
            bounds = (f"{value} >= ?", f"{value} < ?")
            params: list[object] = [(lo - 0.5) / 1000, (hi - 0.5) / 1000]
        elif hi == lo + 1:  # one value: an equality, so the index seeks the time range too
            bounds, params = (f"{value} = ?",), [lo]
        else:
            bounds, params = (f"{value} >= ?", f"{value} < ?"), [lo, hi]
        rest = count - 1 - offset  # from the nearer end of the bin
        # One value: the range is the index's second column, a seek. Else ``+ts``: the range
        # filters the walk of the value's index (and never makes SQLite pick the ts index).
        cond, range_params = self.sel.range.sql("ts" if len(bounds) == 1 else "+ts")

        def run(more: str, tail: str) -> list[Any]:
            sql = (f"SELECT {value} FROM {self.sel.relation} AS r WHERE "
                   f"{' AND '.join((*bounds, *extra, cond, more))} {tail}")
            return [r[0] for r in self.sel.read(sql, [*params, *range_params])]

        found: int | float = walk(run, min(offset, rest), descending=rest < offset,
                                  merge=self.sel.unindexed)
        return found


def _units(span: int, lo: int | None, hi: int | None) -> str:
    """SQL for the slot_hist rows of one span with units in ``[lo, hi)`` (None: unbounded)."""
    parts = [f"span = {span}"]
    if lo is not None:
        parts.append(f"unit >= {int(lo)}")
    if hi is not None:
        parts.append(f"unit < {int(hi)}")
    return " AND ".join(parts)

