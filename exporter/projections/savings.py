"""Cache economics: what the prompt cache saved, and what a prompt costs from it.

The definition (docs/figures.md, "Cache savings"): for each request, its cost
*without the cache* — every cache-read and cache-write token billed as plain
uncached input, at the same rates as the request itself (the same long-context
tier, which the whole prompt decides either way; the same geo, tier and speed
factors; the same price date), output and web searches unchanged — minus its
actual cost. Per token that is

    read  × (input − cache read)  +  5m write × (input − 5m write)
                                  +  1h write × (input − 1h write)

so a cache read saves ~90 % of the input rate and a write costs its premium
(25 % for 5 minutes, 100 % for an hour): a cache written and never read saves a
negative amount. The saving is linear in the token sums, so it is computed per
price class from the class's sums, like the cost, exactly in integers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from exporter.projections.money import usd
from exporter.projections.pricing import Rates

READ, WRITE_5M, WRITE_1H = 2, 3, 4  # positions in the (input, output, read, 5m, 1h) sums/units


def saved(sums: Sequence[int], units: Sequence[int]) -> int:
    """The cache's saving on these token sums, in the units of ``units`` (e.g. pico-dollars).

    ``sums`` and ``units`` list input, output, cache read, 5-minute and
    1-hour write first (further entries, such as web searches, are ignored:
    they cost the same with or without the cache).
    """
    plain = units[0]
    return sum(sums[i] * (plain - units[i]) for i in (READ, WRITE_5M, WRITE_1H))


def counter_parts(rates: Rates, cache_read: int, cache_write_5m: int,
                  cache_write_1h: int) -> dict[str, tuple[str, float]]:
    """The saving split into parts that only grow, for Prometheus counters, in USD.

    A counter must never decrease, but a request's saving can be negative. So
    the metrics carry the reads' saving (``cache_savings_usd``, type
    ``cache_read``: read x (input - read rate)) and the writes' premium
    (``cache_write_premium_usd``, types ``cache_write_5m`` / ``cache_write_1h``:
    write x (write rate - input)), each >= 0 at list prices; the net saving of
    ``report`` is the first minus the second. Returns ``{type: (family, USD)}``.
    """
    per = 1e-6
    return {
        "cache_read": ("cache_savings_usd", cache_read * (rates.input - rates.cache_read) * per),
        "cache_write_5m": ("cache_write_premium_usd",
                           cache_write_5m * (rates.cache_write_5m - rates.input) * per),
        "cache_write_1h": ("cache_write_premium_usd",
                           cache_write_1h * (rates.cache_write_1h - rates.input) * per),
    }


def without_cache(sums: Sequence[int], units: Sequence[int], cost: int) -> int:
    """The cost these sums would have had with every cached token billed as input."""
    return cost + saved(sums, units)


def reread_ratio(cache_read: int, output: int) -> float:
    """Cache-read tokens per output token: history re-read for each token written (0 if none)."""
    return cache_read / output if output else 0.0


@dataclass(frozen=True, slots=True)
class ContextCost:
    """One prompt of ``context`` tokens on one model: its cost read from the cache vs recomputed."""

    model: str
    quantile: str  # "p50" or "p90": which of the selection's prompt sizes
    context: int
    long: bool  # priced at the long-context tier
    cached_pico: int  # every prompt token a cache read
    recomputed_pico: int  # every prompt token uncached input

    def to_json(self) -> dict[str, object]:
        """The ``context_cost`` row of ``report --json`` (USD rounded to 1e-6)."""
        return {"model": self.model, "quantile": self.quantile, "context_tokens": self.context,
                "long_context": self.long, "from_cache_usd": usd(self.cached_pico),
                "recomputed_usd": usd(self.recomputed_pico)}


def context_cost(model: str, quantile: str, context: int, long: bool,
                 units: Sequence[int]) -> ContextCost:
    """The prompt-only cost of ``context`` tokens at these per-token units, cached vs not."""
    return ContextCost(model, quantile, context, long, context * units[READ],
                       context * units[0])
