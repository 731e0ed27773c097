"""Tests of the price table: genai-prices data, our rules, overrides, ids and per-request cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage, calc_price
from genai_prices.data import providers

from exporter.projections.prices import genai_table as genai
from exporter.projections.pricing import (
    MAX_CACHED_IDS,
    MAX_MODEL_ID,
    RATE_NAMES,
    PriceUpdateError,
    RateTable,
    fetch_prices,
    normalise_model_id,
)
from exporter.records import Request
from exporter.synth.model import HAIKU, NOVA, OPUS, SONNET, SYNTHETIC
from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.records import request

MARCH_13 = datetime(2026, 3, 13, tzinfo=UTC).timestamp()  # Opus/Sonnet 4.6 tier ends
NOW = datetime(2026, 12, 1, tzinfo=UTC).timestamp()


def req(model: str = "claude-sonnet-4-5", ts: float = NOW, **fields: Any) -> Request:
    """Build a request with zero tokens unless given, dated ``ts`` (default: 2026-12-01)."""
    return request(model=model, ts=ts, **fields)


@pytest.fixture(scope="module")
def data() -> genai.PriceData:
    """The table built from the installed genai-prices, without a cache."""
    return genai.bundled(None)


@pytest.fixture(scope="module")
def pricing(data: genai.PriceData) -> RateTable:
    """The shipped prices (database and our rules), loaded once, the clock at 2026-12-01."""
    return RateTable.load(data=data, clock=lambda: NOW)


def total(pricing: RateTable, r: Request) -> float:
    """Return the request's total cost, failing if it is unpriced."""
    cost = pricing.cost(r)
    assert cost is not None
    return sum(cost.values())


# --- pricing.md's rules ------------------------------------------------------------


def test_worked_example_small(pricing: RateTable) -> None:
    """The first worked request of pricing.md costs $0.00144."""
    r = req(input=5, cache_read=1000, cache_write_5m=100, output=50)
    assert total(pricing, r) == pytest.approx(0.00144, rel=1e-12)


def test_worked_example_long_context(pricing: RateTable) -> None:
    """The same request with 250,000 cache-read tokens bills everything at premium: $0.151905."""
    r = req(input=5, cache_read=250_000, cache_write_5m=100, output=50)
    assert total(pricing, r) == pytest.approx(0.151905, rel=1e-12)


def test_cost_is_split_by_token_type(pricing: RateTable) -> None:
    """The cost mapping has one entry per token type, each at its own rate."""
    r = req(input=5, cache_read=1000, cache_write_5m=100, cache_write_1h=10, output=50)
    cost = pricing.cost(r)
    assert cost == pytest.approx(
        {
            "input": 15e-6,
            "cache_read": 300e-6,
            "cache_write_5m": 375e-6,
            "cache_write_1h": 60e-6,
            "output": 750e-6,
        }
    )


def test_premium_boundary_is_strictly_above_200k(pricing: RateTable) -> None:
    """A prompt of exactly 200,000 tokens is billed normally; 200,001 at premium."""
    assert total(pricing, req(cache_read=200_000)) == pytest.approx(200_000 * 0.30e-6)
    assert total(pricing, req(cache_read=200_001)) == pytest.approx(200_001 * 0.60e-6)


def test_premium_threshold_counts_every_prompt_field(pricing: RateTable) -> None:
    """Input, cache read and both cache writes add up to the prompt that crosses 200k."""
    r = req(input=1, cache_read=199_998, cache_write_5m=1, cache_write_1h=1, output=10)
    expected = (1 * 6 + 199_998 * 0.6 + 1 * 7.5 + 1 * 12 + 10 * 22.5) * 1e-6
    assert total(pricing, r) == pytest.approx(expected)


def test_output_alone_never_triggers_premium(pricing: RateTable) -> None:
    """Output tokens are not prompt: a huge output on a small prompt stays at base rates."""
    assert total(pricing, req(output=300_000)) == pytest.approx(300_000 * 15e-6)


@pytest.mark.parametrize("model", ["claude-sonnet-4", "claude-sonnet-4-20250514"])
def test_sonnet_4_has_the_premium(pricing: RateTable, model: str) -> None:
    """Sonnet 4 shares Sonnet 4.5's long-context premium (our rule: the database has none)."""
    assert total(pricing, req(model, cache_read=300_000)) == pytest.approx(300_000 * 0.6e-6)


