"""Tests of the text and JSON renderings of the summary."""

from __future__ import annotations

import dataclasses
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from exporter.projections.class_prices import ClassPrices
from exporter.projections.figures import Summary, summary
from exporter.projections.json_text import to_json
from exporter.projections.pricing import RateTable
from exporter.records import Request, Source
from exporter.report.summary import (
    duration,
    pct,
    render_text,
    size,
    tokens,
    transfer_time,
    usd,
)
from tests.support import report_ledgers
from tests.support.records import request


def req(key: str, ts: float, session: str = "3324d49f-aaaa", **fields: Any) -> Request:
    """Build a main Opus request with zero tokens unless given."""
    return request(key, ts, session=session, **fields)


@pytest.fixture(scope="module")
def summarised(tmp_path_factory: pytest.TempPathFactory) -> Summary:
    """Return the summary of a few requests: one long-context session, an unpriced model."""
    requests = [
        req("a", 0.0, input=1, output=582, cache_read=456_000, cache_write_5m=874),
        req("b", 12.0, input=1, output=3321, cache_read=457_000, cache_write_5m=1000),
        req("c", 4000.0, input=2, output=100, cache_write_1h=458_000),
        req("d", 30.0, "18d79b2f-bbbb", model="claude-nova-9", output=10, cache_read=1000),
        req("e", 31.0, source=Source.SUBAGENT, output=5, cache_read=2000),
    ]
    with report_ledgers.real(requests, Path(tmp_path_factory.mktemp("l"))) as ledger:
        return summary(
            report_ledgers.select(ledger),
            ClassPrices.of(RateTable.load()),
            kv_bytes_per_token={"mla": 70_272, "gqa": 516_096},
            upload_bytes_per_token=4.0,
            lines={"usage": 5, "duplicate": 7, "other": 11, "rejected": 2},
            rejected={"invalid_json": 2},
        )


@pytest.fixture(scope="module")
def figures(summarised: Summary) -> dict[str, Any]:
    """Return the summary's JSON figures."""
    return summarised.to_json()


def render(summarised: Summary, width: int = 120) -> str:
    """Render to a plain console of ``width`` columns and return the text."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width)
    render_text(summarised, console)
    out = buffer.getvalue()
    assert isinstance(out, str)
    return out


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0"),
        (582, "582"),
        (3321, "3,321"),
        (33_762, "33.76k"),
        (456_875, "456.9k"),
        (1_951_000, "1.951M"),
        (590_000_000, "590M"),
        (999_999, "1M"),
    ],
)
def test_tokens_format(n: int, text: str) -> None:
    """Token counts are exact below 10k and k/M above, four significant digits."""
    assert tokens(n) == text


def test_other_units() -> None:
    """Bytes, dollars, shares, durations and transfer times use human units."""
    assert size(457_000 * 70_272) == "32.1 GB"
    assert size(512) == "512 B"
    assert usd(1234.5) == "$1,234.50"
    assert pct(0.969) == "96.9%"
    assert pct(0.00001) == "<0.1%"
    assert transfer_time(32e9, 100) == "2.6 s"
    assert transfer_time(236e9, 800) == "2.4 s"


@pytest.mark.parametrize(("amount", "shown"), [
    (0.2634, "$0.26"), (12.23, "$12.23"), (0, "$0.00"), (0.00144, "<$0.01"),
    (0.004999, "<$0.01"), (0.005, "$0.01"), (1234.5, "$1,234.50"), (-0.0343, "-$0.03"),
    (-0.001, "-<$0.01"), (-1234.5, "-$1,234.50"),
])
def test_one_rule_for_dollars(amount: float, shown: str) -> None:
    """Every amount has cents, whatever its size; a non-zero one under a cent says so."""
    assert usd(amount) == shown


@pytest.mark.parametrize(("seconds", "shown"), [
    (0.04, "0 s"), (4.24, "4.2 s"), (13.7, "14 s"), (65, "1 min 5 s"), (3180, "53 min"),
    (4176, "1 h 10 min"), (5.02 * 3600, "5 h 1 min"), (7200, "2 h"), (44.3 * 3600, "44 h 18 min"),
])
def test_one_format_for_durations(seconds: float, shown: str) -> None:
    """A duration is its two largest whole units (h and min, min and s), never decimal hours."""
    assert duration(seconds) == shown


def test_render_contains_key_figures(summarised: Summary, figures: dict[str, Any]) -> None:
    """The summary shows totals, shares, distributions and every section's figures."""
    text = render(summarised)
    t = figures["totals"]
    assert f"{t['requests']:,} in 2 sessions" in text
    assert usd(t["cost_usd"]) in text
    assert pct(figures["cache_read_share"]) in text
    assert tokens(figures["context_tokens"]["p50"]) in text
    assert "p90 3,321" in text  # output p90
    assert "≤ 5 min" in text and "> 1 h" in text
    assert "claude-nova-9" in text and "n/a" in text  # unpriced model: no cost, not $0
    assert "subagent" in text
    assert "3324d49f" in text and "3324d49f-aaaa" not in text  # session ids shortened
    assert "mla · p50" in text and "at 400 Gb/s" in text
    assert "rejected: invalid_json" in text
    assert "duplicate 7" in text


