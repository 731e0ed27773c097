"""The metric catalogue as OpenTelemetry instruments (docs: shared/design/metrics.md).

One MeterProvider per exporter, read by a PrometheusMetricReader that
registers into a CollectorRegistry passed in (never the global one), with
explicit-bucket Views giving each histogram the catalogue's bounds. Names are
created without ``_total``: the Prometheus translation appends it to counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry

BUCKETS: Final[dict[str, tuple[float, ...]]] = {
    "request_context_tokens": (1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 1.5e5, 2e5, 3e5, 4e5, 5e5,
                               6e5, 8e5, 1e6),
    "request_output_tokens": (10, 25, 50, 100, 250, 500, 1e3, 2e3, 4e3, 8e3, 1.6e4, 3.2e4, 6.4e4),
    "request_gap_seconds": (1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300, 600, 900,
                            1800, 3600, 7200, 14400, 43200, 86400),
    "request_kv_cache_bytes": (1e7, 1e8, 1e9, 2.5e9, 5e9, 1e10, 2.5e10, 5e10, 1e11, 2.5e11, 5e11,
                               1e12),
    "request_upload_bytes": (1e4, 1e5, 2.5e5, 5e5, 1e6, 2e6, 4e6, 8e6),
}

COUNTERS: Final[dict[str, str]] = {
    "requests": "Billed API requests.",
    "tokens": "Tokens by type (input, output, cache_read, cache_write_5m, cache_write_1h).",
    "cost_usd": "Estimated list-price cost in USD, by token type.",
    "unpriced_tokens": "Tokens of models with no known price.",
    "prompt_tokens_after_gap": "Prompt tokens split by the idle gap before the request.",
    "requests_after_gap": "Main-chain requests by the idle gap before them.",
    "upload_bytes": "Estimated bytes sent to the API (prompt tokens x bytes per token).",
    "kv_recomputed_bytes": "Estimated KV cache the provider computed (input + cache writes).",
    "exporter_lines": "Transcript lines read, by result.",
    "exporter_rejected_lines": "Malformed transcript lines, by reason.",
    "exporter_bytes_read": "Transcript bytes read.",
    "exporter_late_updates": "Request upgrades that arrived after the request was settled.",
}

HISTOGRAMS: Final[dict[str, str]] = {
    "request_context_tokens": "Prompt size per request (input + cache read + cache writes).",
    "request_output_tokens": "Output tokens per request.",
    "request_gap_seconds": "Idle time before a main-chain request of the same session.",
    "request_kv_cache_bytes": "Estimated KV cache bytes of a request's context, per architecture.",
    "request_upload_bytes": "Estimated request body bytes.",
}

GAUGES: Final[dict[str, str]] = {
    "active_sessions": "Sessions whose last request is younger than the cache TTL.",
    "warm_kv_cache_bytes": "Estimated KV cache held warm for active sessions.",
    "last_request_timestamp_seconds": "Time of the newest request seen, by source.",
    "budget_usd": "Configured spend budgets, for alert rules.",
    "kv_bytes_per_token": "KV bytes per token of each reference architecture.",
    "exporter_files_watched": "Transcript files known.",
    "exporter_ledger_requests": "Requests in the ledger.",
    "exporter_build_info": "Build information; always 1.",
}

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
    readers: Sequence[MetricReader] = (), resource: Resource | None = None,
) -> Instruments:
    """Create every instrument of the catalogue, exposed through ``registry``.

    ``gauges`` maps each name of :data:`GAUGES` to the function observing it.
    ``readers`` are further readers of the same instruments (OTLP push), and
    ``resource`` their resource (the Prometheus reader does not expose it).
    """
    reader = PrometheusMetricReader(
        disable_target_info=True, scope_info_enabled=False, registry=registry
    )
    views = [
        View(
            instrument_name=f"{namespace}_{name}",
            # Whole-number bounds print as le="300", as Go clients and the catalogue write them.
            aggregation=ExplicitBucketHistogramAggregation(boundaries=[int(b) for b in bounds]),
        )
        for name, bounds in BUCKETS.items()
    ]
    extra: dict[str, Any] = {} if resource is None else {"resource": resource}
    provider = MeterProvider(metric_readers=[reader, *readers], views=views, **extra)
    meter = provider.get_meter("claude_code_exporter")
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


def _callback(observe: Observe) -> Callable[[CallbackOptions], Iterable[Observation]]:
    """Adapt a plain (value, labels) source to an OpenTelemetry gauge callback."""

    def callback(_options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(value, labels) for value, labels in observe()]

    return callback
