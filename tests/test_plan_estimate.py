"""Dollars per 1 % of a plan window: the estimator, the ledger's cost in SQL, and a generated run.

The generated run (tests/support/plan.py) makes requests (real ledger rows, priced by the shipped
table) and the status-line refreshes Claude Code would send if each 1 % of
the window were worth a known number of dollars, then checks that the
estimate read back through the whole path (status-line command → spool →
ledger → figures) is within 2 % of that number.
"""

from __future__ import annotations

import functools
import io
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import statusline
from exporter.ingest import spool
from exporter.ledger.plan_store import ingest_samples
from exporter.ledger.store import Ledger
from exporter.projections.class_prices import ClassPrices
from exporter.projections.plan.cost import ledger_cost, publish_today
from exporter.projections.plan.estimate import change_points, usd_per_percent
from exporter.projections.plan.windows import DAY, plan_figures
from exporter.projections.pricing import RateTable
from exporter.records import Request, Source
from tests.support.plan import T0, Run, generate, store_requests


@pytest.fixture(scope="module")
def pricing() -> RateTable:
    """The shipped price table."""
    return RateTable.load()


# ---------------------------------------------------------------- estimator


def test_change_points_ignore_stale_lower_figures() -> None:
    """A lower figure seen later (a stale session) cannot move a higher level's time back."""
    levels = [(40.0, 100.0), (45.0, 200.0), (42.0, 300.0), (50.0, 400.0)]
    assert change_points(levels) == [(42.0, 200.0), (45.0, 200.0), (50.0, 400.0)]


def test_linear_burn_is_recovered_exactly() -> None:
    """Cost linear in time and levels seen at the matching times: the exact rate comes back."""
    usd_per_second = 0.01

    def cost(a: float, b: float) -> float:
        return (b - a) * usd_per_second

    # 1 % every 300 s → 3 USD per 1 %; two instances, one with a stale repeat.
    first = [(float(p), 1000.0 + 300 * p) for p in range(10, 40)]
    second = [(float(p), 50_000.0 + 300 * p) for p in range(0, 15)] + [(3.0, 60_000.0)]
    est = usd_per_percent([first, second], cost)
    assert est.usd_per_percent == pytest.approx(3.0)
    assert (est.windows, est.pairs) == (2, 28 + 13)


def test_no_movement_no_estimate() -> None:
    """Instances with fewer than two change points say nothing (None, zero pairs)."""
    est = usd_per_percent([[(10.0, 1.0)], [(10.0, 1.0), (11.0, 5.0)], []], lambda a, b: 1.0)
    assert est.usd_per_percent is None
    assert (est.pairs, est.windows) == (0, 0)


def test_no_cost_here_no_estimate() -> None:
    """A window that moved while this machine spent nothing gives no estimate, not $0 per 1 %."""
    levels = [(10.0, 1.0), (12.0, 5.0), (15.0, 9.0)]
    est = usd_per_percent([levels], lambda a, b: 0.0)
    assert est.usd_per_percent is None
    assert (est.windows, est.percent, est.usd) == (1, 3.0, 0.0)


# -------------------------------------------------------------- ledger cost


def test_ledger_cost_matches_per_request_pricing(tmp_path: Path, pricing: RateTable) -> None:
    """The report's price classes price as RateTable.cost does per request, over a half-open range.

    Long context, US region, fast mode and an unpriced model included; to the
    micro-dollar the report rounds to.
    """
    rng = random.Random(3)
    reqs = []
    for i in range(400):
        model = rng.choice(["claude-opus-4-6", "claude-sonnet-4-5", "claude-haiku-4-5",
                            "claude-nova-9"])
        reqs.append(Request(
            f"m{i}", T0 + i, model, "s", "/p", Source.MAIN, rng.randrange(0, 50_000),
            rng.randrange(1, 4000), rng.choice([0, 10_000, 180_000, 250_000]),
            rng.randrange(0, 20_000), rng.choice([0, 0, 5000]), "standard",
            rng.choice(["", "global", "us"]), rng.choice(["", "", "fast"]),
        ))
    led = Ledger(tmp_path / "ledger.sqlite3")
    store_requests(led, reqs)
    lo, hi = T0 + 50, T0 + 350
    expected = 0.0
    for r in led.requests(lo, hi):
        priced = pricing.cost(r)
        expected += sum(priced.values()) if priced else 0.0
    assert expected > 0
    prices = ClassPrices.of(pricing)
    assert ledger_cost(led._db, prices, lo, hi) == pytest.approx(expected, abs=1e-6)
    assert ledger_cost(led._db, prices, T0 + 1000, T0 + 2000) == 0.0
    led.close()