def test_render_kv_transfer_time(summarised: Summary, figures: dict[str, Any]) -> None:
    """The KV table gives bytes and bytes x 8 / rate for each reference link."""
    text = render(summarised)
    mla_p50 = figures["kv_bytes"]["mla"]["p50"]
    row = next(line for line in text.splitlines() if "mla · p50" in line)
    assert size(mla_p50) in row
    assert all(transfer_time(mla_p50, g) in row for g in (100, 400, 800))


def test_render_fits_an_80_column_pipe(summarised: Summary) -> None:
    """At 80 columns nothing is cut: whole model ids, no ellipses, no line wider than 80."""
    text = render(summarised, width=80)
    assert "…" not in text
    assert any("claude-nova-9" in line and "n/a" in line for line in text.splitlines())
    assert max(map(len, text.splitlines())) <= 80


def test_render_is_plain_text_off_a_terminal(summarised: Summary) -> None:
    """Writing to a file emits no ANSI escape codes."""
    assert "\x1b[" not in render(summarised)


def test_render_without_sessions(summarised: Summary) -> None:
    """A summary without session rows leaves out the sessions table, nothing else."""
    text = render(dataclasses.replace(summarised, by_session=()))
    assert "Sessions" not in text and "By model" in text


def test_header_names_range_and_zone(summarised: Summary) -> None:
    """The first line names the report, its time zone and the requests it covers."""
    first = render(summarised).splitlines()[0]
    assert first == "Summary · UTC · 1970-01-01 00:00 → 1970-01-01 01:06"


def test_costs_in_json_have_no_float_noise(figures: dict[str, Any]) -> None:
    """Costs are rounded to 1e-6 USD: their shortest repr has at most six decimals."""
    costs = [figures["totals"]["cost_usd"], *(t["cost_usd"] for t in figures["by_model"].values())]
    assert all(len(repr(c).partition(".")[2]) <= 6 for c in costs)


def test_to_json_round_trips_with_sorted_keys(figures: dict[str, Any]) -> None:
    """JSON output parses back to the same figures, keys sorted at every level."""
    text = to_json(figures)
    assert json.loads(text) == json.loads(json.dumps(figures))
    assert text == to_json(dict(reversed(list(figures.items()))))
    top = list(json.loads(text))
    assert top == sorted(top)


def test_to_json_never_writes_nan() -> None:
    """NaN and infinities become null rather than invalid JSON."""
    text = to_json({"a": math.nan, "b": [math.inf, 1.5], "c": {"d": -math.inf}})
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}
    assert "NaN" not in text and "Infinity" not in text