@pytest.mark.parametrize(
    ("model", "read_rate"), [("claude-sonnet-4-6", 0.3), ("claude-opus-4-6", 0.5)]
)
def test_models_without_premium_since_march_13(
    pricing: RateTable, model: str, read_rate: float
) -> None:
    """Sonnet 4.6 and Opus 4.6 bill long prompts at their normal rates from 2026-03-13 on."""
    assert total(pricing, req(model, cache_read=500_000)) == pytest.approx(
        500_000 * read_rate * 1e-6
    )


def test_opus_4_6_long_prompt_priced_by_the_rule_of_its_date(pricing: RateTable) -> None:
    """Above 200k prompt tokens, Opus 4.6 bills at its tier before 2026-03-13, flat from then.

    genai-prices 0.2.3: before the date input 10, cache read 1.0, output 37.5 above
    200k (5 / 0.5 / 25 below); from the date 5 / 0.5 / 25 flat. The request: input
    10, cache read 250,000, output 1,000 (prompt 250,010 > 200,000).
      before: 10×10 + 250,000×1.0 + 1,000×37.5 = 287,600 µUSD = $0.2876
      after:  10×5  + 250,000×0.5 + 1,000×25   = 150,050 µUSD = $0.15005
    """
    tokens = {"input": 10, "cache_read": 250_000, "output": 1000}
    before = req("claude-opus-4-6", ts=MARCH_13 - 1, **tokens)
    after = req("claude-opus-4-6", ts=MARCH_13, **tokens)
    assert total(pricing, before) == pytest.approx(0.2876, rel=1e-12)
    assert total(pricing, after) == pytest.approx(0.15005, rel=1e-12)
    # The same through the class API the figures use.
    assert pricing.boundaries("claude-opus-4-6") == (MARCH_13,)
    for at, output_rate in ((MARCH_13 - 1, 37.5), (MARCH_13, 25.0)):
        rates = pricing.rates("claude-opus-4-6", long_context=True, at=at)
        assert rates is not None
        assert rates.output == output_rate
    assert pricing.long_context_threshold("claude-opus-4-6", at=MARCH_13 - 1) == 200_000
    assert pricing.long_context_threshold("claude-opus-4-6", at=MARCH_13) is None
    assert pricing.long_context_threshold("claude-opus-4-6") == 200_000  # some period has it


def test_rates_without_a_date_are_those_in_force_now(data: genai.PriceData) -> None:
    """``at=None`` means the injected clock's now."""
    early = RateTable.load(data=data, clock=lambda: MARCH_13 - 86_400)
    late = RateTable.load(data=data, clock=lambda: MARCH_13 + 86_400)
    assert early.rates("claude-opus-4-6", long_context=True).output == 37.5  # type: ignore[union-attr]
    assert late.rates("claude-opus-4-6", long_context=True).output == 25.0  # type: ignore[union-attr]


def test_boundaries_are_empty_for_flat_models(pricing: RateTable) -> None:
    """A model whose prices never changed has no boundary; an unpriced one neither."""
    assert pricing.boundaries("claude-sonnet-4-5-20250929") == ()
    assert pricing.boundaries("claude-nova-9") == ()


OPUS_45 = (5, 6.25, 10, 0.50, 25)
OPUS_4 = (15, 18.75, 30, 1.50, 75)
SONNET_RATES = (3, 3.75, 6, 0.30, 15)
PRICING_MD = {  # the table of pricing.md, row by row: the database agrees today
    "claude-opus-4-5": OPUS_45,
    "claude-opus-4-6": OPUS_45,
    "claude-opus-4-7": OPUS_45,
    "claude-opus-4-8": OPUS_45,
    "claude-opus-4-1": OPUS_4,
    "claude-opus-4-20250514": OPUS_4,
    "claude-sonnet-4-6": SONNET_RATES,
    "claude-sonnet-4-5": SONNET_RATES,
    "claude-sonnet-4": SONNET_RATES,
    "claude-3-7-sonnet": SONNET_RATES,
    "claude-3-5-sonnet": SONNET_RATES,
    "claude-haiku-4-5": (1, 1.25, 2, 0.10, 5),
    "claude-3-5-haiku": (0.80, 1, 1.6, 0.08, 4),
    "claude-3-haiku": (0.25, 0.30, 0.50, 0.03, 1.25),
    "claude-3-opus": OPUS_4,
}


