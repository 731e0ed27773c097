"""The report views on generated trees: goldens, totals, time zones, blocks, both producers."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from exporter.ingest.discover import projects_dirs
from exporter.ingest.scan import Scanner
from exporter.ledger.store import Ledger
from exporter.projections import views
from exporter.projections.class_prices import ClassPrices
from exporter.projections.figures import summary
from exporter.projections.periods import UTC_ZONE, Range, resolve_zone
from exporter.projections.pricing import RateTable
from exporter.projections.selection import Selection
from exporter.records import Request, Source
from exporter.report.tables import render_view, view_csv, view_json
from exporter.synth import GenOptions, generate
from tests.support import report_ledgers
from tests.support.records import request
from tests.support.report_limits import limits_sample

GOLDEN = Path(__file__).parent / "golden"
STARTS = (datetime(2026, 9, 28, 7, tzinfo=UTC), datetime(2026, 10, 1, tzinfo=UTC),
          datetime(2026, 11, 2, 21, tzinfo=UTC))
WIDTHS = (160, 80)


@pytest.fixture(scope="module")
def prices() -> ClassPrices:
    """The shipped prices."""
    return ClassPrices.of(RateTable.load())


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three generated trees: two weeks apart, in two months."""
    base = tmp_path_factory.mktemp("trees")
    out = []
    for i, start in enumerate(STARTS):
        generate(base / f"t{i}", GenOptions(seed=20 + i, sessions=3, requests_per_session=60,
                                            start=start))
        out.append(base / f"t{i}")
    return out


