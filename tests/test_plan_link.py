"""The daemon's plan link in process, with an injected clock: today's cost throttled, not lost."""

from __future__ import annotations

import json
from pathlib import Path

from exporter.ingest import spool
from exporter.ledger.store import Ledger
from exporter.projections.pricing import RateTable
from exporter.records import Parsed, Request, Source
from exporter.serve.plan_link import PlanLink
from tests.support.clock import Clock

T0 = 1_790_000_000.0


def add(ledger: Ledger, key: str, ts: float) -> None:
    """One Opus request of one million input tokens ($5 at list price) through the ledger."""
    parsed = Parsed()
    parsed.add(Request(key, ts, "claude-opus-4-6", "s", "/p", Source.MAIN, 1_000_000, 0, 0, 0, 0))
    ledger.apply(parsed, [], 0)


def published(state: Path) -> tuple[float, float]:
    """(usd, written) of the today file the status line reads."""
    doc = json.loads((state / spool.TODAY_NAME).read_text())
    return doc["usd"], doc["written"]


def test_today_is_repriced_at_most_every_interval_and_pending_changes_follow(
    tmp_path: Path,
) -> None:
    """Passes within the interval do not reprice; the next tick after it publishes the change."""
    state = tmp_path / "state"
    clock = Clock(spool.local_midnight(T0) + 12 * 3600)
    ledger = Ledger(state / "ledger.sqlite3")
    link = PlanLink(state / "ledger.sqlite3", state, RateTable.load(), clock=clock,
                    today_every=10.0)
    try:
        add(ledger, "a", clock.now - 60)
        link.after_pass()  # the first pass publishes at once
        assert published(state) == (5.0, clock.now)
        first = clock.now
        for step in range(1, 6):  # five more passes within the interval
            clock.now = first + step
            add(ledger, f"b{step}", clock.now - 0.5)
            link.after_pass()
            link.tick()
        assert published(state) == (5.0, first)  # not repriced yet
        clock.now = first + 10.0
        link.tick()  # the pending change, once the interval has passed
        assert published(state) == (30.0, first + 10.0)
        clock.now += 30.0
        link.tick()  # nothing changed since: no repricing
        assert published(state) == (30.0, first + 10.0)
    finally:
        link.close()
        ledger.close()


def test_a_new_day_is_published_without_waiting_for_a_pass(tmp_path: Path) -> None:
    """Past midnight the next tick writes the new day's (empty) total: yesterday's is not shown."""
    state = tmp_path / "state"
    midnight = spool.local_midnight(T0)
    clock = Clock(midnight + 86_400 - 5)
    ledger = Ledger(state / "ledger.sqlite3")
    link = PlanLink(state / "ledger.sqlite3", state, RateTable.load(), clock=clock,
                    today_every=3600.0)
    try:
        add(ledger, "late", clock.now - 1)
        link.after_pass()
        assert spool.read_today(str(state), clock.now) == 5.0
        clock.now = midnight + 86_400 + 2  # a new day, well within the interval
        link.tick()
        assert spool.read_today(str(state), clock.now) == 0.0
    finally:
        link.close()
        ledger.close()
