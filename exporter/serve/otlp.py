"""OTLP push: the same instruments, exported over OTLP/HTTP to a collector.

For machines that no Prometheus can scrape (laptops behind NAT, short-lived
hosts), ``serve`` can push its metrics to an OpenTelemetry Collector (or any
OTLP/HTTP receiver) with a :class:`PeriodicExportingMetricReader` added to the
same MeterProvider as the Prometheus reader. Both readers see the same
instruments, so names, attributes and values agree; temporality is cumulative
for every instrument (whatever ``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE``
says), as the Prometheus side expects.

The resource says whose figures these are, with privacy-aware defaults (see
docs/teams.md): ``host.name`` is sent, the user only as ``user.hash``, a
pseudonymous hash of the login name. ``service.instance.id`` combines the two
and is always set, so two machines or two users never merge into one series.
"""

from __future__ import annotations

import getpass
import hashlib
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from exporter import __version__
from exporter.serve.push import GuardedExporter, PushState, WatchedSession

SERVICE_NAME: Final = "claude-code-exporter"
CUMULATIVE: Final[dict[type, AggregationTemporality]] = {
    kind: AggregationTemporality.CUMULATIVE
    for kind in (Counter, UpDownCounter, Histogram, ObservableCounter, ObservableUpDownCounter,
                 ObservableGauge)
}


@dataclass(frozen=True, slots=True)
class OtlpOptions:
    """The push's receiver, cadence and resource policy (built once: exporter.cli.assemble)."""

    endpoint: str
    interval_seconds: float = 60.0
    timeout_seconds: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict)
    certificate_file: Path | None = None
    host: str = "name"  # resource host policy: name, hash or none
    user: str = "hash"  # resource user policy: name, hash or none
    resource_attributes: Mapping[str, str] = field(default_factory=dict)


def pseudonym(value: str) -> str:
    """A short stable hash of ``value`` (12 hex digits, like the project-label hash)."""
    return hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:12]


def identity(host_policy: str, user_policy: str, host: str, user: str) -> dict[str, str]:
    """Resource attributes naming the host and the user under their policies.

    Policies are ``name`` (as is), ``hash`` (:func:`pseudonym`, as ``host.id`` /
    ``user.hash``) or ``none``. ``service.instance.id`` is ``HOST:USER`` with each
    part as sent, or hashed when it is not sent at all.
    """
    attrs: dict[str, str] = {}
    if host_policy == "name":
        attrs["host.name"] = host
    elif host_policy == "hash":
        attrs["host.id"] = pseudonym(host)
    if user_policy == "name":
        attrs["user.name"] = user
    elif user_policy == "hash":
        attrs["user.hash"] = pseudonym(user)
    host_part = host if host_policy == "name" else pseudonym(host)
    user_part = user if user_policy == "name" else pseudonym(user)
    attrs["service.instance.id"] = f"{host_part}:{user_part}"
    return attrs


def resource(options: OtlpOptions, *, host: str | None = None,
             user: str | None = None) -> Resource:
    """The OTLP resource: service, identity, then ``otlp_resource_attributes`` on top.

    ``OTEL_RESOURCE_ATTRIBUTES`` / ``OTEL_SERVICE_NAME`` are honoured below the
    exporter's own attributes, as the OpenTelemetry SDK does.
    """
    attrs: dict[str, str] = {"service.name": SERVICE_NAME, "service.version": __version__}
    attrs |= identity(options.host, options.user,
                      host if host is not None else socket.gethostname(),
                      user if user is not None else _login())
    attrs |= dict(options.resource_attributes)
    return Resource.create(attrs)


def reader(options: OtlpOptions, state: PushState) -> PeriodicExportingMetricReader:
    """A periodic OTLP/HTTP reader for ``options.endpoint`` (cumulative, gzip).

    Built when ``serve`` starts its projection: the reader's thread starts with it,
    after the catch-up pass (which may fork parser processes). Each push is
    bounded, counted and logged through ``state`` (exporter.serve.push).
    """
    cert = options.certificate_file
    session = WatchedSession()
    exporter = OTLPMetricExporter(  # type: ignore[call-overload]  # the duck-typed session
        session=session,  # offers what the transport uses of a requests.Session
        endpoint=options.endpoint,
        headers=_headers(options.headers),
        timeout=options.timeout_seconds,
        compression=Compression.Gzip,
        certificate_file=str(cert) if cert is not None else None,
        preferred_temporality=dict(CUMULATIVE),
    )
    return PeriodicExportingMetricReader(
        GuardedExporter(exporter, session, state, options.timeout_seconds),
        export_interval_millis=options.interval_seconds * 1000,
        export_timeout_millis=options.timeout_seconds * 1000,
    )


def _headers(headers: Mapping[str, str]) -> dict[str, str] | None:
    """Headers for the exporter (None lets ``OTEL_EXPORTER_OTLP_HEADERS`` apply)."""
    return dict(headers) or None


def _login() -> str:
    """The login name of the process owner ("unknown" if there is none)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