def test_prices_match_pricing_md_today(pricing: RateTable) -> None:
    """Every row of pricing.md's table is the database's price in force now."""
    for model, row in PRICING_MD.items():
        price = pricing.price(model)
        assert price is not None, model
        assert price.rates.token_rates() == row, model
    premium = {f for f, price in pricing.models.items()
               if price.long_context is not None and f.startswith("claude-")}
    assert premium == {"claude-sonnet-4-0", "claude-sonnet-4-5", "claude-haiku-5-5"}


# --- the newest models, at list price -----------------------------------------------

# Rates of genai-prices 0.2.3 (USD per MTok: input, 5m write, 1h write, cache read,
# output) for the request input 1,000 / 5m write 2,000 / 1h write 500 /
# cache read 100,000 / output 3,000:
#   claude-opus-5    5, 6.25, 10, 0.5, 25 → 5,000 + 12,500 + 5,000 + 50,000 + 75,000 = $0.1475
#   claude-sonnet-5  2, 2.5,  4,  0.2, 10 → 2,000 +  5,000 + 2,000 + 20,000 + 30,000 = $0.059
#   claude-opus-5-5  4, 5,    8,  0.2, 20 → 4,000 + 10,000 + 4,000 + 20,000 + 60,000 = $0.098
# (Opus 5.5 reads the cache at 0.05× input, not the usual 0.1×.)
NEWEST = [
    ("claude-opus-5", 0.1475),
    ("claude-sonnet-5", 0.059),
    ("claude-opus-5-5", 0.098),
    ("claude-opus-5-20260301", 0.1475),
    ("us.anthropic.claude-sonnet-5-v1:0", 0.059),
    ("claude-opus-5-5@20261001", 0.098),
]


@pytest.mark.parametrize(("model", "usd"), NEWEST)
def test_newest_models_at_list_price(pricing: RateTable, model: str, usd: float) -> None:
    """Opus 5, Sonnet 5 and Opus 5.5 (any provider spelling) cost their list price."""
    r = req(model, input=1000, cache_write_5m=2000, cache_write_1h=500, cache_read=100_000,
            output=3000)
    assert total(pricing, r) == pytest.approx(usd, rel=1e-12)


def test_newest_models_have_no_long_context_tier(pricing: RateTable) -> None:
    """Opus 5 bills a 300k prompt flat: 300,000 × 0.5 = $0.15."""
    assert total(pricing, req("claude-opus-5", cache_read=300_000)) == pytest.approx(0.15)


def test_every_model_of_the_fixtures_and_generator_is_priced(
    pricing: RateTable, real_tree: Path
) -> None:
    """Every Claude model that bills in the real transcripts and the generator has a price."""
    seen: set[str] = set()
    for path in real_tree.rglob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            message = json.loads(line).get("message")
            if isinstance(message, dict) and "usage" in message:
                seen.add(str(message.get("model")))
    seen.discard(SYNTHETIC)
    assert seen == {"claude-opus-4-6", "claude-haiku-4-5-20251001", "claude-sonnet-4-5-20250929"}
    for model in seen | {OPUS, SONNET, HAIKU}:
        assert pricing.family(model) is not None, model
    assert pricing.family(NOVA) is None  # the generator's deliberately unpriced model
    assert pricing.family(SYNTHETIC) is None


