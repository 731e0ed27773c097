"""What 1 % of a plan window is worth in list-price dollars, from samples and the ledger.

Within one window instance (a window name and its reset time) the official
percentage only rises. For every percentage level the spool saw, the first
time it was seen is a *change point*: the first status-line refresh after the
response that moved the figure there. Between two change points the ledger
knows exactly what this machine's requests cost, so

    usd_per_percent = Σ cost(first change point, last change point) / Σ (pct_last − pct_first)

summed over the instances. Taking both ends at change points ("just after the
figure moved") cancels the rounding of the official figure, and summing costs
and percentages before dividing (not averaging ratios) weights each instance
by how much it moved. The lowest level of an instance is not a change point
(the window may have reached it long before the first sample) and is skipped.

Errors, in the order they matter:

- usage this ledger never sees (other machines, claude.ai chat and the
  desktop app share the window) raises the percentage without adding cost: the
  estimate is then the true size times this machine's share (75 % of the usage
  here → 0.75 × the true value). It is a lower bound, exact on a single machine;
- the figure is rounded (whole percents in practice): ±1 % of one step per
  instance, shrinking as windows accumulate;
- request timestamps vs refresh times: at most one request at each end moves
  to the wrong side of a change point.

A stale refresh (another session showing an older, lower figure later) cannot
create an early change point: each level's time is the minimum over itself and
every higher level, since a higher figure can never be seen before a lower one
was reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

CostBetween = Callable[[float, float], float]
"""List-price USD of the ledger's requests with ``since <= ts < until``."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """Dollars per 1 % of a window, and what it rests on."""

    usd_per_percent: float | None  # None: no instance moved far enough, or none cost anything here
    pairs: int  # consecutive change-point pairs behind it
    windows: int  # window instances that contributed
    usd: float  # the summed cost
    percent: float  # the summed percentage


def change_points(levels: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """(pct, time) change points of one window instance from its (pct, first seen) levels.

    Sorted by percentage; each time is the earliest sighting of that level or
    any higher one; the lowest level is dropped (not a change point).
    """
    first: dict[float, float] = {}
    for pct, seen in levels:  # one time per level: its earliest sighting
        first[pct] = min(seen, first.get(pct, seen))
    points: list[tuple[float, float]] = []
    earliest = float("inf")
    for pct in sorted(first, reverse=True):
        earliest = min(earliest, first[pct])
        points.append((pct, earliest))
    points.reverse()
    return points[1:]


def usd_per_percent(
    instances: Iterable[Sequence[tuple[float, float]]], cost_between: CostBetween
) -> Estimate:
    """Estimate dollars per 1 % over window instances, each given as (pct, first seen) levels."""
    usd = percent = 0.0
    pairs = windows = 0
    for levels in instances:
        points = change_points(levels)
        if len(points) < 2:
            continue
        (low, start), (high, end) = points[0], points[-1]
        if end <= start or high <= low:
            continue
        usd += cost_between(start, end)
        percent += high - low
        pairs += len(points) - 1
        windows += 1
    # No cost at all while the figure moved: the usage was all elsewhere (another
    # machine, claude.ai), so the ledger says nothing about the window's size; $0
    # would read as "the window is worth nothing".
    value = usd / percent if percent > 0 and usd > 0 else None
    return Estimate(value, pairs, windows, usd, percent)
