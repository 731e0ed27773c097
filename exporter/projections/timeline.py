"""Timeline: the metrics projection replayed over the ledger's history, step by step.

The backfill must count every request exactly as ``serve`` does, so it does not
count at all: it feeds the ledger's requests, one at a time and in the ledger's
time order, to a real :class:`exporter.projections.metrics.Projection` whose counters and
histograms have been swapped for *taps*. A tap receives the very ``add`` and
``record`` calls the projection makes (labels, costs, gap buckets, values) and
folds them into per-series values the same way the OpenTelemetry SDK does
(sums in call order, explicit buckets with inclusive upper bounds). At each
step boundary the series that changed are logged with their new values.

Step boundaries are the multiples of ``step`` seconds since the epoch: a request
at time ``ts`` is counted at boundary index ``floor(ts / step) + 1``, so the
value at boundary ``i`` covers exactly the requests with ``ts < i * step``.

The exporter's own counters (``exporter_*``: lines and bytes read) describe a
process, not the history, and are not recorded.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from prometheus_client import CollectorRegistry

from exporter.ledger import Applied
from exporter.projections import instruments
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.pricing import Pricing
from exporter.records import Request, Source

COUNTER: Final = "counter"
HISTOGRAM: Final = "histogram"
_TIE_NUDGE: Final = 1e-5  # seconds; far below the transcripts' millisecond resolution

Labels = tuple[tuple[str, str], ...]
SampleKey = tuple[str, Labels]


@dataclass(slots=True)
class Unit:
    """One metric of a family: a counter series, or a histogram's buckets + count + sum.

    ``values`` holds the current value of each sample (a counter has one; a
    histogram has one per bucket bound, then ``+Inf``, ``_count`` and ``_sum``).
    ``steps`` lists the boundary indexes at which the unit changed, and ``log``
    the values after each change (``len(values)`` numbers per entry).
    """

    family: str
    kind: str
    labels: Labels
    values: list[Any]
    bounds: tuple[float, ...] = ()
    steps: array[int] = field(default_factory=lambda: array("q"))
    log: array[float] = field(default_factory=lambda: array("d"))
    dirty: bool = False

    @property
    def width(self) -> int:
        """Samples per point: 1 for a counter, buckets + 3 for a histogram."""
        return len(self.values)

    def samples(self) -> list[SampleKey]:
        """The Prometheus sample name and labels of each position of ``values``."""
        if self.kind == COUNTER:
            return [(f"{self.family}_total", self.labels)]
        les = [*(_le(b) for b in self.bounds), "+Inf"]
        out: list[SampleKey] = [
            (f"{self.family}_bucket", _sorted((*self.labels, ("le", le)))) for le in les
        ]
        return [*out, (f"{self.family}_count", self.labels), (f"{self.family}_sum", self.labels)]

    def at(self, index: int) -> Sequence[float]:
        """The values at boundary ``index`` (zeros before the unit's first change)."""
        pos = bisect_left(self.steps, index + 1) - 1
        if pos < 0:
            return [0.0] * self.width
        width = self.width
        return self.log[pos * width:(pos + 1) * width]


class _CounterTap:
    """Stands in for an OpenTelemetry counter: every ``add`` goes to the timeline."""

    def __init__(self, timeline: Timeline, family: str) -> None:
        self._timeline = timeline
        self._family = family

    def add(self, amount: float, attributes: Mapping[str, str] | None = None,
            context: object = None) -> None:
        """Count ``amount`` for the series ``attributes``."""
        unit = self._timeline.unit(self._family, COUNTER, attributes)
        unit.values[0] += amount
        self._timeline.touch(unit)


class _HistogramTap:
    """Stands in for an OpenTelemetry histogram with explicit bucket bounds."""

    def __init__(self, timeline: Timeline, family: str, bounds: tuple[float, ...]) -> None:
        self._timeline = timeline
        self._family = family
        self._bounds = bounds

    def record(self, amount: float, attributes: Mapping[str, str] | None = None,
               context: object = None) -> None:
        """Enter one value: cumulative buckets from its own (``value <= le``), count, sum."""
        unit = self._timeline.unit(self._family, HISTOGRAM, attributes, self._bounds)
        values = unit.values
        n = len(self._bounds)
        for j in range(bisect_left(self._bounds, amount), n + 1):
            values[j] += 1
        values[n + 1] += 1
        values[n + 2] += amount
        self._timeline.touch(unit)


class Timeline:
    """Counters and histograms of the projection, logged at every step boundary."""

    def __init__(self, pricing: Pricing, options: MetricsOptions, step: int) -> None:
        """Prepare a projection with taps; nothing is counted until :meth:`run`."""
        if step < 1:
            raise ValueError("step must be at least one second")
        self.step = step
        self.units: dict[tuple[str, Labels], Unit] = {}
        self._dirty: list[Unit] = []
        self._proj = Projection(pricing, options, CollectorRegistry(),
                                clock=lambda: 0.0, monotonic=lambda: 0.0)
        ns = options.namespace
        counters = self._proj.inst.counters
        for name in list(counters):
            if not name.startswith("exporter_"):
                counters[name] = _CounterTap(self, f"{ns}_{name}")
            else:
                counters[name] = _Drop()
        hists = self._proj.inst.histograms
        for name in list(hists):
            bounds = tuple(float(int(b)) for b in instruments.BUCKETS[name])
            hists[name] = _HistogramTap(self, f"{ns}_{name}", bounds)

    def index(self, ts: float) -> int:
        """The boundary index at which a request at ``ts`` is first counted."""
        return math.floor(ts / self.step) + 1

    def run(self, requests: Iterable[Request]) -> None:
        """Count ``requests`` (in the ledger's time order) and log every boundary.

        The series ``serve`` creates at zero on start-up are logged at the
        boundary before the first request.
        """
        it = iter(requests)
        first = next(it, None)
        if first is None:
            return
        current = self.index(first.ts)
        self._proj.load([], {}, {}, 0)  # the zero series, as at start-up
        self._close(current - 1)
        last_main: dict[str, tuple[float, int]] = {}
        for req in _chain(first, it):
            at = self.index(req.ts)
            if at != current:
                self._close(current)
                current = at
            self._proj.apply(Applied(new=[_untie(req, last_main)]))
            self._proj.settle(force=True)
        self._close(current)

    def unit(self, family: str, kind: str, attributes: Mapping[str, str] | None,
             bounds: tuple[float, ...] = ()) -> Unit:
        """The unit of ``family`` with ``attributes``, created at zero if new."""
        labels = _sorted(tuple((k, str(v)) for k, v in (attributes or {}).items()))
        key = (family, labels)
        unit = self.units.get(key)
        if unit is None:
            width = 1 if kind == COUNTER else len(bounds) + 3
            values: list[Any] = [0.0] if kind == COUNTER else [0] * width
            unit = Unit(family, kind, labels, values, bounds)
            self.units[key] = unit
        return unit

    def touch(self, unit: Unit) -> None:
        """Mark ``unit`` as changed in the current step."""
        if not unit.dirty:
            unit.dirty = True
            self._dirty.append(unit)

    def final(self) -> dict[SampleKey, float]:
        """Every sample's value after the last request, by name and sorted labels."""
        out: dict[SampleKey, float] = {}
        for unit in self.units.values():
            for key, value in zip(unit.samples(), unit.values, strict=True):
                out[key] = float(value)
        return out

    def close(self) -> None:
        """Release the projection."""
        self._proj.shutdown()

    def _close(self, index: int) -> None:
        """Log the units that changed in the step ending at boundary ``index``."""
        for unit in self._dirty:
            unit.dirty = False
            unit.steps.append(index)
            unit.log.extend(float(v) for v in unit.values)
        self._dirty.clear()


class _Drop:
    """A counter whose increments are ignored (the exporter's own counters)."""

    def add(self, amount: float, attributes: Mapping[str, str] | None = None,
            context: object = None) -> None:
        """Ignore the increment."""


def _chain(first: Request, rest: Iterable[Request]) -> Iterable[Request]:
    """``first`` followed by ``rest``."""
    yield first
    yield from rest


def _untie(req: Request, last_main: dict[str, tuple[float, int]]) -> Request:
    """Shift a main request that shares its session's previous time by a few microseconds.

    At start-up ``serve`` takes the gap before such a request as 0 (the previous
    request in (ts, key) order); fed one at a time, the projection would look
    past the tie. The shift, far below the millisecond resolution that gaps are
    rounded to, makes both agree. Only the gap depends on a request's time.
    """
    if req.source is not Source.MAIN:
        return req
    prev = last_main.get(req.session)
    ties = prev[1] + 1 if prev is not None and prev[0] == req.ts else 0
    last_main[req.session] = (req.ts, ties)
    return req._replace(ts=req.ts + ties * _TIE_NUDGE) if ties else req


def _le(bound: float) -> str:
    """A bucket bound as the scrape exposition writes it (``300``, not ``300.0``)."""
    return str(int(bound)) if bound == int(bound) else repr(bound)


def _sorted(labels: Labels) -> Labels:
    """Labels in name order."""
    return tuple(sorted(labels))
