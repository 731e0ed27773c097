"""The counting rules, defined once: gap buckets, TTLs, token fields, quantisation.

Two halves, both pure:

- :class:`Counting` says where a request counts: its raw class (one rollup
  row of the ledger per class and root set), its sums, and the histogram
  observations it makes once settled. The ledger applies it in the same
  transaction as the rows, so the rollups always agree with them.
- :class:`Exposure` turns a class's sums into the catalogue's counter samples
  (label policy, list prices, bytes per token). Every value is a multiple of a
  power-of-two quantum, so a series' total is exact whatever the order and
  grouping of its increments: a restart that sums the same rows comes out
  bit-identical, never a hair lower (which Prometheus would read as a reset).

Where the counts go (OpenTelemetry instruments, the backfill timeline, the
report) is the business of other modules.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from exporter.projections.class_prices import long_thresholds
from exporter.projections.compat import genai_histogram as genai
from exporter.projections.labels import LabelPolicy
from exporter.projections.pricing import Rates, RateTable
from exporter.projections.savings import counter_parts
from exporter.records import (
    ACTIVE_GAP_SECONDS,
    COUNT_SUMS,
    TTL_1H,
    TTL_5M,
    CountClass,
    HistSeries,
    Request,
    Source,
    gap_seconds,
)

TOKEN_FIELDS: Final = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")
PROMPT_TYPES: Final = ("input", "cache_read", "cache_write")
GAP_BUCKETS: Final = ("first", "lt_5m", "5m_to_1h", "gt_1h")
USD_QUANTUM: Final = 2.0**-30  # ~1e-9 USD; totals stay exact up to 2**23 USD per series
GAP_QUANTUM: Final = 2.0**-10  # under a millisecond: never moves a gap across a whole second
RULES_VERSION: Final = 1  # bump when a rule below changes: stored rollups are then rebuilt

HIST_BOUNDS: Final[dict[str, tuple[float, ...]]] = {
    "request_context_tokens": (1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 1.5e5, 2e5, 3e5, 4e5, 5e5,
                               6e5, 8e5, 1e6),
    "request_output_tokens": (10, 25, 50, 100, 250, 500, 1e3, 2e3, 4e3, 8e3, 1.6e4, 3.2e4, 6.4e4),
    "request_gap_seconds": (1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300, 600, 900,
                            1800, 3600, 7200, 14400, 43200, 86400),
    "request_kv_cache_bytes": (1e7, 1e8, 1e9, 2.5e9, 5e9, 1e10, 2.5e10, 5e10, 1e11, 2.5e11, 5e11,
                               1e12),
    "request_upload_bytes": (1e4, 1e5, 2.5e5, 5e5, 1e6, 2e6, 4e6, 8e6),
}

Sums = tuple[int, ...]  # in COUNT_SUMS order
Labels = tuple[tuple[str, str], ...]
SampleKey = tuple[str, Labels]  # catalogue name (no namespace) and labels, in label order
Observation = tuple[HistSeries, int, int | float]  # series, bucket index, value
_SOURCES: Final = tuple(Source)

__all__ = ["ACTIVE_GAP_SECONDS", "GAP_BUCKETS", "GAP_QUANTUM", "HIST_BOUNDS", "PROMPT_TYPES",
           "TOKEN_FIELDS", "TTL_1H", "TTL_5M", "USD_QUANTUM", "Counting", "Exposure", "exact",
           "gap_bucket", "gap_seconds", "split"]


def exact(value: float, quantum: float) -> float:
    """``value`` rounded to a multiple of ``quantum`` (a power of two, or 1).

    Sums of such multiples are exact in binary floating point (below 2**53
    quanta), so a counter's total does not depend on the order of its
    increments.
    """
    return round(value / quantum) * quantum


def gap_bucket(gap: float | None) -> str:
    """Return the cache-expiry bucket of a main request by the gap before it."""
    if gap is None:
        return "first"
    # Inclusive above, like the Prometheus histogram's le="300" and le="3600".
    if gap <= TTL_5M:
        return "lt_5m"
    if gap <= TTL_1H:
        return "5m_to_1h"
    return "gt_1h"


def bucket_index(bounds: Sequence[float], value: float) -> int:
    """The explicit bucket of ``value``: inclusive upper bounds, the last one is +Inf."""
    return bisect_left(bounds, value)


class Counting:
    """Where one request counts: its class, its sums, its histogram observations."""

    def __init__(self, pricing: RateTable, kv_bytes_per_token: Mapping[str, int],
                 upload_bytes_per_token: float) -> None:
        """Rules under the given prices (long context, price periods) and byte estimates."""
        self.pricing = pricing
        self.kv = dict(sorted(kv_bytes_per_token.items()))
        self.upload = upload_bytes_per_token
        self._thresholds: dict[str, float] = {}
        # Per model: the long-context threshold and the price-change times (fixed with the
        # prices, which the fingerprint covers).
        self._edges: dict[str, tuple[float, tuple[float, ...]]] = {}
        self.fingerprint = self._fingerprint()
        # The ledger splits the report's slots by these (exporter.ledger.slot_sums.ensure).
        self.long_context_thresholds = long_thresholds(pricing)

    def count_class(self, req: Request) -> CountClass:
        """The raw class ``req`` counts under (gap bucket from its ledger gap)."""
        model = req.model
        limit, bounds = self._edges.get(model) or self._model_edges(model)
        source = req.source
        return CountClass(
            model, req.project, int(source), req.inference_geo, req.service_tier, req.speed,
            int(req.input + req.cache_read + req.cache_write_5m + req.cache_write_1h > limit),
            bisect_right(bounds, req.ts) if bounds else 0,
            gap_bucket(req.gap) if source is Source.MAIN else "",
        )

    def cuts(self, model: str) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
        """Where a request of ``model`` may change class: context sizes, times and gaps.

        Each is a value past which (context, gap) or from which (time) the
        class steps; the ledger groups rows by them before classing a group.
        """
        limit, bounds = self._edges.get(model) or self._model_edges(model)
        return ((limit,) if limit != float("inf") else (), bounds, (TTL_5M, TTL_1H))

    def _model_edges(self, model: str) -> tuple[float, tuple[float, ...]]:
        """The model's long-context threshold and price-change times, looked up once."""
        edges = self._edges[model] = (self._threshold(model), _boundaries(self.pricing, model))
        return edges

    @staticmethod
    def sums(req: Request, count: int = 1) -> Sums:
        """The rollup sums of one request (``count``: 1 for a new row, 0 for an upgrade)."""
        return (count, req.input, req.output, req.cache_read, req.cache_write_5m,
                req.cache_write_1h, req.web_search)

    def observations(self, req: Request) -> list[Observation]:
        """Every histogram value of a settled request, with its bucket.

        None for an advisor consultation: the histograms describe the requests
        the conversations send (their context, output, KV and upload), and a
        consultation is a part of one of them, run on the provider's side.
        """
        if req.source is Source.ADVISOR:
            return []
        source = int(req.source)
        context = req.context
        out: list[tuple[HistSeries, float | int]] = [
            (HistSeries("request_context_tokens", req.model, source, ""), context),
            (HistSeries("request_output_tokens", req.model, source, ""), req.output),
        ]
        if req.gap is not None and req.source is Source.MAIN:
            out.append((HistSeries("request_gap_seconds", "", 0, ""), exact(req.gap, GAP_QUANTUM)))
        for arch, per_token in self.kv.items():
            out.append((HistSeries("request_kv_cache_bytes", "", 0, arch), context * per_token))
        out.append((HistSeries("request_upload_bytes", "", 0, ""), upload_bytes(context,
                                                                                 self.upload)))
        return [*((s, bucket_index(HIST_BOUNDS[s.name], v), v) for s, v in out),
                *genai.observations(req)]

    def _threshold(self, model: str) -> float:
        """Prompt size above which ``model`` bills at its long-context price (inf: never)."""
        found = self._thresholds.get(model)
        if found is None:
            limit = self.pricing.long_context_threshold(model)
            found = self._thresholds[model] = float("inf") if limit is None else float(limit)
        return found

    def _fingerprint(self) -> str:
        """A digest of every setting the stored rollups depend on (prices do not)."""
        pricing = self.pricing
        facts: dict[str, Any] = {
            "version": RULES_VERSION, "bounds": HIST_BOUNDS, "kv": self.kv,
            "upload": self.upload, "genai": genai.facts(),
            "aliases": dict(sorted(pricing.keys.items())),
            "long": {f: (p.long_context_threshold if p.long_context else None)
                     for f, p in sorted(pricing.models.items())},
            "periods": {f: list(_boundaries(pricing, f)) for f in sorted(pricing.models)},
        }
        return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def upload_bytes(context: int, per_token: float) -> float:
    """Estimated request body bytes of a prompt, whole bytes."""
    return exact(context * per_token, 1.0)


