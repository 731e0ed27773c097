"""Budget pace: this month's (and today's) spend at its end, at the current pace.

For API users without plan windows the question is "will this month end over
``budget_month_usd``?". The answer is the spend so far plus the current pace
times the time left. The pace is the spend of the last :data:`WINDOW_S` (two
weeks: every weekday twice and two weekends, so neither a quiet night nor a
weekend nor one busy afternoon moves it far) divided by those fourteen days; a
user whose first request is younger has the pace of the time since it.
docs/budget-pace.md has the backtest that chose this pace over the month so
far, the last week, the last day and a blend.

Less than a day since the first request, and a month's first local day, say
"not enough data" (:attr:`Pace.projected_usd` is None): a few hours are no
month. Periods are local, in the zone handed in, as ``report`` reads them;
every spend is priced exactly as ``report`` prices it
(:class:`~exporter.projections.facts.Facts`, :class:`ClassPrices`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from exporter.projections.class_prices import ClassPrices
from exporter.projections.facts import Facts
from exporter.projections.money import usd
from exporter.projections.periods import (
    DAY,
    Range,
    Zone,
    date_day,
    month_start,
    next_month,
)
from exporter.projections.selection import Reader, Selection, of_ledger

WINDOW_S: Final = 14 * DAY  # the pace's window: two whole weeks
MIN_SPAN_S: Final = DAY  # a shorter history is taken as one day
MIN_MONTH_S: Final = DAY  # before a day of the month has passed: not enough data
REFRESH_S: Final = 10.0  # the gauge's figures are recomputed at most this often
PERIODS: Final = ("day", "month")

Spend = Callable[[float, float], float]
"""USD of the requests with ``lo <= ts < hi``."""


@dataclass(frozen=True, slots=True)
class Pace:
    """One period's spend, its pace and its projected end (USD)."""

    period: str  # day, month
    start: float  # the period's local start (epoch seconds)
    end: float  # and its end
    spent_usd: float  # from start to now
    usd_per_day: float  # the pace
    projected_usd: float | None  # at ``end`` at this pace; None: not enough data
    budget_usd: float | None = None  # budget_<period>_usd, when set

    @property
    def over(self) -> bool | None:
        """Whether the projection ends over the budget (None: no budget or no projection)."""
        if self.projected_usd is None or not self.budget_usd:
            return None
        return self.projected_usd > self.budget_usd


def usd_per_day(spend: Spend, now: float, first: float) -> float:
    """The pace: the last two weeks' spend per day (a shorter history: since ``first``)."""
    lo = max(now - WINDOW_S, first)
    return spend(lo, now) / max(now - lo, MIN_SPAN_S) * DAY


def paces(spend: Spend, now: float, zone: Zone, first: float | None,
          budgets: Mapping[str, float] | None = None) -> dict[str, Pace]:
    """Today's and this month's :class:`Pace` at ``now``; empty when there is no request.

    Not enough data (no projection): less than :data:`MIN_SPAN_S` since the
    first request, and for the month its first :data:`MIN_MONTH_S`.
    """
    if first is None or first > now:
        return {}
    rate = usd_per_day(spend, now, first)
    today = date_day(zone.local(now).date())
    month = month_start(today)
    bounds = {"day": (zone.midnight(today), zone.midnight(today + 1)),
              "month": (zone.midnight(month), zone.midnight(next_month(month)))}
    out = {}
    for period, (start, end) in bounds.items():
        spent = spend(start, now)
        enough = now - first >= MIN_SPAN_S and (period != "month" or now - start >= MIN_MONTH_S)
        projected = spent + rate * max(end - now, 0.0) / DAY if enough else None
        out[period] = Pace(period, start, end, spent, rate, projected,
                           (budgets or {}).get(period))
    return out


def ledger_spend(selection: Selection, prices: ClassPrices) -> Spend:
    """The :data:`Spend` of a selection, priced as ``report`` prices it."""

    def spend(lo: float, hi: float) -> float:
        if hi <= lo:
            return 0.0
        chosen = dataclasses.replace(selection, range=Range(lo, hi, selection.range.zone))
        facts = Facts(chosen, prices, by_class=True).collect()
        return usd(sum(f.usage.cost_pico for f in facts))

    return spend


def of_selection(selection: Selection, prices: ClassPrices, now: float,
                 budgets: Mapping[str, float] | None = None) -> dict[str, Pace]:
    """:func:`paces` of a selection's requests (its scope and filters; its time range ignored).

    In the selection's zone; what the gauge, the page and ``report`` show.
    """
    whole = dataclasses.replace(selection, range=Range(None, None, selection.range.zone))
    first = whole.largest("min(ts)")
    return paces(ledger_spend(whole, prices), now, whole.range.zone,
                 None if first is None else float(first), budgets)


def selection_of(read: Reader, relation: str, zone: Zone, slot_scope: str | None) -> Selection:
    """The whole scope as a :class:`Selection`, using the slot sums the ledger keeps."""
    return of_ledger(read, relation, Range(None, None, zone), slot_scope)


class PaceGauge:
    """The projected-spend gauge's series, recomputed at most every :data:`REFRESH_S`.

    A scrape reads the last figures; only one scrape in ``REFRESH_S`` seconds
    runs the (slot-sum) queries, under a lock, so concurrent scrapers share it.
    """

    def __init__(self, selection: Selection, prices: ClassPrices, *,
                 clock: Callable[[], float], refresh: float = REFRESH_S) -> None:
        """Spend of ``selection`` (its zone's days and months), at ``clock``'s time."""
        self._selection = selection
        self._prices = prices
        self._clock = clock
        self._refresh = refresh
        self._lock = threading.Lock()
        self._at: float | None = None
        self._series: list[tuple[float, dict[str, str]]] = []

    def paces(self, now: float) -> dict[str, Pace]:
        """Today's and this month's pace at ``now`` (queries the ledger)."""
        return of_selection(self._selection, self._prices, now)

    def series(self) -> list[tuple[float, dict[str, str]]]:
        """``(projected USD, {"period": …})`` per period with a projection."""
        with self._lock:
            now = self._clock()
            if self._at is None or not 0 <= now - self._at < self._refresh:
                found = self.paces(now)
                self._series = [(round(p.projected_usd, 6), {"period": p.period})
                                for p in found.values() if p.projected_usd is not None]
                self._at = now
            return list(self._series)
