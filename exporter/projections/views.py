"""The `report` views: one row per day, week, month, session, project or 5-hour block.

Each view folds :class:`~exporter.projections.usage.Fact` rows (SQL sums per
group and price class) into typed :class:`Row` values; totals are the exact
integer sums of all rows, so they equal the summary's totals over the same
selection. Days, weeks (Monday first, ISO 8601) and months are those of the
report's time zone.

Blocks are the 5-hour windows plan limits are counted in. A block starts at the
first request after the previous block ended and lasts five hours (Anthropic's
rule, the default); ``block_rule="hour"`` floors each start to the hour, as
ccusage does. See docs/figures.md, "Blocks".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from exporter.ledger import slots
from exporter.projections import caps, periods
from exporter.projections.class_prices import ClassPrices
from exporter.projections.facts import Facts
from exporter.projections.figures import Covered
from exporter.projections.periods import Zone, day_date
from exporter.projections.selection import Selection, TimeKey
from exporter.projections.sessions import gap_counts, session_medians
from exporter.projections.usage import ZERO, Fact, Usage

VIEWS: Final = ("daily", "weekly", "monthly", "session", "project", "blocks")
ORDERS: Final = ("oldest", "newest", "cost", "requests", "tokens")
BLOCK_SECONDS: Final = 5 * 3600
BLOCK_RULES: Final = ("first-request", "hour")
MIN_ELAPSED: Final = 60.0  # a block a few seconds old has no meaningful burn rate yet
DEFAULT_ORDER: Final = {"session": "newest", "project": "cost"}

View_ = Literal["daily", "weekly", "monthly", "session", "project", "blocks"]


@dataclass(frozen=True, slots=True)
class Row:
    """One row of a view: what it is, when, its usage and the models it used."""

    label: str  # 2026-01-31, 2026-W05, 2026-01, a session id, a project path, a block start
    start: float  # period or block start; a session's or project's first request
    end: float  # period or block end (exclusive); a session's or project's last request
    usage: Usage
    models: tuple[str, ...]
    breakdown: tuple[tuple[str, Usage], ...] = ()  # per model, with --breakdown
    first: float = math.nan  # first and last request in the row
    last: float = math.nan
    project: str = ""  # session view: the project of the session's first request
    sessions: int = 0  # project view: how many sessions
    gap_p50: float | None = None  # session view: median gap between main requests, seconds
    active: bool = False  # blocks: the block still open at the report's time
    top_models: tuple[str, ...] = ()  # the costliest caps.MODEL_NAMES, if it used more models
    agent: str = ""  # whose logs (exporter.projections.agents): set only when a view has two


@dataclass(frozen=True, slots=True)
class ActiveBlock:
    """The block still open: elapsed time, burn rate and a projection to its end."""

    start: float
    end: float
    now: float
    usage: Usage

    @property
    def elapsed(self) -> float:
        """Seconds since the block started."""
        return self.now - self.start

    @property
    def remaining(self) -> float:
        """Seconds until the block ends."""
        return max(self.end - self.now, 0.0)

    @property
    def _hours(self) -> float:
        """Elapsed hours, at least a minute's worth."""
        return max(self.elapsed, MIN_ELAPSED) / 3600

    @property
    def tokens_per_hour(self) -> float:
        """All tokens (prompt and output) per hour since the block started."""
        return self.usage.tokens / self._hours

    @property
    def cost_pico_per_hour(self) -> float:
        """List-price cost per hour since the block started, pico-dollars."""
        return self.usage.cost_pico / self._hours

    @property
    def projected_tokens(self) -> int:
        """Tokens at the block's end if the burn rate holds."""
        return self.usage.tokens + round(self.tokens_per_hour * self.remaining / 3600)

    @property
    def projected_cost_pico(self) -> int:
        """Cost at the block's end if the burn rate holds, pico-dollars."""
        return self.usage.cost_pico + round(self.cost_pico_per_hour * self.remaining / 3600)


