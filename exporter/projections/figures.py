"""The figures of docs/figures.md (plain `report`), computed in SQL over the ledger.

:func:`summary` returns a typed :class:`Summary`; :meth:`Summary.to_json` is the
``report --json`` contract (and the shape of the generator's ``truth.json``).
Every figure is an aggregate that SQLite computes: sums per price class and
per session (:mod:`exporter.projections.facts`), the gap buckets and the active
generation speed from each main request's ``gap`` column (kept by the ledger),
exact nearest-rank percentiles from the ledger's value histograms
(:class:`Histograms`: the range's bins, then one bin's walk of the value's
index; ``ORDER BY … LIMIT 1 OFFSET k`` over the whole selection where the
histograms cannot answer), and the busiest minute and 10-minute window by
``GROUP BY``. Python sees aggregate rows only, about as many after a year of
history as after a month.

The counting rules (gap buckets, cache lifetimes) are exporter.records' and
exporter.projections.counting's; :func:`percentile` at the end is the
nearest-rank rule the histograms' walks answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from exporter.ledger import slots
from exporter.projections.counting import GAP_BUCKETS
from exporter.projections.facts import (
    ZERO,
    Attrs,
    Fact,
    Facts,
    Prices,
    Selection,
    Usage,
    by_name,
)
from exporter.projections.periods import Range, iso
from exporter.projections.savings import ContextCost, context_cost, reread_ratio
from exporter.records import Source

SESSION_TABLE_ROWS: Final = 20
CONTEXT_COST_MODELS: Final = 3  # models in the "cost per request at your context" table
LINE_RESULTS: Final = ("usage", "duplicate", "other", "rejected")
__all__ = ["GAP_BUCKETS", "Summary", "percentile", "summary"]

# exporter.ledger.slots' buckets of main requests (0 first, 1 <= 120 s, 2 <= 300 s, 3 <= 1 h,
# 4 > 1 h; inclusive above, like the histogram's le="300") -> GAP_BUCKETS index.
_BUCKET_OF: Final = (0, 1, 1, 2, 3)  # SQL bucket -> GAP_BUCKETS index
_MAIN: Final = f"source = {int(Source.MAIN)}"

N = TypeVar("N", int, float)


@dataclass(frozen=True, slots=True)
class Spread:
    """Nearest-rank p50 and p90, and the maximum, of some integers."""

    p50: int = 0
    p90: int = 0
    max: int = 0

    def scaled(self, factor: float) -> Spread:
        """Each figure times ``factor``, rounded to an integer."""
        return Spread(round(self.p50 * factor), round(self.p90 * factor), round(self.max * factor))

    def to_json(self) -> dict[str, int]:
        """``{"p50": …, "p90": …, "max": …}``."""
        return {"p50": self.p50, "p90": self.p90, "max": self.max}


@dataclass(frozen=True, slots=True)
class GapBucket:
    """Main requests after one kind of gap, the cache they wrote, and their prompt tokens."""

    requests: int = 0
    cache_write: int = 0
    prompt: int = 0

    @property
    def write_share(self) -> float:
        """Share of the prompt written to cache (0 for an empty bucket)."""
        return self.cache_write / self.prompt if self.prompt else 0.0


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One of the busiest sessions: requests, time span, median gap, output tokens."""

    session: str
    requests: int
    span_hours: float
    gap_p50: float
    output_tokens: int
    cache_read_tokens: int = 0

    @property
    def reread_ratio(self) -> float:
        """Cache-read tokens per output token in this session."""
        return reread_ratio(self.cache_read_tokens, self.output_tokens)

    def to_json(self) -> dict[str, Any]:
        """The ``by_session`` row of ``report --json``."""
        return {"session": self.session, "requests": self.requests,
                "span_hours": self.span_hours, "gap_p50": self.gap_p50,
                "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens,
                "cache_reads_per_output_token": self.reread_ratio}


@dataclass(frozen=True, slots=True)
class Covered:
    """What a report covers: the range asked for, the zone, and the first and last request."""

    range: Range
    first: float | None
    last: float | None

    def to_json(self) -> dict[str, Any]:
        """ISO-8601 times in the report's zone (None where unbounded or empty)."""
        zone = self.range.zone

        def when(ts: float | None) -> str | None:
            return None if ts is None else iso(ts, zone)

        return {"since": when(self.range.since), "until": when(self.range.until),
                "first_request": when(self.first), "last_request": when(self.last),
                "timezone": zone.name}


