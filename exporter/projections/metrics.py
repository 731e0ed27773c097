"""Metrics projection: the ledger's rollups → the catalogue's OpenTelemetry instruments.

Start-up reads the rollups (O(classes x root sets + series x buckets), never
O(requests)), keeps the rows whose root set lies in the daemon's scope, and
begins every instrument at their totals: a restart is no counter reset for
Prometheus. Afterwards each committed batch brings its rollup increments
(:class:`exporter.records.Applied`), which move the counters at once; requests
enter the histograms when the ledger settles them, with their final values.

What counts where is decided once, in :mod:`exporter.projections.counting`;
this module only keeps per-class sums in memory and hands sample growth to
the instruments. Codex's rows go to Codex's families, never to Claude Code's
(:mod:`exporter.projections.codex_metrics`).
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry

from exporter.ledger.store import Ledger
from exporter.projections import cardinality, instruments
from exporter.projections.attributed import Attributed, Names
from exporter.projections.codex_metrics import Agents, CodexExposure, Reasoning, is_codex
from exporter.projections.compat import families
from exporter.projections.counting import (
    TTL_1H,
    Counting,
    Exposure,
    Labels,
    SampleKey,
    Sums,
    add_sums,
    split,
)
from exporter.projections.labels import LabelPolicy
from exporter.projections.live import LiveSessions
from exporter.projections.pricing import RateTable
from exporter.projections.project_groups import ProjectGroups, folders_of
from exporter.records import (
    ALL_ROOTS,
    COUNT_SUMS,
    Applied,
    CountClass,
    CountRow,
    HistRow,
    HistSeries,
    IterationKind,
    MendKind,
    Request,
    Source,
)

LINE_RESULTS = cardinality.LINE_RESULTS
MENDED_KINDS = MendKind.ALL
REJECT_REASONS = cardinality.REJECT_REASONS
_ZERO: Sums = (0,) * len(COUNT_SUMS)
_SOURCES = tuple(Source)


@dataclass(frozen=True, slots=True)
class MetricsOptions:
    """The settings the projection needs (taken from the exporter's Settings)."""

    namespace: str = "claude_code"
    project_label: str = "basename"
    project_grouping: str = "folder"  # exporter.projections.project_groups.GROUPINGS
    # The project folders known before the first request is labelled (a replay's: backfill).
    project_folders: frozenset[str] = frozenset()
    kv_bytes_per_token: Mapping[str, int] = field(
        default_factory=lambda: {"mla": 70_272, "gqa": 516_096}
    )
    upload_bytes_per_token: float = 4.0
    budgets: Mapping[str, float] = field(default_factory=dict)  # period → USD
    settle_seconds: float = 60.0
    version: str = "0"
    compat: tuple[str, ...] = ()  # of compat.MODES (docs/compat.md)

    def counting(self, pricing: RateTable) -> Counting:
        """The counting rules these options imply (what the ledger's rollups follow)."""
        return Counting(pricing, self.kv_bytes_per_token, self.upload_bytes_per_token)


class Scope:
    """Which roots bitmasks a projection counts: those sharing a bit with its roots."""

    def __init__(self, roots: Sequence[str | Path] | None) -> None:
        """``roots`` as the scanner has them (None: everything)."""
        self._roots = None if roots is None else tuple(
            os.path.abspath(os.fspath(r)).rstrip("/") for r in roots)
        self.mask = 0

    def learn(self, bits: Mapping[str, int]) -> None:
        """Take in the bits of roots (known at start, or created by a batch)."""
        for path, bit in bits.items():
            if self._roots is not None and any(
                    path == s or path.startswith(s + "/") for s in self._roots):
                self.mask |= bit

    def __contains__(self, mask: int) -> bool:
        """True if requests with this roots bitmask are counted (v1 requests always are)."""
        return self._roots is None or mask == ALL_ROOTS or bool(mask & self.mask)


class Projection:
    """Feeds the ledger's rollups into the instruments and answers the live gauges."""

    def __init__(
        self,
        pricing: RateTable,
        options: MetricsOptions,
        registry: CollectorRegistry,
        *,
        roots: Sequence[str | Path] | None = None,
        clock: Callable[[], float] = time.time,
        files_watched: Callable[[], int] = lambda: 0,
        budget_projected: instruments.Observe = list,
        readers: Sequence[MetricReader] = (),
        resource: Resource | None = None,
    ) -> None:
        """Create the instruments in ``registry``; nothing is counted until load().

        ``roots``: count only requests that appeared under them. ``budget_projected``:
        the projected spend's series (:class:`exporter.projections.budget_pace.PaceGauge`;
        none by default). ``readers``
        (e.g. an OTLP push) read the same instruments, with ``resource``.
        """
        self.opts = options
        self.scope = Scope(roots)
        info = pricing.describe()  # which price data every cost figure comes from
        self._build_labels = {"version": options.version, "prices": info["package"],
                              "prices_version": info["version"],
                              "prices_data_date": info["data_date"]}
        self.exposure = Exposure(pricing, LabelPolicy(
            options.project_label,
            groups=ProjectGroups(options.project_grouping, options.project_folders)),
                                 options.kv_bytes_per_token, options.upload_bytes_per_token)
        self._clock = clock
        self._files_watched = files_watched
        self._budget_projected = budget_projected
        self._lock = threading.Lock()
        self._classes: dict[CountClass, Sums] = {}
        self._rows = 0
        self.live = LiveSessions(clock)
        self.caps = cardinality.Caps(options.project_label, len(options.kv_bytes_per_token))
        self.inst = instruments.build(options.namespace, registry, self._gauge_sources(),
                                      limits=self.caps.limits(), readers=readers,
                                      resource=resource,
                                      aggregations=families.aggregations(options.compat))
        self.compat = families.Families(options.compat, self.exposure, self.inst.provider)
        self.attributed = Attributed(pricing, Names(options.project_label), clock=clock)
        self.agents = Agents()
        self.codex = CodexExposure(pricing, options.project_label, self.exposure.labels.groups,
                                   options.kv_bytes_per_token, options.upload_bytes_per_token)
        self._codex_classes: dict[CountClass, Sums] = {}
        self.reasoning = Reasoning(self.codex, clock=clock)

    # ----------------------------------------------------------------- loading
    def load(self, ledger: Ledger, view: str = "requests", scope: str | None = None) -> None:
        """Begin at the ledger's rollups (start-up); ``view`` holds the scoped requests.

        ``scope``: the same scope as a condition on a roots bitmask (``Ledger.scope_filter``).
        """
        rollups = ledger.rollups()
        self.scope.learn(rollups.roots)
        self.agents.learn(ledger.root_agents(), rollups.roots)
        self.exposure.labels.groups.learn(folders_of(ledger.read))  # before any label
        self._start(rollups.counts, rollups.hists, lines=ledger.counters("lines"),
                    rejected=ledger.counters("rejected"),
                    bytes_read=ledger.counters("bytes_read").get("", 0),
                    late=ledger.counters("late_updates").get("", 0),
                    iterations=ledger.counters("iterations"), mended=ledger.counters("mended"))
        self._add(self.attributed.load(ledger.read, view, scope))
        self._add(self.reasoning.load(ledger.read, view))
        now = self._clock()
        # The live window only (bounded on both sides: a clock running behind the
        # transcripts must not turn start-up into a replay of "future" history).
        self._note_live(ledger.requests(since=now - TTL_1H, until=now + TTL_1H, view=view))

    def _start(self, counts: Iterable[CountRow], hists: Iterable[HistRow], *,
               lines: Mapping[str, int], rejected: Mapping[str, int], bytes_read: int,
               late: int, iterations: Mapping[str, int], mended: Mapping[str, int]) -> None:
        """Add every in-scope rollup row once (rows come earliest class first)."""
        totals: dict[SampleKey, float] = dict.fromkeys(self.exposure.zero_samples(), 0)
        codex: list[tuple[CountClass, Sums]] = []
        with self._lock:
            for roots, cls, _first, last, sums in counts:
                if roots in self.scope and self.agents.is_codex(roots):
                    codex.append((cls, sums))
                elif roots in self.scope:
                    self.live.saw(_SOURCES[cls.source], last)
                    for part in split(cls):
                        if part is not None:
                            self._classes[part] = add_sums(self._classes.get(part, _ZERO), sums)
            self.compat.start(self._classes)
            for cls, sums in self._classes.items():
                for key, value in self.exposure.samples(cls, sums):
                    totals[key] = totals.get(key, 0) + value
                if not cls.gap:
                    self._rows += sums[0]
        self._add(totals)
        self._add(self._grow_codex(codex))
        self._record_histogram_rows(hists)
        self._count_exporter(lines, rejected, bytes_read, late, zeros=True,
                             iterations=iterations, mended=mended)

    def apply(self, applied: Applied) -> None:
        """Count one committed batch: its rollup increments, lines, and live state."""
        self.scope.learn(applied.roots)
        self.agents.learn(applied.agents, applied.roots)
        self.exposure.labels.groups.learn(applied.folders)  # a new folder: before its labels
        grown: dict[CountClass, Sums] = {}
        codex: list[tuple[CountClass, Sums]] = []
        for roots, cls, _first, _last, sums in applied.counts:
            if roots in self.scope and self.agents.is_codex(roots):
                codex.append((cls, sums))
            elif roots in self.scope:
                for part in split(cls):
                    if part is not None:
                        grown[part] = add_sums(grown.get(part, _ZERO), sums)
        adds: dict[SampleKey, float] = defaultdict(float)
        with self._lock:
            for cls, sums in grown.items():
                was = self._classes.get(cls, _ZERO)
                now = add_sums(was, sums)
                self._classes[cls] = now
                self.compat.grow(cls, was, now)
                if not cls.gap:
                    self._rows += sums[0]
                _growth(self.exposure, cls, was, now, adds)
        self._add(adds)
        self._add(self._grow_codex(codex))
        # A first pass's batch has no row lists: the attribution sums are read again.
        raw = (applied.new_count > len(applied.new)
               or applied.upgraded_count > len(applied.upgraded))
        self._add(self.attributed.apply(applied.new, applied.upgraded, raw=raw))
        self._add(self.reasoning.apply(applied.new, applied.upgraded, raw))
        self._record_histogram_rows(applied.hists)
        self._note_live([*applied.new, *(new for _old, new in applied.upgraded)])
        self._count_exporter(applied.lines, applied.rejected, applied.bytes_read, applied.late,
                             iterations=applied.iterations, mended=applied.mended)

    def shutdown(self) -> None:
        """Release the instruments."""
        self.inst.shutdown()

    def _note_live(self, requests: Iterable[Request]) -> None:
        """Claude Code's requests into the live gauges (Codex has no cache TTL nor KV warm)."""
        for req in requests:
            if not is_codex(req):
                self.live.note(req)

    def _grow_codex(self, rows: Iterable[tuple[CountClass, Sums]]) -> dict[SampleKey, float]:
        """Codex rollup rows (or increments) into Codex's sums: the growth of their samples."""
        grown: dict[CountClass, Sums] = {}
        for cls, sums in rows:
            price = split(cls)[0]  # the gap-bucket keys have no Codex family
            grown[price] = add_sums(grown.get(price, _ZERO), sums)
        adds: dict[SampleKey, float] = defaultdict(float)
        with self._lock:
            for cls, sums in grown.items():
                was = self._codex_classes.get(cls, _ZERO)
                now = add_sums(was, sums)
                self._codex_classes[cls] = now
                self._rows += sums[0]
                _growth(self.codex, cls, was, now, adds)
        return adds

    # ------------------------------------------------------------------ sinks
    def _add(self, values: Mapping[SampleKey, float]) -> None:
        """Add sample growth to the counters (zeros too, so that the series exist)."""
        counters = self.inst.counters
        for (name, labels), value in values.items():
            counters[name].add(max(value, 0), dict(labels))

    def _record_histogram_rows(self, rows: Iterable[HistRow]) -> None:
        """Add histogram rollup rows (or increments) in scope, one seed per series."""
        claude: list[HistRow] = []
        codex: list[HistRow] = []
        for row in rows:
            (codex if self.agents.is_codex(row[0]) else claude).append(row)
        if codex:
            self._record_codex_rows(codex)
        per: dict[HistSeries, tuple[list[int], list[float]]] = {}
        for roots, series, bucket, value in self.compat.record_genai_rows(claude, self.scope):
            if roots not in self.scope:
                continue
            acc = per.get(series)
            if acc is None:
                acc = per[series] = ([0] * (len(instruments.BUCKETS[series.name]) + 1), [0])
            if bucket < 0:
                acc[1][0] += value
            else:
                acc[0][bucket] += int(value)
        hists = self.inst.histograms
        for series, (counts, total) in per.items():
            seed = instruments.Seed(tuple(counts), total[0])
            hists[series.name].record(0, dict(self.exposure.hist_labels(series)),
                                      context=instruments.seed_context(seed))

    def _record_codex_rows(self, rows: Iterable[HistRow]) -> None:
        """Seed Codex's histograms with its rows in scope (context, output, gap: those it has)."""
        per: dict[tuple[str, Labels], tuple[list[int], list[float]]] = {}
        for roots, series, bucket, value in rows:
            routed = self.codex.hist(series) if roots in self.scope else None
            if routed is None:
                continue
            acc = per.get(routed)
            if acc is None:
                acc = per[routed] = ([0] * (len(instruments.BUCKETS[routed[0]]) + 1), [0])
            if bucket < 0:
                acc[1][0] += value
            else:
                acc[0][bucket] += int(value)
        hists = self.inst.histograms
        for (name, labels), (counts, total) in per.items():
            seed = instruments.Seed(tuple(counts), total[0])
            hists[name].record(0, dict(labels), context=instruments.seed_context(seed))

    def _count_exporter(self, lines: Mapping[str, int], rejected: Mapping[str, int],
                        nbytes: int, late: int, *, zeros: bool = False,
                        iterations: Mapping[str, int] | None = None,
                        mended: Mapping[str, int] | None = None) -> None:
        """Exporter line, rejection, iteration, mended-line, byte and late-update counters."""
        counters = self.inst.counters
        if zeros:  # every fixed-label series exists from the start
            lines = {**dict.fromkeys(LINE_RESULTS, 0), **lines}
            rejected = {**dict.fromkeys(REJECT_REASONS, 0), **rejected}
        for result, n in lines.items():
            counters["exporter_lines"].add(n, {"result": result})
        for reason, n in rejected.items():
            counters["exporter_rejected_lines"].add(n, {"reason": reason})
        counters["exporter_bytes_read"].add(nbytes, {})
        counters["exporter_late_updates"].add(late, {})
        # usage.iterations entries by kind: a fixed label set (the names of undocumented
        # types come from the transcripts: they are `report`'s, all `unknown` here).
        kinds = dict.fromkeys(IterationKind.FIXED, 0) if zeros else {}
        for kind, n in (iterations or {}).items():
            fixed = kind if kind in IterationKind.FIXED else IterationKind.UNKNOWN
            kinds[fixed] = kinds.get(fixed, 0) + n
        for kind, n in kinds.items():
            counters["exporter_iterations"].add(n, {"kind": kind})
        fixes = {**dict.fromkeys(MENDED_KINDS, 0), **(mended or {})} if zeros else mended or {}
        for kind, n in fixes.items():
            counters["exporter_mended_lines"].add(n, {"kind": kind})

    # ------------------------------------------------------------------ gauges
    def _gauge_sources(self) -> dict[str, instruments.Observe]:
        """The observers of every live gauge."""
        opts = self.opts
        return {
            "active_sessions": self.live.active,
            "warm_kv_cache_bytes": lambda: self.live.warm_kv(opts.kv_bytes_per_token),
            "last_request_timestamp_seconds": self.live.last_request,
            "budget_usd": lambda: [(v, {"period": p}) for p, v in sorted(opts.budgets.items())],
            "budget_projected_usd": self._budget_projected,
            "kv_bytes_per_token": lambda: [
                (float(b), {"arch": a}) for a, b in sorted(opts.kv_bytes_per_token.items())
            ],
            "exporter_files_watched": lambda: [(float(self._files_watched()), {})],
            "exporter_ledger_requests": lambda: [(float(self._rows), {})],
            "exporter_build_info": lambda: [(1.0, self._build_labels)],
        }


def _growth(exposure: Exposure | CodexExposure, cls: CountClass, was: Sums, now: Sums,
            adds: dict[SampleKey, float]) -> None:
    """Add to ``adds`` how much each sample of a class grew from sums ``was`` to ``now``."""
    before = dict(exposure.samples(cls, was))
    for key, value in exposure.samples(cls, now):
        adds[key] = adds.get(key, 0.0) + value - before.get(key, 0)
