"""`backfill`: the ledger's history as OpenMetrics text for ``promtool tsdb create-blocks-from``.

The series are those ``serve`` exposes — same names, label sets, label policy
and values — so a Prometheus that gets the blocks sees each counter continue
into the live scrapes without a jump (the timeline counts by the same rules
as ``serve``, and its end is checked against what a ``serve`` starting from
the ledger's rollups would expose).
Counters and histograms are written; gauges and the exporter's own counters
are not (see docs/backfill.md), except the plan-limit families, which are the
history of the status line's samples (:func:`~exporter.projections.timeline.plan_units`):
the used-ratio and reset gauges and the samples and exhausted-windows counters.

Which samples are written (``step`` is the resolution, ``anchor`` a multiple,
``hold`` the longest window queries must see exactly):

- at each boundary where a metric's values changed, the boundary before it
  (the old value, so ``increase()`` sees the first increment after a quiet
  spell) and the boundary after it (a flat segment, so ``rate()`` falls back
  to zero);
- the metric at every multiple of ``anchor`` (UTC) within ``hold`` of one of
  its changes: a window of at most ``hold`` that holds a change sees exactly
  the samples a file with anchors everywhere would give it, so the shipped
  dashboards and rules (windows up to a day) answer as over a dense file;
- every metric at its birth (0, the boundary before its first change), at the
  first boundary written (``since``) and at the last one (``until``): a metric
  that never changed has only those samples.

``hold=None`` writes every anchor of every metric (the dense variant; with
``anchor == step``, every metric at every step, as a scrape would give).
Cost is then proportional to calendar time x series; with a ``hold`` it is
proportional to activity (see docs/backfill.md).

A histogram's buckets, count and sum are always written together.
:func:`write_blocks` writes the history in block-sized time chunks and turns
each into TSDB blocks with promtool, so no file larger than one block's
samples ever exists.
"""

from __future__ import annotations

import math
import subprocess
import tempfile
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import merge
from pathlib import Path
from typing import IO, Final

from prometheus_client import CollectorRegistry

from exporter.ledger.store import Ledger
from exporter.projections import instruments
from exporter.projections.compat import history as compat_history
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.plan.gauges import ALL_FAMILIES
from exporter.projections.plan.windows import PlanHistory
from exporter.projections.pricing import RateTable
from exporter.projections.timeline import GAUGE, SampleKey, Timeline, Unit, plan_units
from exporter.records import Request

DEFAULT_LABELS: Final = {"job": "claude-code"}
DEFAULT_HOLD: Final = 86_400  # the longest fixed window of the shipped rules and dashboards
GAUGE_ANCHOR_S: Final = 240  # within Prometheus's 5-minute look-back of the previous sample
# One promtool block per chunk: 2 h x 3**5, the largest block size below a month (promtool
# rounds --max-block-duration down to 2 h x 3**n; 744h would give this one too).
BLOCK_SECONDS: Final = 486 * 3600


class BackfillError(Exception):
    """The history cannot be written as asked (or would not match ``serve``)."""


@dataclass(frozen=True, slots=True)
class BackfillOptions:
    """What to write: resolution, anchors, time range and target labels."""

    step: int = 60  # seconds between boundaries
    anchor: int = 3600  # anchors at each multiple of this (a multiple of step)
    since: float | None = None  # first boundary written: the first one >= since
    until: float | None = None  # requests with ts < the last boundary <= until; None: now
    labels: Mapping[str, str] = field(default_factory=dict)  # target labels on every series
    hold: int | None = DEFAULT_HOLD  # anchors within this of a change (None: everywhere)


@dataclass(frozen=True, slots=True)
class BackfillStats:
    """What was written."""

    requests: int
    metrics: int  # units: counter series and histogram label sets
    series: int  # samples per point summed over units (as Prometheus counts series)
    samples: int
    first: int | None  # timestamp of the first sample (seconds)
    last: int | None
    chunks: int = 1  # files written (one per promtool block with write_blocks)