@dataclass(frozen=True, slots=True)
class Summary:
    """Every figure of docs/figures.md for one selection of requests."""

    covered: Covered
    totals: Usage
    by_model: Mapping[str, Usage]
    by_source: Mapping[str, Usage]
    sessions: int
    context: Spread
    output: Spread
    gap_p50: float
    gap_p90: float
    gap_count: int
    buckets: Mapping[str, GapBucket]  # GAP_BUCKETS order
    peak_requests_per_minute: int
    max_parallel_sessions_10m: int
    generation_tokens_per_second: float
    kv_bytes: Mapping[str, Spread]
    upload_total: int
    upload: Spread  # p50 and p90 of upload bytes per request
    lines: Mapping[str, int]
    rejected: Mapping[str, int]
    by_session: tuple[SessionRow, ...]
    context_costs: tuple[ContextCost, ...] = ()  # at the p50 and p90 prompt, top models
    iterations: Mapping[str, int] = field(default_factory=dict)  # usage.iterations, by kind

    @property
    def cache_read_share(self) -> float:
        """Cache read over prompt tokens, all requests."""
        return self.totals.cache_read_share

    def to_json(self) -> dict[str, Any]:
        """The ``report --json`` object (docs/figures.md); costs rounded to 1e-6 USD."""
        return {
            "range": self.covered.to_json(),
            "totals": self.totals.totals(),
            "by_model": {k: u.totals() for k, u in self.by_model.items()},
            "by_source": {k: u.totals() for k, u in self.by_source.items()},
            "sessions": self.sessions,
            "rejected_lines": int(self.lines.get("rejected", 0)),
            "rejected_by_reason": dict(sorted(self.rejected.items())),
            "context_tokens": self.context.to_json(),
            "output_tokens": self.output.to_json(),
            "gap_seconds": {"p50": self.gap_p50, "p90": self.gap_p90, "count": self.gap_count},
            "cache_write_share_by_gap": {k: b.write_share for k, b in self.buckets.items()},
            "requests_by_gap": {k: b.requests for k, b in self.buckets.items()},
            "cache_read_share": self.cache_read_share,
            "peak_requests_per_minute": self.peak_requests_per_minute,
            "max_parallel_sessions_10m": self.max_parallel_sessions_10m,
            "generation_tokens_per_second": self.generation_tokens_per_second,
            "kv_bytes": {k: s.to_json() for k, s in self.kv_bytes.items()},
            "upload_bytes": {"total": self.upload_total, "p50": self.upload.p50,
                             "p90": self.upload.p90},
            "lines": {k: int(self.lines.get(k, 0)) for k in LINE_RESULTS},
            "by_session": [row.to_json() for row in self.by_session],
            "cache_savings_usd": self.totals.saved_usd,
            "cache_reads_per_output_token": self.totals.reread_ratio,
            "context_cost": [c.to_json() for c in self.context_costs],
            # Only where a transcript had any: ledgers of older builds report as before.
            **({"iterations": dict(sorted(self.iterations.items()))} if self.iterations else {}),
        }