@dataclass(frozen=True, slots=True)
class View:
    """A whole view: its rows (after --order and --limit) and the totals of all rows."""

    name: str
    covered: Covered
    rows: tuple[Row, ...]
    total: Usage
    count: int  # rows before --limit
    rest: Usage = ZERO  # the rows --limit left out, summed: shown rows + rest = total
    breakdown: bool = False
    active: ActiveBlock | None = None
    block_rule: str = BLOCK_RULES[0]
    filters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # With two agents or more: each row is one agent's, and each agent's open block.
    agents: tuple[str, ...] = ()
    actives: Mapping[str, ActiveBlock] = field(default_factory=dict)
    # False where every row is of an agent that logs no cache writes (Codex alone).
    cache_writes_measured: bool = True


@dataclass(frozen=True, slots=True)
class Options:
    """How to build a view: ordering, row limit, per-model rows, block rule, the time now."""

    order: str | None = None  # None: the view's default
    limit: int | None = None
    breakdown: bool = False
    block_rule: str = BLOCK_RULES[0]
    now: float = 0.0


def build(name: str, selection: Selection, prices: ClassPrices, options: Options) -> View:
    """Build one of :data:`VIEWS` over the selection."""
    facts = Facts(selection, prices, by_class=name not in ("session", "project"))
    bounds = selection.bounds()
    covered = Covered(selection.range, *(bounds or (None, None)))
    active = None
    if name in ("daily", "weekly", "monthly"):
        rows = _periods(name, facts, selection.range.zone, bounds, options.breakdown)
    elif name == "session":
        rows = _sessions(facts, selection, options.breakdown)
    elif name == "project":
        rows = _projects(facts, options.breakdown)
    elif name == "blocks":
        rows, active = _blocks(facts, selection, options)
    else:
        raise ValueError(f"unknown view {name!r}; expected one of {', '.join(VIEWS)}")
    total = sum((r.usage for r in rows), ZERO)
    ordered = order_rows(rows, options.order or DEFAULT_ORDER.get(name, "oldest"))
    cut = len(ordered) if options.limit is None else max(options.limit, 0)
    filters = {"projects": selection.projects, "models": selection.models,
               "sources": tuple(s.label for s in selection.sources)}
    return View(name, covered, tuple(ordered[:cut]), total, len(rows),
                sum((r.usage for r in ordered[cut:]), ZERO), options.breakdown, active,
                options.block_rule, filters)


def merged(parts: Mapping[str, View], options: Options, order: str) -> View:
    """One view of each agent's view (built without --limit): rows tagged, ordered and cut as one.

    A row is one agent's (a day's Claude Code requests, a day's Codex ones):
    sums never mix agents, the total is every row's. Rows of equal order keep
    the agents' order. ``order`` is the view's default order (--order wins).
    """
    views = list(parts.values())
    if len(views) == 1:
        only = views[0]
        return _cut(only, list(only.rows), options, order)
    rows = [dataclasses.replace(r, agent=agent) for agent, v in parts.items() for r in v.rows]
    firsts = [v.covered.first for v in views if v.covered.first is not None]
    lasts = [v.covered.last for v in views if v.covered.last is not None]
    covered = Covered(views[0].covered.range, min(firsts, default=None), max(lasts, default=None))
    actives = {a: v.active for a, v in parts.items() if v.active is not None}
    joined = dataclasses.replace(
        views[0], covered=covered, total=sum((r.usage for r in rows), ZERO),
        active=max(actives.values(), key=lambda b: b.start, default=None),
        agents=tuple(parts), actives=actives)
    return _cut(joined, rows, options, order)


def _cut(view: View, rows: list[Row], options: Options, order: str) -> View:
    """The view with ``rows`` in --order (else ``order``), the first --limit kept."""
    ordered = order_rows(rows, options.order or order)
    cut = len(ordered) if options.limit is None else max(options.limit, 0)
    return dataclasses.replace(view, rows=tuple(ordered[:cut]), count=len(rows),
                               rest=sum((r.usage for r in ordered[cut:]), ZERO))


