"""Exact integer prices per price class, for pricing SQL sums: :class:`ClassPrices`.

:class:`ClassPrices` turns the rate table
(:class:`~exporter.projections.pricing.RateTable`) into pico-dollar units.

A price class is what decides a request's price: model, geo, tier, speed,
long-context level and price period. Each class is priced once, in pico-dollars
per token and per search (:mod:`exporter.projections.money`); the SQL splits
requests by the thresholds and price dates collected here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from exporter.ledger import slots
from exporter.projections.money import PICO_PER_USD
from exporter.projections.pricing import RateTable
from exporter.projections.savings import saved
from exporter.projections.selection import CONTEXT_SQL
from exporter.projections.usage import Attrs, Usage

_SLOT: Final = slots.SLOT_SECONDS


def long_thresholds(pricing: RateTable) -> tuple[int, ...]:
    """Every long-context threshold of the price table (any period), ascending."""
    families = getattr(pricing, "families", None)  # price periods, when the table has them
    periods: list[Any]
    if families:
        periods = [p for fam in families.values() for p in fam.periods]
    else:
        periods = list(pricing.models.values())
    return tuple(sorted({p.long_context_threshold for p in periods if p.long_context}))


@dataclass(slots=True)
class ClassPrices:
    """Prices each price class once, in integer pico-dollars per token and per search."""

    pricing: RateTable
    thresholds: tuple[int, ...] = ()  # every long-context threshold in the table, ascending
    starts: tuple[float, ...] = ()  # every date any family's price changes, ascending
    _units: dict[tuple[Any, ...], tuple[int, ...] | None] = field(default_factory=dict)
    _dated: bool = False

    @classmethod
    def of(cls, pricing: RateTable, models: Iterable[str] | None = None) -> ClassPrices:
        """Collect the thresholds and price dates the SQL must split requests by.

        ``models``: every model the requests priced can have (None: any). Only
        their families' price dates then split the sums: another family's date
        (an OpenAI price change in a Claude Code-only ledger) would make a
        16-day block be read by days for nothing.
        """
        families = getattr(pricing, "families", None)  # price periods, when the table has them
        chosen = list(families.values()) if families else []
        if families and models is not None:
            keys = {key for model in models if (key := pricing.family(model)) is not None}
            chosen = [families[key] for key in sorted(keys)]
        starts = sorted({s for fam in chosen for s in fam.starts})
        # A table with price periods takes each class's date (``at``); the older one has none.
        return cls(pricing, long_thresholds(pricing), tuple(starts), {}, bool(families))

    def fits_slots(self, stored: Sequence[int]) -> bool:
        """Whether slot sums can be priced: split by (at least) our thresholds, dates on 5 minutes.

        Slots split by more thresholds than the price table's answer too: a slot
        key's level then maps to ours (:meth:`relevel`).
        """
        return set(self.thresholds) <= set(stored) and all(s % _SLOT == 0 for s in self.starts)

    def relevel(self, stored: Sequence[int]) -> tuple[int, ...]:
        """Our long-context level for each level of slots split by ``stored`` thresholds.

        Level ``L`` of the slots means the prompt exceeds ``stored[L-1]`` and no
        higher stored threshold; ours counts our thresholds at or below it.
        """
        return (0, *(sum(t <= s for t in self.thresholds) for s in sorted(stored)))

    @property
    def fits_days(self) -> bool:
        """Whether day sums can be priced: every price date is a UTC midnight."""
        return all(s % 86_400 == 0 for s in self.starts)

    def long_sql(self) -> str:
        """SQL for a request's long-context level: how many thresholds its prompt exceeds."""
        if not self.thresholds:
            return "0"
        return "(" + " + ".join(f"({CONTEXT_SQL} > {t})" for t in self.thresholds) + ")"

    def period_sql(self, at: str) -> str:
        """SQL for the price period of epoch ``at``: how many price dates it is at or after."""
        if not self.starts:
            return "0"
        return "(" + " + ".join(f"({at} >= {s!r})" for s in self.starts) + ")"

    def units(self, attrs: Attrs, period: int, at: float) -> tuple[int, ...] | None:
        """Pico-dollars per input, output, cache read, 5m write, 1h write token and per search."""
        model, geo, tier, speed = attrs.model, attrs.inference_geo, attrs.service_tier, attrs.speed
        key = (model, geo, tier, speed, attrs.long, period)
        try:
            return self._units[key]
        except KeyError:
            pass
        when: dict[str, Any] = {"at": at} if self._dated else {}
        threshold = self.pricing.long_context_threshold(model, **when)
        long = (threshold in self.thresholds
                and attrs.long > self.thresholds.index(threshold))
        rates = self.pricing.rates(model, long_context=long, inference_geo=geo,
                                   service_tier=tier, speed=speed, **when)
        out = None
        if rates is not None:
            per_token = (rates.input, rates.output, rates.cache_read, rates.cache_write_5m,
                         rates.cache_write_1h)
            search = getattr(rates, "web_search_usd", 0.0)
            out = (*(round(r * 1_000_000) for r in per_token), round(search * PICO_PER_USD))
        self._units[key] = out
        return out

    def usage(self, attrs: Attrs, period: int, at: float, n: int,
              sums: Sequence[int]) -> Usage:
        """Price ``n`` requests of one class with these token and search sums."""
        inp, out, read, w5, w1, search = sums
        units = self.units(attrs, period, at)
        if units is None:
            return Usage(n, inp, out, read, w5, w1, search, 0, inp + out + read + w5 + w1)
        cost = sum(map(int.__mul__, sums, units))
        return Usage(n, inp, out, read, w5, w1, search, cost, 0, saved(sums, units))
