"""The attribution views of `report`: one row per skill, plugin, MCP server or agent.

Claude Code writes on each assistant line what the request was made for
(``attributionSkill``, ``attributionPlugin``, ``attributionMcpServer``,
``attributionAgent``) and at which ``effort``; the ledger keeps them per request
(records.ATTRIBUTION). A view groups the selected requests by one of them,
requests without it in one row named :data:`NONE`, so the rows add up to the
summary over the same selection to the last pico-dollar. Whole UTC days come
from the ledger's attribution day sums (exporter.ledger.attr_days: rows per
day, session and value, not per request), the partial days at the edges of a time
range from the requests; all of it from the requests when the sums cannot
answer (not kept, a price date or long-context threshold they do not split
by), the rule of the slot-based views (exporter.projections.facts).
``--breakdown`` splits each row by model, or with ``by`` by effort or speed.
See docs/figures.md, "Attribution".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from exporter.ledger import attr_days as attribution_days
from exporter.projections.class_prices import ClassPrices
from exporter.projections.facts import Facts
from exporter.projections.figures import Covered
from exporter.projections.selection import SUMS_SQL, Selection
from exporter.projections.usage import NO_BUCKET, ZERO, Attrs, Fact, Usage
from exporter.projections.views import Options, Row, View, order_rows
from exporter.records import Source

# The views and the column each groups by (records.ATTRIBUTION).
VIEWS: Final = {"skill": "skill", "plugin": "plugin", "mcp": "mcp_server", "agent": "agent"}
BREAKDOWNS: Final = ("model", "effort", "speed")  # what --breakdown splits a row by
NONE: Final = "none"  # the row of requests that carry no value (and of older ledger rows)
DEFAULT_ORDER: Final = "cost"
_SOURCES: Final = tuple(Source)
_DAY: Final = 86_400


def build(name: str, selection: Selection, prices: ClassPrices, options: Options,
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
    rows = _rows(*_facts(VIEWS[name], selection, prices, by), options.breakdown)
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


def _facts(column: str, selection: Selection, prices: ClassPrices, by: str
           ) -> tuple[list[Fact], dict[str, set[str]]]:
    """Priced facts per value, price class and breakdown value (``key``); each value's sessions.

    Whole UTC days from the day sums when they answer, the rest from the requests.
    """
    sessions: dict[str, set[str]] = {}
    out: list[Fact] = []
    edges: list[tuple[str, ...]] = [()]
    if days_answer(selection, prices):
        interior, edges = day_split(selection)
        if interior is not None:
            out = _day_facts(column, selection, prices, by, interior, sessions=sessions)
    for edge in edges:
        found = _row_facts(column, selection, prices, by, edge)
        for f in found:
            sessions.setdefault(f.key[0], set()).add(f.attrs.session)
        out.extend(found)
    return out, sessions


def days_answer(selection: Selection, prices: ClassPrices) -> bool:
    """Whether the attribution day sums can answer for whole days of ``selection``.

    The slot-based views' rule: the sums are kept and current, split by (at
    least) the price table's long-context thresholds, every price date a UTC
    midnight. The filters and the scope are on the slot key and roots: any answer.
    """
    return (selection.slots and selection.days and prices.fits_slots(selection.slot_thresholds)
            and prices.fits_days and attribution_days.current(selection.read))


def day_split(selection: Selection) -> tuple[tuple[int | None, int | None] | None,
                                             list[tuple[str, ...]]]:
    """Whole UTC days ``[lo, hi)`` of the range (None: none), and the partial ones' conditions."""
    since, until = selection.range.since, selection.range.until
    lo = None if since is None else math.ceil(since / _DAY)
    hi = None if until is None else math.floor(until / _DAY)
    if lo is not None and hi is not None and lo >= hi:
        return None, [()]  # inside one or two partial days: all from the requests
    edges: list[tuple[str, ...]] = []
    day = attribution_days.DAY_SQL.replace("r.ts", "ts")
    if since is not None and lo is not None and lo * _DAY > since:
        edges.append((f"{day} < {lo}",))
    if until is not None and hi is not None and hi * _DAY < until:
        edges.append((f"{day} >= {hi}",))
    return (lo, hi), edges


