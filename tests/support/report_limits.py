"""A `report limits` view built by hand, for the tests of its rendering."""

from __future__ import annotations

from exporter.projections.figures import Covered
from exporter.projections.periods import UTC_ZONE, Range
from exporter.projections.plan.estimate import Estimate
from exporter.projections.plan.windows import Instance, PlanFigures, WindowFigures
from exporter.report.tables import Limits


def limits_sample() -> Limits:
    """A `report limits` view by hand: two windows now, three instances (one at the limit)."""
    now = 1_790_050_000.0
    est = Estimate(2.4012, 1234, 5, 1000.0, 416.4)
    five = Instance("five_hour", now - 30_000, now - 12_000, now - 29_000, now - 12_500, 103.0,
                    247.31, Estimate(2.39, 871, 1, 247.0, 103.0))
    other = Instance("five_hour", now - 9000, now + 9000, now - 8800, now - 60, 41.0, 98.2,
                     Estimate(None, 0, 0, 0.0, 0.0))
    week = Instance("seven_day", now - 200_000, now + 404_800, now - 199_000, now - 60, 62.0,
                    1843.77, Estimate(14.02, 630, 1, 869.0, 62.0))
    figures = PlanFigures(windows={"five_hour": WindowFigures(0.41, now + 9000, 1, est),
                                   "seven_day": WindowFigures(0.62, now + 404_800, 0, None)},
                          samples=9000)
    return Limits(Covered(Range(None, None, UTC_ZONE), now - 199_000, now - 60), now, figures,
                  (five, other, week))
