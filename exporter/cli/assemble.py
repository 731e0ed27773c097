"""The one place the settings become parts: options objects for each stage, built once.

``report`` and ``backfill`` take the scan options (and backfill the metrics
options); ``serve`` takes :func:`daemon_parts`, everything a
:class:`~exporter.serve.daemon.Daemon` runs with. Each stage's options type
lives in that stage; only this module and the commands read
:class:`~exporter.cli.config.Settings`, and no stage sees it.

The projection and HTTP modules pull in OpenTelemetry and prometheus-client,
which ``report`` never needs: they are imported inside the functions that
build their options, so importing this module stays cheap.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import exporter
from exporter.cli.config import Settings, split_listen
from exporter.errors import ConfigError
from exporter.ingest.options import ScanOptions

if TYPE_CHECKING:
    from exporter.projections.metrics import MetricsOptions
    from exporter.projections.pricing import RateTable
    from exporter.serve.daemon import DaemonParts
    from exporter.serve.http import HttpOptions
    from exporter.serve.otlp import OtlpOptions


def scan_options(settings: Settings, codex_homes: Sequence[Path] = ()) -> ScanOptions:
    """Parser processes, commit size, longest line (the settings); which roots are Codex homes."""
    return ScanOptions(workers=settings.workers,
                       batch_bytes=int(settings.batch_mb * 1024 * 1024),
                       max_line_bytes=settings.max_line_bytes,
                       codex_homes=tuple(os.path.abspath(h) for h in codex_homes))


def metrics_options(settings: Settings) -> MetricsOptions:
    """The projection's options: names, labels, budgets, compat families."""
    from exporter.projections.metrics import MetricsOptions  # OpenTelemetry

    budgets = {}
    if settings.budget_day_usd is not None:
        budgets["day"] = settings.budget_day_usd
    if settings.budget_month_usd is not None:
        budgets["month"] = settings.budget_month_usd
    return MetricsOptions(
        namespace=settings.namespace, project_label=settings.project_label,
        project_grouping=settings.project_grouping,
        kv_bytes_per_token=dict(settings.kv_bytes_per_token),
        upload_bytes_per_token=settings.upload_bytes_per_token, budgets=budgets,
        settle_seconds=settings.settle_seconds, version=exporter.__version__,
        compat=tuple(settings.compat),
    )


def http_options(settings: Settings) -> HttpOptions:
    """Address, TLS context (loaded here, once), basic auth and limits of the endpoint.

    A certificate or key that cannot be loaded is a ConfigError naming both settings.
    """
    from exporter.serve.hosts import HostPolicy, machine_names
    from exporter.serve.http import BasicAuth, HttpOptions, Limits, server_context

    host, port = split_listen(settings.listen)
    tls = None
    if settings.tls_cert_file and settings.tls_key_file:
        try:
            tls = server_context(settings.tls_cert_file, settings.tls_key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"tls_cert_file / tls_key_file: cannot load: {exc}") from exc
    auth = None
    if settings.basic_auth_user and settings.basic_auth_password:
        auth = BasicAuth(settings.basic_auth_user, settings.basic_auth_password)
    limits = Limits(max_connections=settings.http_max_connections,
                    timeout_seconds=settings.http_timeout_seconds,
                    max_header_bytes=settings.http_max_header_bytes)
    hosts = HostPolicy.of(host, settings.allowed_hosts, machine_names())
    return HttpOptions(host, port, tls=tls, auth=auth, limits=limits,
                       metrics=settings.prometheus_enabled,
                       beyond_loopback=settings.listen_beyond_loopback, hosts=hosts)


def prices(settings: Settings, warn: Callable[[str], None]) -> RateTable:
    """The run's prices (``update_prices`` fetches the newest); ``warn`` hears why it could not."""
    from exporter.projections.pricing import load_pricing

    try:
        return load_pricing(settings.pricing, update=settings.update_prices, warn=warn)
    except ValueError as exc:  # overrides that do not fit the (updated) price data
        raise ConfigError(f"invalid configuration: pricing: {exc}") from exc


def daemon_parts(settings: Settings, dirs: Sequence[Path],
                 warn: Callable[[str], None], codex_homes: Sequence[Path] = ()) -> DaemonParts:
    """Everything ``serve`` runs with; ``warn`` hears why the prices could not be updated.

    ``dirs`` are every root followed; ``codex_homes`` says which of them are Codex's.
    """
    from exporter.serve.daemon import DaemonParts

    return DaemonParts(ledger_path=settings.ledger_path, state_dir=settings.samples_dir,
                       dirs=tuple(dirs), pricing=prices(settings, warn),
                       scan=scan_options(settings, codex_homes), metrics=metrics_options(settings),
                       http=http_options(settings), otlp=otlp_options(settings),
                       poll=settings.poll, rescan_seconds=settings.rescan_seconds)


def otlp_options(settings: Settings) -> OtlpOptions | None:
    """The OTLP push's options, or None when ``otlp_endpoint`` is not set."""
    if not settings.otlp_endpoint:
        return None
    from exporter.serve.otlp import OtlpOptions  # the OTLP exporter's imports

    return OtlpOptions(settings.otlp_endpoint, settings.otlp_interval_seconds,
                       settings.otlp_timeout_seconds, dict(settings.otlp_headers),
                       settings.otlp_certificate_file, settings.otlp_host, settings.otlp_user,
                       dict(settings.otlp_resource_attributes))
