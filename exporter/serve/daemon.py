"""`serve`: the long-running exporter, run from the parts it is handed.

Start-up: ingest what is new, settle it, begin every instrument at the
ledger's rollup totals for this daemon's roots (O(label sets x buckets), not
O(history)), open the HTTP endpoint, then follow the files until
SIGTERM/SIGINT, when the current pass completes, the ledger is closed and the
process exits 0.

The daemon is handed its parts (:class:`DaemonParts`, built once from the
settings by :func:`exporter.cli.assemble.daemon_parts`) and never sees the settings;
its clocks are arguments, so tests drive it in-process.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from exporter import __version__
from exporter.errors import ConfigError
from exporter.ingest.follow import Follower
from exporter.ingest.options import ScanOptions
from exporter.ingest.scan import Scanner
from exporter.ledger.health import CHECK_AT_OPEN_BYTES, check_in_background
from exporter.ledger.lock import WriterLock
from exporter.ledger.store import Ledger, LedgerError
from exporter.projections.budget_pace import PaceGauge, selection_of
from exporter.projections.class_prices import ClassPrices
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.periods import local_zone
from exporter.projections.pricing import RateTable
from exporter.serve import page
from exporter.serve.http import HttpOptions, HttpServer, Refused, make_app
from exporter.serve.page import StartResponse, Wsgi
from exporter.serve.plan_link import PlanLink
from exporter.serve.push import LibraryLog, PushState

if TYPE_CHECKING:
    from exporter.serve.otlp import OtlpOptions

# How often the live WAL's checksums are verified (the WAL is bounded by the fold-in).
VERIFY_SECONDS = 5.0
# At most one pass over changed files per this many seconds (a quiet file's first line is
# read at once): the lines of those seconds share one commit. A commit rewrites a few dozen
# pages (rows, indexes, provenance, rollups, slots) however few lines it holds, so one
# commit a line would write far more WAL than the line (docs/benchmarks.md, "The daemon
# live"); 10 s stays within Prometheus' 15 s default scrape.
LIVE_PASS_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class DaemonParts:
    """What one ``serve`` runs with, each part built once from the settings."""

    ledger_path: Path
    state_dir: Path  # where the status line's samples arrive (exporter.ingest.spool)
    dirs: tuple[Path, ...]  # the transcript directories followed
    pricing: RateTable
    scan: ScanOptions
    metrics: MetricsOptions  # also the ledger's settle time and the page's budgets and labels
    http: HttpOptions
    otlp: OtlpOptions | None = None  # None: no push
    poll: bool = False  # no file events: a full pass every rescan_seconds
    rescan_seconds: float = 30.0


class Daemon:
    """One running exporter: ledger, scanner, projection, HTTP server, follower."""

    def __init__(
        self,
        parts: DaemonParts,
        log: Any,
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Open the ledger; the scanners, projection and server are built by start()."""
        self.parts = parts
        self.log = log
        self.stop_event = threading.Event()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.pricing = parts.pricing
        self.dirs = list(parts.dirs)
        # One serve per state dir: a second one exits naming the first (LedgerBusyError).
        lock = WriterLock.acquire(parts.ledger_path, "serve", [str(d) for d in self.dirs])
        try:
            # A large ledger not known sound is checked while serving (start()): the first
            # scrape does not wait O(history) for it.
            self.ledger = Ledger(parts.ledger_path, rules=parts.metrics.counting(self.pricing),
                                 settle_seconds=parts.metrics.settle_seconds, clock=clock,
                                 lock=lock, check_above=CHECK_AT_OPEN_BYTES)
        except LedgerError:
            lock.release(remove=True)  # a refused file gets no lock file beside it
            raise
        self._files = 0
        self._pending = 0
        self._clock, self._mono = clock, monotonic
        self._next_verify = monotonic() + VERIFY_SECONDS
        self._next_live = self._next_settle = monotonic()  # when the next may run
        self._deferred: set[str] = set()  # changed files whose pass waits for _next_live
        self._ahead = 0  # request lines waiting for the clock, as of the last full pass
        self.scanner: Scanner[Ledger] | None = None  # the follower's, built in start()
        self.projection: Projection | None = None  # built in start(), after the catch-up
        self.follower = Follower(
            self._pass, lambda: self.dirs, settle=self._settle,
            poll=parts.poll, rescan_seconds=parts.rescan_seconds, log=log,
            monotonic=monotonic,
        )
        self.http: HttpServer | None = None
        self.plan: PlanLink | None = None  # built in start(), beside the projection
        self._signal: str | None = None  # the signal that ended the follow loop, if one did
        self.push: PushState | None = None  # the OTLP push's outcomes, when it pushes
        self._library_log: LibraryLog | None = None
        self._said_corrupt = False  # the one ERROR line of a corrupt ledger is logged

    def start(self) -> None:
        """Catch up, load the metrics, and open the endpoint."""
        started = time.perf_counter()
        parts, ledger = self.parts, self.ledger
        # The only pass that may fork parser processes: no thread exists yet (the
        # OTLP reader, HTTP server and watcher all start below). The follower's
        # scanner runs its small passes in-process, beside those threads, and hands
        # each batch to the projection.
        first = parts.scan.scanner(ledger, self.dirs, log=self.log, clock=self._clock).scan()
        self._files, self._ahead = first.files, first.ahead
        self._warn_if_none(first.files)
        ledger.settle(force=True)  # what is on disk at start-up is final
        self.projection = self._projection()
        if self.push is not None:  # its counters, read by both readers
            self._library_log = LibraryLog(self.log)  # the library's lines, structured
            self._library_log.install()
            self.push.observe(self.projection.inst.provider.get_meter("claude_code_exporter.otlp"),
                              parts.metrics.namespace)
        self.projection.load(ledger, view=ledger.scope(self.dirs),
                             scope=ledger.scope_filter(self.dirs))
        self.scanner = parts.scan.scanner(ledger, self.dirs, log=self.log, clock=self._clock,
                                          workers=1, on_applied=self.projection.apply)
        # The status line's plan-limit samples: into the ledger, and out as metrics.
        self.plan = PlanLink.on_projection(self.projection, parts.ledger_path,
                                           parts.state_dir, self.pricing,
                                           clock=self._clock, log=self.log)
        self.plan.tick()
        self.plan.after_pass()
        http = parts.http
        # With prometheus_enabled off (OTLP only) /metrics is gone but /healthz stays,
        # for container health checks and supervisors.
        source = page.source_of(parts.metrics, ledger, self.dirs, self.pricing, clock=self._clock)
        pages = page.routes(source, __version__, check=source.check)
        refused = Refused(lambda host: self.log.warning("http_host_refused", host=host))
        app = make_app(_Withdrawn(self.registry, lambda: self.ledger.health.corrupt is not None),
                       self.health, __version__, http.auth, metrics=http.metrics,
                       routes=_unless_corrupt(pages, lambda: self.ledger.health.corrupt),
                       hosts=http.hosts, refused=refused)
        try:
            self.http = HttpServer(app, http.host, http.port, http.tls, http.limits)
        except OSError as exc:  # a busy port, an address not on this machine
            raise ConfigError(f"listen: cannot serve on {http.host}:{http.port}: {exc}") from exc
        for event, fields in http.warnings():
            self.log.warning(event, **fields)
        self.log.info("serving", listen=f"{http.host}:{self.http.port}",
                      otlp=parts.otlp.endpoint if parts.otlp else None, tls=http.tls is not None,
                      requests=ledger.count(), files=first.files,
                      startup_seconds=round(time.perf_counter() - started, 3),
                      verified=ledger.health.verified)
        # From here the WAL is verified before each fold-in (exporter.ledger.wal); a ledger
        # not known sound is read whole beside the serving (figures withdrawn if it fails).
        ledger.live()
        if not ledger.health.verified:
            check_in_background(ledger.health)

    def _projection(self) -> Projection:
        """The metrics projection, its OTLP push (when configured) and its projected spend."""
        push, resource, self.push = _otlp_push(self.parts.otlp, self.log)
        ledger = self.ledger
        # The projected spend: from the slot sums, in the local zone, as the page's days.
        pace = PaceGauge(selection_of(ledger.read, ledger.scope(self.dirs),
                                      local_zone(os.environ), ledger.scope_filter(self.dirs)),
                         ClassPrices.of(self.pricing), clock=self._clock)
        return Projection(
            self.pricing, self.parts.metrics, self.registry, roots=self.dirs, clock=self._clock,
            files_watched=lambda: self._files, budget_projected=pace.series,
            readers=push, resource=resource,
        )

    def _warn_if_none(self, files: int) -> None:
        """One WARNING when the start-up pass found no transcript, naming where it looked.

        Said once, here: a rescan that still finds none stays quiet (the page says it too).
        """
        if not files:
            self.log.warning("no_transcripts", dirs=[str(d) for d in self.dirs],
                             hint="use Claude Code first, point --data-dir at a directory "
                                  "of transcripts, or try serve --demo")

    def run(self) -> None:
        """Follow until stopped, then shut down cleanly."""
        try:
            self.follower.run(self.stop_event)
        finally:
            if self._signal is not None:
                self.log.info("signal", signal=self._signal)
            self.close()

    def close(self) -> None:
        """Stop serving, record what is pending, close the ledger."""
        if self.http is not None:
            self.http.close()
            self.http = None
        if self.push is not None:
            self.push.begin_stop()  # a hung push is let go; the last one is kept short
        if self.projection is not None:
            if not self._corrupt():
                if self._deferred:  # the lines of the last seconds (else read at the next start)
                    self._next_live = self._mono()
                    self.follower.run_pass(set(self._deferred))
                self.projection.apply(self.ledger.settle(force=True))
            self.projection.shutdown()  # a last OTLP push, if configured
        if self._library_log is not None:
            self._library_log.remove()
        if self.plan is not None:
            self.plan.close()
        self.ledger.close()
        self.log.info("stopped")

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy when the ledger is sound, the last pass succeeded and the watcher runs.

        ``ledger_verified``: a check vouches for the ledger (false while the start-up
        check of a large ledger runs). A corrupt ledger says why and how to recover.
        """
        state, sound = self.follower.state, self.ledger.health
        watcher_ok = self.parts.poll or state.watcher_alive or not self._watchable()
        ledger_ok = state.last_pass_ok and sound.corrupt is None
        detail = {"ledger_ok": ledger_ok, "watcher_alive": state.watcher_alive,
                  "poll": self.parts.poll, "passes": state.passes,
                  "error": state.last_error, "pending": self._pending,
                  "ledger_verified": sound.verified,
                  # Request lines dated ahead of our clock, waiting for it (not lost; the
                  # log names their files): a clock running behind, when not 0.
                  "lines_ahead_of_clock": self._ahead}
        if sound.corrupt is not None:
            detail["error"] = f"ledger corrupt: {sound.corrupt}"  # SQLite's words: no paths
            detail["recover"] = "stop serve; claude-code-exporter rebuild (see the log)"
        if self.push is not None:  # reported, not failing the check: see docs/teams.md
            detail["otlp"] = self.push.health()
        return ledger_ok and watcher_ok, detail

    def install_signals(self) -> None:
        """SIGTERM and SIGINT end the follow loop (main thread only).

        The handler only notes the signal and sets the event; :meth:`run` logs it.
        A handler that logged itself interrupted whatever the main thread was doing,
        and if that was writing a log line, or building the logger on its first line
        (the lazy structlog import), it found it half done: exit 1 instead of 0.
        """
        def handler(signum: int, _frame: object) -> None:
            self._signal = signal.Signals(signum).name
            self.stop_event.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _settle(self) -> int:
        """Enter requests that went quiet into the histograms (ledger, then instruments)."""
        if self.projection is None or self._corrupt():
            return 0
        if self._deferred and self._mono() >= self._next_live:
            self.follower.run_pass(set(self._deferred))  # (its health recorded as any pass's)
        # The WAL verified every few seconds, and before it is folded in (exporter.ledger.wal).
        verify = self._mono() >= self._next_verify
        if verify:
            self._next_verify = self._mono() + VERIFY_SECONDS
        self.ledger.tend(verify=verify)
        if self._corrupt():
            return 0
        if self.plan is not None:
            self.plan.tick()  # status-line samples: visible within a second of being recorded
        if self._mono() < self._next_settle:
            return 0  # a settle is a commit too: at most one per LIVE_PASS_SECONDS
        self._next_settle = self._mono() + LIVE_PASS_SECONDS
        applied = self.ledger.settle()
        if applied.hists:
            self.projection.apply(applied)
        self._pending = self.ledger.pending()  # read here, not by the HTTP thread mid-batch
        return len(applied.hists)

    def _pass(self, paths: Collection[str] | None = None) -> None:
        """One follow pass: over the paths file events named, or everything (None)."""
        if self.scanner is None:
            raise RuntimeError("start() builds the follower's scanner")
        if self._corrupt():
            return  # ingestion stops: /healthz and the one ERROR line say why and what to do
        if paths is not None:  # changed files: batched, at most one pass per LIVE_PASS_SECONDS
            if self._mono() < self._next_live:
                self._deferred.update(paths)
                return
            paths = self._deferred.union(paths)
            self._next_live = self._mono() + LIVE_PASS_SECONDS
        self._deferred = set()  # (a full pass reads them too)
        result = self.scanner.scan(paths=paths)
        self._files = result.files
        if paths is None:  # a pass over every file sees every line still waiting
            self._ahead = result.ahead
        if (result.new_requests or result.upgraded_requests) and self.plan is not None:
            self.plan.after_pass()  # today's cost for the status line moved
        if result.new_requests or result.upgraded_requests:
            self.log.debug("pass", new=result.new_requests, upgraded=result.upgraded_requests,
                           bytes=result.bytes_read)

    def _corrupt(self) -> bool:
        """Whether the ledger is known corrupt; the first time, say so in one ERROR line."""
        self.ledger.health.adopt()  # (a report reading beside may have found it)
        message = self.ledger.health.message()
        if message is not None and not self._said_corrupt:
            self._said_corrupt = True
            self.log.error("ledger_corrupt", detail=message)
        return message is not None

    def _watchable(self) -> bool:
        """True if any transcript directory exists to be watched."""
        return any(d.is_dir() for d in self.dirs)


def _otlp_push(options: OtlpOptions | None, log: Any) -> tuple[list[Any], Any, PushState | None]:
    """The OTLP reader, resource and push state when the push is configured (docs/teams.md)."""
    if options is None:
        return [], None, None
    # Imported only when configured: the OTLP exporter is not needed to scrape.
    from exporter.serve import otlp  # noqa: PLC0415

    state = PushState(options.endpoint, log)
    return [otlp.reader(options, state)], otlp.resource(options), state


class _Withdrawn(CollectorRegistry):
    """The daemon's registry as /metrics sees it: empty once the ledger is known corrupt.

    Figures from a damaged file may be wrong: their series go stale in
    Prometheus rather than go on with wrong values.
    """

    def __init__(self, inner: CollectorRegistry, withdrawn: Callable[[], bool]) -> None:
        """Wrap ``inner``; ``withdrawn`` says when to show nothing."""
        super().__init__()
        self._inner, self._withdrawn = inner, withdrawn

    def collect(self) -> Iterator[Metric]:
        """The inner registry's metrics, unless withdrawn."""
        if not self._withdrawn():
            yield from self._inner.collect()

    def restricted_registry(self, names: Iterable[str]) -> Any:
        """A scrape asking for some names only (``name[]``): withdrawn alike."""
        return self if self._withdrawn() else self._inner.restricted_registry(names)


def _unless_corrupt(routes: Mapping[str, Wsgi], corrupt: Callable[[], str | None],
                    ) -> dict[str, Wsgi]:
    """The page's routes, answering 503 with the way out once the ledger is known corrupt.

    Like /metrics, the page never shows figures read from a damaged file.
    """
    body = (b"The ledger is corrupt: its figures are withdrawn. Stop serve and run "
            b"'claude-code-exporter rebuild' (the log says more).\n")

    def guard(handler: Wsgi) -> Wsgi:
        def guarded(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
            if corrupt() is None:
                return handler(environ, start)
            start("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8"),
                                              ("Content-Length", str(len(body)))])
            return [body]
        return guarded

    return {path: guard(handler) for path, handler in routes.items()}
