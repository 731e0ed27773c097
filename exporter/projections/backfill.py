"""`backfill`: the ledger's history as OpenMetrics text for ``promtool tsdb create-blocks-from``.

The series are those ``serve`` exposes — same names, label sets, label policy
and values — so a Prometheus that gets the blocks sees each counter continue
into the live scrapes without a jump (the timeline counts by the same rules
as ``serve``, and its end is checked against what a ``serve`` starting from
the ledger's rollups would expose).
Counters and histograms are written; gauges and the exporter's own counters
are not (see docs/backfill.md).

Which samples are written (``step`` is the resolution, ``anchor`` a multiple):

- at each boundary where a metric changed, the boundary before it (the old
  value, so ``increase()`` sees the first increment after a quiet spell) and
  the boundary after it (a flat segment, so ``rate()`` falls back to zero);
- every metric at every multiple of ``anchor`` (UTC), at the first boundary
  written (``since``) and at the last one (``until``): ``increase()`` over a
  window whose both ends fall on anchors is then exact; ``anchor == step``
  writes every metric at every step (a dense file, as a scrape would give).

A histogram's buckets, count and sum are always written together.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import merge
from pathlib import Path
from typing import IO, Final

from prometheus_client import CollectorRegistry

from exporter.ledger import Ledger
from exporter.projections import instruments
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.pricing import Pricing
from exporter.projections.timeline import SampleKey, Timeline, Unit
from exporter.records import Request

DEFAULT_LABELS: Final = {"job": "claude-code"}


class BackfillError(Exception):
    """The history cannot be written as asked (or would not match ``serve``)."""


@dataclass(frozen=True, slots=True)
class BackfillOptions:
    """What to write: resolution, anchors, time range and target labels."""

    step: int = 60  # seconds between boundaries
    anchor: int = 3600  # every metric at each multiple of this (a multiple of step)
    since: float | None = None  # first boundary written: the first one >= since
    until: float | None = None  # requests with ts < the last boundary <= until; None: now
    labels: Mapping[str, str] = field(default_factory=dict)  # target labels on every series


@dataclass(frozen=True, slots=True)
class BackfillStats:
    """What was written."""

    requests: int
    metrics: int  # units: counter series and histogram label sets
    series: int  # samples per point summed over units (as Prometheus counts series)
    samples: int
    first: int | None  # timestamp of the first sample (seconds)
    last: int | None


def write_history(
    requests: Sequence[Request], pricing: Pricing, metrics: MetricsOptions, out: IO[str],
    opts: BackfillOptions, *, now: float | None = None,
    serve: Mapping[SampleKey, float] | None = None,
) -> BackfillStats:
    """Write the OpenMetrics history of ``requests`` (ledger time order) to ``out``.

    ``serve``: the samples a ``serve`` starting now would expose
    (:func:`serve_samples`); when the history reaches the newest request, its
    end must equal them, or nothing is written.
    """
    _check(opts)
    step = opts.step
    until = opts.until if opts.until is not None else (now if now is not None else time.time())
    end = math.floor(until / step)
    kept = [r for r in requests if r.ts < end * step]
    start = math.ceil(opts.since / step) if opts.since is not None else None
    timeline = Timeline(pricing, metrics, step)
    try:
        timeline.run(kept)
        if serve is not None and len(kept) == len(requests):
            _verify(timeline.final(), serve)
        written = _write(timeline.units.values(), out, opts, start=start, end=end,
                         namespace=metrics.namespace)
    finally:
        timeline.close()
    requests = kept
    out.write("# EOF\n")
    metrics_n = len(timeline.units)
    series = sum(u.width for u in timeline.units.values())
    first, last, samples = written
    return BackfillStats(len(requests), metrics_n, series, samples,
                         None if first is None else first * step,
                         None if last is None else last * step)


def emission(unit: Unit, start: int | None, end: int, every: int) -> Iterable[int]:
    """Boundary indexes at which ``unit`` is written, ascending, within [start, end].

    ``every`` is the anchor interval in steps. A unit is born the boundary
    before its first change (where it is written at 0).
    """
    lo = unit.steps[0] - 1
    if start is not None:
        lo = max(lo, start)
    if lo > end:
        return []
    if every == 1:
        return range(lo, end + 1)
    first_anchor = -(-lo // every) * every
    around = [_shifted(unit.steps, d, lo, end) for d in (-1, 0, 1)]
    return _unique(merge([lo], *around, range(first_anchor, end + 1, every), [end]))


def _shifted(steps: Iterable[int], by: int, lo: int, end: int) -> Iterable[int]:
    """``steps`` shifted by ``by``, kept within [lo, end] (ascending if steps are)."""
    return (s + by for s in steps if lo <= s + by <= end)


def _write(units: Iterable[Unit], out: IO[str], opts: BackfillOptions, *, start: int | None,
           end: int, namespace: str) -> tuple[int | None, int | None, int]:
    """Write every family's header and samples; return (first, last, samples)."""
    every = opts.anchor // opts.step
    target = tuple(sorted(opts.labels.items()))
    families: dict[str, list[Unit]] = {}
    for unit in units:
        families.setdefault(unit.family, []).append(unit)
    first: int | None = None
    last: int | None = None
    count = 0
    for family in sorted(families):
        group = sorted(families[family], key=lambda u: u.labels)
        out.write(f"# HELP {family} {_escape_help(_help(family, namespace))}\n")
        out.write(f"# TYPE {family} {group[0].kind}\n")
        for unit in group:
            clash = {k for k, _ in unit.labels} & {k for k, _ in target}
            if clash:
                raise BackfillError(f"target label(s) {sorted(clash)} clash with {family}'s")
            prefixes = [_series(name, (*labels, *target)) for name, labels in unit.samples()]
            lines: list[str] = []
            for index in emission(unit, start, end, every):
                ts = str(index * opts.step)
                for prefix, value in zip(prefixes, unit.at(index), strict=True):
                    lines.append(f"{prefix} {_number(value)} {ts}\n")
                first = index if first is None else min(first, index)
                last = index if last is None else max(last, index)
            count += len(lines)
            out.write("".join(lines))
    return first, last, count


