"""`serve`: the wiring of the long-running exporter (part of the command line layer).

Start-up: ingest what is new, load every instrument from the whole ledger
(counters start at their historical totals), open the HTTP endpoint, then
follow the files until SIGTERM/SIGINT, when the current pass completes, the
ledger is closed and the process exits 0.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from exporter import __version__
from exporter.config import Settings, split_listen
from exporter.follow import Follower
from exporter.http import BasicAuth, HttpServer, make_app
from exporter.ledger import Ledger
from exporter.metrics import MetricsOptions, Projection
from exporter.pricing import Pricing
from exporter.scan import Scanner


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
        self.pricing = Pricing.load(settings.pricing)
        self.ledger = Ledger(settings.ledger_path)
        self.scanner = Scanner(self.ledger, dirs, workers=settings.workers, log=log,
                               batch_bytes=int(settings.batch_mb * 1024 * 1024))
        self._files = 0
        self.projection = Projection(
            self.pricing, _options(settings), self.registry,
            clock=clock, files_watched=lambda: self._files,
        )
        self.follower = Follower(
            self._pass, lambda: self.scanner.dirs, settle=self.projection.settle,
            poll=settings.poll, rescan_seconds=settings.rescan_seconds, log=log,
        )
        self.http: HttpServer | None = None

    def start(self) -> None:
        """Catch up, load the metrics, and open the endpoint."""
        started = time.perf_counter()
        first = self.scanner.scan()
        self._files = first.files
        ledger = self.ledger
        self.projection.load(ledger.requests(), ledger.counters("lines"),
                             ledger.counters("rejected"), ledger.counters("bytes_read").get("", 0))
        self.scanner.on_applied = self.projection.apply
        host, port = split_listen(self.settings.listen)
        auth = None
        if self.settings.basic_auth_user and self.settings.basic_auth_password:
            auth = BasicAuth(self.settings.basic_auth_user, self.settings.basic_auth_password)
        tls = None
        if self.settings.tls_cert_file and self.settings.tls_key_file:
            tls = (self.settings.tls_cert_file, self.settings.tls_key_file)
        app = make_app(self.registry, self.health, __version__, auth)
        self.http = HttpServer(app, host, port, tls)
        self.log.info("serving", listen=f"{host}:{self.http.port}", tls=tls is not None,
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
        self.projection.settle(force=True)
        self.ledger.close()
        self.log.info("stopped")

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy when the last pass succeeded and the watcher runs (unless polling)."""
        state = self.follower.state
        watcher_ok = self.settings.poll or state.watcher_alive or not self._watchable()
        ok = state.last_pass_ok and watcher_ok
        return ok, {"ledger_ok": state.last_pass_ok, "watcher_alive": state.watcher_alive,
                    "poll": self.settings.poll, "passes": state.passes,
                    "error": state.last_error, "pending": self.projection.pending}

    def install_signals(self) -> None:
        """SIGTERM and SIGINT end the follow loop (main thread only)."""
        def handler(signum: int, _frame: object) -> None:
            self.log.info("signal", signal=signal.Signals(signum).name)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _pass(self) -> None:
        """One follow pass."""
        result = self.scanner.scan()
        self._files = result.files
        if result.new_requests or result.upgraded_requests:
            self.log.debug("pass", new=result.new_requests, upgraded=result.upgraded_requests,
                           bytes=result.bytes_read)

    def _watchable(self) -> bool:
        """True if any transcript directory exists to be watched."""
        return any(d.is_dir() for d in self.scanner.dirs)


def _options(settings: Settings) -> MetricsOptions:
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
    )
