"""What the page tests share: a page's HTML read back (figures, charts, tables, links), a sample."""

from __future__ import annotations

import dataclasses
from html.parser import HTMLParser

from exporter.projections import figures
from exporter.projections.periods import UTC_ZONE, Range
from exporter.projections.usage import ZERO
from exporter.serve import page_figures
from exporter.serve.page_range import DEFAULT, PageQuery


class Dom(HTMLParser):
    """What the tests read off a page: figures, charts and their shapes, table cells."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, str] = {}
        self.charts: dict[str, int] = {}  # chart name -> drawn shapes (rect/polyline/line)
        self.tables: dict[str, list[list[str]]] = {}
        self._figure: str | None = None
        self._chart: str | None = None
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.links: dict[str, str] = {}  # range choice (or "offer") -> href
        self.notes: set[str] = set()  # data-note of the page's notes
        self.sections: set[str] = set()  # data-section of named cards
        self.range: dict[str, str] = {}  # the range shown: data-since, data-until (ISO)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Note a chart, figure, table, link, note or section as it opens."""
        a = dict(attrs)
        self._marks(a)
        if tag == "svg" and "data-chart" in a:
            self._chart = str(a["data-chart"])
            self.charts[self._chart] = 0
        elif self._chart and tag in ("rect", "polyline", "line"):
            self.charts[self._chart] += 1
        if "data-figure" in a:
            self._figure = str(a["data-figure"])
            self.figures[self._figure] = ""
        if tag == "table" and "data-table" in a:
            self._table = str(a["data-table"])
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []

    def _marks(self, a: dict[str, str | None]) -> None:
        """The page's range links, notes, named sections and shown range."""
        if "data-range" in a:
            self.links[str(a["data-range"])] = str(a.get("href"))
        if "data-offer" in a:
            self.links["offer"] = str(a.get("href"))
        if "data-note" in a:
            self.notes.add(str(a["data-note"]))
        if "data-section" in a:
            self.sections.add(str(a["data-section"]))
        for key in ("data-since", "data-until"):
            if key in a:
                self.range[key.removeprefix("data-")] = str(a[key])

    def handle_endtag(self, tag: str) -> None:
        """Close what ``tag`` closes."""
        if tag == "svg":
            self._chart = None
        elif tag in ("b", "span"):
            self._figure = None
        elif tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        """Text into the open figure or cell."""
        if self._figure:
            self.figures[self._figure] += data
        if self._cell is not None:
            self._cell.append(data)


def parse(html: str) -> Dom:
    """The figures, charts and tables of one page's HTML."""
    dom = Dom()
    dom.feed(html)
    return dom


def sample_page(query: PageQuery = DEFAULT, *, requests: int = 0) -> page_figures.PageData:
    """Page data with ``requests`` requests and every other figure zero."""
    spread = figures.Spread()
    summary = figures.Summary(
        covered=figures.Covered(Range(0.0, None, UTC_ZONE), None, None),
        totals=dataclasses.replace(ZERO, requests=requests),
        by_model={}, by_source={}, sessions=0, context=spread, output=spread, gap_p50=0.0,
        gap_p90=0.0, gap_count=0, buckets={}, peak_requests_per_minute=0,
        max_parallel_sessions_10m=0, generation_tokens_per_second=0.0, kv_bytes={},
        upload_total=0, upload=spread, lines={}, rejected={}, by_session=())
    return page_figures.PageData(summary=summary, now=0.0, zone=UTC_ZONE,
                                 periods={"today": 0.0, "week": 0.0, "month": 0.0}, budgets={},
                                 daily=(("1970-01-01", 0.0),), by_project=(),
                                 active={"5m": 0}, query=query)