def order_rows(rows: Sequence[Row], order: str) -> list[Row]:
    """Rows in ``order``: oldest/newest by start, or most cost/requests/tokens first."""
    keys: dict[str, Callable[[Row], Any]] = {
        "oldest": lambda r: (r.start, r.label),
        "newest": lambda r: (-r.start, r.label),
        "cost": lambda r: (-r.usage.cost_pico, -r.usage.unpriced, r.start, r.label),
        "requests": lambda r: (-r.usage.requests, r.start, r.label),
        "tokens": lambda r: (-r.usage.tokens, r.start, r.label),
    }
    if order not in keys:
        raise ValueError(f"unknown order {order!r}; expected one of {', '.join(ORDERS)}")
    return sorted(rows, key=keys[order])


# ---- folding facts into rows ------------------------------------------------------------
@dataclass(slots=True)
class _Acc:
    """A row while facts are folded into it."""

    usage: Usage = ZERO
    models: dict[str, Usage] = field(default_factory=dict)
    first: float = math.inf
    last: float = -math.inf
    sessions: set[str] = field(default_factory=set)
    project: tuple[float, str] = (math.inf, "")

    def add(self, f: Fact) -> None:
        """Fold one fact in."""
        self.usage = self.usage + f.usage
        self.models[f.attrs.model] = self.models.get(f.attrs.model, ZERO) + f.usage
        self.first = min(self.first, f.first)
        self.last = max(self.last, f.last)
        self.sessions.add(f.attrs.session)
        self.project = min(self.project, (f.first, f.attrs.project))

    def row(self, label: str, start: float, end: float, breakdown: bool, **extra: Any) -> Row:
        """The finished row."""
        parts = tuple(sorted(self.models.items())) if breakdown else ()
        top = caps.costliest(self.models, caps.MODEL_NAMES)
        return Row(label, start, end, self.usage, tuple(sorted(self.models)), parts,
                   self.first, self.last, **extra,
                   top_models=tuple(m for m, _ in top.shown) if top.more else ())


def _fold(found: Iterable[Fact], key: Callable[[Fact], Any]) -> dict[Any, _Acc]:
    """Fold facts into accumulators by ``key``."""
    out: dict[Any, _Acc] = {}
    for f in found:
        k = key(f)
        acc = out.get(k)
        if acc is None:
            acc = out[k] = _Acc()
        acc.add(f)
    return out


def _periods(name: str, facts: Facts, zone: Zone, bounds: tuple[float, float] | None,
             breakdown: bool) -> list[Row]:
    """Rows per local day, week (Monday first) or month."""
    if bounds is None:
        return []
    segments = periods.transitions(zone, *bounds)
    aligned = all(o % slots.SLOT_SECONDS == 0 for _, o in segments) and all(
        s % slots.SLOT_SECONDS == 0 for s, _ in segments[1:])

    def day(t: str) -> str:
        return f"CAST(({t} + {periods.offset_sql(segments, t)}) / {periods.DAY} AS INTEGER)"

    utc = len(segments) == 1 and segments[0][1] % periods.DAY == 0  # days are UTC days
    found = facts.collect(TimeKey(day, aligned, day_aligned=utc))
    start_of: Callable[[int], int] = {
        "daily": lambda d: d, "weekly": periods.week_start, "monthly": periods.month_start,
    }[name]
    rows = []
    for first_day, acc in _fold(found, lambda f: start_of(int(f.key))).items():
        last_day = {"daily": first_day + 1, "weekly": first_day + 7,
                    "monthly": periods.next_month(first_day)}[name]
        rows.append(acc.row(_period_label(name, first_day), zone.midnight(first_day),
                            zone.midnight(last_day), breakdown))
    return rows


