"""The attribution views of `report`: one row per skill, plugin, MCP server or agent.

Claude Code writes on each assistant line what the request was made for
(``attributionSkill``, ``attributionPlugin``, ``attributionMcpServer``,
``attributionAgent``) and at which ``effort``; the ledger keeps them per request
(records.ATTRIBUTION). A view groups the selected requests by one of them,
requests without it in one row named :data:`NONE`, so the rows add up to the
summary over the same selection to the last pico-dollar. The slots do not
keep attribution: these views group the requests themselves (a month of heavy
use in well under a second, docs/benchmarks.md). ``--breakdown`` splits each
row by model, or with ``by`` by effort or speed. See docs/figures.md,
"Attribution".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from exporter.projections.facts import NO_BUCKET, ZERO, Attrs, Fact, Prices, Selection, Usage
from exporter.projections.figures import Covered
from exporter.projections.views import Options, Row, View, order_rows
from exporter.records import Source

# The views and the column each groups by (records.ATTRIBUTION).
VIEWS: Final = {"skill": "skill", "plugin": "plugin", "mcp": "mcp_server", "agent": "agent"}
BREAKDOWNS: Final = ("model", "effort", "speed")  # what --breakdown splits a row by
NONE: Final = "none"  # the row of requests that carry no value (and of older ledger rows)
DEFAULT_ORDER: Final = "cost"
_SUMS: Final = ("sum(input), sum(output), sum(cache_read), sum(cache_write_5m), "
                "sum(cache_write_1h), sum(web_search)")
_SOURCES: Final = tuple(Source)


def build(name: str, selection: Selection, prices: Prices, options: Options,
          by: str = "model") -> View:
    """Build the ``name`` view (a key of :data:`VIEWS`) over the selection.

    ``by``: what ``options.breakdown`` splits each row by (:data:`BREAKDOWNS`).
    """
    if name not in VIEWS:
        raise ValueError(f"unknown view {name!r}; expected one of {', '.join(VIEWS)}")
    if by not in BREAKDOWNS:
        raise ValueError(f"unknown breakdown {by!r}; expected one of {', '.join(BREAKDOWNS)}")
    bounds = selection.bounds()
    covered = Covered(selection.range, *(bounds or (None, None)))
    rows = _rows(_facts(VIEWS[name], selection, prices, by), options.breakdown)
    total = ZERO
    for row in rows:
        total = total + row.usage
    ordered = order_rows(rows, options.order or DEFAULT_ORDER)
    cut = len(ordered) if options.limit is None else max(options.limit, 0)
    filters = {"projects": selection.projects, "models": selection.models,
               "sources": tuple(s.label for s in selection.sources)}
    return View(name, covered, tuple(ordered[:cut]), total, len(rows),
                sum((r.usage for r in ordered[cut:]), ZERO), options.breakdown,
                filters=filters)


def _facts(column: str, selection: Selection, prices: Prices, by: str) -> list[Fact]:
    """One priced fact per value, session, price class and breakdown value (``key``)."""
    split = "model" if by == "model" else by
    found = selection.rows(
        f"{column}, {split}, session, project, model, source, service_tier, inference_geo, "
        f"speed, {prices.long_sql()}, {prices.period_sql('ts')}, min(ts), max(ts), count(*), "
        f"{_SUMS}", tail="GROUP BY " + ", ".join(map(str, range(1, 12))))
    out = []
    for value, part, session, project, model, source, tier, geo, speed, long, period, \
            first, last, n, *sums in found:
        attrs = Attrs(session, project, model, _SOURCES[source], tier, geo, speed, int(long))
        usage = prices.usage(attrs, int(period), float(first), int(n),
                             [int(v or 0) for v in sums])
        out.append(Fact((value or NONE, part or NONE), attrs, NO_BUCKET, float(first),
                        float(last), usage, 0))
    return out


@dataclass(slots=True)
class _Acc:
    """One row while its facts are folded in."""

    usage: Usage = ZERO
    parts: dict[str, Usage] = field(default_factory=dict)
    models: set[str] = field(default_factory=set)
    sessions: set[str] = field(default_factory=set)
    first: float = math.inf
    last: float = -math.inf


def _rows(found: Sequence[Fact], breakdown: bool) -> list[Row]:
    """Fold the facts into one row per value, with its breakdown when asked."""
    accs: dict[str, _Acc] = {}
    for f in found:
        value, part = f.key
        acc = accs.get(value)
        if acc is None:
            acc = accs[value] = _Acc()
        acc.usage = acc.usage + f.usage
        acc.parts[part] = acc.parts.get(part, ZERO) + f.usage
        acc.models.add(f.attrs.model)
        acc.sessions.add(f.attrs.session)
        acc.first = min(acc.first, f.first)
        acc.last = max(acc.last, f.last)
    return [Row(value, a.first, a.last, a.usage, tuple(sorted(a.models)),
                tuple(sorted(a.parts.items())) if breakdown else (), a.first, a.last,
                sessions=len(a.sessions))
            for value, a in accs.items()]
