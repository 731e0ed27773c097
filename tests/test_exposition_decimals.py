"""Dollar figures in /metrics print as decimals, not binary float noise (issue 35, item 10).

Counters add USD in multiples of 2**-30 so that totals never depend on the
order of their increments; /metrics shows them rounded to the nanodollar
rounded up (``0.04565``, not ``0.045649999752640724``), so a counter never
shows less than the exact sum shown before (an earlier version, backfill).
A real ``serve`` is scraped over HTTP too.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

from prometheus_client import generate_latest

from exporter.projections.counting import exact
from exporter.projections.instruments import decimal_usd, exposed
from exporter.records import Source
from exporter.synth import GenOptions, generate
from tests.support.process import Serve
from tests.support.projection import T0, loaded, req
from tests.support.wait import poll

HISTORY = [req("a", T0), req("c", T0 + 400, w5=9_000, read=1_000),
           req("d", T0 + 5_000, w1h=20_000, read=0),
           req("x", T0 + 20, source=Source.SUBAGENT, model="claude-haiku-4-5-20251001")]


def usd_samples(text: str) -> dict[str, str]:
    """Every sample of a ``*_usd*`` family, as printed: {series: value text}."""
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([a-z_:]+_usd[a-z_]*)(\{.*\})? (\S+)", line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = m.group(3)
    return out


def test_usd_values_have_at_most_nine_decimals(tmp_path: Path) -> None:
    """No cost, saving or premium sample /metrics serves prints more than nine decimals."""
    _proj, registry, _ = loaded(tmp_path, HISTORY)
    samples = usd_samples(generate_latest(exposed(registry)).decode())
    assert len(samples) > 10
    noisy = {k: v for k, v in samples.items() if Decimal(v) != round(Decimal(v), 9)}
    assert noisy == {}
    cost = samples['claude_code_cost_usd_total{model="claude-opus-4-6",project="app",'
                   'source="main",type="cache_write_1h"}']
    assert cost == "0.200000001"  # 0.20000000018626451: the quantum's excess, rounded up
    assert decimal_usd(0.045649999752640724) == 0.04565
    assert decimal_usd(0.3) == 0.3 and decimal_usd(0.0) == 0.0


def test_rounding_up_never_shows_less_than_the_exact_sum() -> None:
    """Over many sums of 2**-30 multiples: shown >= exact, and a larger sum never shows less."""
    step, shown_before, total = 2.0**-30, 0.0, 0.0
    for n in range(1, 20_000):
        total += exact(n * 1.37e-7 % 0.01, step)
        shown = decimal_usd(total)
        assert shown >= total and shown >= shown_before
        assert Decimal(repr(shown)) == round(Decimal(repr(shown)), 9)
        shown_before = shown


def test_serve_metrics_endpoint_prints_decimal_dollars(tmp_path: Path) -> None:
    """The text a scrape of a real serve over a generated tree gets has no noisy dollar value."""
    root = tmp_path / "claude"
    generate(root, GenOptions(seed=3, sessions=3, requests_per_session=40, malformed=False))
    serve = Serve(root, tmp_path / "state")
    try:
        poll(lambda: serve.requests() > 0, 30, "requests counted")
        status, body = serve.get("/metrics")
    finally:
        serve.stop()
    assert status == 200
    samples = usd_samples(body.decode())
    assert len(samples) > 10
    assert {k: v for k, v in samples.items() if Decimal(v) != round(Decimal(v), 9)} == {}
