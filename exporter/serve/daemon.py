"""`serve`: the wiring of the long-running exporter (part of the command line layer).

Start-up: ingest what is new, settle it, begin every instrument at the
ledger's rollup totals for this daemon's roots (O(label sets x buckets), not
O(history)), open the HTTP endpoint, then follow the files until
SIGTERM/SIGINT, when the current pass completes, the ledger is closed and the
process exits 0.
"""

from __future__ import annotations

import signal
import ssl
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from exporter import __version__
from exporter.config import ConfigError, Settings, split_listen
from exporter.ingest.follow import Follower
from exporter.ingest.scan import Scanner
from exporter.ledger import Ledger, LedgerError
from exporter.ledger_lock import WriterLock
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.pricing import load_pricing
from exporter.serve import page
from exporter.serve.http import BasicAuth, HttpServer, Limits, make_app
from exporter.serve.plan_link import PlanLink


class Daemon:
    """One running exporter: ledger, scanner, projection, HTTP server, follower."""

    def __init__(
        self,
        settings: Settings,
        dirs: Sequence[Path],
        log: Any,
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Open the ledger and build every part; nothing runs until start()."""
        self.settings = settings
        self.log = log
        self.stop_event = threading.Event()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.pricing = load_pricing(
            settings.pricing, update=settings.update_prices,
            warn=lambda line: log.warning("prices_not_updated", detail=line))
        self.options = metrics_options(settings)
        # One serve per state dir: a second one exits naming the first (LedgerBusyError).
        lock = WriterLock.acquire(settings.ledger_path, "serve", [str(d) for d in dirs])
        try:
            self.ledger = Ledger(settings.ledger_path, rules=self.options.counting(self.pricing),
                                 settle_seconds=settings.settle_seconds, clock=clock, lock=lock)
        except LedgerError:
            lock.release(remove=True)  # a refused file gets no lock file beside it
            raise
        self.scanner = Scanner(self.ledger, dirs, workers=settings.workers, log=log,
                               batch_bytes=int(settings.batch_mb * 1024 * 1024),
                               max_line_bytes=settings.max_line_bytes, clock=clock)
        self._files = 0
        self._pending = 0
        self._clock = clock
        self.projection: Projection | None = None  # built in start(), after the catch-up
        self.follower = Follower(
            self._pass, lambda: self.scanner.dirs, settle=self._settle,
            poll=settings.poll, rescan_seconds=settings.rescan_seconds, log=log,
        )
        self.http: HttpServer | None = None
        self.plan: PlanLink | None = None  # built in start(), beside the projection

    def start(self) -> None:
        """Catch up, load the metrics, and open the endpoint."""
        started = time.perf_counter()
        # The only pass that may fork parser processes: no thread exists yet (the
        # OTLP reader, HTTP server and watcher all start below). Later passes are
        # small and run in-process, beside those threads.
        first = self.scanner.scan()
        self.scanner.workers = 1
        self._files = first.files
        ledger = self.ledger
        ledger.settle(force=True)  # what is on disk at start-up is final
        push, resource = _push(self.settings)
        dirs = self.scanner.dirs
        self.projection = Projection(
            self.pricing, self.options, self.registry, roots=dirs, clock=self._clock,
            files_watched=lambda: self._files, readers=push, resource=resource,
        )
        self.projection.load(ledger, view=ledger.scope(dirs))
        self.scanner.on_applied = self.projection.apply
        # The status line's plan-limit samples: into the ledger, and out as metrics.
        self.plan = PlanLink(self.settings.ledger_path, self.settings.state_dir, self.pricing,
                             clock=self._clock, log=self.log)
        self.plan.register(self.projection.inst.provider.get_meter("claude_code_exporter.plan"),
                           self.settings.namespace)
        self.plan.tick()
        self.plan.after_pass()
        host, port = split_listen(self.settings.listen)
        auth = None
        if self.settings.basic_auth_user and self.settings.basic_auth_password:
            auth = BasicAuth(self.settings.basic_auth_user, self.settings.basic_auth_password)
        tls = None
        if self.settings.tls_cert_file and self.settings.tls_key_file:
            tls = (self.settings.tls_cert_file, self.settings.tls_key_file)
        # With prometheus_enabled off (OTLP only) /metrics is gone but /healthz stays,
        # for container health checks and supervisors.
        pages = page.routes(page.source_of(self.settings, ledger, dirs, self.pricing,
                                           clock=self._clock), __version__)
        app = make_app(self.registry, self.health, __version__, auth,
                       metrics=self.settings.prometheus_enabled, routes=pages)
        if tls is not None:  # checked apart, so the error names the right setting
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(tls[0]), str(tls[1]))
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"tls_cert_file / tls_key_file: cannot load: {exc}") from exc
        try:
            self.http = HttpServer(app, host, port, tls, Limits(
                max_connections=self.settings.http_max_connections,
                timeout_seconds=self.settings.http_timeout_seconds,
                max_header_bytes=self.settings.http_max_header_bytes))
        except OSError as exc:  # a busy port, an address not on this machine
            raise ConfigError(f"listen: cannot serve on {host}:{port}: {exc}") from exc
        self._warn_exposure(host, tls is not None, auth is not None)
        self.log.info("serving", listen=f"{host}:{self.http.port}",
                      otlp=self.settings.otlp_endpoint, tls=tls is not None,
                      requests=ledger.count(), files=first.files,
                      startup_seconds=round(time.perf_counter() - started, 3))

    def run(self) -> None:
        """Follow until stopped, then shut down cleanly."""
        try:
            self.follower.run(self.stop_event)
        finally:
            self.close()

    def close(self) -> None:
        """Stop serving, record what is pending, close the ledger."""
        if self.http is not None:
            self.http.close()
            self.http = None
        if self.projection is not None:
            self.projection.apply(self.ledger.settle(force=True))
            self.projection.shutdown()  # a last OTLP push, if configured
        if self.plan is not None:
            self.plan.close()
        self.ledger.close()
        self.log.info("stopped")

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy when the last pass succeeded and the watcher runs (unless polling)."""
        state = self.follower.state
        watcher_ok = self.settings.poll or state.watcher_alive or not self._watchable()
        ok = state.last_pass_ok and watcher_ok
        return ok, {"ledger_ok": state.last_pass_ok, "watcher_alive": state.watcher_alive,
                    "poll": self.settings.poll, "passes": state.passes,
                    "error": state.last_error,
                    "pending": self._pending}

    def install_signals(self) -> None:
        """SIGTERM and SIGINT end the follow loop (main thread only)."""
        def handler(signum: int, _frame: object) -> None:
            self.log.info("signal", signal=signal.Signals(signum).name)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _warn_exposure(self, host: str, tls: bool, auth: bool) -> None:
        """Say so at start when private figures may leave this machine unprotected."""
        if host not in ("127.0.0.1", "::1", "localhost") and not host.startswith("127."):
            self.log.warning("listening_beyond_loopback", host=host, tls=tls, basic_auth=auth)
        if auth and not tls:
            self.log.warning("basic_auth_without_tls", detail="the password crosses in clear")

    def _settle(self) -> int:
        """Enter requests that went quiet into the histograms (ledger, then instruments)."""
        if self.projection is None:
            return 0
        if self.plan is not None:
            self.plan.tick()  # status-line samples: visible within a second of being recorded
        applied = self.ledger.settle()
        if applied.hists:
            self.projection.apply(applied)
        self._pending = self.ledger.pending()  # read here, not by the HTTP thread mid-batch
        return len(applied.hists)

    def _pass(self, paths: Collection[str] | None = None) -> None:
        """One follow pass: over the paths file events named, or everything (None)."""
        result = self.scanner.scan(paths=paths)
        self._files = result.files
        if (result.new_requests or result.upgraded_requests) and self.plan is not None:
            self.plan.after_pass()  # today's cost for the status line moved
        if result.new_requests or result.upgraded_requests:
            self.log.debug("pass", new=result.new_requests, upgraded=result.upgraded_requests,
                           bytes=result.bytes_read)

    def _watchable(self) -> bool:
        """True if any transcript directory exists to be watched."""
        return any(d.is_dir() for d in self.scanner.dirs)


def _push(settings: Settings) -> tuple[list[Any], Any]:
    """The OTLP reader and resource when ``otlp_endpoint`` is set (docs/teams.md)."""
    if not settings.otlp_endpoint:
        return [], None
    # Imported only when configured: the OTLP exporter is not needed to scrape.
    from exporter.serve import otlp  # noqa: PLC0415

    return [otlp.reader(settings)], otlp.resource(settings)


def metrics_options(settings: Settings) -> MetricsOptions:
    """The projection's options from the settings."""
    budgets = {}
    if settings.budget_day_usd is not None:
        budgets["day"] = settings.budget_day_usd
    if settings.budget_month_usd is not None:
        budgets["month"] = settings.budget_month_usd
    return MetricsOptions(
        namespace=settings.namespace, project_label=settings.project_label,
        kv_bytes_per_token=dict(settings.kv_bytes_per_token),
        upload_bytes_per_token=settings.upload_bytes_per_token, budgets=budgets,
        settle_seconds=settings.settle_seconds, version=__version__,
        compat=tuple(settings.compat),
    )