@dataclass(slots=True)
class _Replay:
    """A counted history, ready to write."""

    timeline: Timeline
    requests: int
    start: int | None  # first boundary index written (None: each unit's birth)
    end: int  # last boundary index written


def _replay(requests: Sequence[Request], pricing: RateTable, metrics: MetricsOptions,
            opts: BackfillOptions, *, now: float | None,
            serve: Mapping[SampleKey, float] | None,
            plan: PlanHistory | None = None) -> _Replay:
    """Count ``requests`` up to ``until``, check the end against ``serve``, add ``plan``'s."""
    _check(opts)
    step = opts.step
    until = opts.until if opts.until is not None else (now if now is not None else time.time())
    end = math.floor(until / step)
    kept = [r for r in requests if r.ts < end * step]
    start = math.ceil(opts.since / step) if opts.since is not None else None
    timeline = Timeline(pricing, metrics, step)
    timeline.run(kept)
    if serve is not None and len(kept) == len(requests):
        _verify(timeline.final(), serve)
    if plan is not None:  # after the check: serve's projection does not hold them
        for unit in plan_units(plan, step, metrics.namespace, end):
            timeline.units[(unit.family, unit.labels)] = unit
        for agent, history in plan.others:  # claude_code_codex_plan_*: as serve names them
            for unit in plan_units(history, step, f"{metrics.namespace}_{agent}", end):
                timeline.units[(unit.family, unit.labels)] = unit
    return _Replay(timeline, len(kept), start, end)


def _stats(replay: _Replay, written: tuple[int | None, int | None, int],
           chunks: int = 1) -> BackfillStats:
    """What a replay wrote."""
    units = replay.timeline.units.values()
    first, last, samples = written
    step = replay.timeline.step
    return BackfillStats(replay.requests, len(units), sum(u.width for u in units), samples,
                         None if first is None else first * step,
                         None if last is None else last * step, chunks)


def write_history(
    requests: Sequence[Request], pricing: RateTable, metrics: MetricsOptions, out: IO[str],
    opts: BackfillOptions, *, now: float | None = None,
    serve: Mapping[SampleKey, float] | None = None, plan: PlanHistory | None = None,
) -> BackfillStats:
    """Write the OpenMetrics history of ``requests`` (ledger time order) to ``out``.

    ``serve``: the samples a ``serve`` starting now would expose
    (:func:`serve_samples`); when the history reaches the newest request, its
    end must equal them, or nothing is written. ``plan``: the status line's
    samples (``exporter.projections.plan.windows.plan_history``), for the plan-limit series.
    """
    replay = _replay(requests, pricing, metrics, opts, now=now, serve=serve, plan=plan)
    written = _write(replay.timeline.units.values(), out, opts, start=replay.start,
                     end=replay.end, namespace=metrics.namespace)
    out.write("# EOF\n")
    return _stats(replay, written)


