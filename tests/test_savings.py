"""Cache savings, the re-read ratio and the cost of a prompt at its size, worked by hand.

Sonnet 4.5 list prices (USD per million tokens): input 3, cache read 0.30, 5-minute
write 3.75, 1-hour write 6, output 15; above 200k prompt tokens every token of the
request at the long-context tier: input 6, read 0.60, 5m write 7.50, 1h write 12,
output 22.50. "Without cache" bills every cache read and write as input at the
request's own tier.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.projections.class_prices import ClassPrices
from exporter.projections.figures import summary
from exporter.projections.pricing import RateTable
from exporter.projections.savings import counter_parts, reread_ratio, saved, without_cache
from exporter.records import Request
from tests.support import report_ledgers
from tests.support.records import request

SONNET = "claude-sonnet-4-5-20250929"
T0 = 1_790_000_000.0  # 2026-09-21, on the 5-minute grid
Figures = Callable[[list[Request]], dict[str, Any]]


def req(key: str, ts: float = T0, **fields: Any) -> Request:
    """A main Sonnet 4.5 request with zero tokens unless given."""
    return request(key, ts, session="s", **{"model": SONNET, **fields})


@pytest.fixture(scope="module", params=["ledger", "slots"])
def figures(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Figures:
    """Requests -> report --json figures, through one producer (requests or slot sums)."""
    prices = ClassPrices.of(RateTable.load())

    def compute(requests: list[Request]) -> dict[str, Any]:
        def run(sel: Any) -> dict[str, Any]:
            return summary(sel, prices, kv_bytes_per_token={}, upload_bytes_per_token=4.0,
                           lines={}, rejected={}).to_json()
        if request.param == "slots":
            return run(report_ledgers.select(report_ledgers.slotted(requests)))
        with report_ledgers.real(requests, Path(tmp_path_factory.mktemp("l"))) as ledger:
            return run(report_ledgers.select(ledger))

    return compute


# (request, cost USD, saving USD), each worked out in the comment above it.
WORKED = {
    # Cached: 100 in x 3 + 50,000 read x 0.30 + 1,000 out x 15 = $0.0303. Without the
    # cache the read is input: 50,100 x 3 + 15,000 = $0.1653. Saved 50,000 x 2.70 = $0.135.
    "cached": (dict(input=100, cache_read=50_000, output=1_000), 0.0303, 0.135),
    # 5-minute write: 10 x 3 + 20,000 x 3.75 + 500 x 15 = $0.08253; without: 20,010 x 3 +
    # 7,500 = $0.06753. Saved 20,000 x (3 - 3.75) = -$0.015: a write alone costs more.
    "write_5m": (dict(input=10, cache_write_5m=20_000, output=500), 0.08253, -0.015),
    # Long context (251,000 prompt tokens > 200k): 1,000 x 6 + 250,000 x 0.60 + 2,000 x
    # 22.50 = $0.201; without: 251,000 x 6 (still the long tier) + 45,000 = $1.551.
    # Saved 250,000 x (6 - 0.60) = $1.35.
    "long": (dict(input=1_000, cache_read=250_000, output=2_000), 0.201, 1.35),
    # 1-hour write: 5 x 3 + 10,000 x 6 + 100 x 15 = $0.061515; without: 10,005 x 3 +
    # 1,500 = $0.031515. Saved 10,000 x (3 - 6) = -$0.03: the 1-hour premium is 100 %.
    "write_1h": (dict(input=5, cache_write_1h=10_000, output=100), 0.061515, -0.03),
}


@pytest.mark.parametrize("name", list(WORKED))
def test_worked_example(name: str, figures: Figures) -> None:
    """One request's cost and saving in report --json equal the hand-worked figures."""
    fields, cost, saving = WORKED[name]
    got = figures([req("a", **fields)])
    assert got["totals"]["cost_usd"] == pytest.approx(cost, abs=1e-9)
    assert got["totals"]["cache_savings_usd"] == pytest.approx(saving, abs=1e-9)
    assert got["cache_savings_usd"] == got["totals"]["cache_savings_usd"]


