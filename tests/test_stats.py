"""Tests of the summary figures computed in SQL over the ledger (docs/figures.md).

Every figure is checked through the ledger itself and through the usage slots
(``tests.support.report_ledgers``): both producers must give the same figures.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.ledger import slots
from exporter.projections.class_prices import ClassPrices
from exporter.projections.counting import GAP_BUCKETS, gap_bucket
from exporter.projections.facts import Facts
from exporter.projections.figures import summary
from exporter.projections.percentiles import percentile
from exporter.projections.periods import UTC_ZONE, Range
from exporter.projections.pricing import RateTable
from exporter.records import Request, Source
from tests.support import report_ledgers
from tests.support.records import REPORT_KEYS, request
from tests.support.report_ledgers import session_gaps

SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-haiku-4-5-20251001"
UNPRICED = "claude-nova-9"
KV = {"mla": 70_272, "gqa": 516_096}
LINES = {"usage": 9, "duplicate": 4, "other": 20, "rejected": 3}
REJECTED = {"not_json": 2, "bad_usage": 1}
Figures = Callable[..., dict[str, Any]]


def req(key: str, ts: float, session: str = "a", **fields: Any) -> Request:
    """Build a main Sonnet 4.5 request with zero tokens unless given."""
    return request(key, ts, session=session, **{"model": SONNET, **fields})


def small_set() -> list[Request]:
    """Nine requests whose every figure is worked out by hand in the tests below."""
    return [
        req("r1", 1000.0, input=10, output=100, cache_write_5m=1000),
        req("r2", 1010.0, input=1, output=50, cache_read=1000, cache_write_5m=20),
        req("r3", 1310.0, input=1, output=200, cache_read=1000),
        req("r4", 1610.5, input=1, output=10, cache_write_1h=1000),
        req("r5", 5210.5, input=2, output=10, cache_read=500, cache_write_5m=500),
        req("r6", 8810.6, output=10, cache_write_5m=1000),
        req("s1", 1012.0, source=Source.SUBAGENT, model=HAIKU, input=5, output=5, cache_read=100),
        req("b1", 1005.0, "b", model=UNPRICED, input=3, output=30, cache_write_5m=100),
        req("b2", 1125.0, "b", model=UNPRICED, input=4, output=40, cache_read=100),
    ]


@pytest.fixture(scope="module")
def pricing() -> RateTable:
    """Return the shipped price table."""
    return RateTable.load()


@pytest.fixture(scope="module", params=["ledger", "slots"])
def figures(request: pytest.FixtureRequest, pricing: RateTable,
            tmp_path_factory: pytest.TempPathFactory) -> Figures:
    """Return a function: requests -> report --json figures, through one producer."""
    prices = ClassPrices.of(pricing)

    def compute(requests: list[Request], **kw: Any) -> dict[str, Any]:
        def run(sel: Any) -> dict[str, Any]:
            return summary(sel, prices, kv_bytes_per_token=KV, upload_bytes_per_token=4.0,
                           lines=LINES, rejected=REJECTED, **kw).to_json()
        if request.param == "slots":
            return run(report_ledgers.select(report_ledgers.slotted(requests)))
        tmp = Path(tmp_path_factory.mktemp("ledger"))
        with report_ledgers.real(requests, tmp) as ledger:
            return run(report_ledgers.select(ledger))

    return compute


@pytest.fixture(scope="module")
def small(figures: Figures) -> dict[str, Any]:
    """Return the figures of the hand-worked set."""
    return figures(small_set())


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        (list(range(1, 11)), 50, 5),
        (list(range(1, 11)), 90, 9),
        (list(range(1, 11)), 100, 10),
        (list(range(1, 11)), 0, 1),
        ([7], 90, 7),
        ([1, 2, 3], 50, 2),
        ([1, 2, 3, 4], 50, 2),
        ([1, 2, 3, 4, 5, 6], 90, 6),
        ([], 50, 0),
    ],
)
def test_percentile_nearest_rank(values: list[int], p: float, expected: int) -> None:
    """Nearest rank: v[ceil(p/100 * n) - 1], and 0 for an empty set."""
    assert percentile(values, p) == expected


@pytest.mark.parametrize(
    ("gap", "bucket"),
    [
        (None, "first"),
        (0.0, "lt_5m"),
        (300.0, "lt_5m"),
        (300.001, "5m_to_1h"),
        (3600.0, "5m_to_1h"),
        (3600.001, "gt_1h"),
    ],
)
def test_gap_bucket_bounds_are_inclusive_above(gap: float | None, bucket: str) -> None:
    """Exactly 300 s is still under 5 minutes and exactly 3600 s still under an hour."""
    assert gap_bucket(gap) == bucket


def test_session_gaps_only_between_main_requests_of_one_session() -> None:
    """Subagent requests and other sessions do not split a session's main chain."""
    requests = [
        req("a2", 20.0),
        req("a1", 10.0),
        req("x", 15.0, source=Source.SUBAGENT),
        req("b1", 12.0, "b"),
        req("a3", 50.0),
        req("c", 30.0, source=Source.COMPACTION),
    ]
    assert session_gaps(requests) == {"a1": None, "b1": None, "a2": 10.0, "a3": 30.0}


