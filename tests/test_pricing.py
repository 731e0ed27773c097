"""Tests of the price table, model id normalisation and per-request cost."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.projections.pricing import RATE_NAMES, Pricing, normalise_model_id
from exporter.records import Request
from tests.conftest import request


def req(model: str = "claude-sonnet-4-5", **fields: Any) -> Request:
    """Build a request with zero tokens unless given."""
    return request(model=model, **fields)


@pytest.fixture(scope="module")
def pricing() -> Pricing:
    """Return the shipped table, loaded once."""
    return Pricing.load()


def total(pricing: Pricing, r: Request) -> float:
    """Return the request's total cost, failing if it is unpriced."""
    cost = pricing.cost(r)
    assert cost is not None
    return sum(cost.values())


def test_worked_example_small(pricing: Pricing) -> None:
    """The first worked request of pricing.md costs $0.00144."""
    r = req(input=5, cache_read=1000, cache_write_5m=100, output=50)
    assert total(pricing, r) == pytest.approx(0.00144, rel=1e-12)


def test_worked_example_long_context(pricing: Pricing) -> None:
    """The same request with 250,000 cache-read tokens bills everything at premium: $0.151905."""
    r = req(input=5, cache_read=250_000, cache_write_5m=100, output=50)
    assert total(pricing, r) == pytest.approx(0.151905, rel=1e-12)


def test_cost_is_split_by_token_type(pricing: Pricing) -> None:
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


def test_premium_boundary_is_strictly_above_200k(pricing: Pricing) -> None:
    """A prompt of exactly 200,000 tokens is billed normally; 200,001 at premium."""
    assert total(pricing, req(cache_read=200_000)) == pytest.approx(200_000 * 0.30e-6)
    assert total(pricing, req(cache_read=200_001)) == pytest.approx(200_001 * 0.60e-6)


def test_premium_threshold_counts_every_prompt_field(pricing: Pricing) -> None:
    """Input, cache read and both cache writes add up to the prompt that crosses 200k."""
    r = req(input=1, cache_read=199_998, cache_write_5m=1, cache_write_1h=1, output=10)
    expected = (1 * 6 + 199_998 * 0.6 + 1 * 7.5 + 1 * 12 + 10 * 22.5) * 1e-6
    assert total(pricing, r) == pytest.approx(expected)


def test_output_alone_never_triggers_premium(pricing: Pricing) -> None:
    """Output tokens are not prompt: a huge output on a small prompt stays at base rates."""
    assert total(pricing, req(output=300_000)) == pytest.approx(300_000 * 15e-6)


@pytest.mark.parametrize("model", ["claude-sonnet-4", "claude-sonnet-4-20250514"])
def test_sonnet_4_has_the_premium(pricing: Pricing, model: str) -> None:
    """Sonnet 4 shares Sonnet 4.5's long-context premium."""
    assert total(pricing, req(model, cache_read=300_000)) == pytest.approx(300_000 * 0.6e-6)


@pytest.mark.parametrize(
    ("model", "read_rate"), [("claude-sonnet-4-6", 0.3), ("claude-opus-4-6", 0.5)]
)
def test_models_without_premium(pricing: Pricing, model: str, read_rate: float) -> None:
    """Sonnet 4.6 and Opus 4.6 bill long prompts at their normal rates."""
    assert total(pricing, req(model, cache_read=500_000)) == pytest.approx(
        500_000 * read_rate * 1e-6
    )


