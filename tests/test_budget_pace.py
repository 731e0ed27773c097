"""Budget pace: the month's and day's end at the current pace, from sequences and a ledger."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.projections import budget_pace
from exporter.projections.class_prices import ClassPrices
from exporter.projections.metrics import Projection
from exporter.projections.periods import DAY, UTC_ZONE, Zone, date_day, local_zone
from exporter.projections.pricing import RateTable
from tests.support.clock import Clock
from tests.support.daemon import RESCAN, Driven
from tests.support.exposition import total
from tests.support.ledgers import ledger_of
from tests.support.projection import options, req
from tests.support.records import assistant, jsonl

HOUR = 3600


def ts(year: int, month: int, day: int, hour: int = 0, *, tz: ZoneInfo | None = None) -> float:
    """Epoch seconds of a wall time (UTC unless ``tz``)."""
    return datetime(year, month, day, hour, tzinfo=tz or UTC).timestamp()


def hourly_spend(per_hour: dict[float, float]) -> budget_pace.Spend:
    """A Spend over whole hours: ``per_hour`` maps an hour's start to its USD."""

    def spend(lo: float, hi: float) -> float:
        return sum(v for h, v in per_hour.items() if lo <= h < hi)

    return spend


def office(first: float, last: float, usd: float, *, weekends: bool) -> dict[float, float]:
    """``usd`` an hour, 09:00-18:00 UTC, from ``first`` to ``last`` (weekdays only unless asked)."""
    out = {}
    t = first
    while t < last:
        when = datetime.fromtimestamp(t, UTC)
        if 9 <= when.hour < 18 and (weekends or when.weekday() < 5):
            out[t] = usd
        t += HOUR
    return out


def test_steady_work_projects_the_month_it_will_be() -> None:
    """Nine hours a day every day at 2 USD: at a mid-month midnight, the month's real total."""
    hours = office(ts(2026, 9, 1), ts(2026, 11, 1), 2.0, weekends=True)
    now = ts(2026, 10, 15)
    month = budget_pace.paces(hourly_spend(hours), now, UTC_ZONE, ts(2026, 9, 1),
                              {"month": 500.0})["month"]
    assert month.usd_per_day == pytest.approx(18.0)
    assert month.projected_usd == pytest.approx(31 * 18.0)
    assert month.over is True


def test_a_quiet_weekend_does_not_lower_the_pace() -> None:
    """Weekdays only: the pace on Monday morning after a quiet weekend is Friday evening's."""
    spend = hourly_spend(office(ts(2026, 9, 1), ts(2026, 11, 1), 2.0, weekends=False))
    friday = budget_pace.paces(spend, ts(2026, 10, 16, 18), UTC_ZONE, ts(2026, 9, 1))
    monday = budget_pace.paces(spend, ts(2026, 10, 19, 9), UTC_ZONE, ts(2026, 9, 1))
    assert monday["month"].usd_per_day == pytest.approx(friday["month"].usd_per_day)
    # Two whole weeks: 10 weekdays x 18 USD over 14 days.
    assert monday["month"].usd_per_day == pytest.approx(10 * 18.0 / 14)
    real = spend(ts(2026, 10, 1), ts(2026, 11, 1))  # 22 weekdays
    assert monday["month"].projected_usd == pytest.approx(real, rel=0.1)


def test_the_months_first_day_says_not_enough_data() -> None:
    """On a month's first local day the month has no projection; the day has one."""
    spend = hourly_spend(office(ts(2026, 9, 1), ts(2026, 11, 1), 2.0, weekends=True))
    found = budget_pace.paces(spend, ts(2026, 10, 1, 20), UTC_ZONE, ts(2026, 9, 1),
                              {"month": 100.0})
    assert found["month"].projected_usd is None and found["month"].over is None
    assert found["month"].spent_usd == pytest.approx(18.0)
    assert found["day"].projected_usd == pytest.approx(18.0 + 4 / 24 * 18.0)
    later = budget_pace.paces(spend, ts(2026, 10, 2, 1), UTC_ZONE, ts(2026, 9, 1))
    assert later["month"].projected_usd is not None


