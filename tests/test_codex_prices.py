"""Codex turns priced from genai-prices' OpenAI models: rates, tiers, fallback, real fixture."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage, calc_price
from genai_prices.data import providers

from exporter.cli.commands import main
from exporter.ingest import codex
from exporter.projections.class_prices import ClassPrices
from exporter.projections.facts import Facts
from exporter.projections.figures import summary
from exporter.projections.prices import genai_table as genai
from exporter.projections.pricing import RateTable
from exporter.records import Request
from tests.support import report_ledgers
from tests.support.paths import ROOT
from tests.support.records import request

FIXTURE = ROOT / "tests" / "fixtures" / "codex_real"
OPENAI = next(p for p in providers if p.id == "openai")
JULY = datetime(2026, 7, 10, tzinfo=UTC)  # the fixture's weeks
NOVEMBER = datetime(2026, 11, 1, tzinfo=UTC)  # after every dated OpenAI price in the data
# The ids Codex CLI runs (its model picker and `-m`), as the logs' turn_context spells them.
CODEX_MODELS = [
    "gpt-5", "gpt-5-codex", "gpt-5.1", "gpt-5.1-codex", "gpt-5.1-codex-max",
    "gpt-5.1-codex-mini", "gpt-5.2", "gpt-5.2-codex", "gpt-5.3-codex", "gpt-5.4",
    "gpt-5.4-mini", "gpt-5.5", "gpt-5.6", "gpt-5.6-sol", "gpt-5.6-terra", "gpt-5.6-luna",
]
PROBES = [  # (uncached input, cache read, output): small, mostly cached, above 272k
    (1000, 0, 0), (0, 1000, 0), (0, 0, 1000),
    (3_210, 96_000, 4_321),
    (12_000, 270_000, 2_000),  # 282k of prompt: above the 272k tier
]


@pytest.fixture(scope="module")
def pricing() -> RateTable:
    """The shipped prices (database and our rules), built without the on-disk cache."""
    return RateTable.load(data=genai.bundled(None))


def turn(model: str, when: datetime, inp: int, read: int, out: int, *,
         tier: str = "") -> Request:
    """A Codex turn as the parser builds it: uncached input, cache read, output, no writes."""
    return request(model=model, ts=when.timestamp(), input=inp, cache_read=read, output=out,
                   service_tier=tier)


def genai_total(model: str, when: datetime, inp: int, read: int, out: int, *,
                tier: str = "") -> Decimal:
    """genai-prices' own price of that turn (its input counts the cached part too)."""
    usage = Usage(input_tokens=inp + read, cache_read_tokens=read, output_tokens=out)
    return calc_price(usage, model, provider_id="openai", genai_request_timestamp=when,
                      price_context={"service_tier": tier} if tier else None).total_price


def total(pricing: RateTable, r: Request) -> float:
    """The request's cost in USD, failing if it is unpriced."""
    cost = pricing.cost(r)
    assert cost is not None, r.model
    return sum(cost.values())


@pytest.mark.parametrize("model", CODEX_MODELS)
@pytest.mark.parametrize("when", [JULY, NOVEMBER], ids=["july", "november"])
def test_codex_models_cost_what_genai_prices_says(pricing: RateTable, model: str,
                                                  when: datetime) -> None:
    """Every Codex model, each token type and the 272k tier: genai-prices' own total."""
    for inp, read, out in PROBES:
        want = genai_total(model, when, inp, read, out)
        got = total(pricing, turn(model, when, inp, read, out))
        assert got == pytest.approx(float(want), rel=1e-12, abs=1e-15), (model, inp, read, out)


def test_every_gpt_5_model_of_the_data_is_priced(pricing: RateTable) -> None:
    """No gpt-5.x model genai-prices has is left out of our table (none skipped)."""
    names = [m.id for m in OPENAI.models if m.id.startswith("gpt-5")]
    assert {"gpt-5", "gpt-5.1", "gpt-5.2", "gpt-5.3-codex", "gpt-5.4", "gpt-5.5"} <= set(names)
    assert [n for n in names if pricing.family(n) is None] == []