def _period_label(name: str, day: int) -> str:
    """``2026-01-31``, ``2026-W05`` (ISO week) or ``2026-01``."""
    d = day_date(day)
    if name == "weekly":
        year, week, _ = d.isocalendar()
        return f"{year}-W{week:02d}"
    if name == "monthly":
        return f"{d.year}-{d.month:02d}"
    return d.isoformat()


def _sessions(facts: Facts, selection: Selection, breakdown: bool) -> list[Row]:
    """Rows per session: project, first and last request, median gap."""
    found = facts.collect(buckets=True)
    accs = _fold(found, lambda f: f.attrs.session)
    medians = session_medians(selection, gap_counts(found))
    return [acc.row(session, acc.first, acc.last, breakdown, project=acc.project[1],
                    sessions=1, gap_p50=medians.get(session))
            for session, acc in accs.items()]


def _projects(facts: Facts, breakdown: bool) -> list[Row]:
    """Rows per project (the transcripts' working directory)."""
    accs = _fold(facts.collect(), lambda f: f.attrs.project)
    return [acc.row(project, acc.first, acc.last, breakdown, project=project,
                    sessions=len(acc.sessions))
            for project, acc in accs.items()]


# ---- blocks -----------------------------------------------------------------------------
def block_starts(selection: Selection, rule: str = BLOCK_RULES[0]) -> list[float]:
    """Start of every 5-hour block of the selection, in SQL (one index seek per block).

    ``first-request``: a block starts at the first request at or after the end of
    the previous one. ``hour``: the same request, floored to the hour (ccusage).
    """
    if rule not in BLOCK_RULES:
        raise ValueError(f"unknown block rule {rule!r}; expected one of {', '.join(BLOCK_RULES)}")
    start = "min(ts)" if rule == "first-request" else "CAST(min(ts) / 3600 AS INTEGER) * 3600.0"
    cond, params = selection.where()
    rel = selection.relation
    sql = (
        f"WITH RECURSIVE chain(start) AS (SELECT {start} FROM {rel} AS r WHERE {cond} "
        f"UNION ALL SELECT (SELECT {start} FROM {rel} AS r WHERE {cond} "
        f"AND ts >= chain.start + {BLOCK_SECONDS}) FROM chain WHERE chain.start IS NOT NULL) "
        "SELECT start FROM chain WHERE start IS NOT NULL"
    )
    return [float(r[0]) for r in selection.read(sql, [*params, *params])]


def _search(starts: Sequence[float], t: str, lo: int, hi: int) -> str:
    """SQL for the index ``i`` in ``[lo, hi)`` with ``starts[i] <= t``: a binary CASE tree."""
    if hi - lo <= 1:
        return str(lo)
    mid = (lo + hi) // 2
    return (f"CASE WHEN {t} < {starts[mid]!r} THEN {_search(starts, t, lo, mid)} "
            f"ELSE {_search(starts, t, mid, hi)} END")


def _blocks(facts: Facts, selection: Selection,
            options: Options) -> tuple[list[Row], ActiveBlock | None]:
    """Rows per block, and the active block (the last, if it has not ended at ``now``)."""
    starts = block_starts(selection, options.block_rule)
    if not starts:
        return [], None
    # A slot holding a block's end holds requests of two blocks: read those one by one.
    mixed = tuple(sorted({slots.slot_of(s + BLOCK_SECONDS) for s in starts
                          if (s + BLOCK_SECONDS) % slots.SLOT_SECONDS}))
    key = TimeKey(lambda t: _search(starts, t, 0, len(starts)), True, "first", mixed)
    rows = []
    active = None
    for index, acc in _fold(facts.collect(key), lambda f: int(f.key)).items():
        start = starts[index]
        end = start + BLOCK_SECONDS
        is_open = start <= options.now < end
        rows.append(acc.row(periods.iso(start, selection.range.zone), start, end,
                            options.breakdown, active=is_open))
        if is_open:
            active = ActiveBlock(start, end, options.now, acc.usage)
    return rows, active