@pytest.fixture(scope="module")
def ledger(trees: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    """The trees ingested into one ledger, as `report` does."""
    led = Ledger(tmp_path_factory.mktemp("state") / "ledger.sqlite3")
    Scanner(led, projects_dirs(trees), workers=1).scan()
    yield led
    led.close()


def select(ledger: Ledger, trees: list[Path], rng: Range | None = None) -> Selection:
    """The selection `report` makes for these trees."""
    return Selection(ledger.read, ledger.scope(projects_dirs(trees)),
                     rng or Range(None, None, UTC_ZONE))


def last_request(sel: Selection) -> float:
    """Time of the newest request (the goldens' clock is an hour after it)."""
    bounds = sel.bounds()
    assert bounds is not None
    return bounds[1]


def text(view: views.View, width: int) -> str:
    """The view rendered on a plain console ``width`` columns wide."""
    buffer = io.StringIO()
    render_view(view, Console(file=buffer, width=width))
    return buffer.getvalue()


def golden(name: str, content: str) -> None:
    """Compare with tests/golden/NAME, or rewrite it when UPDATE_GOLDEN=1."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(content, encoding="utf-8")
    assert content == path.read_text(encoding="utf-8"), f"{name} changed (UPDATE_GOLDEN=1)"


@pytest.mark.parametrize("name", views.VIEWS)
def test_view_goldens(name: str, ledger: Ledger, trees: list[Path], prices: ClassPrices) -> None:
    """Each view's tables (160 and 80 columns) and JSON equal their golden files."""
    sel = select(ledger, trees)
    opts = views.Options(now=last_request(sel) + 3600, breakdown=name == "daily")
    view = views.build(name, sel, prices, opts)
    tables = "".join(f"--- {w} columns\n{text(view, w)}" for w in WIDTHS)
    golden(f"report_{name}.txt", tables)
    golden(f"report_{name}.json", json.dumps(view_json(view), indent=2, sort_keys=True) + "\n")
    for w in WIDTHS:
        assert max(map(len, text(view, w).splitlines())) <= w
        assert "…" not in text(view, w)


@pytest.mark.parametrize("name", views.VIEWS)
def test_totals_add_up_to_the_summary(name: str, ledger: Ledger, trees: list[Path],
                                      prices: ClassPrices) -> None:
    """A view's rows add up to its totals, and those equal the summary's, to the last digit."""
    sel = select(ledger, trees)
    view = views.build(name, sel, prices, views.Options(now=0.0))
    whole = summary(sel, prices, kv_bytes_per_token={}, upload_bytes_per_token=4.0, lines={},
                    rejected={})
    rows = sum((r.usage for r in view.rows), start=type(view.total)())
    assert rows == view.total == whole.totals
    assert view_json(view)["totals"]["cost_usd"] == whole.to_json()["totals"]["cost_usd"]


def test_limit_and_order_keep_the_totals(ledger: Ledger, trees: list[Path],
                                         prices: ClassPrices) -> None:
    """--limit shows the first rows in --order; totals and row_count still cover all rows."""
    sel = select(ledger, trees)
    full = views.build("session", sel, prices, views.Options(order="cost"))
    top = views.build("session", sel, prices, views.Options(order="cost", limit=2))
    assert [r.label for r in top.rows] == [r.label for r in full.rows[:2]]
    costs = [r.usage.cost_pico for r in full.rows]
    assert costs == sorted(costs, reverse=True)
    assert top.total == full.total and top.count == full.count > 2
    assert view_json(top)["row_count"] == full.count


def test_csv_has_one_line_per_row_or_per_model(ledger: Ledger, trees: list[Path],
                                               prices: ClassPrices) -> None:
    """CSV: a header and one line per row; with --breakdown one line per row and model."""
    sel = select(ledger, trees)
    plain = views.build("daily", sel, prices, views.Options())
    lines = view_csv(plain).splitlines()
    assert lines[0].startswith("period,start,end,requests,input_tokens,")
    assert len(lines) == 1 + len(plain.rows)
    split = views.build("daily", sel, prices, views.Options(breakdown=True))
    assert len(view_csv(split).splitlines()) == 1 + sum(len(r.breakdown) for r in split.rows)



@pytest.mark.parametrize("breakdown", [False, True])
@pytest.mark.parametrize("name", views.VIEWS)
def test_csv_header_is_printed_also_without_rows(ledger: Ledger, trees: list[Path],
                                                 prices: ClassPrices, name: str,
                                                 breakdown: bool) -> None:
    """An empty range still prints the CSV header, the same as a view with rows has."""
    options = views.Options(breakdown=breakdown, now=last_request(select(ledger, trees)))
    full = view_csv(views.build(name, select(ledger, trees), prices, options)).splitlines()
    future = Range(datetime(2030, 1, 1, tzinfo=UTC).timestamp(), None, UTC_ZONE)
    empty = views.build(name, select(ledger, trees, future), prices, options)
    assert empty.count == 0 and len(full) > 1
    assert view_csv(empty).splitlines() == full[:1]


def test_csv_writes_booleans_as_the_json_does(ledger: Ledger, trees: list[Path],
                                               prices: ClassPrices) -> None:
    """A block's ``active`` is ``true``/``false`` in the CSV, as in the JSON."""
    sel = select(ledger, trees)
    view = views.build("blocks", sel, prices, views.Options(now=last_request(sel)))
    active = [line["active"] for line in csv.DictReader(io.StringIO(view_csv(view)))]
    assert set(active) <= {"true", "false"} and "true" in active

# ---- time zones --------------------------------------------------------------------------
def late(ts: str, key: str = "k") -> Request:
    """A main request at an ISO time."""
    return request(key, datetime.fromisoformat(ts).timestamp(), output=10)


@pytest.mark.parametrize("producer", ["ledger", "slots"])
def test_timezone_moves_a_late_request_to_the_next_day(producer: str, tmp_path: Path,
                                                       prices: ClassPrices) -> None:
    """23:30 UTC is the same day in UTC and the next day in UTC+2 (fixed or Europe/Berlin)."""
    requests = [late("2026-07-14T23:30:00+00:00", "a"), late("2026-07-14T12:00:00+00:00", "b")]

    def days(zone: str) -> dict[str, int]:
        rng = Range(None, None, resolve_zone(zone))
        if producer == "slots":
            sel = report_ledgers.select(report_ledgers.slotted(requests), rng)
            view = views.build("daily", sel, prices, views.Options())
        else:
            with report_ledgers.real(requests, tmp_path / zone.replace("/", "_")) as led:
                view = views.build("daily", report_ledgers.select(led, rng), prices,
                                   views.Options())
        return {r.label: r.usage.requests for r in view.rows}

    assert days("UTC") == {"2026-07-14": 2}
    assert days("+02:00") == {"2026-07-14": 1, "2026-07-15": 1}
    assert days("Europe/Berlin") == {"2026-07-14": 1, "2026-07-15": 1}


def test_days_across_daylight_saving_time(tmp_path: Path, prices: ClassPrices) -> None:
    """The night clocks go back (Berlin, 2026-10-25) the day has 25 hours, and both sides agree."""
    requests = [late("2026-10-24T22:30:00+00:00", "a"),  # 00:30 CEST on the 25th
                late("2026-10-25T22:30:00+00:00", "b"),  # 23:30 CET on the 25th
                late("2026-10-25T23:30:00+00:00", "c")]  # 00:30 CET on the 26th
    rng = Range(None, None, resolve_zone("Europe/Berlin"))
    sel = report_ledgers.select(report_ledgers.slotted(requests), rng)
    view = views.build("daily", sel, prices, views.Options())
    assert {r.label: r.usage.requests for r in view.rows} == {"2026-10-25": 2, "2026-10-26": 1}
    day = next(r for r in view.rows if r.label == "2026-10-25")
    assert day.end - day.start == 25 * 3600


def test_weeks_start_on_monday_and_months_on_the_first(tmp_path: Path, prices: ClassPrices) -> None:
    """ISO weeks (Monday) and calendar months, in the report's zone."""
    requests = [late("2026-03-01T10:00:00+00:00", "a"),  # Sunday: week 9
                late("2026-03-02T10:00:00+00:00", "b"),  # Monday: week 10
                late("2026-03-31T23:30:00+00:00", "c")]  # April in UTC+2
    rng = Range(None, None, resolve_zone("+02:00"))
    sel = report_ledgers.select(report_ledgers.slotted(requests), rng)
    weeks = views.build("weekly", sel, prices, views.Options())
    assert {r.label: r.usage.requests for r in weeks.rows} == {"2026-W09": 1, "2026-W10": 1,
                                                              "2026-W14": 1}
    months = views.build("monthly", sel, prices, views.Options())
    assert {r.label: r.usage.requests for r in months.rows} == {"2026-03": 2, "2026-04": 1}


# ---- blocks ------------------------------------------------------------------------------
def blocks_by_hand(requests: list[Request], rule: str) -> list[tuple[float, float, int, int]]:
    """(start, end, requests, output tokens) per block, worked out request by request."""
    out: list[list[float]] = []
    for req in sorted(requests, key=lambda r: (r.ts, r.key)):
        if not out or req.ts >= out[-1][1]:
            start = req.ts if rule == "first-request" else req.ts // 3600 * 3600
            out.append([start, start + 5 * 3600, 0, 0])
        out[-1][2] += 1
        out[-1][3] += req.output
    return [(s, e, int(n), int(o)) for s, e, n, o in out]


@pytest.mark.parametrize("rule", views.BLOCK_RULES)
def test_blocks_equal_an_independent_computation(rule: str, ledger: Ledger, trees: list[Path],
                                                 prices: ClassPrices) -> None:
    """Block starts, ends and totals on a generated tree equal a request-by-request walk."""
    sel = select(ledger, trees)
    view = views.build("blocks", sel, prices, views.Options(block_rule=rule))
    got = [(r.start, r.end, r.usage.requests, r.usage.output) for r in view.rows]
    assert got == blocks_by_hand(ledger.requests(view=sel.relation), rule)
    assert len(got) > 3


def test_open_block_burn_rate_and_projection(prices: ClassPrices) -> None:
    """The block holding `now` is open: elapsed, rate per hour and the projection to its end."""
    t0 = 1_800_000_123.0
    requests = [request("a", t0, output=1000), request("b", t0 + 1800, output=1000)]
    sel = report_ledgers.select(report_ledgers.slotted(requests))
    view = views.build("blocks", sel, prices, views.Options(now=t0 + 3600))
    assert view.active is not None and view.rows[-1].active
    a = view.active
    assert (a.elapsed, a.remaining) == (3600.0, 4 * 3600.0)
    assert a.tokens_per_hour == 2000.0 and a.projected_tokens == 10_000
    assert a.projected_cost_pico == 5 * a.usage.cost_pico
    closed = views.build("blocks", sel, prices, views.Options(now=t0 + 5 * 3600))
    assert closed.active is None and view_json(closed)["active_block"] is None


# ---- both producers ----------------------------------------------------------------------
def varied(n: int) -> list[Request]:
    """Requests over ten days in several sessions, projects, models and sources."""
    import random

    rng = random.Random(4)
    ts, out = 1_790_000_000.0, []
    for i in range(n):
        ts += rng.choice([3.1, 40.0, 290.0, 700.0, 5000.0, 17_999.0, 18_000.0])
        out.append(request(f"k{i}", round(ts, 3), session=f"s{rng.randrange(5)}",
                           project=rng.choice(["/home/u/a", "/home/u/b"]),
                           model=rng.choice(["claude-opus-4-6", "claude-sonnet-4-5-20250929"]),
                           source=rng.choice([Source.MAIN, Source.MAIN, Source.SUBAGENT]),
                           input=rng.randrange(9), output=rng.randrange(900),
                           cache_read=rng.choice([0, 150_000, 250_000]),
                           cache_write_5m=rng.randrange(900)))
    return out


@pytest.mark.parametrize("name", views.VIEWS)
def test_slots_and_requests_give_the_same_views(name: str, tmp_path: Path,
                                                prices: ClassPrices) -> None:
    """Every view is the same from the usage slots and from the requests, ranges included."""
    requests = varied(1500)
    t0 = requests[0].ts
    ranges = [Range(None, None, zone) for zone in (UTC_ZONE, resolve_zone("Asia/Kolkata"))]
    ranges += [Range(t0 + 86_400.7, t0 + 6 * 86_400 + 13.2, r.zone) for r in ranges]
    slotted = report_ledgers.slotted(requests)
    with report_ledgers.real(requests, tmp_path) as led:
        for rng in ranges:
            for filters in ({}, {"projects": ("/home/u/a",), "sources": (Source.MAIN,)}):
                opts = views.Options(breakdown=True, now=t0 + 3 * 86_400)
                a = views.build(name, report_ledgers.select(slotted, rng, **filters), prices,
                                opts)
                b = views.build(name, report_ledgers.select(led, rng, **filters), prices, opts)
                assert view_json(a) == view_json(b), (rng, filters)


def test_unknown_view_and_order_are_refused(prices: ClassPrices) -> None:
    """A view or order that does not exist is a ValueError naming the valid ones."""
    sel = report_ledgers.select(report_ledgers.slotted([request("a", 1.8e9)]))
    with pytest.raises(ValueError, match="daily"):
        views.build("dayly", sel, prices, views.Options())
    with pytest.raises(ValueError, match="newest"):
        views.build("daily", sel, prices, views.Options(order="big"))


@pytest.mark.parametrize("width", [80, 160])
def test_limits_table_never_cuts_a_figure(width: int) -> None:
    """At 80 and 160 columns every figure of `report limits` shows in full; wide has them all."""
    from exporter.report.tables import render_limits

    out = io.StringIO()
    view: Any = limits_sample()
    render_limits(view, Console(file=out, width=width, color_system=None))
    shown = out.getvalue()
    assert "…" not in shown
    for figure in ("103 %", "$247.31", "$2.39", "$1,843.77", "$14.02", "five_hour", "seven_day",
                   "1 % ≈ $2.40", "1,234 sample pairs"):
        assert figure in shown, (width, figure)
    wide = ("start", "  pairs  ", "ended, limit")
    assert all((part in shown) == (width == 160) for part in wide), width
    assert "no estimate yet" in shown  # the weekly window has none


# ---- columns a terminal shows ------------------------------------------------------------
@pytest.mark.parametrize("name", views.VIEWS)
def test_tokens_by_type_fit_at_120_columns(name: str, ledger: Ledger, trees: list[Path],
                                           prices: ClassPrices) -> None:
    """At 120 columns a view shows every token type: input, output, cache write, cache read."""
    sel = select(ledger, trees)
    view = views.build(name, sel, prices, views.Options(now=last_request(sel) + 3600))
    head = next(line for line in text(view, 120).splitlines() if "requests" in line)
    for title in ("input", "output", "cache write", "cache read", "cost"):
        assert f" {title} " in f"{head} ", (name, head)


@pytest.mark.parametrize("width", [80, 120, 160])
def test_hidden_columns_are_named_in_one_line(width: int, ledger: Ledger, trees: list[Path],
                                              prices: ClassPrices) -> None:
    """A table narrower than all its columns says which are hidden and how to see them."""
    sel = select(ledger, trees)
    view = views.build("daily", sel, prices, views.Options())
    notes = [line for line in text(view, width).splitlines() if line.startswith("hidden")]
    assert len(notes) == 1 and len(notes[0]) <= 80, notes
    assert "--json" in notes[0] and "widen" in notes[0]
    if width == 80:
        assert "input" in notes[0] and "more" in notes[0]
    assert not [line for line in text(view, 400).splitlines() if line.startswith("hidden")]


# ---- the default report ------------------------------------------------------------------
def default_report(sel: Selection, prices: ClassPrices, now: float, width: int) -> str:
    """`report` without --full on a plain console ``width`` columns wide."""
    from exporter.report import glance

    whole = summary(sel, prices, kv_bytes_per_token={"mla": 70_272},
                    upload_bytes_per_token=4.0, lines={}, rejected={})
    buffer = io.StringIO()
    glance.render(whole, glance.glance(sel, prices, now), Console(file=buffer, width=width))
    return buffer.getvalue()


def test_default_report_goldens(ledger: Ledger, trees: list[Path], prices: ClassPrices) -> None:
    """The default `report` at 80 and 160 columns equals its golden file."""
    sel = select(ledger, trees)
    now = last_request(sel) + 3600
    golden("report_default.txt", "".join(f"--- {w} columns\n{default_report(sel, prices, now, w)}"
                                         for w in WIDTHS))


@pytest.mark.parametrize("width", WIDTHS)
def test_default_report_fits_one_screen(width: int, ledger: Ledger, trees: list[Path],
                                        prices: ClassPrices) -> None:
    """What a person asks first fits one screen; the serving-side analysis waits for --full."""
    sel = select(ledger, trees)
    now = last_request(sel) + 3600
    lines = default_report(sel, prices, now, width).splitlines()
    assert len(lines) <= 30 and max(map(len, lines)) <= width
    shown = "\n".join(lines)
    for figure in ("today", "this week", "this month", "opus-4-6", "cache read",
                   "open 5-hour block", "--full"):
        assert figure in shown, figure
    assert "KV cache" not in shown and "Gb/s" not in shown
    day = views.build("daily", sel, prices, views.Options())
    today = next(line for line in lines if line.lstrip().startswith("today"))
    assert f"${day.rows[-1].usage.cost_usd:,.2f}" in today


def test_default_report_projects_the_month_at_this_pace(ledger: Ledger, trees: list[Path],
                                                        prices: ClassPrices) -> None:
    """One line: the month's end at this pace (budget_pace), against the budget when one is set."""
    from exporter.projections import budget_pace
    from exporter.report import glance

    sel = select(ledger, trees)
    now = last_request(sel) + 3600
    month = budget_pace.of_selection(sel, prices, now, {"month": 1.0})["month"]
    whole = summary(sel, prices, kv_bytes_per_token={"mla": 70_272},
                    upload_bytes_per_token=4.0, lines={}, rejected={})

    def shown(budgets: dict[str, float]) -> str:
        buffer = io.StringIO()
        seen = glance.glance(sel, prices, now, budgets)
        glance.render(whole, seen, Console(file=buffer, width=80))
        return buffer.getvalue()

    line = next(x for x in shown({"month": 1.0}).splitlines() if "at this pace" in x)
    if month.projected_usd is None:
        assert "not enough data" in line
    else:
        assert f"${month.projected_usd:,.2f}" in line and "of the $1.00 budget" in line
    plain = next(x for x in shown({}).splitlines() if "at this pace" in x)
    assert "budget" not in plain