# --- model ids -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_id", "family"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("CLAUDE-SONNET-4-5-20250929", "claude-sonnet-4-5"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5"),
        ("apac.anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet"),
        ("global.anthropic.claude-opus-4-6-v1", "claude-opus-4-6"),
        ("us-gov.anthropic.claude-3-7-sonnet-20250219-v1:0", "claude-3-7-sonnet"),
        ("anthropic.claude-3-haiku-20240307-v1:0", "claude-3-haiku"),
        ("anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),
        ("claude-opus-4-1@20250805", "claude-opus-4-1"),
        ("claude-3-5-sonnet-v2@20241022", "claude-3-5-sonnet"),
        ("claude-opus-4-20250514", "claude-opus-4-0"),
        ("claude-opus-4-0", "claude-opus-4-0"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4-0"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("claude-sonnet-4-5[1m]", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929[1m]", "claude-sonnet-4-5"),
        ("claude-3-opus-20240229", "claude-3-opus"),
        ("claude-3-7-sonnet-20250219", "claude-3-7-sonnet"),
        ("claude-opus-5-2026-03-01", "claude-opus-5"),
        ("claude-4-5-opus", "claude-opus-4-5"),
    ],
)
def test_family_normalisation(pricing: RateTable, model_id: str, family: str) -> None:
    """Provider prefixes, version and date suffixes and case do not change the family."""
    assert pricing.family(model_id) == family


@pytest.mark.parametrize(
    "model_id",
    ["claude-opus-4-9", "claude-sonnet-4-5-preview", NOVA, "<synthetic>", "", "gpt-4o-nova",
     "claude"],
)
def test_unknown_models_are_unpriced(pricing: RateTable, model_id: str) -> None:
    """An id that does not normalise to a family key exactly is unpriced (None), never $0."""
    assert pricing.family(model_id) is None
    assert pricing.cost(req(model_id, input=1000, output=10)) is None
    assert pricing.rates(model_id) is None


def test_unpriced_help_says_how_to_price(pricing: RateTable) -> None:
    """The guidance names the config key to add and the package to update."""
    text = pricing.unpriced_help("claude-nova-9-20261101")
    assert '[pricing.models."claude-nova-9"]' in text
    assert "pip install -U genai-prices" in text
    assert "\n" not in text
    assert "never billed" in pricing.unpriced_help("<synthetic>")


def test_normalise_model_id_strips_repeated_suffixes() -> None:
    """Date, Bedrock version and context suffixes are removed together."""
    assert normalise_model_id("us.anthropic.claude-opus-4-1-20250805-v1:0") == "claude-opus-4-1"
    within = "claude-opus-4-6" + "-v1" * ((MAX_MODEL_ID - 15) // 3)
    assert len(within) <= MAX_MODEL_ID
    assert normalise_model_id(within) == "claude-opus-4-6"


def test_long_ids_are_cut_and_unpriced(pricing: RateTable) -> None:
    """A 10 kB id of repeated ``-v1`` is cut to MAX_MODEL_ID before any work, and unpriced.

    The work per id is bounded by MAX_MODEL_ID, so 10,000 such ids cost what 10,000
    short ones do (the old loop was quadratic: 0.53 s per 10 kB id).
    """
    attack = "claude-opus-4-6" + "-v1" * 3400
    assert len(attack) > 10_000
    assert len(normalise_model_id(attack)) <= MAX_MODEL_ID
    assert pricing.family(attack) is None
    assert attack not in pricing._families  # not remembered either
    assert "characters" in pricing.unpriced_help(attack)


def test_caches_are_bounded(data: genai.PriceData) -> None:
    """10,000 distinct ids and 1,000 distinct label values leave both memos bounded."""
    pricing = RateTable.load(data=data, clock=lambda: NOW)
    for i in range(10_000):
        pricing.family(f"claude-x-{i}-" + "y" * 150)
        pricing.cost(req("claude-opus-4-6", input=1, inference_geo=f"geo-{i % 1000}" * 50))
        pricing.cost(req("claude-opus-4-6", input=1, inference_geo=f"g{i}"))  # short, distinct
    assert len(pricing._families) <= MAX_CACHED_IDS
    assert len(pricing._by_labels) <= MAX_CACHED_IDS
    # Every unknown geo bills at 1x: only Opus 4.6's own classes (2 periods x long or not).
    assert len(pricing._rates) <= 4


def test_family_is_memoised(pricing: RateTable) -> None:
    """The lookup of an id is cached (it is called once per request)."""
    pricing.family("anthropic.claude-opus-4-5-20251101-v1:0")
    fam = pricing._families["anthropic.claude-opus-4-5-20251101-v1:0"]
    assert fam is not None
    assert fam.key == "claude-opus-4-5"


def test_keys_agree_with_genai_prices_matching(data: genai.PriceData) -> None:
    """Every id we price exactly is priced as the model genai-prices' own matcher picks."""
    from genai_prices.types import ClauseEquals, ClauseOr, ClauseStartsWith

    anthropic = next(p for p in providers if p.id == "anthropic")
    spellings = {k for k in data.keys if k.startswith("claude-")}  # OpenAI's: test_codex_prices
    for info in anthropic.models:
        clauses = info.match.or_ if isinstance(info.match, ClauseOr) else [info.match]
        for c in clauses:
            if isinstance(c, ClauseEquals):
                spellings.add(c.equals)
            elif isinstance(c, ClauseStartsWith):
                spellings.add(c.starts_with.rstrip("@-."))
    checked = 0
    for name in spellings:
        ours = data.keys.get(normalise_model_id(name))
        found = anthropic.find_model(name)
        if ours is None or found is None:
            continue  # e.g. "claude-5-0-opus": genai-prices knows only "claude-5.0-opus"
        assert normalise_model_id(found.id) == ours, name
        checked += 1
    assert checked >= len([f for f in data.families if f.startswith("claude-")])


# --- multipliers and fast mode -----------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "factor"),
    [
        ({"inference_geo": "us"}, 1.1),
        ({"inference_geo": "US"}, 1.1),
        ({"inference_geo": "global"}, 1.0),
        ({"inference_geo": ""}, 1.0),
        ({"service_tier": "batch"}, 0.5),
        ({"service_tier": "standard"}, 1.0),
        ({"inference_geo": "us", "service_tier": "batch"}, 0.55),
    ],
)
def test_whole_request_multipliers(pricing: RateTable, fields: dict[str, Any],
                                   factor: float) -> None:
    """US-only inference costs 1.1x, batch 0.5x, and they multiply."""
    base = req(input=5, cache_read=1000, cache_write_5m=100, output=50)
    assert total(pricing, base._replace(**fields)) == pytest.approx(0.00144 * factor)