def test_gaps_are_whole_milliseconds(figures: Figures) -> None:
    """A 300.000 s gap stays 300 s (lt_5m) even where epoch-second floats are inexact."""
    first, second = 1_073_741_700.123, 1_073_742_000.123  # straddles 2**30: float noise
    assert second - first != 300.0
    result = figures([req("a", first), req("b", second)])
    assert result["requests_by_gap"]["lt_5m"] == 1
    assert result["gap_seconds"]["p50"] == 300.0


def test_equal_timestamps_break_ties_by_key(figures: Figures) -> None:
    """Of two main requests at the same instant, the smaller key is the session's first."""
    requests = [req("b", 10.0, cache_read=100), req("a", 10.0, cache_write_5m=100)]
    for order in (requests, requests[::-1]):
        result = figures(order)
        assert result["cache_write_share_by_gap"]["first"] == 1.0
        assert result["cache_write_share_by_gap"]["lt_5m"] == 0.0


def test_peak_per_minute_uses_calendar_minutes(figures: Figures) -> None:
    """Requests 0.002 s apart across a minute boundary fall in different minutes."""
    times = [59.0, 59.999, 60.001, 61.0, 62.0]
    base = 1_800_000_000.0  # a multiple of 60 and of 300: minutes and slots start here
    result = figures([req(f"k{i}", base + t, f"s{i}") for i, t in enumerate(times)])
    assert result["peak_requests_per_minute"] == 3
    assert figures([])["peak_requests_per_minute"] == 0


def test_parallel_sessions_use_aligned_windows(figures: Figures) -> None:
    """Sessions count together only inside one aligned 10-minute window."""
    base = 1_800_000_000.0  # a multiple of 600
    times = [0.0, 300.0, 599.0, 600.0, 601.0, 1199.9]
    sessions = ["a", "b", "c", "a", "a", "b"]
    result = figures([req(f"k{i}", base + t, s) for i, (t, s) in enumerate(zip(times, sessions,
                                                                                strict=True))])
    assert result["max_parallel_sessions_10m"] == 3
    two = figures([req("x", base + 599.0, "a"), req("y", base + 600.0, "b")])
    assert two["max_parallel_sessions_10m"] == 1


def test_totals(small: dict[str, Any]) -> None:
    """Token sums, cost of the priced requests and unpriced tokens over all requests."""
    assert small["totals"] == {
        "requests": 9,
        "input_tokens": 27,
        "output_tokens": 455,
        "cache_read_tokens": 2700,
        "cache_write_5m_tokens": 2620,
        "cache_write_1h_tokens": 1000,
        "web_search_requests": 0,
        "cost_usd": 0.021985,  # exact: 0.021945 + 0.00004, rounded once to 1e-6
        "unpriced_tokens": 133 + 144,
        # Sonnet reads 2,500 x ($3 - $0.30) + 5m writes 2,520 x ($3 - $3.75) + 1h writes
        # 1,000 x ($3 - $6) = $1,860/MTok; Haiku reads 100 x ($1 - $0.10) = $90/MTok.
        "cache_savings_usd": 0.00195,
        "cache_reads_per_output_token": 2700 / 455,
    }


