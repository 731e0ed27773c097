"""The page's budget card: the month's end at the current pace against the monthly budget."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest

from exporter.projections import budget_pace
from exporter.projections.class_prices import ClassPrices
from exporter.projections.periods import UTC_ZONE
from exporter.projections.pricing import RateTable
from exporter.serve import page_figures, page_html
from tests.support.ledgers import ROOT, ledger_of
from tests.support.page_dom import parse, sample_page
from tests.support.projection import options, req

HOUR = 3600.0
NOW = datetime(2026, 10, 20, 12, tzinfo=UTC).timestamp()


def month(projected: float | None, budget: float | None = None) -> budget_pace.Pace:
    """A month's pace with this projection."""
    return budget_pace.Pace("month", 0.0, 1.0, 10.0, 5.0, projected, budget)


def test_card_shows_the_projection_against_the_budget() -> None:
    """Over the budget: the projected end, its share of the budget, and a warning class."""
    data = dataclasses.replace(sample_page(), budgets={"month": 400.0},
                               pace={"month": month(512.0, 400.0)})
    html = page_html.render(data, "t")
    assert parse(html).figures["projected-month"] == page_html.money(512.0)
    assert "128% of the budget" in html and 'class="pace over"' in html


def test_card_under_budget_and_without_a_budget() -> None:
    """Under the budget: no warning; no budget: the projection alone."""
    under = dataclasses.replace(sample_page(), budgets={"month": 400.0},
                                pace={"month": month(200.0, 400.0)})
    html = page_html.render(under, "t")
    assert "50% of the budget" in html and 'class="pace over"' not in html
    bare = page_html.render(dataclasses.replace(sample_page(), pace={"month": month(200.0)}), "t")
    assert parse(bare).figures["projected-month"] == page_html.money(200.0)
    assert "of the budget" not in bare


def test_card_says_not_enough_data() -> None:
    """No projection yet (a month's first day): the card says so, with no figure."""
    html = page_html.render(dataclasses.replace(sample_page(), pace={"month": month(None)}), "t")
    assert "not enough data" in html
    assert "projected-month" not in parse(html).figures
    assert "not enough data" not in page_html.render(sample_page(), "t")  # no requests: nothing


def test_page_data_carries_the_ledgers_pace(tmp_path: Path) -> None:
    """The page's figures hold the same pace as the gauge's, and its JSON the projections."""
    history = [req(f"r{i}", NOW - i * 6 * HOUR, output=2_000) for i in range(1, 80)]
    ledger = ledger_of(tmp_path / "l.db", history, options=options(), clock=lambda: NOW)
    prices = ClassPrices.of(RateTable.load())
    source = page_figures.LedgerSource(ledger, [Path(ROOT)], prices, UTC_ZONE,
                                       budgets={"month": 10.0}, clock=lambda: NOW)
    data = source()
    gauge = budget_pace.PaceGauge(budget_pace.selection_of(ledger.read, "requests", UTC_ZONE,
                                                           None), prices, clock=lambda: NOW)
    want = gauge.paces(NOW)
    assert data.pace["month"].projected_usd == pytest.approx(want["month"].projected_usd)
    assert data.pace["month"].budget_usd == 10.0
    page = data.to_json()["page"]
    assert page["projected_usd"]["month"] == pytest.approx(want["month"].projected_usd,
                                                            abs=1e-6)