def write_blocks(
    requests: Sequence[Request], pricing: RateTable, metrics: MetricsOptions, blocks: Path,
    opts: BackfillOptions, *, promtool: str, now: float | None = None,
    serve: Mapping[SampleKey, float] | None = None, workdir: Path | None = None,
    progress: Callable[[int, int], None] | None = None, plan: PlanHistory | None = None,
) -> BackfillStats:
    """Turn the history into TSDB blocks in ``blocks`` with ``promtool``, one block at a time.

    The history is cut at multiples of :data:`BLOCK_SECONDS` (promtool aligns
    its blocks to them, so each chunk makes one block); each chunk is written
    to a temporary file in ``workdir``, handed to promtool and deleted, so
    the disk holds at most one block's text at a time. (promtool maps its input
    into memory, so a pipe cannot feed it.) ``progress(done, total)`` is
    called after each chunk. ``plan`` as for :func:`write_history`.
    """
    replay = _replay(requests, pricing, metrics, opts, now=now, serve=serve, plan=plan)
    units = list(replay.timeline.units.values())
    windows = list(_windows(units, replay, opts, BLOCK_SECONDS))
    every, hold = _reach(opts)
    # Each unit's boundaries once (not once per chunk): a chunk takes a slice of them.
    emitted = {id(u): array("q", emission(u, replay.start, replay.end,
                                          _every(u, every, opts.step), hold))
               for u in units}
    blocks.mkdir(parents=True, exist_ok=True)
    first: int | None = None
    last: int | None = None
    samples = 0
    with tempfile.TemporaryDirectory(prefix="backfill-", dir=workdir) as tmp:
        chunk = Path(tmp) / "chunk.om"
        for done, (lo, hi) in enumerate(windows, start=1):
            with chunk.open("w", encoding="utf-8") as out:
                a, b, n = _write(units, out, opts, start=replay.start, end=replay.end,
                                 namespace=metrics.namespace, window=(lo, hi), emitted=emitted)
                out.write("# EOF\n")
            if n and a is not None and b is not None:
                _promtool(promtool, chunk, blocks)
                first = a if first is None else first
                last = b
                samples += n
            chunk.unlink()
            if progress is not None:
                progress(done, len(windows))
    return _stats(replay, (first, last, samples), len(windows))


