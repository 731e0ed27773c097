"""The page's range query, its cache per range, and times as a person reads them (in parts)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from exporter.projections.periods import UTC_ZONE, Zone
from exporter.serve import page, page_nav
from exporter.serve.page_figures import PageData
from exporter.serve.page_range import MAX_QUERY, PageQuery, QueryError, parse_query
from tests.support.page_dom import sample_page


def test_query_parameters_are_reports_flags_and_empty_is_not_given() -> None:
    """since/until/tz are read as given; an empty one is a flag not given; tz=local the default."""
    assert parse_query("") == PageQuery()
    assert parse_query("tz=UTC") == PageQuery(tz="UTC")
    assert parse_query("since=") == PageQuery(ranged=True)
    assert parse_query("since=+7d+&tz=Local") == PageQuery("7d", ranged=True)
    assert parse_query("since=2026-02-01&until=2026-02-28") == PageQuery(
        "2026-02-01", "2026-02-28", ranged=True)
    assert PageQuery(ranged=True).query() == "?since="
    assert PageQuery().query() == "./"
    assert PageQuery("7d", None, "Europe/Berlin", ranged=True).query() == \
        "?since=7d&tz=Europe%2FBerlin"


@pytest.mark.parametrize(("raw", "says"), [
    ("days=365", "unknown parameter 'days'"), ("since=1&since=2", "since is given twice"),
    ("since=" + "x" * 65, "longer than 64"), ("a" * (MAX_QUERY + 1), "longer than 512"),
    ("a=1&b=2&c=3&d=4&e=5&f=6", "at most 4 parameters"), ("since=%ff", "at most 4 parameters"),
])
def test_queries_the_page_does_not_take(raw: str, says: str) -> None:
    """Unknown, repeated, long, many or undecodable parameters: a QueryError saying which."""
    with pytest.raises(QueryError, match=says):
        parse_query(raw)


def test_one_cached_page_per_normalised_range_and_at_most_sixteen() -> None:
    """?since=7d and ?since=7d&tz=local share a build; the 17th new range evicts the oldest."""
    built: list[PageQuery] = []

    def source(query: PageQuery) -> PageData:
        built.append(query)
        return sample_page(query)

    handlers = page.routes(source, "t", clock=lambda: 0.0)

    def get(qs: str) -> None:
        list(handlers["/"]({"PATH_INFO": "/", "QUERY_STRING": qs}, lambda *a: None))

    get("since=7d")
    get("since=7d&tz=local")
    get("since=+7d")
    assert len(built) == 1
    for n in range(page.MAX_RANGES):
        get(f"since={n + 1}h")
    assert len(built) == 1 + page.MAX_RANGES
    get("since=7d")  # evicted by the sixteen after it: built again
    assert len(built) == 2 + page.MAX_RANGES


def test_resets_read_as_a_person_reads_them() -> None:
    """A reset is a local day and minute and how far away: 'tomorrow 09:05 (in 2 h 10 min)'."""
    berlin = Zone("Europe/Berlin", ZoneInfo("Europe/Berlin"))
    now = datetime(2026, 12, 7, 22, 55, tzinfo=UTC).timestamp()
    later = now + 2 * 3600 + 10 * 60 + 20
    assert page_nav.when(later, now, berlin) == "tomorrow 02:05"
    assert page_nav.when(later, now, UTC_ZONE) == "tomorrow 01:05"
    assert page_nav.when(now + 3 * 86400, now, UTC_ZONE) == "Thu 10 Dec 22:55"
    assert page_nav.relative(later, now) == "in 2 h 10 min"
    assert page_nav.relative(now + 3600, now) == "in 1 h"
    assert page_nav.relative(now + 30, now) == "in under a minute"
    assert page_nav.relative(now + 3 * 86400 + 4 * 3600, now) == "in 3 d 4 h"
    assert page_nav.relative(now - 300, now) == "5 min ago"