def test_batch_rule_matches_the_database(data: genai.PriceData) -> None:
    """Where genai-prices has batch prices (from 2026-10-14), they are exactly our ×0.5."""
    anthropic = next(p for p in providers if p.id == "anthropic")
    when = datetime(2026, 11, 1, tzinfo=UTC)
    checked = 0
    for info in anthropic.models:
        if not any(v.when == {"processing": "batch"} for v in info.price_variants or ()):
            continue
        standard = info.get_prices(when)
        batch = info.get_prices(when, {"processing": "batch"})
        usage = Usage(input_tokens=1_000, cache_read_tokens=300, cache_write_tokens=200,
                      cache_write_1h_tokens=50, output_tokens=400)
        assert batch.calc_price(usage)["total_price"] == standard.calc_price(usage)[
            "total_price"] / 2, info.id
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize(
    ("model", "factor"),
    [
        ("claude-opus-4-6", 6.0),  # our rule: the database has no fast price
        ("claude-opus-4-7", 6.0),  # our rule
        ("claude-opus-4-8", 2.0),  # the database: $10 / $50
        ("claude-opus-5", 2.0),  # the database: $10 / $50
        ("claude-opus-5-5", 2.0),  # the database: $8 / $40
        ("claude-opus-4-5", 1.0),  # no fast mode
    ],
)
def test_fast_mode(pricing: RateTable, model: str, factor: float) -> None:
    """``speed: fast`` costs the database's fast price, else our multiplier."""
    r = req(model, input=1000, output=100, cache_read=5000, cache_write_1h=10)
    assert total(pricing, r._replace(speed="fast")) == pytest.approx(total(pricing, r) * factor)


def test_shipped_rules_only_fill_gaps(data: genai.PriceData) -> None:
    """Each rule of exporter/data/pricing.toml supplies what the database lacks."""
    sonnet_4 = data.families["claude-sonnet-4-0"].periods
    assert all(p.long_context is None for p in sonnet_4)
    for family in ("claude-opus-4-6", "claude-opus-4-7"):
        assert all(p.fast is None for p in data.families[family].periods)
    for family in ("claude-opus-4-8", "claude-opus-5"):  # no rule: the data has it
        assert all(p.fast is not None for p in data.families[family].periods)


# --- the same figures as genai-prices' own calculation ------------------------------