def _spellings(info: Any) -> Iterator[str]:
    """The ids a model's match rules spell out in full (``equals``, ``starts_with``)."""
    from genai_prices.types import ClauseEquals, ClauseOr, ClauseStartsWith

    todo = [info.match]
    while todo:
        clause = todo.pop()
        if isinstance(clause, ClauseOr):
            todo.extend(clause.or_)
        elif isinstance(clause, ClauseEquals):
            yield clause.equals
        elif isinstance(clause, ClauseStartsWith):
            yield clause.starts_with.rstrip("@-.")


def test_every_openai_id_is_priced_as_genai_prices_matches_it(pricing: RateTable) -> None:
    """Each id an OpenAI model names is priced as the model genai-prices' own matcher picks.

    Dated snapshots included: gpt-4o-2024-05-13 has its own price, not gpt-4o's.
    """
    checked = 0
    for name in sorted({n for info in OPENAI.models for n in _spellings(info)}):
        found = OPENAI.find_model(name)
        key = pricing.family(name)
        if key is None or found is None:
            continue  # an audio or image model: no token prices we could hold
        assert pricing.families[key].name == found.id, name
        checked += 1
    assert checked > 150
    assert pricing.family("gpt-4o-2024-05-13") != pricing.family("gpt-4o-2024-08-06")


def _openai_families(data: genai.PriceData) -> Iterator[tuple[str, str]]:
    """(family key, genai-prices' id) of every OpenAI family in the table."""
    ids = {m.id for m in OPENAI.models}
    for key, fam in data.families.items():
        if fam.name in ids and not key.startswith("claude-"):
            yield key, fam.name


@pytest.mark.parametrize("tier", ["", "default", "priority", "fast", "flex"])
def test_every_openai_family_and_tier_matches_calc_price(tier: str) -> None:
    """Every OpenAI family, period and service tier: our float rates give genai-prices' total."""
    data = genai.bundled(None)
    table = RateTable(data.families, data.keys)  # the database alone, no rules
    checked = 0
    for key, name in _openai_families(data):
        days = [JULY.timestamp(), NOVEMBER.timestamp()]
        days += [s + d for s in data.families[key].starts for d in (-1.0, 0.0)]
        for ts in days:
            when = datetime.fromtimestamp(ts, UTC)
            for inp, read, out in PROBES:
                want = genai_total(name, when, inp, read, out, tier=tier)
                got = total(table, turn(name, when, inp, read, out, tier=tier))
                assert got == pytest.approx(float(want), rel=1e-12, abs=1e-15), (key, ts, tier)
                checked += 1
    assert checked > 500


def test_a_hand_computed_turn() -> None:
    """gpt-5.5 in July 2026 ($5 input, $0.50 cached input, $30 output per MTok), by hand."""
    table = RateTable.load(data=genai.bundled(None))
    # The fixture's first day (ccusage's 2026-06-30 row): 47,599 uncached input, 104,320
    # cached input, 7,024 output (2,498 of it reasoning, already inside the output).
    # 47,599 x 5 + 104,320 x 0.5 + 7,024 x 30 = 237,995 + 52,160 + 210,720 micro-dollars.
    cost = table.cost(turn("gpt-5.5", JULY, 47_599, 104_320, 7_024))
    assert cost == pytest.approx({"input": 0.237995, "cache_read": 0.05216, "output": 0.21072,
                                  "cache_write_5m": 0.0, "cache_write_1h": 0.0})
    # Above 272k of prompt every token bills at the tier: input x2, cached x2, output x1.5.
    # 12,000 x 10 + 270,000 x 1 + 2,000 x 45 = 120,000 + 270,000 + 90,000 micro-dollars.
    assert total(table, turn("gpt-5.5", JULY, 12_000, 270_000, 2_000)) == pytest.approx(0.48)


