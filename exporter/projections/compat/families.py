"""The compatibility families as OpenTelemetry instruments, fed like the catalogue's.

:class:`Families` is a second sink of the metrics projection's count stream:

- counters (``native``): the projection keeps per-class sums of the ledger's
  rollups; :meth:`Families.start` turns all of them into the native counters'
  totals at start-up, :meth:`Families.grow` adds the growth of one class in a
  live batch. A restart therefore begins where the last process ended (no
  counter reset for Prometheus), exactly like the catalogue's counters;
- histogram (``genai``): the ledger keeps the bucket counts of every settled
  request's :func:`~exporter.projections.compat.genai_histogram.observations` in its
  histogram rollups; :meth:`Families.seed` takes those rows (at start-up and
  per batch) and seeds ``gen_ai.client.token.usage`` with them, through the
  same seedable aggregation the catalogue's histograms use.

The instruments live on the projection's MeterProvider, so every reader of it
(the Prometheus endpoint, an OTLP push) sees them. Their names are fixed,
whatever the catalogue's namespace: they are someone else's contract.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.view import Aggregation

from exporter.projections import instruments
from exporter.projections.compat import MODES, native
from exporter.projections.compat import genai_histogram as genai
from exporter.projections.counting import Exposure, SampleKey, Sums
from exporter.records import CountClass, HistRow, HistSeries

SCOPE = "claude_code_exporter.compat"


class InScope(Protocol):
    """Which roots bitmasks count (the projection's :class:`~.metrics.Scope`)."""

    def __contains__(self, mask: int, /) -> bool:
        """True if requests with this roots bitmask are counted."""


def check(modes: Iterable[str]) -> tuple[str, ...]:
    """``modes`` without repeats, in :data:`MODES` order; ValueError for an unknown one."""
    wanted = set(modes)
    unknown = sorted(wanted - set(MODES))
    if unknown:
        raise ValueError(f"unknown compat mode(s) {unknown}; expected some of {list(MODES)}")
    return tuple(m for m in MODES if m in wanted)


def aggregations(modes: Iterable[str]) -> dict[str, Aggregation]:
    """By instrument name, the aggregations ``modes`` need (the GenAI bucket bounds, seedable).

    :func:`instruments.build` puts them on the Views that also carry each
    instrument's cardinality limit.
    """
    if "genai" not in check(modes):
        return {}
    return {genai.NAME: instruments.SeededHistogramAggregation(
        boundaries=list(genai.BOUNDS), record_min_max=False)}


class Families:
    """The compatibility instruments of one projection, and what feeds them."""

    def __init__(self, modes: Sequence[str], exposure: Exposure,
                 provider: MeterProvider) -> None:
        """Create the instruments of ``modes`` on ``provider`` (built with :func:`aggregations`).

        ``exposure`` is the projection's: its label policy and prices apply.
        """
        self.modes = check(modes)
        self.exposure = exposure
        self._native = native.Native(exposure)
        meter = provider.get_meter(SCOPE)
        self._counters: dict[str, Any] = {}
        if "native" in self.modes:
            self._counters = {
                native.TOKEN_USAGE: meter.create_counter(
                    native.TOKEN_USAGE, unit=native.TOKEN_UNIT,
                    description=native.TOKEN_DESCRIPTION),
                native.COST_USAGE: meter.create_counter(
                    native.COST_USAGE, unit=native.COST_UNIT,
                    description=native.COST_DESCRIPTION),
            }
        self._histogram: Any = None
        if "genai" in self.modes:
            self._histogram = meter.create_histogram(genai.NAME, unit=genai.UNIT,
                                                     description=genai.DESCRIPTION)

    # ---------------------------------------------------------------- counters
    def start(self, classes: Mapping[CountClass, Sums]) -> None:
        """Begin the counters at the totals of every class (start-up)."""
        if not self._counters:
            return
        totals: dict[SampleKey, float] = {}
        for cls, sums in classes.items():
            for key, value in self._native.samples(cls, sums):
                totals[key] = totals.get(key, 0) + value
        self._add(totals)

    def grow(self, cls: CountClass, was: Sums, now: Sums) -> None:
        """Add the growth of one class whose sums went from ``was`` to ``now``."""
        if not self._counters:
            return
        growth = dict(self._native.samples(cls, now))
        for key, value in self._native.samples(cls, was):
            growth[key] = growth.get(key, 0) - value
        self._add(growth)

    def _add(self, values: Mapping[SampleKey, float]) -> None:
        """Add sample growth (zeros too: a class's series exist once it has requests)."""
        for (name, labels), value in values.items():
            self._counters[name].add(max(value, 0), dict(labels))

    # --------------------------------------------------------------- histogram
    def record_genai_rows(self, rows: Iterable[HistRow], scope: InScope) -> list[HistRow]:
        """Seed the GenAI histogram with its rollup rows in ``scope``; return the other rows.

        The GenAI rows are always taken out (the ledger keeps them whether or
        not the family is on), so the catalogue's histograms never see them.
        """
        rest: list[HistRow] = []
        per: dict[HistSeries, tuple[list[int], list[float]]] = {}
        for row in rows:
            roots, series, bucket, value = row
            if series.name != genai.NAME:
                rest.append(row)
                continue
            if self._histogram is None or roots not in scope:
                continue
            acc = per.get(series)
            if acc is None:
                acc = per[series] = ([0] * (len(genai.BOUNDS) + 1), [0])
            if bucket < 0:
                acc[1][0] += value
            else:
                acc[0][bucket] += int(value)
        for series, (counts, total) in per.items():
            labels = genai.attributes(self.exposure.labels.model(series.model), series.arch)
            self._histogram.record(0, dict(labels), context=instruments.seed_context(
                instruments.Seed(tuple(counts), total[0])))
        return rest
