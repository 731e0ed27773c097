"""Claude Code's own counter names: ``claude_code.token.usage`` and ``claude_code.cost.usage``.

Claude Code's telemetry (its monitoring docs, "Metrics") exports these two
counters after every API request, with unit ``tokens`` and ``USD``; through an
OpenTelemetry Collector (or this exporter's Prometheus endpoint) they become
``claude_code_token_usage_tokens_total`` and ``claude_code_cost_usage_USD_total``.
Their labels, as Claude Code writes them:

- ``type``: ``input``, ``output``, ``cacheRead``, ``cacheCreation`` (camelCase;
  ``cacheCreation`` is both cache-write lifetimes together);
- ``model``: the model id;
- ``query_source``: ``main``, ``subagent`` or ``auxiliary`` (our sources
  ``main``, ``subagent`` and ``compaction``: a compaction is one of Claude
  Code's auxiliary queries), and ``advisor`` for advisor consultations.

Claude Code's other per-request attributes are not in transcripts, except
``speed`` (``fast`` on fast-mode requests, absent otherwise), which is left
out on purpose: a label present on some series of a family and absent on
others shows as ``speed=""`` on every other series of a scrape, and no
dashboard built on these families reads it (fast-mode requests are in the
totals at their fast-mode price).

The samples are derived from the catalogue's own samples of the same class
(:meth:`Exposure.samples`): tokens by type regrouped, cost summed over the
types. So the native totals equal the catalogue's by construction (the costs
are multiples of the same power-of-two quantum, exact in any grouping), and
the same label policy (model caps, cleaning) applies. Never a session label:
see docs/compat.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from exporter.projections.counting import Exposure, Labels, SampleKey, Sums
from exporter.records import CountClass

TOKEN_USAGE: Final = "claude_code.token.usage"
TOKEN_UNIT: Final = "tokens"
TOKEN_DESCRIPTION: Final = "Tokens used, by type, model and query source (Claude Code's names)."
COST_USAGE: Final = "claude_code.cost.usage"
COST_UNIT: Final = "USD"
COST_DESCRIPTION: Final = "Estimated list-price cost in USD, by model and query source."

TOKEN_TYPE: Final[Mapping[str, str]] = {
    "input": "input", "output": "output", "cache_read": "cacheRead",
    "cache_write_5m": "cacheCreation", "cache_write_1h": "cacheCreation",
}
"""The catalogue's token type -> Claude Code's ``type`` value."""

QUERY_SOURCE: Final[Mapping[str, str]] = {
    "main": "main", "subagent": "subagent", "compaction": "auxiliary",
    "advisor": "advisor",  # a consultation billed on top (docs/figures.md, Iterations)
}
"""The catalogue's ``source`` value -> Claude Code's ``query_source`` value."""


class Native:
    """The native counter samples of a class, from the catalogue's samples of it."""

    def __init__(self, exposure: Exposure) -> None:
        """Samples under ``exposure``'s label policy and prices."""
        self.exposure = exposure

    def samples(self, cls: CountClass, sums: Sums) -> list[tuple[SampleKey, float]]:
        """Every native sample a class's sums make (gap classes make none)."""
        if cls.gap:
            return []
        tokens: dict[Labels, float] = {}
        cost: dict[Labels, float] = {}
        priced = False
        for (name, labels), value in self.exposure.samples(cls, sums):
            if name == "tokens":
                key = self._labels(labels, TOKEN_TYPE[dict(labels)["type"]])
                tokens[key] = tokens.get(key, 0) + value
            elif name == "cost_usd":
                key = self._labels(labels)
                cost[key] = cost.get(key, 0) + value
                priced = True
        out: list[tuple[SampleKey, float]] = [((TOKEN_USAGE, k), v) for k, v in tokens.items()]
        if priced:  # an unpriced model has no cost series (0 would claim it was free)
            out.extend(((COST_USAGE, k), v) for k, v in cost.items())
        return out

    @staticmethod
    def _labels(catalogue: Labels, token_type: str | None = None) -> Labels:
        """Native labels from a catalogue sample's labels (project dropped, source renamed)."""
        found = dict(catalogue)
        base = (("model", found["model"]), ("query_source", QUERY_SOURCE[found["source"]]))
        return base if token_type is None else (*base, ("type", token_type))
