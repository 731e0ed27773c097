"""How many series each family can have, and the SDK limits set from that (docs/metrics.md).

Every label of a family is a :class:`Dimension`: a label name and the most
distinct values it can take (1 for a label whose value is fixed per series).
Open dimensions (``model``, ``project``) are capped by the label policy
(:mod:`exporter.projections.labels`): past the cap a new value becomes
``other``, so the cap counts ``other`` as one more value.
Closed dimensions (``source``, ``type``, ``gap``, ...) have the values the
code defines; ``arch`` has the configured architectures. A family's worst
case is the product of its dimensions.

The OpenTelemetry SDK has its own limit per instrument (2,000 attribute sets
unless told otherwise). Past it, it folds every further label set into one
series labelled ``otel.metric.overflow`` and adds that label, empty, to every
other series of the family: totals by label go wrong, and the exposition
changes shape. So each instrument gets a View whose limit is set here, above
its worst case, and the SDK's fold is never reached; ``other`` is the only
overflow rule. A limit on a View beats the reader's, so no reader setting (or
environment variable read by a future SDK) can lower it.

A new label dimension plugs in by declaring a :class:`Dimension` with its cap
and adding it to the families that carry it; tests/test_cardinality.py sums
the worst case of every family against the truth and checks the whole table
against :data:`SERIES_BUDGET`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Final

from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import CardinalityLimits

from exporter.projections import attributed
from exporter.projections.compat import genai_histogram as genai
from exporter.projections.compat import native
from exporter.projections.counting import GAP_BUCKETS, PROMPT_TYPES, TOKEN_FIELDS
from exporter.projections.labels import MAX_CODEX_MODELS, MAX_MODELS, MAX_PROJECTS
from exporter.records import IterationKind, LineResult, RejectReason, Source

LINE_RESULTS: Final = (LineResult.USAGE, LineResult.DUPLICATE, LineResult.OTHER,
                       LineResult.REJECTED)
REJECT_REASONS: Final = tuple(
    v for k, v in vars(RejectReason).items() if k.isupper() and isinstance(v, str)
)

SERIES_BUDGET: Final = 80_000
"""Most label sets the whole table may allow (a worst-case scrape: docs/metrics.md)."""

FOREIGN_LIMIT: Final = 256
"""The Prometheus reader's limit for instruments this table does not declare.

