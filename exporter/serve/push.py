"""The OTLP push, watched: every push counted, failures logged, the stop bounded.

The OpenTelemetry exporter reports a failed push only as plain-text lines of
the ``logging`` module, and a collector that accepts a connection and never
answers holds the push for its whole timeout, the stop included: SIGTERM took
20 s (the push in flight, then the final one), longer than ``docker stop``
waits. :class:`GuardedExporter` sits between the periodic reader and the
OTLP exporter:

- each push runs on its own short-lived thread, and the reader's thread waits
  for it at most ``timeout_seconds`` (plus a little), or until the stop begins
  (:meth:`PushState.begin_stop`), whichever comes first;
- after the stop began, the final push waits at most ``STOP_PUSH_SECONDS``,
  and none starts while an earlier one still hangs;
- outcomes go to :class:`PushState`: the ``claude_code_exporter_otlp_pushes_total`` and
  ``claude_code_exporter_otlp_push_failures_total{reason}`` counters (the
  reason as :class:`WatchedSession`, the exporter's HTTP session, saw it), ``/healthz``'s
  ``otlp`` object, and structured log lines (``otlp_push_failed`` at the first
  failure of a run and then at the 2nd, 4th, 8th... so a dead collector cannot
  flood the log; ``otlp_push_recovered`` when a push succeeds again).

The library's own log records are handed to the structured log at DEBUG
(:class:`LibraryLog`), not printed as plain text.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import requests  # the OTLP exporter's HTTP client
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

STOP_PUSH_SECONDS: Final = 3.0  # the final push at a stop: docker stop waits 10 s in all
GRACE_SECONDS: Final = 1.0  # beyond the exporter's own timeout, before the wait gives up
#: Why a push failed: no answer in time (or cut short by the stop); no connection (refused,
#: reset, unknown name, TLS); an error status from the collector; anything else.
REASONS: Final = ("timeout", "unreachable", "rejected", "other")


@dataclass(slots=True)
class PushState:
    """What the pushes did so far; read by /healthz and the counters, written by the pushes."""

    endpoint: str
    log: Any
    clock: Callable[[], float] = time.time
    pushes: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    consecutive: int = 0
    last_success: float | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def begin_stop(self) -> None:
        """The daemon is stopping: a push in flight is abandoned, the last one kept short."""
        self.stopping.set()

    def record(self, ok: bool, reason: str, seconds: float) -> None:
        """Count one push and log a failure (at powers of two of the run) or a recovery."""
        with self._lock:
            self.pushes += 1
            before = self.consecutive
            if ok:
                self.consecutive = 0
                self.last_success = self.clock()
            else:
                self.failures[reason] += 1
                self.consecutive += 1
            run = self.consecutive
        if ok and before:
            self.log.info("otlp_push_recovered", endpoint=self.endpoint, failed_before=before)
        elif not ok and run & (run - 1) == 0:
            self.log.warning("otlp_push_failed", endpoint=self.endpoint, reason=reason,
                             seconds=round(seconds, 3), consecutive_failures=run)

    def health(self) -> dict[str, Any]:
        """The ``otlp`` object of /healthz: ``ok`` is false while the latest push failed."""
        with self._lock:
            return {"endpoint": self.endpoint, "ok": self.consecutive == 0,
                    "pushes": self.pushes, "failures": sum(self.failures.values()),
                    "consecutive_failures": self.consecutive, "last_success": self.last_success}

    def observe(self, meter: Meter, namespace: str) -> None:
        """Register the two counter families on ``meter`` (the projection's provider)."""
        meter.create_observable_counter(
            f"{namespace}_exporter_otlp_pushes", callbacks=[self._pushes],
            description="OTLP pushes attempted, successful or not")
        meter.create_observable_counter(
            f"{namespace}_exporter_otlp_push_failures", callbacks=[self._failures],
            description="OTLP pushes that failed, by reason: timeout (no answer in time, or "
                        "cut short by the stop), unreachable (no connection), rejected (an "
                        "error status), other")

    def _pushes(self, _options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            return [Observation(self.pushes)]

    def _failures(self, _options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            return [Observation(n, {"reason": r}) for r, n in self.failures.items()]


class WatchedSession:
    """The exporter's HTTP session, noting how its latest request ended (a push's reason).

    The OpenTelemetry transport keeps the error to itself; this is the one place
    that sees it. Only what the transport uses is offered: request, verify, cert, close.
    """

    def __init__(self) -> None:
        """A fresh ``requests`` session; ``outcome`` is "" until a request ends."""
        self._session = requests.Session()
        self.outcome = ""

    @property
    def verify(self) -> Any:
        """The session's CA setting."""
        return self._session.verify

    @verify.setter
    def verify(self, value: Any) -> None:
        self._session.verify = value

    @property
    def cert(self) -> Any:
        """The session's client certificate."""
        return self._session.cert

    @cert.setter
    def cert(self, value: Any) -> None:
        self._session.cert = value

    def request(self, *args: Any, **kwargs: Any) -> Any:
        """One request, its outcome noted: ok, timeout, unreachable or rejected."""
        try:
            response = self._session.request(*args, **kwargs)
        except requests.Timeout:
            self.outcome = "timeout"
            raise
        except requests.RequestException:
            self.outcome = "unreachable"
            raise
        self.outcome = "ok" if response.status_code < 400 else "rejected"
        return response

    def close(self) -> None:
        """Close the session's connections."""
        self._session.close()


class GuardedExporter(MetricExporter):
    """A metric exporter that bounds, counts and logs each push of the one it wraps."""

    def __init__(self, inner: MetricExporter, session: WatchedSession, state: PushState,
                 timeout_seconds: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        """Wrap ``inner`` (over ``session``, its own timeout ``timeout_seconds``) into ``state``."""
        # The reader asks its exporter for temporality and aggregation: the inner one's.
        super().__init__(preferred_temporality=inner._preferred_temporality,
                         preferred_aggregation=inner._preferred_aggregation)
        self._inner, self._session, self._state = inner, session, state
        self._timeout = timeout_seconds
        self._monotonic = monotonic
        self._busy: threading.Thread | None = None  # the push thread, while it runs

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        """Push on a thread; wait for it until its deadline or the stop; count the outcome."""
        state, started = self._state, self._monotonic()
        if self._busy is not None and self._busy.is_alive():  # an earlier push still hangs
            state.record(False, "timeout", 0.0)
            return MetricExportResult.FAILURE
        outcome: list[MetricExportResult] = []
        done = threading.Event()
        self._session.outcome = ""

        def push() -> None:
            try:
                outcome.append(self._inner.export(metrics_data, timeout_millis=timeout_millis))
            except Exception:  # the library's: counted as an error below
                outcome.append(MetricExportResult.FAILURE)
            finally:
                done.set()

        # A daemon thread: one that hangs in a dead collector's socket never holds the exit.
        self._busy = threading.Thread(target=push, name="otlp-push", daemon=True)
        self._busy.start()
        budget = self._timeout + GRACE_SECONDS
        if state.stopping.is_set():
            budget = min(budget, STOP_PUSH_SECONDS)
        end = started + budget
        while not done.is_set() and (left := end - self._monotonic()) > 0:
            if state.stopping.is_set():
                end = min(end, started + STOP_PUSH_SECONDS)
            # Wakes at least every 0.1 s to see the stop begin.
            done.wait(min(left, 0.1))
        seconds = self._monotonic() - started
        ok = done.is_set() and outcome == [MetricExportResult.SUCCESS]
        noted = self._session.outcome
        reason = ("timeout" if not done.is_set()  # the wait gave up, or the stop cut it short
                  else noted if noted in REASONS else "other")
        state.record(ok, reason, seconds)
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Nothing is buffered here."""
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Shut the wrapped exporter down (it closes its connections)."""
        self._inner.shutdown(timeout_millis=timeout_millis)


class LibraryLog(logging.Handler):
    """The OpenTelemetry library's ``logging`` records, as structured DEBUG lines."""

    NAME: Final = "opentelemetry"

    def __init__(self, log: Any) -> None:
        """Hand each record to ``log.debug("otlp_library", ...)``."""
        super().__init__(logging.DEBUG)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        """One record: its logger, level and message, never a traceback."""
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        self._log.debug("otlp_library", logger=record.name, level=record.levelname.lower(),
                        message=message[:1000])

    def install(self) -> None:
        """Take the library's records (the process-wide ``opentelemetry`` logger) from stderr."""
        target = logging.getLogger(self.NAME)
        target.addHandler(self)
        target.propagate = False  # not also to a root handler, nor the plain-text last resort

    def remove(self) -> None:
        """Give the records back to the ``logging`` module's defaults."""
        target = logging.getLogger(self.NAME)
        target.removeHandler(self)
        target.propagate = True
