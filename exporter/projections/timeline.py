"""Timeline: the ledger's history counted step by step, by the rules ``serve`` counts with.

The backfill must count every request exactly as ``serve`` does, so both use
:mod:`exporter.projections.counting`: each request, in the ledger's time order
and with the ledger's gap, grows its class's sums; the growth of the class's
counter samples (:class:`~exporter.projections.counting.Exposure`) and the
request's histogram observations are folded into per-series values the way
the OpenTelemetry SDK folds them (sums, explicit buckets with inclusive upper
bounds). At each step boundary the series that changed are logged with their
new values.

Step boundaries are the multiples of ``step`` seconds since the epoch: a request
at time ``ts`` is counted at boundary index ``floor(ts / step) + 1``, so the
value at boundary ``i`` covers exactly the requests with ``ts < i * step``.

The exporter's own counters (``exporter_*``: lines and bytes read) describe a
process, not the history, and are not recorded. Codex's turns count in Codex's
families only, as in ``serve`` (:mod:`exporter.projections.codex_metrics`).

The plan-limit families (docs/plan-limits.md) come from the ledger's
status-line samples instead of its requests (:func:`plan_units`): the samples
counter, the exhausted-windows counter, and the used-ratio and reset gauges,
each with the value ``serve`` would have shown at every boundary.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from exporter.ledger.plan_store import window_instance
from exporter.projections.codex_metrics import CodexExposure, is_codex
from exporter.projections.compat.history import History
from exporter.projections.counting import (
    HIST_BOUNDS,
    Exposure,
    Labels,
    Sums,
    add_sums,
    split,
)
from exporter.projections.labels import LabelPolicy
from exporter.projections.metrics import MetricsOptions
from exporter.projections.plan.windows import PlanHistory
from exporter.projections.pricing import RateTable
from exporter.projections.project_groups import ProjectGroups
from exporter.records import COUNT_SUMS, CountClass, Request

COUNTER: Final = "counter"
HISTOGRAM: Final = "histogram"
GAUGE: Final = "gauge"  # the plan-limit gauges: written from their first value on
_ZERO: Final[Sums] = (0,) * len(COUNT_SUMS)

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
        if self.kind == GAUGE:
            return [(self.family, self.labels)]
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


class Timeline:
    """Counters and histograms of the catalogue, logged at every step boundary."""

    def __init__(self, pricing: RateTable, options: MetricsOptions, step: int) -> None:
        """Prepare the rules; nothing is counted until :meth:`run`."""
        if step < 1:
            raise ValueError("step must be at least one second")
        self.step = step
        self.units: dict[tuple[str, Labels], Unit] = {}
        self._dirty: list[Unit] = []
        self._ns = options.namespace
        self._counting = options.counting(pricing)
        self._exposure = Exposure(pricing, LabelPolicy(
            options.project_label,
            groups=ProjectGroups(options.project_grouping, options.project_folders)),
                                  options.kv_bytes_per_token, options.upload_bytes_per_token)
        self._classes: dict[CountClass, Sums] = {}
        self._compat = History(options.compat, self._exposure)
        self._codex = CodexExposure(pricing, options.project_label, self._exposure.labels.groups,
                                    options.kv_bytes_per_token, options.upload_bytes_per_token)
        self._codex_classes: dict[CountClass, Sums] = {}

    def index(self, ts: float) -> int:
        """The boundary index at which a request at ``ts`` is first counted."""
        return math.floor(ts / self.step) + 1

    def run(self, requests: Iterable[Request]) -> None:
        """Count ``requests`` (in the ledger's time order, with its gaps) and log every boundary.

        The series ``serve`` creates at zero on start-up are logged at the
        boundary before the first request.
        """
        current: int | None = None
        for req in requests:
            at = self.index(req.ts)
            if current is None:
                for name, labels in self._exposure.zero_samples():
                    self._count(name, labels, 0)
                self._close(at - 1)
                current = at
            elif at != current:
                self._close(current)
                current = at
            self._add(req)
        if current is not None:
            self._close(current)

    def _add(self, req: Request) -> None:
        """Count one request: its class's sample growth and its histogram observations."""
        if is_codex(req):
            self._add_codex(req)
            return
        sums = self._counting.sums(req)
        for cls in split(self._counting.count_class(req)):
            if cls is None:
                continue
            old = self._classes.get(cls, _ZERO)
            new = add_sums(old, sums)
            self._classes[cls] = new
            before = dict(self._exposure.samples(cls, old))
            for (name, labels), value in self._exposure.samples(cls, new):
                self._count(name, labels, value - before.get((name, labels), 0))
            for family, labels, value in self._compat.growth(cls, old, new):
                unit = self.unit(family, COUNTER, labels)
                unit.values[0] += value
                self.touch(unit)
        for series, bucket, value in self._counting.observations(req):
            if History.owns(series):  # a compatibility family's (docs/compat.md)
                routed = self._compat.histogram(series)
                if routed is None:
                    continue
                unit = self.unit(routed[0], HISTOGRAM, routed[1], routed[2])
            else:
                labels = self._exposure.hist_labels(series)
                unit = self.unit(f"{self._ns}_{series.name}", HISTOGRAM, labels,
                                 tuple(float(int(b)) for b in HIST_BOUNDS[series.name]))
            self._observe(unit, bucket, value)

    def _add_codex(self, req: Request) -> None:
        """Count one Codex turn in Codex's families (its price class; its reasoning; histograms)."""
        cls = split(self._counting.count_class(req))[0]
        old = self._codex_classes.get(cls, _ZERO)
        new = self._codex_classes[cls] = add_sums(old, self._counting.sums(req))
        before = dict(self._codex.samples(cls, old))
        for (name, labels), value in self._codex.samples(cls, new):
            self._count(name, labels, value - before.get((name, labels), 0))
        if req.reasoning:
            name, labels = self._codex.reasoning_key(req.model, req.project)
            self._count(name, labels, req.reasoning)
        for series, bucket, value in self._counting.observations(req):
            routed = self._codex.hist(series)
            if routed is not None:
                bounds = HIST_BOUNDS[series.name]
                self._observe(self.unit(f"{self._ns}_{routed[0]}", HISTOGRAM, routed[1],
                                        tuple(float(int(b)) for b in bounds)), bucket, value)

    def _observe(self, unit: Unit, bucket: int, value: float) -> None:
        """One histogram observation in its explicit bucket (cumulative), count and sum."""
        values = unit.values
        n = len(unit.bounds)
        for j in range(bucket, n + 1):  # cumulative: every bucket from its own upwards
            values[j] += 1
        values[n + 1] += 1
        values[n + 2] += value
        self.touch(unit)

    def _count(self, name: str, labels: Labels, amount: float) -> None:
        """Add to one counter series."""
        unit = self.unit(f"{self._ns}_{name}", COUNTER, labels)
        unit.values[0] += amount
        self.touch(unit)

    def unit(self, family: str, kind: str, labels: Labels,
             bounds: tuple[float, ...] = ()) -> Unit:
        """The unit of ``family`` with ``labels``, created at zero if new."""
        key = (family, _sorted(labels))
        found = self.units.get(key)
        if found is None:
            width = 1 if kind == COUNTER else len(bounds) + 3
            values: list[Any] = [0] * width
            found = Unit(family, kind, key[1], values, bounds)
            self.units[key] = found
        return found

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
        """Nothing to release (kept for callers that close what they open)."""

    def _close(self, index: int) -> None:
        """Log the units that changed in the step ending at boundary ``index``."""
        for unit in self._dirty:
            unit.dirty = False
            unit.steps.append(index)
            unit.log.extend(float(v) for v in unit.values)
        self._dirty.clear()


def _le(bound: float) -> str:
    """A bucket bound as the scrape exposition writes it (``300``, not ``300.0``)."""
    return str(int(bound)) if bound == int(bound) else repr(bound)


def _sorted(labels: Labels) -> Labels:
    """Labels in name order."""
    return tuple(sorted(labels))


# ---- plan limits: from the status line's samples --------------------------------------
def plan_units(history: PlanHistory, step: int, namespace: str, end: int) -> list[Unit]:
    """The plan-limit series at every boundary up to ``end``, as ``serve`` computes them.

    At boundary ``i`` (time ``T = i * step``) a series covers the samples first
    seen before ``T``: the samples counter counts them; per window, the
    exhausted counter counts the instances (window and reset to the minute)
    that reached 100 %, and the gauges show the newest instance's highest
    figure (0 from its reset time on) and its reported reset time.
    """
    out: list[Unit] = []
    index = _index(step)
    if history.samples:
        counted = Unit(f"{namespace}_plan_window_samples", COUNTER, (), [0])
        for n, t in enumerate(history.samples, start=1):
            _log(counted, index(t), [n], end)
        out.append(counted)
    by_window: dict[str, list[tuple[float, float, float]]] = {}
    for seen, name, pct, resets in history.windows:
        by_window.setdefault(name, []).append((seen, pct, resets))
    for name in sorted(by_window):
        out.extend(_window_units(name, by_window[name], step, namespace, end))
    return [u for u in out if u.steps]


def _window_units(name: str, figures: list[tuple[float, float, float]], step: int,
                  namespace: str, end: int) -> list[Unit]:
    """The used-ratio and reset gauges and the exhausted counter of one window."""
    labels: Labels = (("window", name),)
    used = Unit(f"{namespace}_plan_window_used_ratio", GAUGE, labels, [0.0])
    resets_at = Unit(f"{namespace}_plan_window_resets_at_seconds", GAUGE, labels, [0.0])
    exhausted = Unit(f"{namespace}_plan_windows_exhausted", COUNTER, labels, [0])
    index = _index(step)
    # Boundaries where a value can change: after a sample, and where a reset time passes.
    candidates = sorted({index(t) for t, _, _ in figures}
                        | {math.ceil(r / step) for _, _, r in figures})
    peaks: dict[int, list[float]] = {}  # instance -> [highest %, latest reported reset]
    full: set[int] = set()
    pos = 0
    for at in candidates:
        if at > end:
            break
        while pos < len(figures) and index(figures[pos][0]) <= at:
            _, pct, reported = figures[pos]
            key = window_instance(reported)
            peak = peaks.setdefault(key, [pct, reported])
            peak[0], peak[1] = max(peak[0], pct), max(peak[1], reported)
            if pct >= 100:
                full.add(key)
            pos += 1
        if not peaks:
            continue
        high, reported = peaks[max(peaks)]
        _log(used, at, [0.0 if reported <= at * step else high / 100.0], end)
        _log(resets_at, at, [reported], end)
        _log(exhausted, at, [len(full)], end)
    return [used, resets_at, exhausted]


def _index(step: int) -> Any:
    """The boundary index at which something at ``t`` is first counted."""
    return lambda t: math.floor(t / step) + 1


def _log(unit: Unit, index: int, values: list[Any], end: int) -> None:
    """Log ``values`` at boundary ``index`` when they changed (and ``index <= end``)."""
    if index > end:
        return
    if unit.steps and unit.steps[-1] == index:
        del unit.steps[-1]
        del unit.log[-unit.width:]
    unit.values = list(values)
    prev = list(unit.log[-unit.width:]) if unit.steps else None
    if prev == [float(v) for v in values]:
        return
    unit.steps.append(index)
    unit.log.extend(float(v) for v in values)
