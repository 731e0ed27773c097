"""The rate table (:class:`RateTable`): list-price cost of a request, genai-prices plus our rules.

Where prices come from (docs/figures.md, "Prices"): the genai-prices database,
read once at start into plain float rates per model family and price period
(``prices.genai_table``): Anthropic's models (Claude Code) and OpenAI's (Codex,
with their own service-tier prices); our rules fill its gaps
(``exporter/data/pricing.toml``: US-only inference ×1.1, batch ×0.5, fast-mode
multipliers it lacks, a missing long-context tier, Codex's fallback model); the
user's config overrides win over both (``prices.rules``). A model id is
normalised (provider prefix, version and date suffixes removed,
``prices.model_ids``) and matched EXACTLY to a family key: an id that matches
nothing is unpriced, never guessed and never $0.

Per-request pricing is two dict lookups and, for the few families whose prices
change on a date, one bisect; both caches are bounded.
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Final

from exporter.projections.prices.genai_table import (
    PriceData,
    PriceUpdateError,
    bundled,
    default_cache_dir,
    fetch_latest,
)
from exporter.projections.prices.model_ids import MAX_MODEL_ID, normalise_model_id
from exporter.projections.prices.rates import RATE_NAMES, Family, ModelPrice, Rates
from exporter.projections.prices.rules import MULTIPLIER_FIELDS, apply
from exporter.records import Request

__all__ = [
    "MAX_MODEL_ID", "MULTIPLIER_FIELDS", "RATE_NAMES", "ModelPrice", "PriceData",
    "PriceUpdateError", "RateTable", "Rates", "fetch_prices", "load_pricing", "normalise_model_id",
]

# Distinct raw ids remembered; beyond it the memo starts over (ids come from
# transcripts, so an attacker could otherwise grow it without bound).
MAX_CACHED_IDS: Final = 4096
_NO_MULTIPLIERS: Final[Mapping[str, float]] = {}


def fetch_prices(url: str | None = None, timeout: float = 10.0) -> PriceData:
    """The newest genai-prices data from the network (``--update-prices``).

    Raises :class:`PriceUpdateError` with a one-line reason; pass the result to
    :meth:`RateTable.load` as ``data``.
    """
    return fetch_latest(url, timeout)


def load_pricing(overrides: Mapping[str, Any] | None, cache_dir: Path | None = None, *,
                 update: bool = False,
                 warn: Callable[[str], None] = lambda _line: None) -> RateTable:
    """The prices a command uses: the installed database, or the newest with ``update``.

    ``update`` (``--update-prices``) fetches genai-prices' newest data for this run;
    without network it says so in one line through ``warn`` and keeps the
    installed data. ``cache_dir`` holds the built rate table (default: the user
    cache directory; not the state dir, which holds the ledger and nothing
    before it is known to be ours). Where it cannot be written, the table is
    rebuilt at each start.
    """
    data = None
    if update:
        try:
            data = fetch_prices()
        except PriceUpdateError as exc:
            warn(f"--update-prices: {exc}; using the installed price data")
    return RateTable.load(overrides, data=data, cache_dir=cache_dir)


class RateTable:
    """The rate table: model id → family → rates in force at a time, plus whole-request multipliers.

    It prices one request (:meth:`rates`, :meth:`cost`); sums of many are priced
    per price class by :class:`~exporter.projections.class_prices.ClassPrices`.
    """

    def __init__(
        self,
        families: Mapping[str, Family],
        keys: Mapping[str, str],
        multipliers: Mapping[str, Mapping[str, float]] | None = None,
        meta: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Build from validated parts; most callers want :meth:`load`."""
        self.families = dict(families)
        self.keys = dict(keys)
        mult = multipliers or {}
        self._geo = dict(mult.get("inference_geo", _NO_MULTIPLIERS))
        self._tier = dict(mult.get("service_tier", _NO_MULTIPLIERS))
        self.meta = dict(meta or {})
        self._clock = clock
        # Memos for the hot path: raw id -> family (bounded), and per rate class.
        # A rate class key holds only bounded values (family, period, factors, a service
        # tier the family's data names), so
        # that memo is bounded by the table itself, whatever the transcripts say.
        self._families: dict[str, Family | None] = {}
        self._rates: dict[tuple[str, int, bool, float, float, bool, str], Rates] = {}
        self._by_labels: dict[
            tuple[str, str, str, str], tuple[Family | None, tuple[Rates, ...]]] = {}

    @classmethod
    def load(
        cls,
        overrides: Mapping[str, Any] | None = None,
        *,
        data: PriceData | None = None,
        cache_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> RateTable:
        """The database (or ``data``), our rules, then the user's ``overrides``.

        ``cache_dir`` holds the table built from genai-prices (default: the user
        cache directory). Raises ValueError naming the offending key when the
        overrides are invalid.
        """
        if data is None:
            data = bundled(cache_dir or default_cache_dir())
        text = resources.files("exporter").joinpath("data/pricing.toml").read_text("utf-8")
        families, keys, multipliers = apply(
            data.families, data.keys, tomllib.loads(text), overrides or {}
        )
        meta = dict(data.meta)
        if overrides:
            meta["overrides"] = "config"
        return cls(families, keys, multipliers, meta, clock)

    # --- lookups -------------------------------------------------------------------

    def _family(self, model: str) -> Family | None:
        """The family pricing ``model`` (memoised), or None when unpriced."""
        try:
            return self._families[model]
        except KeyError:
            pass
        if len(model) > MAX_MODEL_ID:
            return None  # not a real id; not remembered either
        # The id as written first: a few OpenAI snapshots are priced apart from the
        # family their normalised id names (a Claude id as written is a key only if
        # it is already normalised: the same family either way).
        key = self.keys.get(model.strip().lower()) or self.keys.get(normalise_model_id(model))
        found = None if key is None else self.families[key]
        if len(self._families) >= MAX_CACHED_IDS:
            self._families.clear()
        self._families[model] = found
        return found

    def family(self, model: str) -> str | None:
        """Return the family key pricing ``model``, or None when the model is unpriced."""
        fam = self._family(model)
        return None if fam is None else fam.key

    def _index(self, fam: Family, at: float | None) -> int:
        """The period of ``fam`` in force at ``at`` (None: now)."""
        if not fam.starts:
            return 0
        return fam.index(self._clock() if at is None else at)

    def price(self, model: str, *, at: float | None = None) -> ModelPrice | None:
        """Return the family price of ``model`` in force at ``at``, or None when unpriced."""
        fam = self._family(model)
        return None if fam is None else fam.periods[self._index(fam, at)]

    @property
    def models(self) -> dict[str, ModelPrice]:
        """Each family's price in force now."""
        return {key: fam.periods[self._index(fam, None)] for key, fam in self.families.items()}

    def long_context_threshold(self, model: str, *, at: float | None = None) -> int | None:
        """Prompt size above which ``model`` bills at its tier, or None if it never does.

        Without ``at``: the lowest threshold of any period, so that a caller that
        classifies requests by it and passes each request's date to
        :meth:`rates` prices every period right.
        """
        fam = self._family(model)
        if fam is None:
            return None
        if at is None:
            return fam.long_context_threshold()
        price = fam.periods[self._index(fam, at)]
        return price.long_context_threshold if price.long_context is not None else None

    def boundaries(self, model: str) -> tuple[float, ...]:
        """Sorted epoch seconds at which ``model``'s prices change; empty if never.

        Requests between two boundaries share one price: group by period, price
        each class once.
        """
        fam = self._family(model)
        return () if fam is None else fam.starts

    # --- rates and cost ------------------------------------------------------------

    def rates(
        self,
        model: str,
        *,
        long_context: bool = False,
        inference_geo: str = "",
        service_tier: str = "",
        speed: str = "",
        at: float | None = None,
    ) -> Rates | None:
        """Effective rates with every multiplier folded in, or None when unpriced.

        ``long_context`` is the per-request decision (prompt above
        :meth:`long_context_threshold`); ``at`` the request's epoch seconds
        (None: now), for prices that change on a date.
        """
        fam = self._family(model)
        if fam is None:
            return None
        return self._class_rates(fam, self._index(fam, at), long_context,
                                 (inference_geo, service_tier, speed))

    def _class_rates(
        self, fam: Family, period: int, long_context: bool, labels: tuple[str, str, str]
    ) -> Rates:
        """Memoised rates of one price class; ``labels`` is (inference_geo, service_tier, speed).

        A service tier the period prices on its own (OpenAI's priority, flex…)
        bills at those rates; any other tier at the standard rates times its
        multiplier (our rules: batch ×0.5).
        """
        geo, tier, speed = labels
        g = self._geo.get(geo) or self._geo.get(geo.lower(), 1.0)
        fast = speed == "fast" or (speed != "" and speed.lower() == "fast")
        price = fam.periods[period]
        own = tier.lower() if price.tiers and tier else ""
        if own and price.tier(own) is None:
            own = ""
        t = 1.0 if own else (self._tier.get(tier) or self._tier.get(tier.lower(), 1.0))
        long_context = long_context and price.long_context is not None
        key = (fam.key, period, long_context, g, t, fast, own)
        try:
            return self._rates[key]
        except KeyError:
            pass
        result = price.select(long_context, fast, own).scaled(g * t)
        self._rates[key] = result
        return result

    def request_rates(self, req: Request) -> Rates | None:
        """Effective rates for one request (its date, and long context on its prompt).

        The hot path: one memo lookup by the request's raw labels gives the family
        and the rates of each (period, long context) class, so a request costs a
        dict lookup, a prompt comparison and, for dated families, one bisect.
        """
        labels = (req.model, req.inference_geo, req.service_tier, req.speed)
        entry = self._by_labels.get(labels)
        if entry is None:
            entry = self._labels_entry(labels)
        fam, table = entry
        if fam is None:
            return None
        period = fam.index(req.ts) if fam.starts else 0
        price = fam.periods[period]
        long_context = price.long_context is not None and (
            req.context > price.long_context_threshold)
        return table[2 * period + long_context]

    def _labels_entry(
        self, labels: tuple[str, str, str, str]
    ) -> tuple[Family | None, tuple[Rates, ...]]:
        """The family of a label set and its rates per ``2 * period + long``; memoised."""
        model, geo, tier, speed = labels
        fam = self._family(model)
        table: tuple[Rates, ...] = ()
        if fam is not None:
            table = tuple(
                self._class_rates(fam, period, long_context, (geo, tier, speed))
                for period in range(len(fam.periods)) for long_context in (False, True)
            )
        entry = (fam, table)
        if sum(map(len, labels)) <= MAX_MODEL_ID:  # raw strings from transcripts: bounded
            if len(self._by_labels) >= MAX_CACHED_IDS:
                self._by_labels.clear()
            self._by_labels[labels] = entry
        return entry

    def cost(self, req: Request) -> dict[str, float] | None:
        """USD per token type for one request, or None when its model is unpriced.

        A request that carries ``web_search_requests`` (when the ledger records
        them) also gets a ``web_search`` entry.
        """
        rates = self.request_rates(req)
        if rates is None:
            return None
        return rates.cost(
            req.input, req.output, req.cache_read, req.cache_write_5m, req.cache_write_1h,
            web_search=getattr(req, "web_search_requests", 0),
        )

    # --- telling the user ----------------------------------------------------------

    def describe(self) -> dict[str, str]:
        """Where the prices come from: package, version, data date, origin.

        For ``build_info`` labels and ``report``. ``data_date`` is the latest date
        from which any Anthropic price in the data applies; ``origin`` is
        ``bundled`` (the installed package), ``fetched <UTC time>``
        (``--update-prices``), ``not installed`` or ``unusable (<why>)`` (then
        nothing but config overrides is priced).
        """
        out = {k: self.meta.get(k, "") for k in ("package", "version", "data_date", "origin")}
        out["overrides"] = self.meta.get("overrides", "none")
        return out

    def unpriced_help(self, model: str) -> str:
        """One line on how to price ``model``: a config override or a newer database."""
        if model == "<synthetic>":
            return "<synthetic> marks Claude Code's own messages: never billed"
        if len(model) > MAX_MODEL_ID:
            return f"a model id over {MAX_MODEL_ID} characters is never priced"
        info = self.describe()
        family = normalise_model_id(model) or model
        source = f"{info['package']} {info['version']}".strip()
        if info["data_date"]:
            source += f" (prices to {info['data_date']})"
        return (
            f"{model!r} has no price in {source}: run `pip install -U genai-prices` "
            "for newer data, or add "
            f'[pricing.models."{family}"] with {", ".join(RATE_NAMES)} (USD per MTok) '
            "to the config"
        )
