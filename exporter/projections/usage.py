"""The values the report's sums are made of: usage, price attributes, facts.

:class:`Usage` sums some requests, priced; :class:`Attrs` is what a group's
requests share; :class:`Fact` is one group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from exporter.projections.money import usd
from exporter.projections.savings import reread_ratio
from exporter.records import Source

if TYPE_CHECKING:  # an annotation only: usage stays free of the ledger's modules
    from exporter.projections.context_share import ContextShare

NO_BUCKET: Final = -9  # a fact not split by gap bucket


@dataclass(frozen=True, slots=True)
class Usage:
    """Sums over some requests: counts, the five token types, web searches, cost."""

    requests: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    web_search: int = 0
    cost_pico: int = 0  # exact list-price cost of the priced requests, 1e-12 USD
    unpriced: int = 0  # all five token fields of requests whose model has no price
    saved_pico: int = 0  # the prompt cache's saving (exporter.projections.savings), 1e-12 USD

    def __add__(self, other: Usage) -> Usage:
        """Field-wise sum (spelled out: it runs once per fact)."""
        return Usage(
            self.requests + other.requests, self.input + other.input, self.output + other.output,
            self.cache_read + other.cache_read, self.cache_write_5m + other.cache_write_5m,
            self.cache_write_1h + other.cache_write_1h, self.web_search + other.web_search,
            self.cost_pico + other.cost_pico, self.unpriced + other.unpriced,
            self.saved_pico + other.saved_pico,
        )

    @property
    def context(self) -> int:
        """Prompt tokens: input + cache read + cache writes."""
        return self.input + self.cache_read + self.cache_write_5m + self.cache_write_1h

    @property
    def cache_write(self) -> int:
        """Cache writes, 5 minutes and 1 hour."""
        return self.cache_write_5m + self.cache_write_1h

    @property
    def tokens(self) -> int:
        """Every token: the prompt plus the output."""
        return self.context + self.output

    @property
    def cost_usd(self) -> float:
        """The cost rounded to 1e-6 USD."""
        return usd(self.cost_pico)

    @property
    def saved_usd(self) -> float:
        """The cache's saving rounded to 1e-6 USD (negative when writes outweighed reads)."""
        return usd(self.saved_pico)

    @property
    def reread_ratio(self) -> float:
        """Cache-read tokens per output token (0 without output)."""
        return reread_ratio(self.cache_read, self.output)

    @property
    def cache_read_share(self) -> float:
        """Cache read over prompt tokens (0 without any)."""
        return self.cache_read / self.context if self.context else 0.0

    def totals(self) -> dict[str, int | float]:
        """The ``T`` object of docs/figures.md."""
        return {
            "requests": self.requests,
            "input_tokens": self.input,
            "output_tokens": self.output,
            "cache_read_tokens": self.cache_read,
            "cache_write_5m_tokens": self.cache_write_5m,
            "cache_write_1h_tokens": self.cache_write_1h,
            "web_search_requests": self.web_search,
            "cost_usd": self.cost_usd,
            "unpriced_tokens": self.unpriced,
            "cache_savings_usd": self.saved_usd,
            "cache_reads_per_output_token": self.reread_ratio,
        }


ZERO: Final = Usage()


@dataclass(frozen=True, slots=True)
class AgentUsage:
    """One agent's usage in a report: its sums, and what its logs measure apart or not at all.

    ``reasoning``: reasoning tokens, a part of ``usage.output`` (None where the
    agent does not report them apart); ``cache_writes_measured``: whether its
    logs say what was written to the prompt cache (Codex's do not: its zero
    cache writes are "not measured", not a measured zero);
    ``context_window_share``: the prompt's share of the stated context window
    (None where the agent's logs state no window).
    """

    agent: str
    usage: Usage
    reasoning: int | None = None
    cache_writes_measured: bool = True
    context_window_share: ContextShare | None = None

    def to_json(self) -> dict[str, Any]:
        """A ``by_model`` entry (``T``) plus reasoning, cache writes measured, window share."""
        share = self.context_window_share
        return {**self.usage.totals(), "reasoning_tokens": self.reasoning,
                "cache_writes_measured": self.cache_writes_measured,
                "context_window_share": None if share is None else share.to_json()}


class Attrs(NamedTuple):
    """What a fact's requests share: session, project and price attributes."""

    session: str
    project: str
    model: str
    source: Source
    service_tier: str
    inference_geo: str
    speed: str
    long: int  # how many long-context thresholds the prompt exceeds


@dataclass(frozen=True, slots=True)
class Fact:
    """Sums over requests sharing a group key, attributes, gap bucket and price period."""

    key: Any  # the TimeKey's value (a day number, …), or None
    attrs: Attrs
    bucket: int  # exporter.ledger.slots bucket (-1 not main, 0 first, 1..4 by gap), or NO_BUCKET
    first: float
    last: float
    usage: Usage
    gap_ms: int  # sum of the gaps before the main requests, milliseconds (exact)


def by_name(usages: Mapping[str, Usage]) -> dict[str, Usage]:
    """Usages sorted by name (stable output)."""
    return {k: usages[k] for k in sorted(usages)}