def _windows(units: Sequence[Unit], replay: _Replay, opts: BackfillOptions,
             block: int) -> Iterator[tuple[int, int]]:
    """Boundary-index ranges [lo, hi) of the blocks that hold samples, in time order."""
    step = opts.step
    births = [u.steps[0] - 1 for u in units if u.steps]
    if not births:
        return
    lo_index = min(births) if replay.start is None else max(replay.start, min(births))
    first_block = lo_index * step // block
    last_block = replay.end * step // block
    for k in range(first_block, last_block + 1):
        yield -(-k * block // step), -(-(k + 1) * block // step)


def _promtool(promtool: str, chunk: Path, blocks: Path) -> None:
    """Run promtool on one chunk; its error becomes a BackfillError."""
    argv = [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
            f"--max-block-duration={BLOCK_SECONDS // 3600}h", str(chunk), str(blocks)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise BackfillError(f"promtool failed ({done.returncode}): {' / '.join(message)}")


def emission(unit: Unit, start: int | None, end: int, every: int,
             hold: int | None = None) -> Iterable[int]:
    """Boundary indexes at which ``unit`` is written, ascending, within [start, end].

    ``every`` is the anchor interval and ``hold`` the anchor reach around a
    change, in steps (None: anchors everywhere). A unit is born the boundary
    before its first change (where it is written at 0); a gauge at its first value.
    """
    lo = unit.steps[0] - (0 if unit.kind == GAUGE else 1)
    if start is not None:
        lo = max(lo, start)
    if lo > end:
        return []
    if every == 1 and hold is None:
        return range(lo, end + 1)
    changes = list(_changes(unit))
    around = [_shifted(changes, d, lo, end) for d in (-1, 0, 1)]
    if hold is None:
        anchors: Iterable[int] = range(-(-lo // every) * every, end + 1, every)
    else:
        anchors = _held(changes, every, hold, lo, end)
    return _unique(merge([lo], *around, anchors, [end]))


def _changes(unit: Unit) -> Iterator[int]:
    """The logged boundaries where the unit's values differ from the ones before."""
    width = unit.width
    log = unit.log
    prev: Sequence[float] = [0.0] * width
    for pos, index in enumerate(unit.steps):
        now = log[pos * width:(pos + 1) * width]
        if list(now) != list(prev):
            yield index
        prev = now


def _held(changes: Iterable[int], every: int, hold: int, lo: int, end: int) -> Iterator[int]:
    """Multiples of ``every`` within ``hold`` of a change and within [lo, end], ascending."""
    nxt = lo
    for change in changes:
        at = max(change - hold, nxt)
        at = -(-at // every) * every
        stop = min(change + hold, end)
        while at <= stop:
            yield at
            at += every
        nxt = max(nxt, at)


def _every(unit: Unit, every: int, step: int) -> int:
    """The anchor interval of ``unit`` in steps: a gauge's at most GAUGE_ANCHOR_S.

    A graph of a gauge reads its instant values, which Prometheus looks up at
    most 5 minutes back: anchors closer than that draw a line, not dots.
    """
    if unit.kind != GAUGE:
        return every
    return max(1, min(every, GAUGE_ANCHOR_S // step))


def _reach(opts: BackfillOptions) -> tuple[int, int | None]:
    """The anchor interval and the hold, in steps."""
    return opts.anchor // opts.step, None if opts.hold is None else opts.hold // opts.step


def _shifted(steps: Iterable[int], by: int, lo: int, end: int) -> Iterable[int]:
    """``steps`` shifted by ``by``, kept within [lo, end] (ascending if steps are)."""
    return (s + by for s in steps if lo <= s + by <= end)


def _write(units: Iterable[Unit], out: IO[str], opts: BackfillOptions, *, start: int | None,
           end: int, namespace: str, window: tuple[int, int] | None = None,
           emitted: Mapping[int, array[int]] | None = None,
           ) -> tuple[int | None, int | None, int]:
    """Write every family's header and samples; return (first, last, samples).

    ``window``: only boundary indexes in [lo, hi), and only families with a
    sample there; ``emitted``: each unit's boundaries (by ``id``), if known.
    """
    every, hold = _reach(opts)
    target = tuple(sorted(opts.labels.items()))
    families: dict[str, list[Unit]] = {}
    for unit in units:
        families.setdefault(unit.family, []).append(unit)
    first: int | None = None
    last: int | None = None
    count = 0
    for family in sorted(families):
        group = sorted(families[family], key=lambda u: u.labels)
        header = (f"# HELP {family} {_escape_help(_help(family, namespace))}\n"
                  f"# TYPE {family} {group[0].kind}\n")
        if window is None:
            out.write(header)
            header = ""
        for unit in group:
            clash = {k for k, _ in unit.labels} & {k for k, _ in target}
            if clash:
                raise BackfillError(f"target label(s) {sorted(clash)} clash with {family}'s")
            prefixes = [_series(name, (*labels, *target)) for name, labels in unit.samples()]
            lines: list[str] = []
            indexes: Iterable[int]
            if emitted is not None:
                known = emitted[id(unit)]
                indexes = known
                if window is not None:
                    indexes = known[bisect_left(known, window[0]):bisect_left(known, window[1])]
            else:
                indexes = emission(unit, start, end, _every(unit, every, opts.step), hold)
                if window is not None:
                    indexes = [i for i in indexes if window[0] <= i < window[1]]
            for index in indexes:
                ts = str(index * opts.step)
                for prefix, value in zip(prefixes, unit.at(index), strict=True):
                    lines.append(f"{prefix} {_number(value)} {ts}\n")
                first = index if first is None else min(first, index)
                last = index if last is None else max(last, index)
            if lines:
                out.write(header)
                header = ""
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


def serve_samples(ledger: Ledger, pricing: RateTable, metrics: MetricsOptions,
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
        hist |= compat_history.HISTOGRAM_FAMILIES
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
    if opts.hold is not None and opts.hold < 0:
        raise BackfillError("--hold must not be negative")


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
    plan = next((f.help for f in ALL_FAMILIES if f.name == name), "")
    return (instruments.COUNTERS.get(name) or instruments.HISTOGRAMS.get(name)
            or compat_history.HELP.get(family, "") or plan)


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


__all__ = ["BLOCK_SECONDS", "DEFAULT_HOLD", "BackfillError", "BackfillOptions", "BackfillStats",
           "emission", "exposed", "serve_samples", "write_blocks", "write_history"]
