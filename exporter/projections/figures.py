"""The figures of docs/figures.md (plain `report`), computed in SQL over the ledger.

:func:`summary` returns a typed :class:`Summary`; :meth:`Summary.to_json` is the
``report --json`` contract (and the shape of the generator's ``truth.json``).
Every figure is an aggregate that SQLite computes: sums per price class and
per session (:mod:`exporter.projections.facts`), the gap buckets and the active
generation speed from each main request's ``gap`` column (kept by the ledger),
exact nearest-rank percentiles (:mod:`exporter.projections.percentiles`), the
busiest sessions (:mod:`exporter.projections.sessions`), and the busiest minute
and 10-minute window by ``GROUP BY``. Python sees aggregate rows only, about as
many after a year of history as after a month.

The counting rules (gap buckets, cache lifetimes) are exporter.records' and
exporter.projections.counting's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from exporter.ledger import slots
from exporter.projections.class_prices import ClassPrices
from exporter.projections.counting import GAP_BUCKETS
from exporter.projections.facts import Facts
from exporter.projections.percentiles import MAIN_SQL, Histograms, kth
from exporter.projections.periods import Range, iso
from exporter.projections.savings import ContextCost, context_cost
from exporter.projections.selection import Selection
from exporter.projections.sessions import SessionRow, SessionSums, busiest_sessions
from exporter.projections.usage import ZERO, AgentUsage, Attrs, Fact, Usage, by_name
from exporter.records import Source

SESSION_TABLE_ROWS: Final = 20
CONTEXT_COST_MODELS: Final = 3  # models in the "cost per request at your context" table
LINE_RESULTS: Final = ("usage", "duplicate", "other", "rejected")

# exporter.ledger.slots' buckets of main requests (0 first, 1 <= 120 s, 2 <= 300 s, 3 <= 1 h,
# 4 > 1 h; inclusive above, like the histogram's le="300") -> GAP_BUCKETS index.
_BUCKET_OF: Final = (0, 1, 1, 2, 3)  # SQL bucket -> GAP_BUCKETS index


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
    # Per agent, only where the report's roots hold two (exporter.projections.agents).
    by_agent: Mapping[str, AgentUsage] = field(default_factory=dict)
    # False where every request is of an agent that logs no cache writes (Codex alone).
    cache_writes_measured: bool = True

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
            # Only with a second agent: a Claude Code-only report is as it was.
            **({"by_agent": {k: a.to_json() for k, a in self.by_agent.items()}}
               if self.by_agent else {}),
            **({} if self.cache_writes_measured else {"cache_writes_measured": False}),
        }


def summary(
    selection: Selection,
    prices: ClassPrices,
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
    models, sources = _by_model_and_source(found)
    totals = sum(models.values(), ZERO)
    buckets, speed = _gap_buckets(found)
    n_gaps = sum(b.requests for k, b in buckets.items() if k != "first")
    context, output, gap_p50, gap_p90 = _spreads(selection, sources, totals.requests, n_gaps)
    sessions = {name: SessionSums(*row) for name, row in facts.sessions().items()}
    last = max((f.last for f in found), default=None)
    return Summary(
        covered=Covered(selection.range, min((f.first for f in found), default=None), last),
        totals=totals,
        by_model=by_name(models),
        by_source={s.label: sources[s.label] for s in Source if s.label in sources},
        sessions=len(sessions),
        context=context,
        output=output,
        gap_p50=gap_p50,
        gap_p90=gap_p90,
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
        by_session=tuple(busiest_sessions(selection, sessions, session_rows)),
        context_costs=tuple(context_costs(prices, models, context, last)),
        iterations=dict(iterations or {}),
    )


def _by_model_and_source(found: Iterable[Fact]) -> tuple[dict[str, Usage], dict[str, Usage]]:
    """The facts' usage summed per model and per source label."""
    models: dict[str, Usage] = {}
    sources: dict[str, Usage] = {}
    for f in found:
        models[f.attrs.model] = models.get(f.attrs.model, ZERO) + f.usage
        label = f.attrs.source.label
        sources[label] = sources.get(label, ZERO) + f.usage
    return models, sources


def _spreads(selection: Selection, sources: Mapping[str, Usage], requests: int,
             n_gaps: int) -> tuple[Spread, Spread, float, float]:
    """The prompt and output spreads, and the p50 and p90 gap between main requests."""
    # Distributions are about the requests the conversations sent: advisor consultations
    # (billed on top of one) are left out, by a condition only where the selection has any.
    advisors = sources.get(Source.ADVISOR.label)
    own = (f"source != {int(Source.ADVISOR)}",) if advisors is not None else ()
    n = requests - (advisors.requests if advisors is not None else 0)
    hist = Histograms.of(selection, own)
    if hist is not None:
        c50, c90, c_max = hist.ranks(slots.CONTEXT_HIST, (50, 90, 100))
        o50, o90, o_max = hist.ranks(slots.OUTPUT_HIST, (50, 90, 100))
        gap_p50, gap_p90 = hist.ranks(slots.GAP_HIST, (50, 90))
    else:
        ctx = selection.context
        c50, c90 = kth(selection, ctx, *own, p=50, n=n), kth(selection, ctx, *own, p=90, n=n)
        c_max = int(selection.rows(f"max({ctx})", *own)[0][0] or 0)
        o50 = kth(selection, "output", *own, p=50, n=n)
        o90 = kth(selection, "output", *own, p=90, n=n)
        o_max = int(selection.rows("max(output)", *own)[0][0] or 0)
        gap = ("gap", MAIN_SQL, "gap IS NOT NULL")
        gap_p50 = kth(selection, *gap, p=50, n=n_gaps)
        gap_p90 = kth(selection, *gap, p=90, n=n_gaps)
    return (Spread(int(c50), int(c90), int(c_max)), Spread(int(o50), int(o90), int(o_max)),
            float(gap_p50), float(gap_p90))


def context_costs(prices: ClassPrices, models: Mapping[str, Usage], context: Spread,
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