def test_by_model_and_by_source(small: dict[str, Any]) -> None:
    """Breakdowns use the model id as recorded and the source label."""
    by_model = small["by_model"]
    assert list(by_model) == [HAIKU, UNPRICED, SONNET]
    assert by_model[SONNET]["cost_usd"] == pytest.approx(0.021945)
    assert by_model[HAIKU]["cost_usd"] == pytest.approx(0.00004)
    assert by_model[UNPRICED]["cost_usd"] == 0.0
    assert by_model[UNPRICED]["unpriced_tokens"] == 277
    assert {k: v["requests"] for k, v in small["by_source"].items()} == {"main": 8, "subagent": 1}
    assert small["by_source"]["subagent"]["cost_usd"] == pytest.approx(0.00004)


def test_distributions(small: dict[str, Any]) -> None:
    """Context and output p50/p90/max over all requests, nearest rank."""
    assert small["context_tokens"] == {"p50": 1001, "p90": 1021, "max": 1021}
    assert small["output_tokens"] == {"p50": 30, "p90": 200, "max": 200}
    assert small["sessions"] == 2


def test_gap_figures(small: dict[str, Any]) -> None:
    """Gaps pooled over sessions: [10, 120, 300, 300.5, 3600, 3600.1]."""
    assert small["gap_seconds"] == {"p50": 300.0, "p90": pytest.approx(3600.1), "count": 6}
    assert small["requests_by_gap"] == {"first": 2, "lt_5m": 3, "5m_to_1h": 2, "gt_1h": 1}
    assert small["cache_write_share_by_gap"] == pytest.approx(
        {"first": 1100 / 1113, "lt_5m": 20 / 2126, "5m_to_1h": 1500 / 2003, "gt_1h": 1.0}
    )


def test_activity(small: dict[str, Any]) -> None:
    """Cache-read share, peak per minute, parallel sessions and active generation speed."""
    assert small["cache_read_share"] == pytest.approx(2700 / 6347)
    assert small["peak_requests_per_minute"] == 4
    assert small["max_parallel_sessions_10m"] == 2
    assert small["generation_tokens_per_second"] == pytest.approx(90 / 130)


def test_serving_estimates(small: dict[str, Any]) -> None:
    """KV bytes are context quantiles times bytes per token; upload uses 4 B per token."""
    assert small["kv_bytes"]["mla"] == {
        "p50": 1001 * 70_272,
        "p90": 1021 * 70_272,
        "max": 1021 * 70_272,
    }
    assert small["kv_bytes"]["gqa"]["p50"] == 1001 * 516_096
    assert small["upload_bytes"] == {"total": 6347 * 4, "p50": 4004, "p90": 4084}


def test_line_accounting(small: dict[str, Any]) -> None:
    """Line counts and rejection reasons are passed through."""
    assert small["lines"] == LINES
    assert small["rejected_lines"] == 3
    assert small["rejected_by_reason"] == {"bad_usage": 1, "not_json": 2}


def test_by_session(small: dict[str, Any]) -> None:
    """Per-session rows count every source; the gap median uses main gaps only."""
    a, b = small["by_session"]
    assert a == {
        "session": "a",
        "requests": 7,
        "span_hours": pytest.approx(7810.6 / 3600),
        "gap_p50": 300.5,
        "output_tokens": 385,
        "cache_read_tokens": 2600,
        "cache_reads_per_output_token": 2600 / 385,
    }
    assert b == {
        "session": "b",
        "requests": 2,
        "span_hours": pytest.approx(120 / 3600),
        "gap_p50": 120.0,
        "output_tokens": 70,
        "cache_read_tokens": 100,
        "cache_reads_per_output_token": 100 / 70,
    }


def test_sessions_table_limit(figures: Figures) -> None:
    """The table keeps the sessions with most requests, ties by session id."""
    requests = [
        req(f"{s}{i}", 1000.0 + i, s)
        for s, n in (("x", 1), ("y", 3), ("z", 2), ("w", 2))
        for i in range(n)
    ]
    rows = figures(requests, session_rows=3)["by_session"]
    assert [(r["session"], r["requests"]) for r in rows] == [("y", 3), ("w", 2), ("z", 2)]