def summary(
    selection: Selection,
    prices: Prices,
    *,
    kv_bytes_per_token: Mapping[str, int],
    upload_bytes_per_token: float,
    lines: Mapping[str, int],
    rejected: Mapping[str, int],
    session_rows: int = SESSION_TABLE_ROWS,
    iterations: Mapping[str, int] | None = None,
) -> Summary:
    """Every figure of docs/figures.md for the selected requests."""
    # Price classes (session and project folded in SQL), and sessions summed apart:
    # a year's thousands of session keys never become Python objects.
    facts = Facts(selection, prices, by_class=True)
    found = facts.collect(buckets=True)
    models: dict[str, Usage] = {}
    sources: dict[str, Usage] = {}
    for f in found:
        models[f.attrs.model] = models.get(f.attrs.model, ZERO) + f.usage
        label = f.attrs.source.label
        sources[label] = sources.get(label, ZERO) + f.usage
    totals = sum(models.values(), ZERO)
    buckets, speed = _gap_buckets(found)
    n_gaps = sum(b.requests for k, b in buckets.items() if k != "first")
    # Distributions are about the requests the conversations sent: advisor consultations
    # (billed on top of one) are left out, by a condition only where the selection has any.
    advisors = sources.get(Source.ADVISOR.label)
    own = (f"source != {int(Source.ADVISOR)}",) if advisors is not None else ()
    n = totals.requests - (advisors.requests if advisors is not None else 0)
    hist = Histograms.of(selection, own)
    if hist is not None:
        c50, c90, c_max = hist.ranks(slots.CONTEXT_HIST, (50, 90, 100))
        o50, o90, o_max = hist.ranks(slots.OUTPUT_HIST, (50, 90, 100))
        gap_p50, gap_p90 = hist.ranks(slots.GAP_HIST, (50, 90))
    else:
        ctx = selection.context
        c50, c90 = _kth(selection, ctx, *own, p=50, n=n), _kth(selection, ctx, *own, p=90, n=n)
        c_max = int(selection.rows(f"max({ctx})", *own)[0][0] or 0)
        o50 = _kth(selection, "output", *own, p=50, n=n)
        o90 = _kth(selection, "output", *own, p=90, n=n)
        o_max = int(selection.rows("max(output)", *own)[0][0] or 0)
        gap = ("gap", _MAIN, "gap IS NOT NULL")
        gap_p50 = _kth(selection, *gap, p=50, n=n_gaps)
        gap_p90 = _kth(selection, *gap, p=90, n=n_gaps)
    context = Spread(int(c50), int(c90), int(c_max))
    output = Spread(int(o50), int(o90), int(o_max))
    sessions = {name: _Session(*row) for name, row in facts.sessions().items()}
    last = max((f.last for f in found), default=None)
    return Summary(
        covered=Covered(selection.range, min((f.first for f in found), default=None), last),
        totals=totals,
        by_model=by_name(models),
        by_source={s.label: sources[s.label] for s in Source if s.label in sources},
        sessions=len(sessions),
        context=context,
        output=output,
        gap_p50=float(gap_p50),
        gap_p90=float(gap_p90),
        gap_count=n_gaps,
        buckets=buckets,
        peak_requests_per_minute=facts.busiest_minute(),
        max_parallel_sessions_10m=facts.busiest_sessions_10m(),
        generation_tokens_per_second=speed,
        kv_bytes={arch: Spread(context.p50 * int(b), context.p90 * int(b), context.max * int(b))
                  for arch, b in kv_bytes_per_token.items()},
        # An advisor consultation runs on the provider's side: nothing of it is uploaded.
        upload_total=round(sum(u.context for k, u in sources.items() if k != "advisor")
                           * upload_bytes_per_token),
        upload=context.scaled(upload_bytes_per_token),
        lines=dict(lines),
        rejected=dict(rejected),
        by_session=tuple(_busiest_sessions(selection, sessions, session_rows)),
        context_costs=tuple(context_costs(prices, models, context, last)),
        iterations=dict(iterations or {}),
    )


def context_costs(prices: Prices, models: Mapping[str, Usage], context: Spread,
                  at: float | None) -> Iterable[ContextCost]:
    """One prompt of the p50 and of the p90 size on each costliest model: cached vs recomputed.

    Standard list prices (no geo, tier or speed factor) as on ``at`` (the last
    request), at the long-context tier where the prompt exceeds the model's threshold.
    """
    if at is None:
        return
    period = sum(at >= s for s in prices.starts)
    top = sorted((u.cost_pico, m) for m, u in models.items() if u.cost_pico > 0)
    for _, model in reversed(top[-CONTEXT_COST_MODELS:]):
        for name, size in (("p50", context.p50), ("p90", context.p90)):
            level = sum(size > t for t in prices.thresholds)
            units = prices.units(Attrs("", "", model, Source.MAIN, "", "", "", level), period, at)
            if units is None:
                continue
            threshold = prices.pricing.long_context_threshold(model, at=at)
            long = threshold is not None and size > threshold
            yield context_cost(model, name, size, long, units)