def test_ledger_cost_is_the_reports_cost_web_searches_included(tmp_path: Path,
                                                               pricing: RateTable) -> None:
    """Over the same range the estimate's cost is the cost `report` shows, searches billed."""
    from exporter.projections import figures
    from exporter.projections.periods import UTC_ZONE, Range
    from exporter.projections.selection import Selection

    reqs = [Request(f"q{i}", T0 + 10 * i, "claude-opus-4-6", "s", "/p", Source.MAIN, 1000,
                    200, 50_000, 0, 0, web_search=i % 3) for i in range(60)]
    led = Ledger(tmp_path / "ledger.sqlite3")
    store_requests(led, reqs)
    prices = ClassPrices.of(pricing)
    lo, hi = T0 + 95, T0 + 455
    sel = Selection(led.read, "requests", Range(lo, hi, UTC_ZONE))
    shown = figures.summary(sel, prices, kv_bytes_per_token={}, upload_bytes_per_token=0.0,
                            lines={}, rejected={})
    assert shown.totals.web_search > 0
    assert ledger_cost(led._db, prices, lo, hi) == shown.totals.cost_usd > 0
    led.close()


def test_publish_today_is_what_the_status_line_shows(tmp_path: Path, pricing: RateTable) -> None:
    """Today's cost is published (neither yesterday's nor tomorrow's); the status line reads it."""
    now = T0 + 10 * 3600
    midnight = spool.local_midnight(now)
    reqs = [Request("old", midnight - 60, "claude-opus-4-6", "s", "/p", Source.MAIN,
                    1_000_000, 0, 0, 0, 0),
            Request("new", midnight + 60, "claude-opus-4-6", "s", "/p", Source.MAIN,
                    1_000_000, 0, 0, 0, 0),
            Request("ahead", spool.local_midnight(midnight + 36 * 3600) + 60, "claude-opus-4-6",
                    "s", "/p", Source.MAIN, 1_000_000, 0, 0, 0, 0)]  # tomorrow: not today's
    led = Ledger(tmp_path / "ledger.sqlite3")
    store_requests(led, reqs)
    assert publish_today(led._db, ClassPrices.of(pricing), tmp_path, now) == pytest.approx(5.0)
    assert spool.read_today(str(tmp_path), now) == pytest.approx(5.0)
    led.close()


# ----------------------------------------------------------- generated run


def replay(run: Run, state: Path, pricing: RateTable) -> Callable[[], Any]:
    """Feed the refreshes to the status-line command, the requests to the ledger; ingest."""
    env = {spool.STATE_DIR_ENV: str(state)}
    for at, doc in run.refreshes:
        out = io.BytesIO()
        statusline.main([], io.BytesIO(json.dumps(doc).encode()), out, env,
                        clock=functools.partial(float, at))
        assert out.getvalue().startswith(b"Opus 4.6")
    led = Ledger(state / "ledger.sqlite3")
    store_requests(led, run.requests)
    ingest_samples(led._db)
    end = run.refreshes[-1][0] + 60

    def figures() -> Any:
        prices = ClassPrices.of(pricing)
        return plan_figures(led._db, end, lambda a, b: ledger_cost(led._db, prices, a, b),
                            lookback={"five_hour": 30 * DAY, "seven_day": 30 * DAY})

    return figures


@pytest.mark.parametrize(("decimals", "lag"), [(0, False), (1, False), (0, True)])
def test_estimate_within_2_percent_of_the_generating_size(
    decimals: int, lag: bool, tmp_path: Path, pricing: RateTable
) -> None:
    """One machine: the estimate is within 2 % of the window size that generated the figures.

    Whole or tenth percents; figures current or one response behind.
    """
    run = generate(Run(2.40, 14.0, decimals=decimals, lag=lag), pricing)
    assert len(run.requests) > 4000
    fig = replay(run, tmp_path, pricing)()
    five = fig.windows["five_hour"].estimate
    seven = fig.windows["seven_day"].estimate
    assert five.windows == 5 and five.pairs >= 300
    assert five.usd_per_percent == pytest.approx(2.40, rel=0.02)
    assert seven.windows == 1 and seven.pairs >= 50
    assert seven.usd_per_percent == pytest.approx(14.0, rel=0.02)


def test_usage_elsewhere_scales_the_estimate_by_this_machines_share(
    tmp_path: Path, pricing: RateTable
) -> None:
    """A quarter of the usage elsewhere: the estimate is 0.75 x the true size (a lower bound).

    As docs/plan-limits.md says.
    """
    run = generate(Run(2.40, 14.0, foreign_share=0.25), pricing, seed=5)
    fig = replay(run, tmp_path, pricing)()
    estimate = fig.windows["five_hour"].estimate.usd_per_percent
    assert estimate == pytest.approx(0.75 * 2.40, rel=0.03)
    assert estimate < 2.40 * 0.8
