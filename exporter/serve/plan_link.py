"""The daemon's link to the plan-limit figures of the status line (docs/plan-limits.md).

Three duties, each on the thread that owns it:

- ``tick()`` (the follower thread, every second): when the status line's spool
  changed, move its new samples into the ledger (exactly once: the spool offset
  commits with the rows), and refresh today's cost file the status line prints;
- ``after_pass()`` (the follower thread): a pass added requests, so today's cost moved.
  It is repriced at most every ``today_every`` seconds (by the injected clock): a busy
  session's passes come every second, and the status line's figure need not follow
  each one. A pending change is published by a later ``tick``, and a new day at once;
- the plan families (``register``): read at scrape time through a read-only
  connection of their own, at most once a second whatever the number of scrapers.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.ingest import spool
from exporter.ingest.formats import CODEX
from exporter.ledger import connections
from exporter.ledger import plan_store as store
from exporter.projections.class_prices import ClassPrices
from exporter.projections.plan import cost
from exporter.projections.plan import gauges as metrics
from exporter.projections.plan.windows import PlanFigures, plan_figures
from exporter.projections.pricing import RateTable
from exporter.sqlite import sqlite3

if TYPE_CHECKING:
    from exporter.projections.metrics import Projection

#: Seconds between two repricings of today for the status line (it refreshes at most
#: every 300 ms, but a figure a few seconds old is as good there).
TODAY_EVERY_S = 10.0
#: The instrumentation scope of the plan families on the projection's meter provider.
METER_NAME = "claude_code_exporter.plan"


class PlanLink:
    """Spool → ledger, today's cost file, and the plan metric families of one daemon."""

    def __init__(self, ledger_path: Path, state_dir: Path, pricing: RateTable, *,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, log: Any = None,
                 today_every: float = TODAY_EVERY_S) -> None:
        """Open the write and read connections; nothing is read until ``tick``."""
        self._state = state_dir
        # Two price caches: the follower thread prices today, the scrape threads the estimate.
        self._prices_today = ClassPrices.of(pricing)
        self._prices_scrape = ClassPrices.of(pricing)
        self._clock = clock
        self._today_every = today_every
        self._today_due = True  # today's cost moved since it was last published
        self._published: tuple[float, float] | None = None  # (clock time, its local midnight)
        self._log = log
        self._spool = state_dir / spool.SPOOL_NAME
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) ingested
        self._failed: tuple[int, int, int] | None = None  # the spool state last logged failing
        # Separate connections: the ledger's own is busy with its batches, and the
        # scrape threads must never share the writer's. WAL lets both read while it writes.
        self._write = connections.plan_writer(ledger_path)
        self._read = connections.reader(ledger_path)
        self._read_lock = threading.Lock()
        self._cache = metrics.FiguresCache(self._figures, monotonic)

    @classmethod
    def on_projection(cls, projection: Projection, ledger_path: Path, state_dir: Path,
                      pricing: RateTable, *, clock: Callable[[], float] = time.time,
                      monotonic: Callable[[], float] = time.monotonic,
                      log: Any = None) -> PlanLink:
        """The link ``serve`` runs: its families on ``projection``'s meter provider.

        Under the projection's namespace, so they are scraped (and pushed) with the
        rest. One assembly for the daemon and the tests that pin its exposition.
        """
        link = cls(ledger_path, state_dir, pricing, clock=clock, monotonic=monotonic, log=log)
        try:
            link.register(projection.inst.provider.get_meter(METER_NAME),
                          projection.opts.namespace)
        except BaseException:
            link.close()
            raise
        return link

    def register(self, meter: Any, namespace: str) -> None:
        """Create the plan families on ``meter`` (observed at scrape time)."""
        metrics.register(meter, namespace, self._cache.get)

    def tick(self) -> None:
        """Ingest the spool if it changed since the last look (cheap: one stat).

        Also publishes today's cost when a change is pending or the day turned.
        """
        self._publish_if_due()
        try:
            st = os.stat(self._spool)
        except OSError:
            return  # no status line configured yet: nothing to do
        mark = (st.st_ino, st.st_size, st.st_mtime_ns)
        if mark == self._seen:
            return
        try:
            while store.ingest_samples(self._write, self._state, clock=self._clock).more:
                pass  # a large backlog comes in bounded reads
            self._seen = mark
        except (OSError, sqlite3.Error) as exc:  # retried on the next tick; never stops serving
            if self._log is not None:
                self._log.warning("plan_samples_not_ingested", detail=str(exc))
        except Exception as exc:  # a bug in the plan ingest: the transcripts' metrics go on
            if self._log is not None and mark != self._failed:  # once per spool state
                self._log.error("plan_samples_ingest_failed", error=type(exc).__name__,
                                detail=str(exc), exc_info=True)
            self._failed = mark

    def after_pass(self) -> None:
        """A pass added requests: today's cost moved (published at most every ``today_every``)."""
        self._today_due = True
        self._publish_if_due()

    def _publish_if_due(self) -> None:
        """Reprice today unless it was done less than ``today_every`` ago on the same day."""
        now = self._clock()
        midnight = spool.local_midnight(now)
        if self._published is not None:
            at, day = self._published
            recent = 0.0 <= now - at < self._today_every
            if day == midnight and (not self._today_due or recent):
                return
        self._published = (now, midnight)  # a failure, too, is retried only after today_every
        try:
            cost.publish_today(self._write, self._prices_today, self._state, now)
        except (OSError, sqlite3.Error) as exc:  # a full disk: the status line shows no cost
            if self._log is not None:
                self._log.debug("statusline_today_not_written", detail=str(exc))
            return  # still due
        self._today_due = False

    def close(self) -> None:
        """Close both connections."""
        self._write.close()
        with self._read_lock:
            self._read.close()

    def _figures(self) -> PlanFigures:
        """Fresh figures from the read connection (one scrape at a time)."""
        with self._read_lock:
            db = self._read
            prices = self._prices_scrape
            return plan_figures(db, self._clock(), cost.claude_cost(db, prices),
                                agent_cost={CODEX: cost.codex_cost(db, prices)})
