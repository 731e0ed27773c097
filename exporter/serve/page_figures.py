"""The page's figures (:class:`PageData`), computed from the ledger's SQL figures.

The same figures as ``report`` (slots and rollups, never a scan of every
request): the summary of the last 30 days, today's, this week's and this
month's cost, cost per day and by project, active sessions and, where the
status line feeds them, the plan-limit windows. No session ids (the summary's
session table is left empty); projects under the ``project_label`` policy.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

from exporter.ingest.formats import CLAUDE, CODEX
from exporter.ledger import slots
from exporter.ledger.store import Ledger
from exporter.projections import agents, budget_pace, caps, figures
from exporter.projections.class_prices import ClassPrices
from exporter.projections.facts import Facts
from exporter.projections.labels import LabelPolicy
from exporter.projections.money import usd
from exporter.projections.periods import (
    DAY,
    Range,
    Zone,
    date_day,
    day_date,
    iso,
    month_start,
    offset_sql,
    resolve_zone,
    transitions,
    week_start,
)
from exporter.projections.plan.pace import NOT_ENOUGH, Pace
from exporter.projections.project_groups import ProjectGroups, folders_of
from exporter.projections.range_check import checked
from exporter.projections.selection import Selection, TimeKey, of_ledger
from exporter.projections.usage import ZERO, AgentUsage, Usage
from exporter.records import TTL_1H, TTL_5M
from exporter.serve.page_range import DEFAULT, PageQuery
from exporter.sqlite import sqlite3

WINDOW_DAYS: Final = 30
MAX_BARS: Final = 400  # days in the daily chart; a longer range is drawn a bar a month
TTLS: Final = (("5m", TTL_5M), ("1h", TTL_1H))  # active sessions, as the gauge's ttl label


@dataclass(frozen=True, slots=True)
class Window:
    """One plan-limit window as the status line last reported it."""

    name: str  # five_hour, seven_day
    used_ratio: float
    resets_at: float
    pace: Pace | None = None  # projected at reset and when it runs out (docs/plan-limits.md)
    exhausted: int = 0  # instances that reached 100 % (shown for other agents' windows)
    usd_per_percent: float | None = None  # the look-back estimate (shown for other agents')


@dataclass(frozen=True, slots=True)
class PageData:
    """Every figure on the page, as of ``now``."""

    summary: figures.Summary  # the page's range (default: the last WINDOW_DAYS whole local days)
    now: float
    zone: Zone
    periods: Mapping[str, float]  # today / week / month: cost in USD
    budgets: Mapping[str, float]  # day / month: USD (settings budget_*_usd)
    daily: tuple[tuple[str, float], ...]  # (local date, cost USD), oldest first, no gaps
    by_project: tuple[tuple[str, float], ...]  # (project label, cost USD), most first
    active: Mapping[str, int]  # ttl -> sessions whose last request is younger
    plan: tuple[Window, ...] = ()
    prices: Mapping[str, str] = field(default_factory=dict)  # RateTable.describe(), as report's
    query: PageQuery = DEFAULT  # the range as asked (links keep it)
    span: tuple[float, float] | None = None  # first and last request of the roots, any time
    roots: tuple[str, ...] = ()  # the transcript directories followed
    # day / month: the spend at their end at the current pace (exporter.projections.budget_pace)
    pace: Mapping[str, budget_pace.Pace] = field(default_factory=dict)
    # Each agent's usage in the range, where the roots hold another agent than Claude Code
    # (whatever ``query.agent`` filters: the panel offers every agent).
    agents: Mapping[str, AgentUsage] = field(default_factory=dict)
    # Other agents' plan windows from their own logs (Codex's rate limits), by agent: only
    # those that logged one (whatever ``query.agent`` filters: a window is the account's).
    agent_plan: Mapping[str, tuple[Window, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``report --json``'s object for the page's range and its own figures, capped (caps.py)."""
        projects, rest = self.by_project[:caps.API_ROWS], self.by_project[caps.API_ROWS:]
        page: dict[str, Any] = {
            "generated": iso(self.now, self.zone),
            "cost_usd": {k: round(v, 6) for k, v in self.periods.items()},
            "budget_usd": dict(self.budgets),
            "projected_usd": {p: None if v.projected_usd is None else round(v.projected_usd, 6)
                              for p, v in self.pace.items()},
            "daily_cost_usd": [{"day": d, "cost_usd": round(c, 6)} for d, c in self.daily],
            "by_project_cost_usd": [{"project": p, "cost_usd": round(c, 6)}
                                    for p, c in projects],
            "active_sessions": dict(self.active),
            "plan_windows": [_window_json(w, self.zone) for w in self.plan],
            **{f"{agent}_plan_windows": [_agent_window_json(w, self.zone) for w in windows]
               for agent, windows in self.agent_plan.items()},  # only where present
            "requests_any_time": None if self.span is None else {
                "first": iso(self.span[0], self.zone), "last": iso(self.span[1], self.zone)},
        }
        if self.span is None:
            page["no_transcripts"] = list(self.roots)
        if self.agents or self.query.agent is not None:  # a Claude Code-only page is as it was
            page["agent"] = self.query.agent
            page["agents"] = {a: u.to_json() for a, u in self.agents.items()}
        if rest:
            page["by_project_other"] = caps.other_cost(rest, "projects")
        return {**caps.summary_json(self.summary), "prices": dict(self.prices), "page": page}