PROBES = [  # (input, cache write 5m, cache write 1h, cache read, output)
    (1000, 0, 0, 0, 0),
    (0, 1000, 0, 0, 0),
    (0, 0, 1000, 0, 0),
    (0, 0, 0, 1000, 0),
    (0, 0, 0, 0, 1000),
    (7, 1234, 567, 89_000, 4321),
    (7, 1234, 567, 250_000, 4321),  # above 200k
    (50_000, 0, 0, 60_000, 10),  # above Haiku 5.5's 100k
]


def _days(data: genai.PriceData, family: str) -> list[float]:
    """A day before, at and after each boundary, and one day with none."""
    starts = data.families[family].starts
    return [NOW] if not starts else [t + d for t in starts for d in (-1.0, 0.0, 86_400.0)]


def test_every_family_matches_calc_price(data: genai.PriceData) -> None:
    """Our float table gives genai-prices' Decimal total for every family, period and mix."""
    pricing = RateTable(data.families, data.keys)  # the database alone, no rules
    checked = 0
    for family, fam in data.families.items():
        if not family.startswith("claude-"):
            continue  # OpenAI's families: tests/test_codex_prices.py
        for ts in _days(data, family):
            when = datetime.fromtimestamp(ts, UTC)
            for inp, w5, w1, read, out in PROBES:
                usage = Usage(input_tokens=inp + w5 + w1 + read, cache_read_tokens=read,
                              cache_write_tokens=w5 + w1, cache_write_1h_tokens=w1,
                              output_tokens=out)
                for speed in ("", "fast"):
                    want = calc_price(usage, fam.name, provider_id="anthropic",
                                      genai_request_timestamp=when,
                                      price_context={"speed": speed} if speed else None)
                    r = req(fam.name, ts=ts, input=inp, cache_write_5m=w5, cache_write_1h=w1,
                            cache_read=read, output=out, speed=speed)
                    got = pricing.cost(r)
                    assert got is not None
                    assert sum(got.values()) == pytest.approx(float(want.total_price),
                                                              rel=1e-12, abs=1e-15), (family, ts)
                    checked += 1
    assert checked > 400


def test_web_search_price(pricing: RateTable) -> None:
    """A web search costs $10 per thousand (genai-prices), untouched by the token multipliers."""
    rates = pricing.rates("claude-opus-4-6", inference_geo="us")
    assert rates is not None
    assert rates.web_search_usd == pytest.approx(0.01)
    assert rates.cost(0, 0, 0, 0, 0, web_search=3) == pytest.approx(
        {"input": 0, "output": 0, "cache_read": 0, "cache_write_5m": 0, "cache_write_1h": 0,
         "web_search": 0.03})
    want = calc_price(Usage(web_searches=3), "claude-opus-4-6", provider_id="anthropic")
    assert float(want.total_price) == pytest.approx(0.03)
    assert pricing.rates("claude-3-haiku").web_search_usd == 0.0  # type: ignore[union-attr]


# --- where the data comes from ----------------------------------------------------


def test_describe_names_the_data(pricing: RateTable) -> None:
    """describe() gives package, installed version, data date and origin."""
    info = pricing.describe()
    assert info["package"] == "genai-prices"
    assert info["version"] == metadata.version("genai-prices")
    assert datetime.strptime(info["data_date"], "%Y-%m-%d")
    assert info["origin"] == "bundled"
    assert info["overrides"] == "none"
    assert RateTable.load({"aliases": {"claude-z-1": "claude-opus-4-6"}},
                        data=pricing_data()).describe()["overrides"] == "config"


def pricing_data() -> genai.PriceData:
    """The table from the installed data (no cache)."""
    return genai.bundled(None)


def test_cache_round_trips_and_rebuilds(tmp_path: Path, data: genai.PriceData) -> None:
    """The cached table equals a fresh build; a corrupt or stale cache is rebuilt."""
    first = genai.bundled(tmp_path)
    cache = genai.cache_file(tmp_path)
    assert cache is not None and cache.is_file()
    again = genai.bundled(tmp_path)
    assert (dict(again.families), dict(again.keys), dict(again.meta)) == (
        dict(data.families), dict(data.keys), dict(data.meta))
    assert first.families == again.families
    cache.write_text("{not json")
    assert genai.bundled(tmp_path).families == data.families
    raw = json.loads(cache.read_text())
    raw["stamp"] = "other"
    raw["families"] = {}
    cache.write_text(json.dumps(raw))
    assert genai.bundled(tmp_path).families == data.families  # stale: rebuilt