def test_contract_keys(small: dict[str, Any]) -> None:
    """The JSON shape has exactly the contract's keys (plus by_session, range, context_cost)."""
    assert set(small) == REPORT_KEYS | {"by_session", "range", "context_cost"}
    assert list(small["requests_by_gap"]) == list(GAP_BUCKETS)


def test_empty_ledger(figures: Figures) -> None:
    """No requests gives zeros everywhere, not errors or NaN."""
    empty = figures([])
    assert empty["totals"]["requests"] == 0
    assert empty["context_tokens"] == {"p50": 0, "p90": 0, "max": 0}
    assert empty["gap_seconds"] == {"p50": 0.0, "p90": 0.0, "count": 0}
    assert empty["cache_read_share"] == 0.0
    assert empty["generation_tokens_per_second"] == 0.0
    assert empty["peak_requests_per_minute"] == 0
    assert empty["by_model"] == {} and empty["by_session"] == []


def random_requests(n: int, seed: int = 7) -> list[Request]:
    """Return ``n`` varied requests: models, sources, geo, fast mode, long prompts."""
    rng = random.Random(seed)
    models = [SONNET, HAIKU, UNPRICED, "claude-opus-4-6", "claude-sonnet-4"]
    out, ts = [], 1.7e9
    for i in range(n):
        ts += rng.expovariate(1 / 20)
        out.append(
            req(
                f"k{i}",
                ts,
                f"s{rng.randrange(12)}",
                model=rng.choice(models),
                source=rng.choice([Source.MAIN] * 6 + [Source.SUBAGENT, Source.COMPACTION]),
                input=rng.randrange(20),
                output=rng.randrange(4000),
                cache_read=rng.randrange(400_000),
                cache_write_5m=rng.randrange(5000),
                cache_write_1h=rng.randrange(200),
                inference_geo=rng.choice(["global", "us", ""]),
                speed=rng.choice(["", "", "fast"]),
            )
        )
    return out


def test_cost_equals_sum_of_per_request_costs(figures: Figures, pricing: RateTable) -> None:
    """RateTable by class gives the total of pricing every request on its own, to 1e-6 USD."""
    requests = random_requests(2000)
    expected = sum(sum(c.values()) for r in requests if (c := pricing.cost(r)) is not None)
    assert figures(requests)["totals"]["cost_usd"] == pytest.approx(expected, abs=1e-6)


def test_buckets_agree_with_session_gaps(figures: Figures) -> None:
    """The summary buckets each main request as gap_bucket(session_gaps()) does."""
    requests = random_requests(2000)
    expected = {b: 0 for b in GAP_BUCKETS}
    for gap in session_gaps(requests).values():
        expected[gap_bucket(gap)] += 1
    assert figures(requests)["requests_by_gap"] == expected


def test_input_order_does_not_matter(figures: Figures) -> None:
    """Shuffling the requests gives the same figures, to the last digit."""
    requests = random_requests(1000)
    shuffled = list(requests)
    random.Random(3).shuffle(shuffled)
    assert figures(requests) == figures(shuffled)


def test_slots_and_requests_give_the_same_figures(pricing: RateTable, tmp_path: Path) -> None:
    """The usage slots and the ledger's requests give identical figures, JSON to JSON."""
    requests = random_requests(3000, seed=11)
    prices = ClassPrices.of(pricing)

    def run(sel: Any) -> dict[str, Any]:
        return summary(sel, prices, kv_bytes_per_token=KV, upload_bytes_per_token=4.0,
                       lines=LINES, rejected=REJECTED).to_json()

    slotted = report_ledgers.slotted(requests)
    t0 = requests[0].ts
    selections: list[tuple[dict[str, Any], Range | None]] = [
                  ({}, None), ({}, Range(t0 + 3_000.5, t0 + 40_000.25, UTC_ZONE)),
                  ({"sources": (Source.MAIN,), "models": (SONNET,)}, None),
                  ({"models": (HAIKU,)}, Range(t0 + 900.0, None, UTC_ZONE))]
    with report_ledgers.real(requests, tmp_path) as ledger:
        for filters, rng in selections:
            a = run(report_ledgers.select(slotted, rng, **filters))
            b = run(report_ledgers.select(ledger, rng, **filters))
            assert a == b, (filters, rng)