Only the plan families (their own meter on the same provider) use it: a few
windows and reasons. It is set so the SDK's default never decides.
"""


@dataclass(frozen=True, slots=True)
class Dimension:
    """One label and the most distinct values it can take (``other`` included)."""

    label: str
    values: int


def sdk_limit(worst: int) -> int:
    """The SDK limit of a family whose worst case is ``worst`` label sets.

    A quarter above it: a mistake in this table must show as extra series in
    a test, not as the SDK's mixed overflow series in someone's Prometheus.
    """
    return worst + max(1, worst // 4)


MODEL: Final = Dimension("model", MAX_MODELS + 1)
SOURCE: Final = Dimension("source", len(Source))
#: The per-request histograms: a request's own sources, advisor consultations left out.
OWN_SOURCE: Final = Dimension("source", len(Source) - 1)
TOKEN_TYPE: Final = Dimension("type", len(TOKEN_FIELDS))
COST_TYPE: Final = Dimension("type", len(TOKEN_FIELDS) + 1)  # and web_search
SAVINGS_TYPE: Final = Dimension("type", 1)  # cache_read
PREMIUM_TYPE: Final = Dimension("type", 2)  # cache_write_5m, cache_write_1h
GAP: Final = Dimension("gap", len(GAP_BUCKETS))
PROMPT_TYPE: Final = Dimension("type", len(PROMPT_TYPES))
TTL: Final = Dimension("ttl", 2)  # 5m, 1h
PERIOD: Final = Dimension("period", 2)  # day, month
RESULT: Final = Dimension("result", len(LINE_RESULTS))
REASON: Final = Dimension("reason", len(REJECT_REASONS))
ATTRIBUTION_KIND: Final = Dimension("kind", len(attributed.KINDS))
#: Names per kind (skills, plugins, MCP servers, agents, efforts): capped like projects.
ATTRIBUTED_NAME: Final = Dimension("name", attributed.MAX_NAMES + 1)
MENDED_KIND: Final = Dimension("kind", 2)  # lone_surrogate; model_assumed (Codex)
# undocumented types are `unknown`
ITERATION_KIND: Final = Dimension("kind", len(IterationKind.FIXED))
QUERY_SOURCE: Final = Dimension("query_source", len(Source))  # one value per source at most
NATIVE_TYPE: Final = Dimension("type", len(set(native.TOKEN_TYPE.values())))
GENAI_MODEL: Final = Dimension("gen_ai.request.model", MODEL.values)  # the model label's value
GENAI_TYPE: Final = Dimension("gen_ai.token.type", 2)  # input, output
#: One value per series: constants, or (the response model) the request model again.
GENAI_FIXED: Final = tuple(Dimension(label, 1) for label in (
    "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.response.model"))
CODEX_MODEL: Final = Dimension("model", MAX_CODEX_MODELS + 1)  # Codex's own cap
CODEX_TOKEN_TYPE: Final = Dimension("type", 4)  # input, output, cache_read, reasoning
CODEX_COST_TYPE: Final = Dimension("type", 3)  # input, output, cache_read
BUILD: Final = tuple(Dimension(label, 1) for label in (
    "version", "prices", "prices_version", "prices_data_date"))


class Caps:
    """The label dimensions of one exporter, and every family's worst case under them."""

    def __init__(self, project_policy: str, archs: int) -> None:
        """``project_policy`` as the label policy takes it; ``archs``: configured architectures."""
        self.project = Dimension("project", 1 if project_policy == "none" else MAX_PROJECTS + 1)
        self.arch = Dimension("arch", archs)

    def families(self) -> dict[str, tuple[Dimension, ...]]:
        """Each instrument's dimensions: catalogue names without namespace, compat names as is."""
        usage = (MODEL, self.project, SOURCE)
        arch = (self.arch,)
        return {
            "requests": usage, "tokens": (*usage, TOKEN_TYPE), "cost_usd": (*usage, COST_TYPE),
            "unpriced_tokens": (MODEL,),
            "cache_savings_usd": (*usage, SAVINGS_TYPE),
            "cache_write_premium_usd": (*usage, PREMIUM_TYPE),
            "web_search_requests": usage,
            "prompt_tokens_after_gap": (GAP, PROMPT_TYPE), "requests_after_gap": (GAP,),
            "upload_bytes": (), "kv_recomputed_bytes": arch,
            "exporter_lines": (RESULT,), "exporter_rejected_lines": (REASON,),
            "attributed_requests": (ATTRIBUTION_KIND, ATTRIBUTED_NAME),
            "attributed_cost_usd": (ATTRIBUTION_KIND, ATTRIBUTED_NAME),
            "exporter_iterations": (ITERATION_KIND,), "exporter_mended_lines": (MENDED_KIND,),
            "exporter_bytes_read": (), "exporter_late_updates": (),
            "request_context_tokens": (MODEL, OWN_SOURCE),
            "request_output_tokens": (MODEL, OWN_SOURCE),
            "request_gap_seconds": (), "request_kv_cache_bytes": arch,
            "request_upload_bytes": (),
            "active_sessions": (TTL,), "warm_kv_cache_bytes": arch,
            "last_request_timestamp_seconds": (SOURCE,), "budget_usd": (PERIOD,),
            "budget_projected_usd": (PERIOD,),
            "kv_bytes_per_token": arch, "exporter_files_watched": (),
            "exporter_ledger_requests": (), "exporter_build_info": BUILD,
            native.TOKEN_USAGE: (MODEL, QUERY_SOURCE, NATIVE_TYPE),
            native.COST_USAGE: (MODEL, QUERY_SOURCE),
            genai.NAME: (GENAI_MODEL, GENAI_TYPE, *GENAI_FIXED),
            **self.codex_families(),
        }

    def codex_families(self) -> dict[str, tuple[Dimension, ...]]:
        """Codex's families (exporter.projections.codex_metrics): no source label, own models."""
        usage = (CODEX_MODEL, self.project)
        return {
            "codex_requests": usage, "codex_tokens": (*usage, CODEX_TOKEN_TYPE),
            "codex_cost_usd": (*usage, CODEX_COST_TYPE), "codex_unpriced_tokens": (CODEX_MODEL,),
            "codex_cache_savings_usd": usage, "codex_upload_bytes": (),
            "codex_kv_recomputed_bytes": (self.arch,),
            "codex_request_context_tokens": (CODEX_MODEL,),
            "codex_request_output_tokens": (CODEX_MODEL,), "codex_request_gap_seconds": (),
        }

    def worst_cases(self) -> dict[str, int]:
        """Each instrument's most label sets: the product of its dimensions."""
        return {name: prod(d.values for d in dims) for name, dims in self.families().items()}

    def limits(self) -> dict[str, int]:
        """Each instrument's SDK cardinality limit (:func:`sdk_limit` of its worst case)."""
        return {name: sdk_limit(worst) for name, worst in self.worst_cases().items()}


def reader_limits() -> CardinalityLimits:
    """A reader's limit for every instrument class: :data:`FOREIGN_LIMIT`, never the default."""
    return {Counter: FOREIGN_LIMIT, UpDownCounter: FOREIGN_LIMIT, Histogram: FOREIGN_LIMIT,
            ObservableCounter: FOREIGN_LIMIT, ObservableUpDownCounter: FOREIGN_LIMIT,
            ObservableGauge: FOREIGN_LIMIT}