class LedgerSource:
    """Computes :class:`PageData` from a ledger's SQL figures for some transcript roots."""

    def __init__(self, ledger: Ledger, roots: Sequence[Path], prices: ClassPrices, zone: Zone, *,
                 budgets: Mapping[str, float], project_label: str = "basename",
                 project_grouping: str = "folder",
                 kv_bytes_per_token: Mapping[str, int] | None = None,
                 upload_bytes_per_token: float = 0.0,
                 clock: Callable[[], float] = time.time) -> None:
        """Remember what to read; the ledger's shape (slots, days, context) is checked once.

        The plan tables are looked for at each build until found: the status
        line's first sample creates them while ``serve`` runs.
        """
        self._ledger = ledger
        self._roots = tuple(str(r) for r in roots)
        self._base = of_ledger(ledger.read, ledger.scope(list(roots)), Range(None, None, zone),
                               ledger.scope_filter(list(roots)))
        self._plan = False  # found at the first build that looks (_windows)
        self._prices = prices
        self._zone = zone
        self._budgets = dict(budgets)
        self._project_label = project_label
        self._grouping = project_grouping
        self._kv = dict(kv_bytes_per_token or {})
        self._upload = upload_bytes_per_token
        self._clock = clock

    def check(self, query: PageQuery) -> None:
        """Raise the PeriodError ``report`` would give for this range, or nothing."""
        self.range_of(query, self._clock())

    def range_of(self, query: PageQuery, now: float) -> Range:
        """The range of ``query`` as ``report --since/--until/--timezone`` reads it.

        Without ``since`` and ``until``: the default window, from the earlier of 30
        days back and the month's first day (whole local days), on.
        """
        zone = self._zone if query.tz is None or query.tz.lower() == "local" \
            else resolve_zone(query.tz, {})
        if query.ranged:
            return checked(Range.parse(query.since, query.until, zone, now),
                           query.since, query.until)
        today = date_day(zone.local(now).date())
        return Range(zone.midnight(min(today - WINDOW_DAYS + 1, month_start(today))), None, zone)

    def __call__(self, query: PageQuery = DEFAULT) -> PageData:
        """The figures now, over the range ``query`` asks for."""
        now = self._clock()
        rng = self.range_of(query, now)
        zone = rng.zone
        today = date_day(zone.local(now).date())
        # Projects as /metrics and `report` group them; folders learned at each build
        # (a new one may appear while serve runs).
        groups = ProjectGroups(self._grouping, folders_of(self._ledger.read))
        whole = dataclasses.replace(self._base, range=rng, groups=groups)
        base, roots = self._base, self._roots
        if query.agent is not None:  # as report --agent: that agent's roots only
            one = agents.scope(self._ledger, self._roots, query.agent)
            base, roots = one.of(self._base), one.roots
        span = base.bounds()
        first, last = _days(rng, span, now)
        chosen = dataclasses.replace(base, range=rng, groups=groups)
        summary = figures.summary(
            chosen, self._prices, kv_bytes_per_token=self._kv,
            upload_bytes_per_token=self._upload,
            lines=self._ledger.counters("lines", roots),
            rejected=self._ledger.counters("rejected", roots), session_rows=0)
        found = agents.scopes(self._ledger, self._roots, self._base)
        each = self._agents(whole, found)
        summary = dataclasses.replace(
            summary, by_agent=each if query.agent is None and len(each) > 1 else {},
            cache_writes_measured=agents.measures_cache_writes(query.agent) if query.agent
            else agents.all_measure_cache_writes(found))
        days, by_project = self._by_day(chosen, zone.midnight(first), now)
        plan, agent_plan = self._windows(now)
        daily = tuple((day_date(n).isoformat(), usd(days[n].cost_pico if n in days else 0))
                      for n in range(first, last + 1))
        return PageData(
            summary=summary, now=now, zone=zone,
            periods=self._periods(base, rng, days, today, now), budgets=self._budgets,
            daily=daily, by_project=by_project, active=self._active(base, now),
            plan=plan, prices=self._prices.pricing.describe(), query=query,
            span=span, roots=self._roots,
            pace=budget_pace.of_selection(chosen, self._prices, now, self._budgets), agents=each,
            agent_plan=agent_plan)

    def _agents(self, whole: Selection, found: Mapping[str, agents.Scope]
                ) -> dict[str, AgentUsage]:
        """Each agent's usage over ``whole``, where the roots hold an agent besides Claude Code."""
        if set(found) <= {CLAUDE}:
            return {}
        return {a: agents.usage_of(s.of(whole), self._prices, a) for a, s in found.items()}

    def _periods(self, base: Selection, rng: Range, days: Mapping[int, Usage], today: int,
                 now: float) -> dict[str, float]:
        """Today's, this week's and this month's cost (the range's days when they cover them)."""
        zone = rng.zone
        start = min(week_start(today), month_start(today))
        if not (rng.until is None and rng.since is not None and rng.since <= zone.midnight(start)):
            recent = dataclasses.replace(base, range=Range(zone.midnight(start), None, zone))
            days = self._by_day(recent, zone.midnight(start), now)[0]
        cost = {day: usage.cost_pico for day, usage in days.items()}

        def since(first: int) -> float:
            return usd(sum(c for d, c in cost.items() if d >= first))

        return {"today": since(today), "week": since(week_start(today)),
                "month": since(month_start(today))}

    def _by_day(self, selection: Selection, lo: float, now: float,
                ) -> tuple[dict[int, Usage], tuple[tuple[str, float], ...]]:
        """Usage per local day, and cost per project label (most first), from one query.

        Days are grouped in SQL like the ``daily`` view does (slot sums where the
        zone's offsets keep slots whole); projects go through the scrape's
        ``project_label`` policy, so the page names them as /metrics does.
        """
        zone = selection.range.zone
        segments = transitions(zone, lo, max(now, lo) + DAY)
        aligned = all(o % slots.SLOT_SECONDS == 0 for _, o in segments) and all(
            t % slots.SLOT_SECONDS == 0 for t, _ in segments[1:])
        utc = len(segments) == 1 and segments[0][1] % DAY == 0

        def day(t: str) -> str:
            return f"CAST(({t} + {offset_sql(segments, t)}) / {DAY} AS INTEGER)"

        # Folded per price class and project in SQL: the sessions never reach Python.
        found = Facts(selection, self._prices, by_class=True, keep_project=True).collect(
            TimeKey(day, aligned, day_aligned=utc))
        days: dict[int, Usage] = {}
        # The label policy's privacy, not its metric cap: the page ranks by cost and caps itself.
        policy = LabelPolicy(self._project_label, max_projects=max(1, len(found)),
                             groups=selection.groups)
        projects: dict[str, int] = {}
        for f in found:
            days[int(f.key)] = days.get(int(f.key), ZERO) + f.usage
            label = policy.project(f.attrs.project) or "(all projects)"
            projects[label] = projects.get(label, 0) + f.usage.cost_pico
        ranked = sorted(((p, usd(c)) for p, c in projects.items()), key=lambda kv: (-kv[1], kv[0]))
        return days, tuple(ranked)

    def _active(self, base: Selection, now: float) -> dict[str, int]:
        """Sessions whose last request is younger than each cache TTL (an index range)."""
        out = {}
        for label, seconds in TTLS:
            rows = base.rows("count(DISTINCT session)", "ts >= ?", params=[now - seconds])
            out[label] = int(rows[0][0])
        return out

    def _windows(self, now: float) -> tuple[tuple[Window, ...], dict[str, tuple[Window, ...]]]:
        """The status line's plan-limit windows, and other agents' (Codex's), where logged.

        Each agent's dollars per 1 % and pace from its own requests' cost.
        """
        if not self._plan:  # looked for again: the first sample may have come since
            self._plan = bool(self._ledger.read(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'plan_windows'", []))
        if not self._plan:
            return (), {}
        from exporter.projections.plan.cost import claude_cost, codex_cost  # noqa: PLC0415 - as above
        from exporter.projections.plan.windows import plan_figures  # noqa: PLC0415 - only with plan tables

        conn = cast(sqlite3.Connection, _ReadConnection(self._ledger))
        cost = claude_cost(conn, self._prices)  # the estimate and the pace: Claude Code's requests
        found = plan_figures(conn, now, cost, agent_cost={CODEX: codex_cost(conn, self._prices)})
        others = {agent: tuple(
            Window(name, w.used_ratio, w.resets_at, w.pace, w.exhausted,
                   None if w.estimate is None else w.estimate.usd_per_percent)
            for name, w in sorted(own.windows.items()))
            for agent, own in found.agents.items() if own.windows}
        return tuple(Window(name, w.used_ratio, w.resets_at, w.pace)
                     for name, w in sorted(found.windows.items())), others


def _window_json(w: Window, zone: Zone) -> dict[str, object]:
    """One plan window in /api/summary.json: used, reset, and its pace.

    ``pace`` is ``not_enough_data``, ``on_track``, ``limit_ahead`` or
    ``limit_reached``; ``projected_ratio`` is null without enough data,
    ``limit_at`` null unless the window runs (or ran) out before its reset.
    """
    pace = w.pace
    projected = None if pace is None or pace.projected_percent is None else (
        round(pace.projected_percent / 100, 4))
    limit_at = None if pace is None or pace.limit_at is None else iso(pace.limit_at, zone)
    return {"window": w.name, "used_ratio": w.used_ratio, "resets_at": iso(w.resets_at, zone),
            "pace": NOT_ENOUGH if pace is None else pace.state,
            "projected_ratio": projected, "limit_at": limit_at}


def _agent_window_json(w: Window, zone: Zone) -> dict[str, object]:
    """Another agent's plan window in /api/summary.json: the status line's keys, and more.

    ``windows_exhausted``: its instances that reached 100 %; ``usd_per_percent``:
    the look-back estimate from that agent's own requests (null: none yet).
    """
    per = None if w.usd_per_percent is None else round(w.usd_per_percent, 6)
    return {**_window_json(w, zone), "windows_exhausted": w.exhausted, "usd_per_percent": per}


def _days(rng: Range, span: tuple[float, float] | None, now: float) -> tuple[int, int]:
    """The first and last local day of the daily chart: the range, cut to what can be drawn.

    An open end is the first request (or today) and today (or the last request);
    a range far longer than :data:`MAX_BARS` days is cut to the requests' days,
    and one with no requests at all to its last :data:`MAX_BARS` days.
    """
    zone = rng.zone

    def day(t: float) -> int:
        return date_day(zone.local(t).date())

    newest = now if span is None else max(now, span[1])
    last = day(newest if rng.until is None else min(rng.until - 1, newest))
    first = day(rng.since if rng.since is not None else span[0] if span else now)
    if last - first >= MAX_BARS and span is not None:
        first = max(first, day(span[0]))
    if last - first >= MAX_BARS and span is None:
        first = last - MAX_BARS + 1
    return first, max(first, last)


class _Rows(list[tuple[Any, ...]]):
    """A query's rows with the two cursor methods the plan figures call."""

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self)

    def fetchone(self) -> tuple[Any, ...] | None:
        return self[0] if self else None


class _ReadConnection:
    """``execute`` over :meth:`Ledger.read` (its lock, read-only), for the plan figures."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def execute(self, sql: str, params: Sequence[object] = ()) -> _Rows:
        return _Rows(self._ledger.read(sql, params))
