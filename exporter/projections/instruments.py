"""The metric catalogue as OpenTelemetry instruments (docs/metrics.md).

One MeterProvider per exporter, read by a PrometheusMetricReader that
registers into a CollectorRegistry passed in (never the global one), with
explicit-bucket Views giving each histogram the catalogue's bounds. Names are
created without ``_total``: the Prometheus translation appends it to counters.

Start-up begins every instrument at the ledger's rollup totals. A counter
takes its total in one ``add``. A histogram cannot (the API has no weighted
record, and no asynchronous histogram), so each histogram View uses
:class:`SeededHistogramAggregation`: the SDK's explicit-bucket aggregation
plus one rule, that a measurement whose Context carries a :class:`Seed`
adds those starting bucket counts and sum instead of one value. Views are the
SDK's hook for choosing an aggregation, so every reader (Prometheus, OTLP)
sees the starting state, and live records keep the SDK's own code path.

Codex's families (``codex_*``, :mod:`exporter.projections.codex_metrics`) are
created with the rest; an instrument nothing was recorded in is in no
exposition, so they appear once a Codex turn is counted.

Every instrument gets exactly one View, which also carries its cardinality
limit from :mod:`exporter.projections.cardinality` (an instrument without a
declared limit is an error here, never the SDK's default). A provider the
environment switched off (``OTEL_SDK_DISABLED=true``, which the SDK reads by
itself) would serve an empty exposition that looks healthy: :func:`build`
refuses it with :class:`MetricsDisabledError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any, Final

from opentelemetry.context import Context, create_key, get_value, set_value
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import Meter, MeterProvider
from opentelemetry.sdk.metrics._internal.aggregation import (
    _ExplicitBucketHistogramAggregation,
)
from opentelemetry.sdk.metrics._internal.measurement import Measurement
from opentelemetry.sdk.metrics.export import AggregationTemporality, MetricReader
from opentelemetry.sdk.metrics.view import Aggregation, ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry

from exporter.projections import cardinality
from exporter.projections.counting import HIST_BOUNDS

_SEED_KEY: Final = create_key("claude_code_exporter.histogram_seed")

COUNTERS: Final[dict[str, str]] = {
    "requests": "Billed API requests.",
    "tokens": "Tokens by type (input, output, cache_read, cache_write_5m, cache_write_1h).",
    "cost_usd": "Estimated list-price cost in USD, by token type.",
    "unpriced_tokens": "Tokens of models with no known price.",
    "cache_savings_usd": "Estimated list-price USD the prompt cache saved on reads "
                         "(cache read x (input rate - read rate)).",
    "cache_write_premium_usd": "Estimated list-price USD paid for cache writes above plain input "
                               "(write x (write rate - input rate)).",
    "web_search_requests": "Server-side web searches (billed per search).",
    "prompt_tokens_after_gap": "Prompt tokens split by the idle gap before the request.",
    "requests_after_gap": "Main-chain requests by the idle gap before them.",
    "upload_bytes": "Estimated bytes sent to the API (prompt tokens x bytes per token).",
    "kv_recomputed_bytes": "Estimated KV cache the provider computed (input + cache writes).",
    "attributed_requests": "Requests by the skill, plugin, MCP server, agent or effort "
                           "their lines named (kind, name).",
    "attributed_cost_usd": "Estimated list-price cost in USD by the skill, plugin, MCP server, "
                           "agent or effort its requests' lines named (kind, name).",
    "exporter_lines": "Transcript lines read, by result.",
    "exporter_rejected_lines": "Malformed transcript lines, by reason.",
    "exporter_iterations": "usage.iterations entries of transcript lines, by what they were.",
    "exporter_mended_lines": "Transcript lines read once an oddity in them was mended, by kind.",
    "exporter_bytes_read": "Transcript bytes read.",
    "exporter_late_updates": "Request upgrades that arrived after the request was settled.",
    # Codex's families (exporter.projections.codex_metrics): exposed once a Codex turn exists.
    "codex_requests": "Codex turns (each billed model call of a Codex session, counted once).",
    "codex_tokens": "Codex tokens by type (input: uncached input; cache_read; output, "
                    "reasoning included; reasoning: the part of output spent reasoning).",
    "codex_cost_usd": "Estimated list-price cost of Codex turns in USD, by token type.",
    "codex_unpriced_tokens": "Codex tokens of models with no known price.",
    "codex_cache_savings_usd": "Estimated list-price USD the prompt cache saved Codex on reads "
                               "(cache read x (input rate - read rate)).",
    "codex_upload_bytes": "Estimated bytes Codex sent to the API (prompt tokens x bytes per "
                          "token).",
    "codex_kv_recomputed_bytes": "Estimated KV cache the provider computed for Codex "
                                 "(uncached input).",
}

HISTOGRAMS: Final[dict[str, str]] = {
    "request_context_tokens": "Prompt size per request (input + cache read + cache writes).",
    "request_output_tokens": "Output tokens per request.",
    "request_gap_seconds": "Idle time before a main-chain request of the same session.",
    "request_kv_cache_bytes": "Estimated KV cache bytes of a request's context, per architecture.",
    "request_upload_bytes": "Estimated request body bytes.",
    "codex_request_context_tokens": "Prompt size per Codex turn (input + cache read).",
    "codex_request_output_tokens": "Output tokens per Codex turn (reasoning included).",
    "codex_request_gap_seconds": "Idle time before a Codex turn of the same session.",
}

#: Each histogram's bounds: the catalogue's, and Codex's the same as their Claude Code twins.
BUCKETS: Final[dict[str, tuple[float, ...]]] = {
    **HIST_BOUNDS, **{n: HIST_BOUNDS[n.removeprefix("codex_")] for n in HISTOGRAMS
                      if n.startswith("codex_")}}

GAUGES: Final[dict[str, str]] = {
    "active_sessions": "Sessions whose last request is younger than the cache TTL.",
    "warm_kv_cache_bytes": "Estimated KV cache held warm for active sessions.",
    "last_request_timestamp_seconds": "Time of the newest request seen, by source.",
    "budget_usd": "Configured spend budgets, for alert rules.",
    "budget_projected_usd": "Estimated list-price spend at the end of the local day or month "
                            "at the current pace (the last two weeks' spend per day).",
    "kv_bytes_per_token": "KV bytes per token of each reference architecture.",
    "exporter_files_watched": "Transcript files known.",
    "exporter_ledger_requests": "Requests in the ledger.",
    "exporter_build_info": "Build information; always 1.",
}


class MetricsDisabledError(ValueError):
    """The OpenTelemetry SDK was switched off by the environment: no metric would be served."""


@dataclass(frozen=True, slots=True)
class Seed:
    """Bucket counts (the last is +Inf) and a sum, entered as one measurement."""

    counts: tuple[int, ...]
    total: float


def seed_context(seed: Seed) -> Context:
    """The Context that makes a histogram measurement a seed (its value is ignored)."""
    return set_value(_SEED_KEY, seed, Context())


class _SeededHistogram(_ExplicitBucketHistogramAggregation):
    """The SDK's explicit-bucket aggregation that also takes seeds."""

    def aggregate(self, measurement: Measurement, should_sample_exemplar: bool = True) -> None:
        """Fold a starting measurement's counts and sum in; any other as the SDK does."""
        seed = get_value(_SEED_KEY, measurement.context) if measurement.context else None
        if not isinstance(seed, Seed):
            super().aggregate(measurement, should_sample_exemplar)
            return
        with self._lock:
            counts: list[int] = self._value or self._get_empty_bucket_counts()
            for i, n in enumerate(seed.counts):
                counts[i] += n
            self._value = counts  # type: ignore[assignment]  # the SDK declares it None first
            self._sum += seed.total  # type: ignore[assignment]  # int or float, as the SDK's


