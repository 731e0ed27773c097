"""Backtests of the pace estimators on generated plan-window sequences (issue 37).

Each sequence kind is a usage profile over one window instance with known
truth: requests (time, list-price dollars) arrive at random gaps, 1 % of the
window is worth ``USD_PER_PERCENT`` dollars, the official figure is whole
percents refreshed half a second after each request (the rule of
tests/support/plan.py's ``refreshes``), and usage stops at 100 % (Claude Code
refuses more). At 25 %, 50 % and 75 % of the window each estimator is asked
when 100 % will be reached; its error is the distance to the true time, both
capped at the reset ("never" is "at the reset"), in minutes.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from exporter.projections.plan import pace

FIVE_HOURS = 5 * 3600.0
WEEK = 7 * 86_400.0
USD_PER_PERCENT = 1.0
#: The learned estimate the ledger estimator is handed: 5 % off, as a real one may be.
LEARNED = 1.05
CHECKPOINTS = (0.25, 0.5, 0.75)
KINDS = ("steady", "bursts", "quiet_night", "reset_mid_burst", "hit_100")

Rate = Callable[[float], float]  # $ per second at a time since the window opened


@dataclass(frozen=True, slots=True)
class Sequence:
    """One generated window: its requests (incl. some before it opened) and its truth."""

    kind: str
    length: float
    events: tuple[tuple[float, float], ...]  # (time since the window opened, usd)
    truth: float | None  # when 100 % was reached (None: not before the reset)


def _profile(kind: str, rng: random.Random) -> tuple[float, Rate, float]:
    """(window length, usage rate, how long before the window the usage starts)."""
    if kind == "steady":
        r = 100 / (rng.uniform(0.7, 1.1) * FIVE_HOURS)
        return FIVE_HOURS, lambda t: r, 0.0
    if kind == "bursts":
        r = 100 / (rng.uniform(0.45, 0.75) * FIVE_HOURS)
        edges = list(itertools.accumulate(rng.uniform(600, 1800) for _ in range(40)))
        return FIVE_HOURS, lambda t: 2 * r if bisect.bisect(edges, t) % 2 == 0 else 0.0, 0.0
    if kind == "quiet_night":
        r = 100 / (rng.uniform(55, 75) * 3600)
        return WEEK, lambda t: r if (t % 86_400) < 10 * 3600 else 0.0, 0.0
    if kind == "reset_mid_burst":
        r = 100 / (rng.uniform(1.0, 1.6) * FIVE_HOURS)
        burst = rng.uniform(1800, 3600)
        return FIVE_HOURS, lambda t: 3 * r if t < burst else 0.5 * r, 1800.0
    if kind == "hit_100":
        r = 100 / (rng.uniform(0.45, 0.6) * FIVE_HOURS)
        return FIVE_HOURS, lambda t: r, 0.0
    raise ValueError(kind)


def generate(kind: str, seed: int) -> Sequence:
    """A window of ``kind``: requests at 5-40 s gaps, each costing its gap at the rate ± 70 %."""
    rng = random.Random(f"{kind}/{seed}")
    length, rate, before = _profile(kind, rng)
    events: list[tuple[float, float]] = []
    total, truth, t = 0.0, None, -before
    while t < length and truth is None:
        gap = rng.uniform(5, 40)
        t += gap
        usd = rate(max(t, 0.0)) * gap * rng.uniform(0.3, 1.7)
        if usd <= 0 or t >= length:
            continue
        events.append((t, usd))
        if t >= 0:
            total += usd
            if total >= 100 * USD_PER_PERCENT:
                truth = t
    return Sequence(kind, length, tuple(events), truth)


@dataclass(frozen=True, slots=True)
class Replay:
    """A sequence indexed for asking the estimators at any moment."""

    seq: Sequence
    times: tuple[float, ...]
    cumulative: tuple[float, ...]  # dollars up to and including each event
    levels: tuple[tuple[float, float], ...]  # (percent, first seen) of this instance

    @classmethod
    def of(cls, seq: Sequence) -> Replay:
        """Index the events and derive the official levels."""
        times = tuple(t for t, _ in seq.events)
        cumulative = tuple(itertools.accumulate(usd for _, usd in seq.events))
        levels: dict[float, float] = {}
        total = 0.0
        for t, usd in seq.events:
            if t < 0:
                continue
            total += usd
            pct = float(min(100, math.floor(total / USD_PER_PERCENT)))
            levels.setdefault(pct, t + 0.5)
        return cls(seq, times, cumulative, tuple(sorted(levels.items())))

    def spent(self, since: float, until: float) -> float:
        """Dollars of the requests with ``since <= t < until``."""
        a = bisect.bisect_left(self.times, since)
        b = bisect.bisect_left(self.times, until)
        low = self.cumulative[a - 1] if a else 0.0
        return (self.cumulative[b - 1] if b else 0.0) - low

    def at(self, now: float) -> pace.PaceInput:
        """What the exporter would know at ``now`` (seconds since the window opened)."""
        points = tuple((p, at) for p, at in self.levels if at <= now)
        used = max((p for p, _ in points), default=0.0)
        span = pace.recent_span(self.seq.length)
        return pace.PaceInput(now=now, start=0.0, resets_at=self.seq.length, used=used,
                              points=points, recent_usd=self.spent(now - span, now),
                              usd_per_percent=LEARNED)


def eta_error_minutes(replay: Replay, share: float, estimator: pace.Estimator) -> float:
    """|estimated − true| time of 100 % at ``share`` of the window, both capped at the reset."""
    length = replay.seq.length
    got = pace.project(replay.at(share * length), estimator).limit_at
    truth = replay.seq.truth
    est = length if got is None else min(got, length)
    true = length if truth is None else min(truth, length)
    return abs(est - true) / 60.0


def table(seeds: int = 20, estimators: dict[str, pace.Estimator] | None = None,
          ) -> Iterator[tuple[str, str, list[float]]]:
    """(kind, estimator, mean ETA error in minutes at each checkpoint) over ``seeds`` windows."""
    chosen = pace.ESTIMATORS if estimators is None else estimators
    for kind in KINDS:
        replays = [Replay.of(generate(kind, s)) for s in range(seeds)]
        for name, estimator in chosen.items():
            errors = [sum(eta_error_minutes(r, c, estimator) for r in replays) / seeds
                      for c in CHECKPOINTS]
            yield kind, name, errors