@pytest.mark.parametrize(
    ("model_id", "family"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("CLAUDE-SONNET-4-5-20250929", "claude-sonnet-4-5"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5"),
        ("apac.anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet"),
        ("global.anthropic.claude-opus-4-6-v1", "claude-opus-4-6"),
        ("anthropic.claude-3-haiku-20240307-v1:0", "claude-3-haiku"),
        ("anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),
        ("claude-opus-4-1@20250805", "claude-opus-4-1"),
        ("claude-3-5-sonnet-v2@20241022", "claude-3-5-sonnet"),
        ("claude-opus-4-20250514", "claude-opus-4"),
        ("claude-opus-4-0", "claude-opus-4"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("claude-sonnet-4-5[1m]", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929[1m]", "claude-sonnet-4-5"),
        ("claude-3-opus-20240229", "claude-3-opus"),
        ("claude-3-7-sonnet-20250219", "claude-3-7-sonnet"),
    ],
)
def test_family_normalisation(pricing: Pricing, model_id: str, family: str) -> None:
    """Provider prefixes, version and date suffixes and case do not change the family."""
    assert pricing.family(model_id) == family


@pytest.mark.parametrize(
    "model_id",
    [
        "claude-opus-4-9",
        "claude-opus-5-5",
        "claude-sonnet-4-5-preview",
        "<synthetic>",
        "",
        "gpt-4o",
    ],
)
def test_unknown_models_are_unpriced(pricing: Pricing, model_id: str) -> None:
    """An id that does not normalise to a family key exactly is unpriced, never guessed."""
    assert pricing.family(model_id) is None
    assert pricing.cost(req(model_id, input=1000, output=10)) is None


def test_normalise_model_id_strips_repeated_suffixes() -> None:
    """Date, Bedrock version and context suffixes are removed together."""
    assert normalise_model_id("us.anthropic.claude-opus-4-1-20250805-v1:0") == "claude-opus-4-1"


def test_family_is_memoised(pricing: Pricing) -> None:
    """The lookup of an id is cached (it is called once per request)."""
    pricing.family("anthropic.claude-opus-4-5-20251101-v1:0")
    assert pricing._families["anthropic.claude-opus-4-5-20251101-v1:0"] == "claude-opus-4-5"


@pytest.mark.parametrize(
    ("fields", "factor"),
    [
        ({"inference_geo": "us"}, 1.1),
        ({"inference_geo": "global"}, 1.0),
        ({"inference_geo": ""}, 1.0),
        ({"service_tier": "batch"}, 0.5),
        ({"service_tier": "standard"}, 1.0),
        ({"inference_geo": "us", "service_tier": "batch"}, 0.55),
    ],
)
def test_whole_request_multipliers(pricing: Pricing, fields: dict[str, Any], factor: float) -> None:
    """US-only inference costs 1.1x, batch 0.5x, and they multiply."""
    base = req(input=5, cache_read=1000, cache_write_5m=100, output=50)
    assert total(pricing, base._replace(**fields)) == pytest.approx(0.00144 * factor)


@pytest.mark.parametrize(
    ("model", "factor"),
    [
        ("claude-opus-4-6", 6.0),
        ("claude-opus-4-7", 6.0),
        ("claude-opus-4-8", 2.0),
        ("claude-opus-4-5", 1.0),
    ],
)
def test_fast_mode_multiplier(pricing: Pricing, model: str, factor: float) -> None:
    """``speed: fast`` multiplies the request by the family's fast multiplier."""
    r = req(model, input=1000, output=100)
    assert total(pricing, r._replace(speed="fast")) == pytest.approx(total(pricing, r) * factor)


OPUS_45 = (5, 6.25, 10, 0.50, 25)
OPUS_4 = (15, 18.75, 30, 1.50, 75)
SONNET = (3, 3.75, 6, 0.30, 15)
PRICING_MD = {  # the table of pricing.md, row by row
    "claude-opus-4-5": OPUS_45,
    "claude-opus-4-6": OPUS_45,
    "claude-opus-4-7": OPUS_45,
    "claude-opus-4-8": OPUS_45,
    "claude-opus-4-1": OPUS_4,
    "claude-opus-4": OPUS_4,
    "claude-sonnet-4-6": SONNET,
    "claude-sonnet-4-5": SONNET,
    "claude-sonnet-4": SONNET,
    "claude-3-7-sonnet": SONNET,
    "claude-3-5-sonnet": SONNET,
    "claude-haiku-4-5": (1, 1.25, 2, 0.10, 5),
    "claude-3-5-haiku": (0.80, 1, 1.6, 0.08, 4),
    "claude-3-haiku": (0.25, 0.30, 0.50, 0.03, 1.25),
    "claude-3-opus": OPUS_4,
}


def test_shipped_table_matches_pricing_md(pricing: Pricing) -> None:
    """The shipped data holds exactly the families and rates of pricing.md."""
    shipped = {
        family: tuple(getattr(price.rates, name) for name in RATE_NAMES)
        for family, price in pricing.models.items()
    }
    assert shipped == PRICING_MD
    premium = {f for f, price in pricing.models.items() if price.long_context is not None}
    assert premium == {"claude-sonnet-4", "claude-sonnet-4-5"}


def test_override_adds_a_model() -> None:
    """A model missing from the table can be priced from the config."""
    rates = dict(zip(RATE_NAMES, (2.0, 2.5, 4.0, 0.2, 10.0), strict=True))
    pricing = Pricing.load({"models": {"claude-opus-5-5": rates}})
    assert total(pricing, req("claude-opus-5-5-20260101", input=1_000_000)) == pytest.approx(2.0)


def test_override_changes_one_price_and_keeps_the_rest() -> None:
    """Overriding one rate of a known family leaves its other rates as shipped."""
    pricing = Pricing.load({"models": {"claude-haiku-4-5": {"output": 6.0}}})
    price = pricing.price("claude-haiku-4-5")
    assert price is not None
    assert (price.rates.output, price.rates.input) == (6.0, 1.0)


def test_override_changes_multipliers() -> None:
    """Geo, tier and fast multipliers are configurable."""
    pricing = Pricing.load(
        {
            "multipliers": {"inference_geo": {"us": 1.0}, "service_tier": {"priority": 2.0}},
            "models": {"claude-opus-4-6": {"fast_multiplier": 3}},
        }
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
        ({"modles": {}}, "modles"),
        ({"multipliers": {"inference_geo": {"us": "x"}}}, "multipliers.inference_geo.us"),
        ({"multipliers": {"speed": {"fast": 2}}}, "multipliers.speed"),
        ({"aliases": {"claude-y": "claude-nope"}}, "aliases.claude-y"),
    ],
)
def test_bad_override_names_the_key(overrides: dict[str, Any], named: str) -> None:
    """An invalid override raises ValueError whose message names the offending key."""
    with pytest.raises(ValueError, match=f"'{named}'"):
        Pricing.load(overrides)