class SeededHistogramAggregation(ExplicitBucketHistogramAggregation):
    """View aggregation: explicit buckets, seedable (see the module docstring)."""

    def _create_aggregation(self, instrument: Any, attributes: Any, reservoir_factory: Any,
                            start_time_unix_nano: int) -> Any:
        """The SDK's hook: build the aggregation of one attribute set (synchronous histograms)."""
        return _SeededHistogram(
            attributes, AggregationTemporality.DELTA, start_time_unix_nano,
            reservoir_factory(_ExplicitBucketHistogramAggregation), self._boundaries,
            self._record_min_max,
        )


#: A USD sample in the text exposition, rounded up to the nanodollar: about the
#: counters' quantum (counting.USD_QUANTUM, 2**-30).
USD_STEP: Final = Decimal("1e-9")


def decimal_usd(value: float) -> float:
    """``value`` rounded *up* to the nanodollar: a decimal, never below the exact sum."""
    if not math.isfinite(value):
        return value
    return float(Decimal(value).quantize(USD_STEP, rounding=ROUND_CEILING))


class DecimalDollars:
    """A registry's families as /metrics shows them: USD samples rounded up to the nanodollar.

    Counters add dollars in binary multiples of 2**-30, exact and independent of
    the order of their increments, but printed as they are they show binary noise
    (``0.045649999752640724`` for 0.04565). Only the text a person or Prometheus
    reads is rounded; the registry itself, which backfill checks itself against
    and OTLP pushes from, keeps the exact sums. Rounded *up*, never to nearest:
    Prometheus takes any decrease of a counter for a reset and counts the whole
    value again, so the shown value must never fall below one shown before, by
    an earlier version (the exact sum), by backfill (exact sums too) or by this
    one (rounding up is monotonic).
    """

    def __init__(self, inner: CollectorRegistry) -> None:
        """Show what ``inner`` collects."""
        self._inner = inner

    def collect(self) -> Iterable[Any]:
        """The families of ``inner``, dollar samples rounded (fresh objects each scrape)."""
        for family in self._inner.collect():
            if "_usd" in family.name.lower():  # the compatibility families write USD
                family.samples = [s._replace(value=decimal_usd(s.value))
                                  for s in family.samples]
            yield family


