"""Backtest of the budget pace (docs/budget-pace.md): which pace predicts the month's end.

Generated months of hourly spend (seeded; September 2026 as history, then
October, November and December, which begin on a Thursday, a Sunday and a
Tuesday), five shapes of work:

- ``steady``: every day, 09:00-19:00;
- ``office``: weekdays 09:00-18:00, nights and weekends quiet;
- ``burst``: office, plus two days mid-month at six times the spend;
- ``vacation``: office, with days 10-16 of each month off;
- ``growing``: office, the spend rising linearly to twice over the three months.

At 09:00, 14:00 and 22:00 of every day after a month's first, each estimator
projects the month's end (:func:`exporter.projections.budget_pace.paces` with
its pace swapped); the table is the mean absolute error against the month's
real total, by day of the month. ``python3 -m bench.budget_pace``.

``python3 -m bench.budget_pace --time MB`` times instead what one refresh of the
gauge costs (:meth:`PaceGauge.paces`: the month's, the day's and the two
weeks' spend from the slot sums) on the generated heavy month of ``MB`` MB
(:func:`bench.common.month_tree`), ingested by ``report`` once.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import accumulate
from pathlib import Path

from bench.common import exporter_cmd, month_tree
from exporter.projections import budget_pace
from exporter.projections.periods import DAY, UTC_ZONE, month_start

START = datetime(2026, 9, 1, tzinfo=UTC).timestamp()
MONTHS = ((2026, 10), (2026, 11), (2026, 12))
END = datetime(2027, 1, 1, tzinfo=UTC).timestamp()
HOURS = int((END - START) // 3600)
SEEDS = range(5)
CHECK_DAYS = (1, 2, 3, 7, 14, 21, 28)
CHECK_HOURS = (9, 14, 22)

Rate = Callable[[budget_pace.Spend, float, float], float]


def _hourly(shape: str, seed: int) -> list[float]:
    """USD per hour of one generated sequence."""
    rng = random.Random(f"{shape}-{seed}")
    out = []
    for h in range(HOURS):
        t = datetime.fromtimestamp(START + h * 3600, UTC)
        weekday = t.weekday() < 5
        work = 9 <= t.hour < (19 if shape == "steady" else 18)
        on = work and (weekday or shape == "steady")
        if shape == "vacation" and 10 <= t.day <= 16:
            on = False
        scale = 1.0 + (h / HOURS if shape == "growing" else 0.0)
        if shape == "burst" and t.day in (15, 16) and on:
            scale *= 6
        out.append(rng.lognormvariate(math.log(3.0), 0.8) * scale if on
                   else (rng.random() < 0.03) * rng.uniform(0, 2))
    return out


def _spend_of(hourly: list[float]) -> budget_pace.Spend:
    """USD in ``[lo, hi)`` (whole hours) from the prefix sums."""
    prefix = [0.0, *accumulate(hourly)]

    def spend(lo: float, hi: float) -> float:
        a = min(max(int((lo - START) // 3600), 0), HOURS)
        b = min(max(int((hi - START) // 3600), 0), HOURS)
        return prefix[b] - prefix[a] if b > a else 0.0

    return spend


def _month_rate(spend: budget_pace.Spend, now: float, _first: float) -> float:
    """The month so far, per day."""
    start = UTC_ZONE.midnight(month_start(int(now // DAY)))
    return spend(start, now) / max(now - start, DAY) * DAY


def _days_rate(days: int) -> Rate:
    """The last ``days`` days, per day."""
    def rate(spend: budget_pace.Spend, now: float, first: float) -> float:
        lo = max(now - days * DAY, first)
        return spend(lo, now) / max(now - lo, DAY) * DAY
    return rate


def _blend(spend: budget_pace.Spend, now: float, first: float) -> float:
    """The mean of the week's and the month's."""
    return (_days_rate(7)(spend, now, first) + _month_rate(spend, now, first)) / 2


ESTIMATORS: dict[str, Rate] = {"two weeks (chosen)": budget_pace.usd_per_day,
                               "one week": _days_rate(7), "month so far": _month_rate,
                               "last day": _days_rate(1), "blend week+month": _blend}
SHAPES = ("steady", "office", "burst", "vacation", "growing")


def _project(rate: Rate, spend: budget_pace.Spend, now: float, end: float,
             start: float) -> float:
    """Spent so far plus the pace times the time left."""
    return spend(start, now) + rate(spend, now, START) * (end - now) / DAY


def errors(shape: str) -> dict[str, dict[int, float]]:
    """Mean absolute error (fraction of the month's total) by estimator and day of month."""
    sums: dict[str, dict[int, list[float]]] = {n: {d: [] for d in CHECK_DAYS} for n in ESTIMATORS}
    for seed in SEEDS:
        spend = _spend_of(_hourly(shape, seed))
        for year, month in MONTHS:
            start = datetime(year, month, 1, tzinfo=UTC).timestamp()
            end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC).timestamp()
            total = spend(start, end)
            for day in CHECK_DAYS:
                for hour in CHECK_HOURS:
                    now = start + (day - 1) * DAY + hour * 3600
                    for name, rate in ESTIMATORS.items():
                        got = _project(rate, spend, now, end, start)
                        sums[name][day].append(abs(got - total) / total)
    return {n: {d: sum(v) / len(v) for d, v in by.items()} for n, by in sums.items()}


def time_gauge(mb: int, repeat: int = 20) -> dict[str, float]:
    """Median and max milliseconds of one gauge refresh over the heavy month's ledger."""
    from exporter.ledger.store import Ledger
    from exporter.projections.class_prices import ClassPrices
    from exporter.projections.pricing import RateTable

    tree = month_tree(mb)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(exporter_cmd("report", "--json", "--data-dir", str(tree), "--state-dir",
                                    tmp), check=True, stdout=subprocess.DEVNULL)
        ledger = Ledger(Path(tmp) / "ledger.sqlite3")
        try:
            selection = budget_pace.selection_of(ledger.read, "requests", UTC_ZONE, None)
            last = float(selection.largest("max(ts)"))
            gauge = budget_pace.PaceGauge(selection, ClassPrices.of(RateTable.load()),
                                          clock=lambda: last)
            took = []
            for i in range(repeat):  # each an hour later: never the same cached figures
                started = time.perf_counter()
                gauge.paces(last + i * 3600)
                took.append((time.perf_counter() - started) * 1000)
            requests = ledger.count()
        finally:
            ledger.close()
    return {"requests": requests, "median_ms": statistics.median(took), "max_ms": max(took)}


def main() -> None:
    """Print the table (markdown) of every shape, or the gauge's cost with ``--time``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time", type=int, metavar="MB", help="time the gauge on MB of month")
    args = parser.parse_args()
    if args.time:
        print(time_gauge(args.time))
        return
    head = " | ".join(f"day {d}" for d in CHECK_DAYS)
    every = {shape: errors(shape) for shape in SHAPES}
    mean = {n: {d: sum(every[s][n][d] for s in SHAPES) / len(SHAPES) for d in CHECK_DAYS}
            for n in ESTIMATORS}
    for shape, table in (*every.items(), ("mean of the five", mean)):
        print(f"\n{shape}\n\n| estimator | {head} |\n|---|{'---|' * len(CHECK_DAYS)}")
        for name, by in table.items():
            cells = " | ".join(f"{by[d]:.1%}" for d in CHECK_DAYS)
            print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