def day_where(selection: Selection, interior: tuple[int | None, int | None]
              ) -> tuple[str, list[object]]:
    """The WHERE condition on ``attr_days`` for whole days ``[lo, hi)`` of the selection."""
    lo, hi = interior
    parts = [*([f"day >= {int(lo)}"] if lo is not None else []),
             *([f"day < {int(hi)}"] if hi is not None else [])]
    params: list[object] = []
    if selection.slot_scope:
        parts.append(f"({selection.slot_scope})")
    keys = []
    for name, values in (("project", selection.projects), ("model", selection.models)):
        if values:
            keys.append(f"{name} IN ({','.join('?' * len(values))})")
            params.extend(values)
    if selection.sources:
        keys.append(f"source IN ({','.join(str(int(s)) for s in selection.sources)})")
    if keys:
        parts.append(f"key IN (SELECT id FROM slot_keys WHERE {' AND '.join(keys)})")
    return " AND ".join(parts) or "1", params


def _day_facts(column: str, selection: Selection, prices: ClassPrices, by: str,
               interior: tuple[int | None, int | None], *, sessions: dict[str, set[str]],
               ) -> list[Fact]:
    """The facts of whole UTC days from the day sums of the view's kind, per price class.

    Summed per price class in SQL (a year's sessions never reach Python); each
    value's sessions are added to ``sessions``.
    """
    cond, params = day_where(selection, interior)
    kind = attribution_days.KINDS.index(column)
    if by == "effort":  # the rows split by effort
        kind += attribution_days.PAIRS
    inner = ", ".join(f"sum({c}) AS {c}" for c in attribution_days.SUMS)
    outer = ", ".join(f"sum(x.{c})" for c in attribution_days.SUMS)
    found = selection.read(
        f"WITH x AS MATERIALIZED (SELECT value, effort, key, {prices.period_sql('day * 86400')} "
        f"AS period, min(first) AS first, max(last) AS last, {inner} FROM attr_days "
        f"WHERE kind = {kind} AND {cond} GROUP BY 1, 2, 3, 4) "
        "SELECT x.value, x.effort, k.model, k.source, k.service_tier, k.inference_geo, k.speed, "
        f"k.long, x.period, min(x.first), max(x.last), {outer} FROM x "
        "JOIN slot_keys k ON k.id = x.key GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9", params)
    level = prices.relevel(selection.slot_thresholds)
    out = []
    for value, effort, model, source, tier, geo, speed, long, period, first, last, n, \
            *rest in found:
        attrs = Attrs("", "", model, _SOURCES[source], tier, geo, speed, level[long])
        usage = prices.usage(attrs, int(period), float(first), int(n), [int(v) for v in rest])
        split = {"model": model, "speed": speed}.get(by, effort)
        out.append(Fact((value or NONE, split or NONE), attrs, NO_BUCKET, float(first),
                        float(last), usage, 0))
    names = Facts(selection, prices).keys()
    for value, key in selection.read(
            f"SELECT DISTINCT value, key FROM attr_days WHERE kind = {kind} AND {cond}", params):
        sessions.setdefault(value or NONE, set()).add(names[key].session)
    return out


def _row_facts(column: str, selection: Selection, prices: ClassPrices, by: str,
               extra: tuple[str, ...]) -> list[Fact]:
    """The facts of the selection's requests that match ``extra`` (every one: ``()``)."""
    split = "model" if by == "model" else by
    found = selection.rows(
        f"{column}, {split}, session, project, model, source, service_tier, inference_geo, "
        f"speed, {prices.long_sql()}, {prices.period_sql('ts')}, min(ts), max(ts), count(*), "
        f"{SUMS_SQL}", *extra, tail="GROUP BY " + ", ".join(map(str, range(1, 12))))
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
    first: float = math.inf
    last: float = -math.inf


def _rows(found: Sequence[Fact], sessions: Mapping[str, set[str]], breakdown: bool
          ) -> list[Row]:
    """Fold the facts into one row per value (``sessions``: its sessions), with its breakdown."""
    accs: dict[str, _Acc] = {}
    for f in found:
        value, part = f.key
        acc = accs.get(value)
        if acc is None:
            acc = accs[value] = _Acc()
        acc.usage = acc.usage + f.usage
        acc.parts[part] = acc.parts.get(part, ZERO) + f.usage
        acc.models.add(f.attrs.model)
        acc.first = min(acc.first, f.first)
        acc.last = max(acc.last, f.last)
    return [Row(value, a.first, a.last, a.usage, tuple(sorted(a.models)),
                tuple(sorted(a.parts.items())) if breakdown else (), a.first, a.last,
                sessions=len(sessions.get(value, ())))
            for value, a in accs.items()]