def test_priority_tier_from_the_date_genai_prices_gives_it(pricing: RateTable) -> None:
    """``service_tier`` priority/fast: its own rates where the data has them, else standard."""
    small = (10_000, 50_000, 1_000)
    standard = total(pricing, turn("gpt-5.4", NOVEMBER, *small))
    # $5 / $0.50 / $30 per MTok (twice standard) from 2026-10-12, flat above 272k.
    assert total(pricing, turn("gpt-5.4", NOVEMBER, *small, tier="priority")) == pytest.approx(
        2 * standard)
    assert total(pricing, turn("gpt-5.4", NOVEMBER, *small, tier="fast")) == pytest.approx(
        2 * standard)
    assert total(pricing, turn("gpt-5.4", NOVEMBER, *small, tier="Priority")) == pytest.approx(
        2 * standard)
    july = total(pricing, turn("gpt-5.4", JULY, *small))
    assert total(pricing, turn("gpt-5.4", JULY, *small, tier="priority")) == pytest.approx(july)
    assert total(pricing, turn("gpt-5.4", NOVEMBER, *small, tier="default")) == standard


def test_sums_price_tiers_and_the_272k_tier_as_requests_do(pricing: RateTable,
                                                          tmp_path: Path) -> None:
    """A report's sums (slots and raw requests) price each tier and size as each request."""
    prices = ClassPrices.of(pricing)
    assert 272_000 in prices.thresholds
    shapes = [(5_000, 60_000, 800), (9_000, 280_000, 1_200)]  # under and over 272k
    requests = [
        request(f"k{i}", when.timestamp() + 60.0 * i, session=f"s{i % 3}", model=model,
                input=inp, cache_read=read, output=out, service_tier=tier)
        for i, (when, model, tier, (inp, read, out)) in enumerate(
            (w, m, t, sh) for w in (JULY, NOVEMBER)
            for m in ("gpt-5.4", "gpt-5.5", "claude-opus-4-6")
            for t in ("", "default", "priority", "flex") for sh in shapes)]

    def run(sel: Any) -> dict[str, Any]:
        return summary(sel, prices, kv_bytes_per_token={}, upload_bytes_per_token=4.0,
                       lines={}, rejected={}).to_json()

    slotted = report_ledgers.select(report_ledgers.slotted(requests, prices.thresholds))
    assert Facts(slotted, prices).slotted  # the slot sums answer, not the requests
    from_slots = run(slotted)
    with report_ledgers.real(requests, tmp_path) as ledger:
        assert run(report_ledgers.select(ledger)) == from_slots
    want = sum(total(pricing, r) for r in requests)
    assert from_slots["totals"]["cost_usd"] == pytest.approx(want, abs=1e-6)
    assert from_slots["totals"]["unpriced_tokens"] == 0


def test_claude_prices_are_what_the_anthropic_data_alone_gives() -> None:
    """Adding OpenAI's models leaves every Claude family and id exactly as before."""
    both = genai.bundled(None)
    alone = genai.from_providers([p for p in providers if p.id == "anthropic"],
                                 origin="bundled")
    claude = {k: v for k, v in both.families.items() if k.startswith("claude-")}
    assert claude == dict(alone.families)
    assert {k: v for k, v in both.keys.items() if v.startswith("claude-")} == dict(alone.keys)
    assert both.meta["data_date"] == alone.meta["data_date"]


def test_the_fallback_model_prices_as_gpt_5(pricing: RateTable) -> None:
    """A turn without model metadata (``codex.FALLBACK_MODEL``) is priced as gpt-5."""
    assert pricing.family(codex.FALLBACK_MODEL) == pricing.family("gpt-5") == "gpt-5"
    shape = (3_210, 96_000, 4_321)
    assert total(pricing, turn(codex.FALLBACK_MODEL, JULY, *shape)) == pytest.approx(
        float(genai_total("gpt-5", JULY, *shape)), rel=1e-12)


@pytest.mark.parametrize("model", ["gpt-9-nova", "gpt-5.6-nova", "gpt-5 (guessed)", "o9"])
def test_unknown_openai_models_stay_unpriced(pricing: RateTable, model: str) -> None:
    """An id genai-prices does not know is unpriced (None), never $0."""
    assert pricing.family(model) is None
    assert pricing.cost(turn(model, JULY, 1_000, 0, 10)) is None


