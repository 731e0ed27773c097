"""Metrics projection: ledger requests → the catalogue's OpenTelemetry instruments.

At start the whole ledger is loaded, so counters begin at their historical
totals and a restart is no counter reset for Prometheus. Afterwards every
committed batch is applied as it comes: counters move at once (an upgraded
request adds only its difference), while a request enters the histograms
once, with its final values, after ``settle_seconds`` without further lines.
An upgrade after that is added to the counters and counted as a late update.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry

from exporter.ingest.parse import RejectReason
from exporter.ledger import Applied
from exporter.projections import instruments
from exporter.projections.figures import gap_bucket, gap_seconds, session_gaps
from exporter.projections.labels import LabelPolicy
from exporter.projections.live import LiveSessions
from exporter.projections.pricing import Pricing
from exporter.records import LineResult, Request, Source

TOKEN_FIELDS = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")
PROMPT_TYPES = ("input", "cache_read", "cache_write")
GAP_BUCKETS = ("first", "lt_5m", "5m_to_1h", "gt_1h")
USD_QUANTUM = 2.0**-30  # ~1e-9 USD; totals stay exact up to 2**23 USD per series
GAP_QUANTUM = 2.0**-10  # under a millisecond: never moves a gap across a whole-second bound
LINE_RESULTS = (LineResult.USAGE, LineResult.DUPLICATE, LineResult.OTHER, LineResult.REJECTED)
REJECT_REASONS = tuple(
    v for k, v in vars(RejectReason).items() if k.isupper() and isinstance(v, str)
)


@dataclass(frozen=True, slots=True)
class MetricsOptions:
    """The settings the projection needs (taken from the exporter's Settings)."""

    namespace: str = "claude_code"
    project_label: str = "basename"
    kv_bytes_per_token: Mapping[str, int] = field(
        default_factory=lambda: {"mla": 70_272, "gqa": 516_096}
    )
    upload_bytes_per_token: float = 4.0
    budgets: Mapping[str, float] = field(default_factory=dict)  # period → USD
    settle_seconds: float = 60.0
    version: str = "0"


@dataclass(slots=True)
class _Seen:
    """What the projection remembers of a request it has counted."""

    req: Request
    labels: tuple[str, str, str]  # model, project, source as first counted
    gap: float | None
    due: float | None  # monotonic time to enter the histograms; None once recorded


class Projection:
    """Feeds ledger requests into the instruments and answers the live gauges."""

    def __init__(
        self,
        pricing: Pricing,
        options: MetricsOptions,
        registry: CollectorRegistry,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        files_watched: Callable[[], int] = lambda: 0,
        readers: Sequence[MetricReader] = (),
        resource: Resource | None = None,
    ) -> None:
        """Create the instruments in ``registry``; nothing is counted until load().

        ``readers`` (e.g. an OTLP push) read the same instruments, with ``resource``.
        """
        self.pricing = pricing
        self.opts = options
        self.labels = LabelPolicy(options.project_label)
        self._mono = monotonic
        self._files_watched = files_watched
        self._lock = threading.Lock()
        self._pending: dict[str, _Seen] = {}
        self._labels_of: dict[str, tuple[str, str, str]] = {}
        self._keys: dict[tuple[str, str, str], dict[str, _Key]] = {}
        self._main_times: dict[str, list[float]] = defaultdict(list)
        self.live = LiveSessions(clock)
        self._rows = 0
        self.inst = instruments.build(options.namespace, registry, self._gauge_sources(),
                                      readers=readers, resource=resource)

    # ----------------------------------------------------------------- loading
    def load(
        self, requests: Sequence[Request], lines: Mapping[str, int],
        rejected: Mapping[str, int], bytes_read: int,
    ) -> None:
        """Count the whole ledger (startup): every request final, gaps exact."""
        gaps = session_gaps(requests)
        adds = _Adds()
        with self._lock:
            for req in requests:
                gap = gaps.get(req.key)
                labels = self._request_labels(req)
                self._labels_of[req.key] = labels
                self._count_new(adds, req, labels, gap)
                self._record(req, labels, gap)
                self.live.note(req)
                if req.source is Source.MAIN:
                    self._main_times[req.session].append(req.ts)
            for times in self._main_times.values():
                times.sort()
            self._rows = len(requests)
        self._count_lines(adds, lines, rejected, bytes_read)
        _zero_series(adds)
        adds.flush(self.inst.counters)

    def apply(self, applied: Applied) -> None:
        """Count one committed batch: new requests, upgrades and its lines."""
        adds = _Adds()
        now = self._mono()
        with self._lock:
            for req in applied.new:
                gap = self._live_gap(req)
                labels = self._request_labels(req)
                self._labels_of[req.key] = labels
                self._count_new(adds, req, labels, gap)
                self._pending[req.key] = _Seen(req, labels, gap, now + self.opts.settle_seconds)
                self.live.note(req)
            for old, new in applied.upgraded:
                self._upgrade(adds, old, new, now)
            self._rows += len(applied.new)
        self._count_lines(adds, applied.lines, applied.rejected, applied.bytes_read)
        adds.flush(self.inst.counters)

    def settle(self, force: bool = False) -> int:
        """Record the requests whose quiet time is over (all with ``force``)."""
        now = self._mono()
        with self._lock:
            due = [k for k, s in self._pending.items() if force or (s.due or 0) <= now]
            for key in due:
                seen = self._pending.pop(key)
                self._record(seen.req, seen.labels, seen.gap)
        return len(due)

    @property
    def pending(self) -> int:
        """Requests counted but not yet in the histograms."""
        return len(self._pending)

    def shutdown(self) -> None:
        """Release the instruments."""
        self.inst.shutdown()

    # ---------------------------------------------------------------- counting
    def _request_labels(self, req: Request) -> tuple[str, str, str]:
        """(model, project, source) label values under the label policy."""
        return self.labels.model(req.model), self.labels.project(req.project), req.source.label

    def _count_new(
        self, adds: _Adds, req: Request, labels: tuple[str, str, str], gap: float | None
    ) -> None:
        """All counter increments of a request seen for the first time."""
        model, project, source = labels
        adds.add("requests", 1, model=model, project=project, source=source)
        self._count_tokens(adds, req, None, labels, gap)

    def _upgrade(self, adds: _Adds, old: Request, new: Request, now: float) -> None:
        """A request got larger: add the difference under the labels first used."""
        labels = self._labels_of.get(new.key) or self._request_labels(new)
        seen = self._pending.get(new.key)
        gap = seen.gap if seen else None
        self._count_tokens(adds, new, old, labels, gap)
        self.live.note(new)
        if seen is not None:
            seen.req, seen.due = new, now + self.opts.settle_seconds
        else:
            adds.add("exporter_late_updates", 1)

    def _typed_keys(self, labels: tuple[str, str, str]) -> dict[str, _Key]:
        """The label tuple of each token type under (model, project, source), cached."""
        keys = self._keys.get(labels)
        if keys is None:
            model, project, source = labels
            keys = {name: (("model", model), ("project", project), ("source", source),
                           ("type", name)) for name in TOKEN_FIELDS}
            self._keys[labels] = keys
        return keys

    def _count_tokens(
        self, adds: _Adds, req: Request, old: Request | None,
        labels: tuple[str, str, str], gap: float | None,
    ) -> None:
        """Token, cost, gap, upload and KV counters for ``req`` minus ``old``."""
        model = labels[0]
        typed = self._typed_keys(labels)  # label tuples per token type, built once per set
        for name in TOKEN_FIELDS:
            adds.add_key("tokens", typed[name], _diff(req, old, name))
        cost = self.pricing.cost(req)
        if cost is None:
            unpriced = sum(_diff(req, old, n) for n in TOKEN_FIELDS)
            adds.add("unpriced_tokens", unpriced, model=model)
        else:
            before = self.pricing.cost(old) if old is not None else None
            for name, usd in cost.items():
                grown = exact(usd, USD_QUANTUM) - exact((before or {}).get(name, 0.0), USD_QUANTUM)
                adds.add_key("cost_usd", typed[name], max(0.0, grown))
        per_token = self.opts.upload_bytes_per_token
        upload = exact(req.context * per_token, 1.0)
        adds.add("upload_bytes", upload - (exact(old.context * per_token, 1.0) if old else 0.0))
        computed = (req.input + req.cache_write) - ((old.input + old.cache_write) if old else 0)
        for arch, per_token in self.opts.kv_bytes_per_token.items():
            adds.add("kv_recomputed_bytes", computed * per_token, arch=arch)
        if req.source is Source.MAIN:
            bucket = gap_bucket(gap)
            if old is None:
                adds.add("requests_after_gap", 1, gap=bucket)
            adds.add("prompt_tokens_after_gap", _diff(req, old, "input"), gap=bucket, type="input")
            adds.add("prompt_tokens_after_gap", _diff(req, old, "cache_read"), gap=bucket,
                     type="cache_read")
            write = req.cache_write - (old.cache_write if old else 0)
            adds.add("prompt_tokens_after_gap", write, gap=bucket, type="cache_write")

    def _count_lines(
        self, adds: _Adds, lines: Mapping[str, int], rejected: Mapping[str, int], nbytes: int
    ) -> None:
        """Exporter line, rejection and byte counters."""
        for result, n in lines.items():
            adds.add("exporter_lines", n, result=result)
        for reason, n in rejected.items():
            adds.add("exporter_rejected_lines", n, reason=reason)
        adds.add("exporter_bytes_read", nbytes)

    def _record(self, req: Request, labels: tuple[str, str, str], gap: float | None) -> None:
        """Enter one request into the histograms (once, final values)."""
        model, _project, source = labels
        hist = self.inst.histograms
        context = req.context
        hist["request_context_tokens"].record(context, {"model": model, "source": source})
        hist["request_output_tokens"].record(req.output, {"model": model, "source": source})
        if gap is not None:
            hist["request_gap_seconds"].record(exact(gap, GAP_QUANTUM))
        for arch, per_token in self.opts.kv_bytes_per_token.items():
            hist["request_kv_cache_bytes"].record(context * per_token, {"arch": arch})
        hist["request_upload_bytes"].record(exact(context * self.opts.upload_bytes_per_token, 1.0))

    def _live_gap(self, req: Request) -> float | None:
        """Gap before a newly seen main request, from its session's known times."""
        if req.source is not Source.MAIN:
            return None
        times = self._main_times[req.session]
        at = bisect.bisect_right(times, req.ts)  # after a tie: gap 0, as load() gives
        times.insert(at, req.ts)
        return None if at == 0 else gap_seconds(req.ts, times[at - 1])

    # ------------------------------------------------------------------ gauges
    def _gauge_sources(self) -> dict[str, instruments.Observe]:
        """The observers of every live gauge."""
        opts = self.opts
        return {
            "active_sessions": self.live.active,
            "warm_kv_cache_bytes": lambda: self.live.warm_kv(opts.kv_bytes_per_token),
            "last_request_timestamp_seconds": self.live.last_request,
            "budget_usd": lambda: [(v, {"period": p}) for p, v in sorted(opts.budgets.items())],
            "kv_bytes_per_token": lambda: [
                (float(b), {"arch": a}) for a, b in sorted(opts.kv_bytes_per_token.items())
            ],
            "exporter_files_watched": lambda: [(float(self._files_watched()), {})],
            "exporter_ledger_requests": lambda: [(float(self._rows), {})],
            "exporter_build_info": lambda: [(1.0, {"version": opts.version})],
        }


_Key = tuple[tuple[str, str], ...]


class _Adds:
    """Counter increments summed per label set, then added in one go."""

    def __init__(self) -> None:
        self._sums: dict[tuple[str, _Key], float] = defaultdict(float)

    def add(self, name: str, value: float, **labels: str) -> None:
        """Queue ``value`` for counter ``name`` with ``labels`` (negatives are dropped)."""
        self.add_key(name, tuple(labels.items()), value)

    def add_key(self, name: str, key: _Key, value: float) -> None:
        """As ``add``, with the labels already as a tuple of pairs (the hot path)."""
        if value > 0:
            self._sums[(name, key)] += value
        else:
            self._sums.setdefault((name, key), 0.0)

    def flush(self, counters: Mapping[str, Any]) -> None:
        """Apply the queued increments (zeros too, so the series exist)."""
        for (name, labels), value in self._sums.items():
            counters[name].add(value, dict(labels))
        self._sums.clear()


def exact(value: float, quantum: float) -> float:
    """``value`` rounded to a multiple of ``quantum`` (a power of two, or 1).

    Sums of such multiples are exact in binary floating point (below 2**53
    quanta), so a counter's total does not depend on the order of its
    increments: a restart that adds the same requests in another order must
    not come out a hair lower, which Prometheus would read as a reset.
    """
    return round(value / quantum) * quantum


def _zero_series(adds: _Adds) -> None:
    """Create every fixed-label series at 0 from the start.

    Prometheus cannot see the first increase of a series that appears
    mid-run, so the first cold restart or rejected line would be missed.
    """
    for bucket in GAP_BUCKETS:
        adds.add("requests_after_gap", 0, gap=bucket)
        for kind in PROMPT_TYPES:
            adds.add("prompt_tokens_after_gap", 0, gap=bucket, type=kind)
    for result in LINE_RESULTS:
        adds.add("exporter_lines", 0, result=result)
    for reason in REJECT_REASONS:
        adds.add("exporter_rejected_lines", 0, reason=reason)
    adds.add("exporter_late_updates", 0)


def _diff(req: Request, old: Request | None, name: str) -> int:
    """How much one token field grew (the whole value for a new request)."""
    value: int = getattr(req, name)
    return value - (getattr(old, name) if old is not None else 0)