def _kth(selection: Selection, expr: str, *extra: str, p: int, n: int) -> Any:
    """The nearest-rank ``p``-th percentile of ``expr`` over ``n`` selected rows (0 if none).

    ``ORDER BY … LIMIT 1 OFFSET k`` walks the ledger's index on ``expr``, from
    the nearer end (p90 is the 10 % from the top); exact, and no row reaches
    Python. A time range holding a small part of the history (under 1/32:
    measured crossover on a year, a covering walk passes ~10M entries a second,
    a sort costs a row lookup each) is sorted instead (``+expr`` keeps SQLite
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
    rows = selection.rows(expr, f"{expr} IS NOT NULL", *extra,
                          tail=f"ORDER BY {key}{order} LIMIT 1 OFFSET {offset}")
    return rows[0][0] if rows else 0


_DAY: Final = 86_400
_BLOCK: Final = slots.HIST_BLOCK_DAYS
# exporter.ledger.slots histograms: the value as the ledger's index holds it, and which rows count.
_HIST_ROWS: Final = {slots.OUTPUT_HIST: ("output", ()),
                     slots.GAP_HIST: ("gap", (_MAIN, "gap IS NOT NULL"))}


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
        order, skip = ("", offset) if offset <= rest else (" DESC", rest)
        # One value: the range is the index's second column, a seek. Else ``+ts``: the range
        # filters the walk of the value's index (and never makes SQLite pick the ts index).
        cond, range_params = self.sel.range.sql("ts" if len(bounds) == 1 else "+ts")
        sql = (f"SELECT {value} FROM {self.sel.relation} AS r WHERE "
               f"{' AND '.join((*bounds, *extra, cond))} ORDER BY {value}{order} "
               f"LIMIT 1 OFFSET {skip}")
        rows = self.sel.read(sql, [*params, *range_params])
        return rows[0][0] if rows else 0


def _units(span: int, lo: int | None, hi: int | None) -> str:
    """SQL for the slot_hist rows of one span with units in ``[lo, hi)`` (None: unbounded)."""
    parts = [f"span = {span}"]
    if lo is not None:
        parts.append(f"unit >= {int(lo)}")
    if hi is not None:
        parts.append(f"unit < {int(hi)}")
    return " AND ".join(parts)


def _gap_buckets(found: Iterable[Fact]) -> tuple[dict[str, GapBucket], float]:
    """Main requests per gap bucket, and output per second over gaps of at most 120 s."""
    sums = [[0, 0, 0] for _ in GAP_BUCKETS]
    out = gap_ms = 0
    for f in found:
        if f.bucket < 0:
            continue
        acc = sums[_BUCKET_OF[f.bucket]]
        acc[0] += f.usage.requests
        acc[1] += f.usage.cache_write
        acc[2] += f.usage.context
        if f.bucket == 1:
            out += f.usage.output
            gap_ms += f.gap_ms
    speed = out * 1000 / gap_ms if gap_ms > 0 else 0.0
    return {name: GapBucket(*acc) for name, acc in zip(GAP_BUCKETS, sums, strict=True)}, speed


@dataclass(slots=True)
class _Session:
    """Sums of one session while folding facts."""

    requests: int = 0
    output: int = 0
    cache_read: int = 0
    gaps: int = 0  # main requests with a gap before them
    first: float = math.inf
    last: float = -math.inf


def _busiest_sessions(selection: Selection, sessions: Mapping[str, _Session],
                      limit: int) -> Iterable[SessionRow]:
    """The ``limit`` sessions with most requests (ties by id) and their median main gap."""
    top = sorted(sessions.items(), key=lambda item: (-item[1].requests, item[0]))[:limit]
    medians = session_medians(selection, {name: s.gaps for name, s in top})
    for name, s in top:
        yield SessionRow(name, s.requests, (s.last - s.first) / 3600,
                         float(medians.get(name, 0.0)), s.output, s.cache_read)


def gap_counts(found: Iterable[Fact]) -> dict[str, int]:
    """Each session's number of main requests that have a gap (from facts split by bucket)."""
    out: dict[str, int] = {}
    for f in found:
        if f.bucket > 0:
            out[f.attrs.session] = out.get(f.attrs.session, 0) + f.usage.requests
    return out


def session_medians(selection: Selection, counts: Mapping[str, int]) -> dict[str, float]:
    """Each session's nearest-rank median gap between main requests, given its gap count.

    One ``ORDER BY gap LIMIT 1 OFFSET k`` per session: the ledger's index on
    (session, gap) makes it a short walk, and nothing is sorted in Python.
    """
    out: dict[str, float] = {}
    for session, n in counts.items():
        if n <= 0:
            continue
        # Only main requests have gaps: the (session, gap) index answers alone.
        rows = selection.rows("gap", "gap IS NOT NULL", "session = ?",
                              tail=f"ORDER BY gap LIMIT 1 OFFSET {(n * 50 + 99) // 100 - 1}",
                              params=(session,))
        if rows:
            out[session] = float(rows[0][0])
    return out


# ---- per-request rules, for the live metrics ------------------------------------------
def percentile(sorted_values: Sequence[N], p: float) -> N | int:
    """Return the nearest-rank percentile ``v[ceil(p/100 * n) - 1]``; 0 if empty."""
    n = len(sorted_values)
    if n == 0:
        return 0
    # p * n first: for integer p the product is exact and the division rounds correctly.
    rank = math.ceil(p * n / 100)
    return sorted_values[min(max(rank, 1), n) - 1]