def exposed(registry: CollectorRegistry) -> CollectorRegistry:
    """The registry /metrics serves: ``registry``'s families through :class:`DecimalDollars`."""
    outer = CollectorRegistry(auto_describe=False)
    outer.register(DecimalDollars(registry))
    return outer


Observe = Callable[[], Iterable[tuple[float, dict[str, str]]]]
"""A gauge source: yields (value, labels) pairs at scrape time."""


@dataclass(frozen=True, slots=True)
class Instruments:
    """The synchronous instruments, by catalogue name (without namespace)."""

    counters: dict[str, Any]
    histograms: dict[str, Any]
    provider: MeterProvider

    def shutdown(self) -> None:
        """Stop the provider (unregisters the reader's collector)."""
        self.provider.shutdown()


def build(
    namespace: str, registry: CollectorRegistry, gauges: dict[str, Observe], *,
    limits: Mapping[str, int], readers: Sequence[MetricReader] = (),
    resource: Resource | None = None, aggregations: Mapping[str, Aggregation] | None = None,
) -> Instruments:
    """Create every instrument of the catalogue, exposed through ``registry``.

    ``gauges`` maps each name of :data:`GAUGES` to the function observing it.
    ``limits``: the SDK cardinality limit of every instrument (catalogue names
    without namespace, other names as created: :meth:`cardinality.Caps.limits`).
    ``readers`` are further readers of the same instruments (OTLP push), and
    ``resource`` their resource (the Prometheus reader does not expose it).
    ``aggregations``: by instrument name, the aggregation of instruments created
    later on the provider (the compatibility families' buckets).
    """
    reader = PrometheusMetricReader(
        disable_target_info=True, scope_info_enabled=False, registry=registry,
        cardinality_limits=cardinality.reader_limits(),
    )
    extra: dict[str, Any] = {} if resource is None else {"resource": resource}
    provider = MeterProvider(metric_readers=[reader, *readers],
                             views=_views(namespace, limits, aggregations or {}), **extra)
    meter = provider.get_meter("claude_code_exporter")
    if not isinstance(meter, Meter):
        provider.shutdown()
        raise MetricsDisabledError(
            "OTEL_SDK_DISABLED=true in the environment switches the OpenTelemetry SDK off, and "
            "with it every metric this exporter serves: unset it for this process")
    counters = {
        n: meter.create_counter(f"{namespace}_{n}", description=d) for n, d in COUNTERS.items()
    }
    histograms = {
        n: meter.create_histogram(f"{namespace}_{n}", description=d) for n, d in HISTOGRAMS.items()
    }
    for name, desc in GAUGES.items():
        meter.create_observable_gauge(
            f"{namespace}_{name}", callbacks=[_callback(gauges[name])], description=desc
        )
    return Instruments(counters, histograms, provider)


def _views(namespace: str, limits: Mapping[str, int],
           aggregations: Mapping[str, Aggregation]) -> list[View]:
    """One View per instrument: its declared limit, and its aggregation where it has its own.

    One only: two Views matching one instrument would make two streams of it.
    A name of the catalogue, or of ``aggregations``, without a limit raises
    KeyError (declare it in :mod:`exporter.projections.cardinality`).
    """
    ours = {**COUNTERS, **HISTOGRAMS, **GAUGES}
    undeclared = sorted(set(aggregations) - set(limits))
    if undeclared:
        raise KeyError(f"no cardinality limit declared for {undeclared}")
    out: list[View] = []
    for name in ours:
        aggregation: Aggregation | None = None
        if name in BUCKETS:
            # Whole-number bounds print as le="300", as Go clients and the catalogue write them.
            # min/max off: a seed has none, and Prometheus does not show them.
            aggregation = SeededHistogramAggregation(
                boundaries=[int(b) for b in BUCKETS[name]], record_min_max=False)
        out.append(View(instrument_name=f"{namespace}_{name}", aggregation=aggregation,
                        aggregation_cardinality_limit=limits[name]))
    for name, limit in limits.items():
        if name not in ours:
            out.append(View(instrument_name=name, aggregation=aggregations.get(name),
                            aggregation_cardinality_limit=limit))
    return out


def _callback(observe: Observe) -> Callable[[CallbackOptions], Iterable[Observation]]:
    """Adapt a plain (value, labels) source to an OpenTelemetry gauge callback."""

    def callback(_options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(value, labels) for value, labels in observe()]

    return callback