def test_cache_keeps_one_file_per_key_and_only_the_newest(tmp_path: Path,
                                                          data: genai.PriceData) -> None:
    """Another install's table (another key) survives ours; old keys beyond the bound go."""
    other = genai.cache_file(tmp_path, "another install")
    assert other is not None and other != genai.cache_file(tmp_path)
    other.write_text("{}")
    genai.bundled(tmp_path)
    ours = genai.cache_file(tmp_path)
    assert ours is not None and ours.is_file() and other.is_file()
    for n in range(genai.CACHE_KEEP + 3):
        stale = genai.cache_file(tmp_path, f"release {n}")
        assert stale is not None
        stale.write_text("{}")
        os.utime(stale, ns=(n, n))  # older than ours
    ours.unlink()
    genai.bundled(tmp_path)  # rebuilds ours, then prunes
    kept = sorted(tmp_path.glob(genai.CACHE_PREFIX + "*.json"))
    assert len(kept) == genai.CACHE_KEEP and ours in kept
    assert genai.bundled(tmp_path).families == data.families


def test_cached_start_does_not_import_the_database(tmp_path: Path) -> None:
    """With a warm cache, loading prices never imports genai-prices (its import is ~0.2 s)."""
    code = (
        "import sys; from pathlib import Path; from exporter.projections.pricing import RateTable;"
        f"p = RateTable.load(cache_dir=Path({str(tmp_path)!r}));"
        "print(p.family('claude-opus-5'), 'genai_prices' in sys.modules)"
    )
    run = [sys.executable, "-c", code]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run(run, check=True, env=env, capture_output=True, timeout=120)
    warm = subprocess.run(run, check=True, env=env, capture_output=True, text=True, timeout=120)
    assert warm.stdout.split() == ["claude-opus-5", "False"]


# --- --update-prices ---------------------------------------------------------------


def test_update_without_network_fails_clearly() -> None:
    """A fetch that cannot connect raises PriceUpdateError naming the URL."""
    url = f"http://127.0.0.1:{free_port()}/data.json"
    with pytest.raises(PriceUpdateError, match=f"could not fetch prices from {url}"):
        fetch_prices(url, timeout=5.0)


@pytest.fixture()
def price_server() -> Iterator[str]:
    """A loopback HTTP server answering a tiny genai-prices payload."""
    payload = json.dumps([{
        "id": "anthropic", "name": "Anthropic", "api_pattern": "x",
        "models": [{"id": "claude-opus-9", "match": {"equals": "claude-opus-9"},
                    "prices": {"input_mtok": 7, "output_mtok": 35, "cache_read_mtok": 0.7,
                               "cache_write_mtok": 8.75, "cache_write_1h_mtok": 14}}],
    }]).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/data.json"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def test_update_uses_fetched_data(price_server: str) -> None:
    """Fetched data prices its models and says it was fetched."""
    pricing = RateTable.load(data=fetch_prices(price_server), clock=lambda: NOW)
    assert total(pricing, req("claude-opus-9", input=1_000_000, output=1000)) == pytest.approx(
        7.035)
    assert pricing.describe()["origin"].startswith("fetched ")
    assert pricing.family("claude-opus-4-6") is None  # only what was fetched


# --- overrides -----------------------------------------------------------------------


def test_override_adds_a_model(data: genai.PriceData) -> None:
    """A model missing from the database can be priced from the config."""
    rates = dict(zip(RATE_NAMES, (2.0, 2.5, 4.0, 0.2, 10.0), strict=True))
    pricing = RateTable.load({"models": {"claude-nova-9": rates}}, data=data)
    assert total(pricing, req(NOVA, input=1_000_000)) == pytest.approx(2.0)


def test_override_changes_one_price_and_keeps_the_rest(data: genai.PriceData) -> None:
    """Overriding one rate of a known family leaves its other rates as shipped."""
    pricing = RateTable.load({"models": {"claude-haiku-4-5": {"output": 6.0}}}, data=data)
    price = pricing.price("claude-haiku-4-5")
    assert price is not None
    assert (price.rates.output, price.rates.input) == (6.0, 1.0)


