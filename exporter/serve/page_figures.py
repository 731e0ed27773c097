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

from exporter.ledger import slots
from exporter.ledger.store import Ledger
from exporter.projections import caps, figures
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
    transitions,
    week_start,
)
from exporter.projections.selection import CONTEXT_SQL, Selection, TimeKey
from exporter.projections.usage import ZERO, Usage
from exporter.records import TTL_1H, TTL_5M
from exporter.sqlite import sqlite3

WINDOW_DAYS: Final = 30
TTLS: Final = (("5m", TTL_5M), ("1h", TTL_1H))  # active sessions, as the gauge's ttl label


@dataclass(frozen=True, slots=True)
class Window:
    """One plan-limit window as the status line last reported it."""

    name: str  # five_hour, seven_day
    used_ratio: float
    resets_at: float


@dataclass(frozen=True, slots=True)
class PageData:
    """Every figure on the page, as of ``now``."""

    summary: figures.Summary  # the last WINDOW_DAYS days (whole local days)
    now: float
    zone: Zone
    periods: Mapping[str, float]  # today / week / month: cost in USD
    budgets: Mapping[str, float]  # day / month: USD (settings budget_*_usd)
    daily: tuple[tuple[str, float], ...]  # (local date, cost USD), oldest first, no gaps
    by_project: tuple[tuple[str, float], ...]  # (project label, cost USD), most first
    active: Mapping[str, int]  # ttl -> sessions whose last request is younger
    plan: tuple[Window, ...] = ()
    prices: Mapping[str, str] = field(default_factory=dict)  # RateTable.describe(), as report's

    def to_json(self) -> dict[str, Any]:
        """``report --json``'s object for the page's range and its own figures, capped (caps.py)."""
        projects, rest = self.by_project[:caps.API_ROWS], self.by_project[caps.API_ROWS:]
        page: dict[str, Any] = {
            "generated": iso(self.now, self.zone),
            "cost_usd": {k: round(v, 6) for k, v in self.periods.items()},
            "budget_usd": dict(self.budgets),
            "daily_cost_usd": [{"day": d, "cost_usd": round(c, 6)} for d, c in self.daily],
            "by_project_cost_usd": [{"project": p, "cost_usd": round(c, 6)}
                                    for p, c in projects],
            "active_sessions": dict(self.active),
            "plan_windows": [{"window": w.name, "used_ratio": w.used_ratio,
                              "resets_at": iso(w.resets_at, self.zone)} for w in self.plan],
        }
        if rest:
            page["by_project_other"] = caps.other_cost(rest, "projects")
        return {**caps.summary_json(self.summary), "prices": dict(self.prices), "page": page}


class LedgerSource:
    """Computes :class:`PageData` from a ledger's SQL figures for some transcript roots."""

    def __init__(self, ledger: Ledger, roots: Sequence[Path], prices: ClassPrices, zone: Zone, *,
                 budgets: Mapping[str, float], project_label: str = "basename",
                 kv_bytes_per_token: Mapping[str, int] | None = None,
                 upload_bytes_per_token: float = 0.0,
                 clock: Callable[[], float] = time.time) -> None:
        """Remember what to read; the ledger's shape (slots, days, context) is checked once."""
        tables = {r[0] for r in ledger.read("SELECT name FROM sqlite_master", [])}
        columns = {r[1] for r in ledger.read("PRAGMA table_info(requests)", [])}
        self._ledger = ledger
        self._base = Selection(
            ledger.read, ledger.scope(list(roots)), Range(None, None, zone),
            slots="slots" in tables, days={"slot_days", "slot_day_peaks"} <= tables,
            slot_thresholds=slots.read_thresholds(ledger.read) if "slots" in tables
            else slots.DEFAULT_THRESHOLDS,
            slot_scope=ledger.scope_filter(list(roots)),
            context="context" if "context" in columns else CONTEXT_SQL)
        self._plan = "plan_windows" in tables
        self._prices = prices
        self._zone = zone
        self._budgets = dict(budgets)
        self._project_label = project_label
        self._kv = dict(kv_bytes_per_token or {})
        self._upload = upload_bytes_per_token
        self._clock = clock

    def __call__(self) -> PageData:
        """The figures now."""
        now = self._clock()
        zone = self._zone
        today = date_day(zone.local(now).date())
        # At least 30 days, and the whole month (31 days on the 31st).
        first = min(today - WINDOW_DAYS + 1, month_start(today))
        recent = self._select(zone.midnight(first))
        summary = figures.summary(
            recent, self._prices, kv_bytes_per_token=self._kv,
            upload_bytes_per_token=self._upload, lines=self._ledger.counters("lines"),
            rejected=self._ledger.counters("rejected"), session_rows=0)
        days, by_project = self._by_day(recent, zone.midnight(first), now)
        cost = {day: usage.cost_pico for day, usage in days.items()}

        def since(start: int) -> float:
            return usd(sum(c for d, c in cost.items() if d >= start))

        periods = {"today": since(today), "week": since(week_start(today)),
                   "month": since(month_start(today))}
        daily = tuple((day_date(n).isoformat(), usd(cost.get(n, 0)))
                      for n in range(first, today + 1))
        return PageData(
            summary=summary, now=now, zone=zone, periods=periods, budgets=self._budgets,
            daily=daily, by_project=by_project, active=self._active(now),
            plan=self._windows(now), prices=self._prices.pricing.describe())

    def _select(self, since: float) -> Selection:
        """The base selection from ``since`` on."""
        return dataclasses.replace(self._base, range=Range(since, None, self._zone))

    def _by_day(self, selection: Selection, lo: float, now: float,
                ) -> tuple[dict[int, Usage], tuple[tuple[str, float], ...]]:
        """Usage per local day, and cost per project label (most first), from one query.

        Days are grouped in SQL like the ``daily`` view does (slot sums where the
        zone's offsets keep slots whole); projects go through the scrape's
        ``project_label`` policy, so the page names them as /metrics does.
        """
        segments = transitions(self._zone, lo, max(now, lo) + DAY)
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
        policy = LabelPolicy(self._project_label, max_projects=max(1, len(found)))
        projects: dict[str, int] = {}
        for f in found:
            days[int(f.key)] = days.get(int(f.key), ZERO) + f.usage
            label = policy.project(f.attrs.project) or "(all projects)"
            projects[label] = projects.get(label, 0) + f.usage.cost_pico
        ranked = sorted(((p, usd(c)) for p, c in projects.items()), key=lambda kv: (-kv[1], kv[0]))
        return days, tuple(ranked)

    def _active(self, now: float) -> dict[str, int]:
        """Sessions whose last request is younger than each cache TTL (an index range)."""
        out = {}
        for label, seconds in TTLS:
            rows = self._base.rows("count(DISTINCT session)", "ts >= ?", params=[now - seconds])
            out[label] = int(rows[0][0])
        return out

    def _windows(self, now: float) -> tuple[Window, ...]:
        """The plan-limit windows, where the status line has fed any."""
        if not self._plan:
            return ()
        from exporter.projections.plan.windows import plan_figures  # noqa: PLC0415 - only with plan tables

        conn = cast(sqlite3.Connection, _ReadConnection(self._ledger))
        found = plan_figures(conn, now).windows
        return tuple(Window(name, w.used_ratio, w.resets_at) for name, w in sorted(found.items()))


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