def test_a_few_hours_of_history_say_not_enough_data() -> None:
    """A first request two hours ago projects nothing (no day, no month); none at all: no pace."""
    now = ts(2026, 10, 20, 14)
    spend = hourly_spend({now - 2 * HOUR: 30.0, now - HOUR: 30.0})
    found = budget_pace.paces(spend, now, UTC_ZONE, now - 2 * HOUR)
    assert {p.projected_usd for p in found.values()} == {None}
    assert budget_pace.paces(spend, now, UTC_ZONE, None) == {}


def test_the_month_is_the_local_month() -> None:
    """In Pacific time the last evening of September (UTC: 1 October) is still September."""
    zone = Zone("America/Los_Angeles", ZoneInfo("America/Los_Angeles"))
    now = ts(2026, 9, 30, 20, tz=ZoneInfo("America/Los_Angeles"))
    spend = hourly_spend(office(ts(2026, 8, 1), ts(2026, 10, 2), 1.0, weekends=True))
    month = budget_pace.paces(spend, now, zone, ts(2026, 8, 1))["month"]
    assert month.end == ts(2026, 10, 1, tz=ZoneInfo("America/Los_Angeles"))
    assert month.start == ts(2026, 9, 1, tz=ZoneInfo("America/Los_Angeles"))
    assert month.projected_usd == pytest.approx(
        spend(month.start, now) + 4 / 24 * 9.0)


def test_gauge_from_a_ledger_prices_as_report_and_refreshes_at_most_every_few_seconds(
        tmp_path: Path) -> None:
    """The ledger's requests priced exactly, exposed on the projection; a re-scrape reuses them."""
    now = ts(2026, 10, 20, 12)
    clock = Clock(now)
    pricing = RateTable.load()
    history = [req(f"r{i}", now - i * 6 * HOUR, output=2_000) for i in range(1, 4 * 14 + 8)]
    ledger = ledger_of(tmp_path / "l.db", history, options=options(), clock=clock)
    reads: list[str] = []

    def read(sql: str, params: object = ()) -> list[tuple[object, ...]]:
        reads.append(sql)
        return ledger.read(sql, params)  # type: ignore[arg-type]

    gauge = budget_pace.PaceGauge(
        budget_pace.selection_of(read, "requests", UTC_ZONE, None), ClassPrices.of(pricing),
        clock=clock)
    registry = CollectorRegistry()
    Projection(pricing, options(), registry, clock=clock, budget_projected=gauge.series)
    cost = sum(sum((pricing.cost(r) or {}).values()) for r in history)
    each = cost / len(history)
    # Four requests a day: the pace is 4 x each; October so far holds 19 days x 4 - 1 of them.
    spent = each * sum(1 for r in history if r.ts >= ts(2026, 10, 1))
    want = spent + 4 * each * (ts(2026, 11, 1) - now) / DAY
    text = generate_latest(registry).decode()
    line = next(x for x in text.splitlines()
                if x.startswith('claude_code_budget_projected_usd{period="month"}'))
    assert float(line.split()[1]) == pytest.approx(want, rel=1e-6)
    queries = len(reads)
    clock.advance(budget_pace.REFRESH_S / 2)
    generate_latest(registry)
    assert len(reads) == queries  # cached: no query within REFRESH_S
    clock.advance(budget_pace.REFRESH_S)
    generate_latest(registry)
    assert len(reads) > queries


def test_serve_exposes_the_projection_of_its_ledger(tmp_path: Path) -> None:
    """A daemon's scrape: the month's projection is its spend plus two weeks' pace to month end."""
    driven = Driven(tmp_path)  # one request on 2026-10-01, the clock on 2027-01-15
    try:
        with driven.session.open("ab") as fh:
            fh.write(jsonl(assistant("msg_2", "req_2", ts="2027-01-13T12:00:00.000Z")))
        driven.mono.advance(RESCAN + 1)
        driven.step()
        assert driven.requests() == 2
        text = generate_latest(driven.daemon.registry).decode()
        # Two requests priced alike; only January's is in the month and the two weeks.
        spent = total(text, "claude_code_cost_usd") / 2
        month_end = local_zone(os.environ).midnight(date_day(date(2027, 2, 1)))
        left = (month_end - driven.clock()) / DAY
        got = total(text, "claude_code_budget_projected_usd", period="month")
        assert spent > 0
        assert got == pytest.approx(spent + spent / 14 * left, abs=1e-6)  # micro-dollars
    finally:
        driven.daemon.close()