def test_a_second_long_context_threshold_prices_the_same_from_slots(tmp_path: Path) -> None:
    """Slots summed by a 100k and a 200k threshold price every request as requests do."""
    family = {"input": 1.0, "output": 2.0, "cache_read": 0.1, "cache_write_5m": 1.25,
              "cache_write_1h": 2.0, "long_context_threshold": 100_000,
              "long_context": {"input": 2.0, "output": 3.0, "cache_read": 0.2,
                               "cache_write_5m": 2.5, "cache_write_1h": 4.0}}
    prices = ClassPrices.of(RateTable.load({"models": {"claude-test-1": family}}))
    assert prices.thresholds[:2] == (100_000, 200_000)  # then OpenAI's 272k
    requests = [req(f"k{i}", 1.8e9 + 7.0 * i, model=rng_model, cache_read=ctx)
                for i, (rng_model, ctx) in enumerate(
                    [("claude-test-1", 90_000), ("claude-test-1", 150_000),
                     ("claude-test-1", 250_000), (SONNET, 150_000), (SONNET, 250_000)] * 40)]

    def run(sel: Any) -> dict[str, Any]:
        return summary(sel, prices, kv_bytes_per_token=KV, upload_bytes_per_token=4.0,
                       lines=LINES, rejected=REJECTED).to_json()

    from_slots = run(report_ledgers.select(report_ledgers.slotted(requests, prices.thresholds)))
    with report_ledgers.real(requests, tmp_path) as ledger:
        assert run(report_ledgers.select(ledger)) == from_slots
    expected = sum(sum(c.values()) for r in requests if (c := prices.pricing.cost(r)))
    assert from_slots["totals"]["cost_usd"] == pytest.approx(expected, abs=1e-6)


def test_slots_split_by_more_thresholds_answer_a_table_with_fewer(pricing: RateTable,
                                                                 tmp_path: Path) -> None:
    """Slots split at 100k, 150k and 200k serve a price table with fewer thresholds, exactly."""
    requests = random_requests(1500, seed=5)
    prices = ClassPrices.of(pricing)
    db = report_ledgers.slotted(requests, (100_000, 150_000, *prices.thresholds))
    sel = report_ledgers.select(db)
    assert Facts(sel, prices).slotted  # the slot sums answer, not the requests

    def run(sel: Any) -> dict[str, Any]:
        return summary(sel, prices, kv_bytes_per_token=KV, upload_bytes_per_token=4.0,
                       lines=LINES, rejected=REJECTED).to_json()

    with report_ledgers.real(requests, tmp_path) as ledger:
        assert run(sel) == run(report_ledgers.select(ledger))


def test_block_sums_split_at_a_price_date_inside_a_block(pricing: RateTable,
                                                         tmp_path: Path) -> None:
    """Over months around a price change inside a 16-day block, slots price as requests do."""
    prices = ClassPrices.of(pricing)
    change = next(s for s in prices.starts if s % (slots.BLOCK_DAYS * 86_400))
    base = random_requests(1500, seed=3)
    # Spread over 80 days around the change: several whole blocks, one cut by the date.
    requests = [r._replace(ts=change - 40 * 86_400 + i * 4_608.0 + r.ts % 1)
                for i, r in enumerate(base)]

    def run(sel: Any) -> dict[str, Any]:
        return summary(sel, prices, kv_bytes_per_token=KV, upload_bytes_per_token=4.0,
                       lines=LINES, rejected=REJECTED).to_json()

    db = report_ledgers.slotted(requests, prices.thresholds)
    assert db.execute("SELECT count(DISTINCT block) FROM slot_blocks").fetchone()[0] >= 5
    ranges = [None, Range(change - 33 * 86_400 + 0.5, change + 30 * 86_400, UTC_ZONE)]
    with report_ledgers.real(requests, tmp_path) as ledger:
        for rng in ranges:
            assert run(report_ledgers.select(db, rng)) == run(report_ledgers.select(ledger, rng))