def test_savings_add_up_over_requests(figures: Figures) -> None:
    """The four requests together save the sum of their savings (linear in the token sums)."""
    requests = [req(name, T0 + 10 * i, **WORKED[name][0]) for i, name in enumerate(WORKED)]
    got = figures(requests)
    assert got["totals"]["cache_savings_usd"] == pytest.approx(0.135 - 0.015 + 1.35 - 0.03,
                                                               abs=1e-9)
    assert got["totals"]["cost_usd"] == pytest.approx(0.0303 + 0.08253 + 0.201 + 0.061515,
                                                      abs=1e-9)
    # 300,000 read tokens for 3,600 output tokens.
    assert got["cache_reads_per_output_token"] == pytest.approx(300_000 / 3_600)
    assert got["by_session"][0]["cache_reads_per_output_token"] == pytest.approx(300_000 / 3_600)


def test_context_cost_table(figures: Figures) -> None:
    """The p50 and p90 prompt on the model: read from the cache vs recomputed, at its tier."""
    cached, long = WORKED["cached"][0], WORKED["long"][0]
    got = figures([req("a", T0, **cached), req("b", T0 + 10, **long)])
    rows = {r["quantile"]: r for r in got["context_cost"]}
    # p50 of (50,100, 251,000) is 50,100: x 0.30 = $0.01503 cached, x 3 = $0.1503 recomputed.
    assert rows["p50"] == {"model": SONNET, "quantile": "p50", "context_tokens": 50_100,
                           "long_context": False, "from_cache_usd": 0.01503,
                           "recomputed_usd": 0.1503}
    # p90 is 251,000, long context: x 0.60 = $0.1506 cached, x 6 = $1.506 recomputed.
    assert rows["p90"] == {"model": SONNET, "quantile": "p90", "context_tokens": 251_000,
                           "long_context": True, "from_cache_usd": 0.1506,
                           "recomputed_usd": 1.506}


def test_unpriced_requests_save_nothing(figures: Figures) -> None:
    """A model without a price has no cost and no saving, and no context-cost row."""
    got = figures([req("a", model="claude-nova-9", cache_read=10_000, output=10)])
    assert got["totals"]["cache_savings_usd"] == 0.0
    assert got["context_cost"] == []
    assert got["cache_reads_per_output_token"] == 1_000.0


def test_definition_in_units() -> None:
    """saved() and without_cache() on integer units: reads save, writes cost their premium."""
    units = (3, 15, 0, 4, 6)  # made-up integer rates: input, output, read, 5m write, 1h write
    sums = (1, 2, 10, 100, 1_000, 7)  # the trailing web-search count is ignored
    assert saved(sums, units) == 10 * 3 + 100 * (3 - 4) + 1_000 * (3 - 6)
    cost = sum(s * u for s, u in zip(sums, units, strict=False))
    assert without_cache(sums, units, cost) == (1 + 10 + 100 + 1_000) * 3 + 2 * 15
    assert reread_ratio(1_685, 1) == 1_685.0 and reread_ratio(5, 0) == 0.0


def test_counter_parts_only_grow_and_net_to_the_saving() -> None:
    """The counters' parts are >= 0 and reads' saving minus writes' premium is the saving."""
    rates = RateTable.load().rates("claude-sonnet-4-5", long_context=True)
    assert rates is not None
    parts = counter_parts(rates, 250_000, 1_000, 10)
    # 250,000 reads x (6 - 0.60); 1,000 5m writes x (7.50 - 6); 10 1h writes x (12 - 6).
    want = {"cache_read": ("cache_savings_usd", 1.35),
            "cache_write_5m": ("cache_write_premium_usd", 0.0015),
            "cache_write_1h": ("cache_write_premium_usd", 0.00006)}
    assert {k: f for k, (f, _) in parts.items()} == {k: f for k, (f, _) in want.items()}
    for kind, (_, usd) in want.items():
        assert parts[kind][1] == pytest.approx(usd)
    assert all(usd >= 0 for _, usd in parts.values())