def _boundaries(pricing: RateTable, model: str) -> tuple[float, ...]:
    """The model's price-change times, when the price table has dated prices."""
    # Dated prices come with a newer price table (RateTable.boundaries); until then none.
    boundaries: Callable[[str], Sequence[float]] | None = getattr(pricing, "boundaries", None)
    return tuple(boundaries(model)) if boundaries is not None else ()


def class_rates(pricing: RateTable, cls: CountClass) -> Rates | None:
    """The rates of a class's requests (None: unpriced model)."""
    kwargs: dict[str, Any] = {}
    bounds = _boundaries(pricing, cls.model)
    if bounds and cls.period:
        kwargs["at"] = bounds[cls.period - 1]  # the start of the class's price period
    return pricing.rates(cls.model, long_context=bool(cls.long), inference_geo=cls.geo,
                         service_tier=cls.tier, speed=cls.speed, **kwargs)


class Exposure:
    """A class's sums as the catalogue's counter samples (names without namespace)."""

    def __init__(self, pricing: RateTable, labels: LabelPolicy,
                 kv_bytes_per_token: Mapping[str, int], upload_bytes_per_token: float) -> None:
        """Samples under ``labels`` (the label policy), list prices and the byte estimates."""
        self.pricing = pricing
        self.labels = labels
        self.kv = dict(sorted(kv_bytes_per_token.items()))
        self.upload = upload_bytes_per_token
        self._keys: dict[tuple[str, str, int], dict[str, Labels]] = {}
        self._rates: dict[CountClass, Rates | None] = {}

    def samples(self, cls: CountClass, sums: Sums) -> list[tuple[SampleKey, float]]:
        """Every counter sample value that a class's sums make (zeros included).

        Counters without a gap label come from the class with its gap bucket
        cleared (:func:`price_class`), the gap-labelled ones from the bucket's
        sums alone (:meth:`gap_samples`): how a history splits into buckets
        must not move a cost by a rounding.
        """
        if cls.gap:
            return self.gap_samples(cls.gap, sums)
        n = dict(zip(COUNT_SUMS, sums, strict=True))
        typed = self._typed(cls)
        model = self.labels.model(cls.model)
        # Integer samples stay Python ints (exact at any size); only cost and upload
        # bytes are floats, multiples of their quantum.
        out: list[tuple[SampleKey, float]] = [(("requests", typed[""]), n["requests"])]
        out.extend((("tokens", typed[t]), n[t]) for t in TOKEN_FIELDS)
        rates = self._class_rates(cls)
        if rates is None:
            out.append((("unpriced_tokens", (("model", model),)), sum(n[t] for t in TOKEN_FIELDS)))
        else:
            cost = rates.cost(*(n[t] for t in TOKEN_FIELDS))
            out.extend((("cost_usd", typed[t]), exact(cost[t], USD_QUANTUM)) for t in TOKEN_FIELDS)
            # The prompt cache's saving, as two families that only grow (a saving can be
            # negative: a write never read); report's net figure is their difference.
            parts = counter_parts(rates, n["cache_read"], n["cache_write_5m"], n["cache_write_1h"])
            out.extend(((family, typed[kind]), exact(max(0.0, usd), USD_QUANTUM))
                       for kind, (family, usd) in parts.items())
            # Web searches are billed per search. Their series exist only where searches
            # were made: one more series per label set for a feature most never use.
            per_search: float | None = getattr(rates, "web_search_usd", None)
            if per_search is not None and n["web_search"]:
                out.append((("cost_usd", (*typed[""], ("type", "web_search"))),
                            exact(n["web_search"] * per_search, USD_QUANTUM)))
        if n["web_search"]:
            out.append((("web_search_requests", typed[""]), n["web_search"]))
        if cls.source == Source.ADVISOR:
            return out  # run on the provider's side: nothing uploaded, KV not the conversation's
        context = n["input"] + n["cache_read"] + n["cache_write_5m"] + n["cache_write_1h"]
        out.append((("upload_bytes", ()), upload_bytes(context, self.upload)))
        computed = n["input"] + n["cache_write_5m"] + n["cache_write_1h"]
        out.extend((("kv_recomputed_bytes", (("arch", a),)), computed * b)
                   for a, b in self.kv.items())
        return out

    @staticmethod
    def gap_samples(gap: str, sums: Sums) -> list[tuple[SampleKey, float]]:
        """The gap-labelled counter samples of one gap bucket's sums (integers)."""
        n = dict(zip(COUNT_SUMS, sums, strict=True))
        label = (("gap", gap),)
        write = n["cache_write_5m"] + n["cache_write_1h"]
        return [(("requests_after_gap", label), n["requests"]),
                *((("prompt_tokens_after_gap", (*label, ("type", kind))), value)
                  for kind, value in (("input", n["input"]), ("cache_read", n["cache_read"]),
                                      ("cache_write", write)))]

    def zero_samples(self) -> list[SampleKey]:
        """The fixed-label series that exist from the start (Prometheus must see them at 0)."""
        out: list[SampleKey] = []
        for bucket in GAP_BUCKETS:
            out.append(("requests_after_gap", (("gap", bucket),)))
            out.extend(("prompt_tokens_after_gap", (("gap", bucket), ("type", kind)))
                       for kind in PROMPT_TYPES)
        return out

    def hist_labels(self, series: HistSeries) -> Labels:
        """The labels of a histogram series under the label policy."""
        if series.name in ("request_context_tokens", "request_output_tokens"):
            return (("model", self.labels.model(series.model)),
                    ("source", _SOURCES[series.source].label))
        if series.arch:
            return (("arch", series.arch),)
        return ()

    def _typed(self, cls: CountClass) -> dict[str, Labels]:
        """Label tuples of the (model, project, source) series, per token type ("" for none)."""
        raw = (cls.model, cls.project, cls.source)
        keys = self._keys.get(raw)
        if keys is None:
            base = (("model", self.labels.model(cls.model)),
                    ("project", self.labels.project(cls.project)),
                    ("source", _SOURCES[cls.source].label))
            keys = {"": base, **{t: (*base, ("type", t)) for t in TOKEN_FIELDS}}
            self._keys[raw] = keys
        return keys

    def _class_rates(self, cls: CountClass) -> Rates | None:
        """Rates per class, looked up once."""
        if cls not in self._rates:
            self._rates[cls] = class_rates(self.pricing, cls)
        return self._rates[cls]


def split(cls: CountClass) -> tuple[CountClass, CountClass | None]:
    """The two keys a class's sums are kept under: its price class, and its gap bucket.

    The gap key keeps only the bucket (the gap counters have no other label).
    """
    price = cls._replace(gap="") if cls.gap else cls
    gap = CountClass("", "", 0, "", "", "", 0, 0, cls.gap) if cls.gap else None
    return price, gap


def diff(new: Iterable[tuple[SampleKey, float]],
         old: Iterable[tuple[SampleKey, float]]) -> dict[SampleKey, float]:
    """Per-sample growth from ``old`` to ``new`` (both from :meth:`Exposure.samples`)."""
    out = dict(new)
    for key, value in old:
        out[key] = out.get(key, 0) - value
    return out


def add_sums(a: Sums, b: Sums, sign: int = 1) -> Sums:
    """Element-wise ``a + sign * b``."""
    return tuple(x + sign * y for x, y in zip(a, b, strict=True))
