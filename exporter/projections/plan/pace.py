"""Pace: where a plan window will stand at its reset, and when it reaches 100 % (issue 37).

Pure functions over small values: :class:`PaceInput` holds what the ledger
and the samples know about one window instance now (the official figure and
its change points, the window's start and reset, the ledger's spend over the
last :data:`RECENT_S` seconds and the learned dollars per 1 %); an estimator
turns it into a rate in percent per second; :func:`project` turns a rate into
a :class:`Pace`.

Estimators (scored on generated sequences by ``bench/pace.py``, table in
docs/plan-limits.md):

- ``slope``: least-squares slope of the official percentage over the last 30
  minutes (what the dashboard and the alert computed in PromQL before);
- ``ledger``: the ledger's cost over the last 30 minutes / the $ per 1 %;
- ``average``: the official percentage / the time since the window opened;
- ``blend`` (the one shipped): ``BLEND_RECENT`` × ledger + the rest × average,
  the average alone without a $ per 1 % estimate. The average carries the
  window's own history (a night lowers it, never to zero); the recent part
  follows a change of pace. A burst followed by idle hours decays with them.

"Not enough data" (``state == NOT_ENOUGH``, no projection) while less than
:data:`MIN_SHARE` of the window has passed, or with no sample of this window
instance: extrapolating the first minutes over a week is a wild number.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

#: The recent stretch the slope and the ledger rate look at (the old PromQL's ``[30m]``).
RECENT_S: Final = 1800.0
#: The ledger rate looks back over this share of a long window (a weekly one: 16.8 hours).
RECENT_SHARE: Final = 0.1
#: Share of the window that must have passed before anything is projected.
MIN_SHARE: Final = 0.05
#: Weight of the recent ledger rate in the shipped blend (chosen in bench/pace.py).
BLEND_RECENT: Final = 0.25
#: Seconds between the points the slope is fitted to (a scrape-like sampling of the figure).
SLOPE_STEP_S: Final = 60.0

NOT_ENOUGH: Final = "not_enough_data"
ON_TRACK: Final = "on_track"
LIMIT_AHEAD: Final = "limit_ahead"
LIMIT_REACHED: Final = "limit_reached"


@dataclass(frozen=True, slots=True)
class PaceInput:
    """One window instance as seen at ``now``."""

    now: float
    start: float  # when the window opened (its reset minus its length, or its first sample)
    resets_at: float
    used: float  # official percent now (the highest seen in this instance)
    points: tuple[tuple[float, float], ...]  # (percent, first seen) of each level, by percent
    recent_usd: float | None = None  # ledger list-price cost over [now - recent_span, now)
    usd_per_percent: float | None = None  # the learned estimate (None: none yet)


@dataclass(frozen=True, slots=True)
class Pace:
    """A window's projection: its state, the figure at reset, when it reaches 100 %."""

    state: str  # NOT_ENOUGH, ON_TRACK, LIMIT_AHEAD or LIMIT_REACHED
    projected_percent: float | None = None  # at reset at the current pace; None: not enough data
    limit_at: float | None = None  # Unix seconds 100 % is (or was) reached; None: not before reset
    percent_per_hour: float | None = None  # the pace used


Estimator = Callable[[PaceInput], float | None]
"""A rate in percent per second from a window's input (None: it has nothing to say)."""


def slope(inp: PaceInput) -> float | None:
    """Least-squares slope of the official figure over the last RECENT_S (clamped at 0)."""
    since = max(inp.start, inp.now - RECENT_S)
    if inp.now - since < 2 * SLOPE_STEP_S:
        return None
    by_time = sorted(inp.points, key=lambda p: p[1])
    times = [at for _p, at in by_time]
    running = list(itertools.accumulate((p for p, _at in by_time), max))  # never falls
    xs: list[float] = []
    ys: list[float] = []
    t = inp.now
    while t >= since:
        k = bisect.bisect_right(times, t)
        xs.append(t)
        ys.append(running[k - 1] if k else 0.0)
        t -= SLOPE_STEP_S
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return max(0.0, sxy / sxx) if sxx > 0 else None


def ledger_rate(inp: PaceInput) -> float | None:
    """The ledger's recent cost rate divided by the learned $ per 1 %."""
    if inp.recent_usd is None or not inp.usd_per_percent:
        return None
    span = recent_span(inp.resets_at - inp.start)
    return max(0.0, inp.recent_usd) / inp.usd_per_percent / span


def recent_span(length: float) -> float:
    """The stretch the ledger rate looks back over: 30 minutes, or a tenth of a long window.

    A weekly window's pace is a day's, not the last half hour's (a night is not a trend).
    """
    return max(RECENT_S, length * RECENT_SHARE)


def average(inp: PaceInput) -> float | None:
    """The official figure over the time since the window opened."""
    elapsed = inp.now - inp.start
    return inp.used / elapsed if elapsed > 0 else None


def blend(inp: PaceInput, weight: float = BLEND_RECENT) -> float | None:
    """``weight`` × the ledger rate + the rest × the average (the average alone without one)."""
    avg = average(inp)
    recent = ledger_rate(inp)
    if avg is None or recent is None:
        return avg
    return weight * recent + (1.0 - weight) * avg


ESTIMATORS: Final[dict[str, Estimator]] = {
    "slope": slope, "ledger": ledger_rate, "average": average, "blend": blend,
}


def project(inp: PaceInput, estimator: Estimator = blend) -> Pace:
    """The window's pace by ``estimator``: projected percent at reset and when it reaches 100 %."""
    if inp.used >= 100.0:
        reached = min((at for p, at in inp.points if p >= 100.0), default=inp.now)
        return Pace(LIMIT_REACHED, inp.used, reached, None)
    length = inp.resets_at - inp.start
    if not inp.points or length <= 0 or inp.now - inp.start < MIN_SHARE * length:
        return Pace(NOT_ENOUGH)
    rate = estimator(inp)
    if rate is None or not math.isfinite(rate):
        return Pace(NOT_ENOUGH)
    left = max(0.0, inp.resets_at - inp.now)
    projected = inp.used + rate * left
    per_hour = rate * 3600.0
    if projected < 100.0 or rate <= 0:
        return Pace(ON_TRACK, projected, None, per_hour)
    return Pace(LIMIT_AHEAD, projected, inp.now + (100.0 - inp.used) / rate, per_hour)