def test_override_wins_over_the_database(data: genai.PriceData) -> None:
    """Config beats the database's rates, its fast price and its dated tier."""
    pricing = RateTable.load(
        {"models": {
            "claude-opus-5": {"input": 7.0},
            "claude-opus-4-8": {"fast_multiplier": 3.0},
            "claude-opus-4-6": {"long_context": {"output": 40.0}},
            "claude-opus-4": {"output": 70.0},  # an old family name still reaches it
        }},
        data=data, clock=lambda: NOW,
    )
    assert total(pricing, req("claude-opus-5", input=1_000_000)) == pytest.approx(7.0)
    fast = req("claude-opus-4-8", input=1_000_000, speed="fast")
    assert total(pricing, fast) == pytest.approx(15.0)
    early = req("claude-opus-4-6", ts=MARCH_13 - 1, cache_read=300_000, output=1_000_000)
    assert total(pricing, early) == pytest.approx(0.3 + 40.0)
    assert total(pricing, req("claude-opus-4-20250514", output=1_000_000)) == pytest.approx(70)


def test_override_changes_multipliers(data: genai.PriceData) -> None:
    """Geo, tier and fast multipliers are configurable."""
    pricing = RateTable.load(
        {
            "multipliers": {"inference_geo": {"us": 1.0}, "service_tier": {"priority": 2.0}},
            "models": {"claude-opus-4-6": {"fast_multiplier": 3}},
        },
        data=data,
    )
    r = req("claude-opus-4-6", input=1_000_000)
    assert total(pricing, r._replace(inference_geo="us")) == pytest.approx(5.0)
    assert total(pricing, r._replace(service_tier="priority")) == pytest.approx(10.0)
    assert total(pricing, r._replace(speed="fast")) == pytest.approx(15.0)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"models": {"claude-x": {"input": "abc"}}}, "models.claude-x.input"),
        ({"models": {"claude-haiku-4-5": {"output": -1}}}, "models.claude-haiku-4-5.output"),
        ({"models": {"claude-haiku-4-5": {"output": True}}}, "models.claude-haiku-4-5.output"),
        ({"models": {"claude-x": {"input": 1.0}}}, "models.claude-x.cache_write_5m"),
        ({"models": {"claude-haiku-4-5": {"ouput": 1.0}}}, "models.claude-haiku-4-5.ouput"),
        ({"models": {"claude-x-20250101": {}}}, "models.claude-x-20250101"),
        ({"models": {"claude-haiku-4-5": 3}}, "models.claude-haiku-4-5"),
        ({"models": {"claude-opus-5": {"long_context": {"input": 1}}}},
         "models.claude-opus-5.long_context.cache_write_5m"),
        ({"modles": {}}, "modles"),
        ({"multipliers": {"inference_geo": {"us": "x"}}}, "multipliers.inference_geo.us"),
        ({"multipliers": {"speed": {"fast": 2}}}, "multipliers.speed"),
        ({"aliases": {"claude-y": "claude-nope"}}, "aliases.claude-y"),
    ],
)
def test_bad_override_names_the_key(
    data: genai.PriceData, overrides: dict[str, Any], named: str
) -> None:
    """An invalid override raises ValueError whose message names the offending key."""
    with pytest.raises(ValueError, match=f"'{named}'"):
        RateTable.load(overrides, data=data)


def test_alias_prices_an_id(data: genai.PriceData) -> None:
    """An alias in the config prices another id as a known family."""
    pricing = RateTable.load({"aliases": {"claude-internal-7": "claude-opus-4-6"}}, data=data)
    assert pricing.family("claude-internal-7-20260101") == "claude-opus-4-6"


def test_database_rates_are_decimal_exact(data: genai.PriceData) -> None:
    """The float rates are the nearest floats of the database's Decimals (no arithmetic drift)."""
    rates = data.families["claude-opus-5-5"].periods[0].rates
    assert Decimal(repr(rates.cache_read)) == Decimal("0.2")
    assert Decimal(repr(rates.cache_write_5m)) == Decimal("5")