# --- the real fixture ----------------------------------------------------------------


def _report(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    """``report --json`` in-process; its JSON."""
    assert main(["report", "--json", "--timezone", "UTC", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def micro(usd: Decimal) -> float:
    """USD rounded half up to the micro-dollar, as ``report`` rounds its exact sums."""
    return float(usd.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP))


def _fixture_turns() -> dict[str, dict[str, Any]]:
    """Each distinct usage record of the fixture once (its whole ``info``), model and time.

    An independent reading (not the parser): a fork's copies of its parent's
    records are the same ``info`` object, counted once at the earliest time.
    """
    turns: dict[str, dict[str, Any]] = {}
    for path in sorted(FIXTURE.rglob("rollout-*.jsonl")):
        model = ""
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            payload = rec.get("payload") or {}
            if rec.get("type") == "turn_context" and payload.get("model"):
                model = payload["model"]
            info = payload.get("info") if payload.get("type") == "token_count" else None
            if not info or not info.get("last_token_usage"):
                continue
            key = json.dumps(info, sort_keys=True)
            when = datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00"))
            if key not in turns or when < turns[key]["when"]:
                turns[key] = {"when": when, "model": model, "usage": info["last_token_usage"]}
    return turns


def test_real_fixture_cost_by_model_is_genai_prices_per_turn(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The fixture's cost per model = genai-prices' price of each turn, at its date and size."""
    want: dict[str, Decimal] = defaultdict(Decimal)
    tokens: dict[str, int] = defaultdict(int)
    for t in _fixture_turns().values():
        u = t["usage"]
        read = u.get("cached_input_tokens") or 0
        want[t["model"]] += genai_total(t["model"], t["when"], u["input_tokens"] - read, read,
                                        u["output_tokens"])
        tokens[t["model"]] += u["input_tokens"] + u["output_tokens"]
    got = _report(["--data-dir", str(FIXTURE), "--state-dir", str(tmp_path / "s")], capsys)
    assert sorted(got["by_model"]) == sorted(want) == [
        "gpt-5.5", "gpt-5.6-luna", "gpt-5.6-sol", "gpt-5.6-terra"]
    for model, row in got["by_model"].items():
        assert row["unpriced_tokens"] == 0, model
        assert row["input_tokens"] + row["cache_read_tokens"] + row["output_tokens"] == tokens[
            model]
        assert row["cost_usd"] == micro(want[model]), model
    assert got["totals"]["unpriced_tokens"] == 0
    assert got["totals"]["cost_usd"] == micro(sum(want.values(), Decimal(0)))


def _list_rates(model: str, when: datetime) -> tuple[Decimal, Decimal, Decimal]:
    """genai-prices' rates below any tier (input, cached input, output; USD per MTok)."""
    info = OPENAI.find_model(model)
    assert info is not None, model
    price = info.get_prices(when)
    fields = (price.input_mtok, price.cache_read_mtok, price.output_mtok)
    found = tuple(getattr(v, "base", v) for v in fields)
    assert all(isinstance(v, Decimal) for v in found), model
    return found  # type: ignore[return-value]


def test_ccusage_cost_is_the_newest_rates_on_its_tokens() -> None:
    """The cost ccusage gives (LiteLLM's undated table) = today's genai-prices rates on its tokens.

    Our own cost differs by design: genai-prices dates the gpt-5.6 price cuts
    (luna and terra from 2026-07-30, sol from 2026-08-21), after the fixture's
    turns, which we price at the rates of their own dates.
    """
    peer = json.loads((FIXTURE / "ccusage_codex_daily.json").read_text())
    for day in peer["daily"]:
        cost = Decimal(0)
        for model, m in day["models"].items():
            inp, read, out = _list_rates(model, NOVEMBER)
            cost += (m["inputTokens"] * inp + m["cacheReadTokens"] * read
                     + m["outputTokens"] * out) / 1_000_000
        assert float(cost) == pytest.approx(day["costUSD"], rel=1e-9), day["date"]
