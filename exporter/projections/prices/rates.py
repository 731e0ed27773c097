"""Value types of the price table: rates, one price period, a family over time, the table."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

RATE_NAMES: Final = ("input", "cache_write_5m", "cache_write_1h", "cache_read", "output")
_PER_TOKEN: Final = 1e-6  # rates are USD per million tokens


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per million tokens for each token type, and USD per web-search request."""

    input: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float
    output: float
    web_search_usd: float = 0.0

    @classmethod
    def of(cls, tokens: Sequence[float], web_search_usd: float = 0.0) -> Rates:
        """Rates from the five token rates in ``RATE_NAMES`` order."""
        if len(tokens) != len(RATE_NAMES):
            raise ValueError(f"expected {len(RATE_NAMES)} token rates, got {len(tokens)}")
        i, w5, w1, read, out = tokens
        return cls(i, w5, w1, read, out, web_search_usd)

    def scaled(self, factor: float) -> Rates:
        """These rates times a whole-request factor (geo, tier, fast mode).

        Web searches keep their price: the factors are token multipliers (Anthropic
        publishes no batch or regional price for searches).
        """
        if factor == 1.0:
            return self
        return Rates.of([rate * factor for rate in self.token_rates()], self.web_search_usd)

    def token_rates(self) -> tuple[float, float, float, float, float]:
        """The five token rates in ``RATE_NAMES`` order."""
        return (self.input, self.cache_write_5m, self.cache_write_1h, self.cache_read,
                self.output)

    def cost(
        self, input: int, output: int, cache_read: int, cache_write_5m: int, cache_write_1h: int,
        *, web_search: int = 0,
    ) -> dict[str, float]:
        """USD per token type for the given token counts (and ``web_search`` if any)."""
        out = {
            "input": input * self.input * _PER_TOKEN,
            "output": output * self.output * _PER_TOKEN,
            "cache_read": cache_read * self.cache_read * _PER_TOKEN,
            "cache_write_5m": cache_write_5m * self.cache_write_5m * _PER_TOKEN,
            "cache_write_1h": cache_write_1h * self.cache_write_1h * _PER_TOKEN,
        }
        if web_search:
            out["web_search"] = web_search * self.web_search_usd
        return out


@dataclass(frozen=True, slots=True)
class TierPrice:
    """A service tier's own rates during one period (OpenAI's ``priority``, ``flex``…).

    ``name`` is lowercase, as a usage record's ``service_tier`` spells it;
    ``long_context`` is the tier's rates above the family's long-context
    threshold (None: the tier bills flat whatever the prompt).
    """

    name: str
    rates: Rates
    long_context: Rates | None = None


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """A family's price during one period, long-context tier, fast mode and service tiers included.

    ``fast`` (and ``fast_long_context``) are fast-mode rates from the data; when
    the data has none, ``fast_multiplier`` scales the standard rates instead.
    ``tiers`` are service tiers the data prices on their own (OpenAI's): a
    request of such a tier bills at them instead of any tier multiplier.
    """

    rates: Rates
    long_context: Rates | None = None
    long_context_threshold: int = 200_000
    fast_multiplier: float = 1.0
    fast: Rates | None = None
    fast_long_context: Rates | None = None
    tiers: tuple[TierPrice, ...] = ()

    def tier(self, name: str) -> TierPrice | None:
        """The data's own price of service tier ``name`` (lowercase) in this period, if any."""
        for tier in self.tiers:
            if tier.name == name:
                return tier
        return None

    def select(self, long_context: bool, fast: bool, tier: str = "") -> Rates:
        """The rates of one request class, before geo and tier multipliers.

        A ``tier`` this period prices on its own wins over fast mode (which is
        Anthropic's, and no model has both).
        """
        own = self.tier(tier) if tier else None
        if own is not None:
            return own.long_context if long_context and own.long_context else own.rates
        if fast and self.fast is not None:
            if long_context and self.fast_long_context is not None:
                return self.fast_long_context
            return self.fast
        base = self.long_context if long_context and self.long_context else self.rates
        return base.scaled(self.fast_multiplier) if fast else base


@dataclass(frozen=True, slots=True)
class Family:
    """One priced model family: its prices over time.

    ``periods[0]`` applies before ``starts[0]`` (and to any earlier request),
    ``periods[i]`` from ``starts[i - 1]`` (epoch seconds, UTC midnight) on.
    """

    key: str
    periods: tuple[ModelPrice, ...]
    starts: tuple[float, ...] = ()
    name: str = ""  # the data's own model id, for messages

    def index(self, ts: float) -> int:
        """The period in force at epoch ``ts``."""
        return bisect_right(self.starts, ts) if self.starts else 0

    def long_context_threshold(self) -> int | None:
        """Lowest prompt size above which some period bills at a tier, or None."""
        found = [p.long_context_threshold for p in self.periods if p.long_context is not None]
        return min(found) if found else None


@dataclass(frozen=True, slots=True)
class PriceData:
    """The priced families, the ids that name them, and where the data came from."""

    families: Mapping[str, Family]
    keys: Mapping[str, str]  # normalised model id -> family key
    meta: Mapping[str, str] = field(default_factory=dict)