def _verify(got: Mapping[SampleKey, float], want: Mapping[SampleKey, float]) -> None:
    """Fail unless the final values equal what ``serve`` exposes at start-up.

    Histogram families absent from ``want`` are not compared: requests not yet
    settled keep them out of a starting serve (see :func:`serve_samples`).
    """
    families = {_family(k[0]) for k in want}
    hist = {name for name in (_family(k[0]) for k in got) if name not in families}
    got = {k: v for k, v in got.items() if _family(k[0]) not in hist or k[0].endswith("_total")}
    if got != want:
        diff = sorted(k for k in got.keys() | want.keys() if got.get(k) != want.get(k))
        key = diff[0]
        raise BackfillError(
            f"the replayed history ends at values serve would not expose ({len(diff)} samples "
            f"differ, e.g. {key}: {got.get(key)} vs {want.get(key)}); please report this"
        )


def _family(sample: str) -> str:
    """The family of a sample name (``_bucket``/``_count``/``_sum``/``_total`` removed)."""
    for suffix in ("_bucket", "_count", "_sum", "_total"):
        if sample.endswith(suffix):
            return sample[: -len(suffix)]
    return sample


def serve_samples(ledger: Ledger, pricing: Pricing, metrics: MetricsOptions,
                  roots: Sequence[str | Path] | None = None) -> dict[SampleKey, float]:
    """The counter and histogram samples a ``serve`` over ``roots`` would expose on start.

    Requests still waiting to settle are not in a starting serve's histograms
    (it settles them right after); their families are left out then.
    """
    registry = CollectorRegistry()
    proj = Projection(pricing, metrics, registry, roots=roots, clock=lambda: 0.0)
    try:
        proj.load(ledger)
        samples = exposed(registry, metrics.namespace)
    finally:
        proj.shutdown()
    if ledger.pending():
        hist = {f"{metrics.namespace}_{name}" for name in instruments.HISTOGRAMS}
        samples = {k: v for k, v in samples.items() if _family(k[0]) not in hist}
    return samples


def exposed(registry: CollectorRegistry, namespace: str) -> dict[SampleKey, float]:
    """Counter and histogram samples of a scrape registry (not the exporter's own)."""
    own = f"{namespace}_exporter_"
    out: dict[SampleKey, float] = {}
    for fam in registry.collect():
        if fam.type not in ("counter", "histogram") or fam.name.startswith(own):
            continue
        for s in fam.samples:
            if not s.name.endswith("_created"):
                out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def _check(opts: BackfillOptions) -> None:
    """Reject a step or anchor that cannot work."""
    if opts.step < 1:
        raise BackfillError("--step must be at least 1s")
    if opts.anchor < opts.step or opts.anchor % opts.step:
        raise BackfillError("--anchor must be a multiple of --step")
    if opts.since is not None and opts.until is not None and opts.since >= opts.until:
        raise BackfillError("--since must be before --until")


def _unique(indexes: Iterable[int]) -> Iterable[int]:
    """Drop repeats from an ascending sequence."""
    prev: int | None = None
    for i in indexes:
        if i != prev:
            yield i
            prev = i


def _help(family: str, namespace: str) -> str:
    """The family's description from the catalogue."""
    name = family.removeprefix(f"{namespace}_")
    return instruments.COUNTERS.get(name) or instruments.HISTOGRAMS.get(name, "")


def _series(name: str, labels: Sequence[tuple[str, str]]) -> str:
    """``name{a="x",...}`` with OpenMetrics escaping."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return f"{name}{{{inner}}}"


def _escape(value: str) -> str:
    """Escape a label value (backslash, double quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    """Escape HELP text (backslash, double quote, newline)."""
    return _escape(text)


def _number(value: float) -> str:
    """A sample value, as an integer when it is one (shorter, and exact)."""
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


__all__ = ["BackfillError", "BackfillOptions", "BackfillStats", "emission",
           "exposed", "serve_samples", "write_history"]
