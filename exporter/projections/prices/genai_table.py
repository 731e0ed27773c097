"""Our rate table, built from the genai-prices database (Pydantic's, released monthly).

genai-prices knows every Anthropic model with its 5-minute and 1-hour cache-write
prices, long-context tiers, prices that change on a date, fast-mode and
web-search prices, and every OpenAI model (what Codex runs) with its cached-input
price, long-context tier and service-tier (priority, flex…) prices; it makes no
network call unless asked. Its ``calc_price`` works in Decimals through pydantic
types, far too slow to call per request, so we read its data ONCE into plain
float rates per family and period (``Family``), and price requests with those.

Importing its data is slow, so the table is cached on disk
(``prices.table_cache``) and genai-prices is imported only to rebuild it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from exporter.projections.prices import model_ids as model_ids_module
from exporter.projections.prices import rates as rates_module
from exporter.projections.prices import table_cache
from exporter.projections.prices.model_ids import is_family_key, normalise_model_id
from exporter.projections.prices.rates import Family, ModelPrice, PriceData, Rates, TierPrice
from exporter.projections.prices.table_cache import CACHE_KEEP, CACHE_PREFIX, default_cache_dir

if TYPE_CHECKING:  # imported lazily at run time: see the module docstring
    from genai_prices import types as gp

__all__ = [
    "CACHE_KEEP", "CACHE_PREFIX", "PACKAGE", "PROVIDERS", "PriceData", "PriceUpdateError",
    "bundled", "cache_file", "default_cache_dir", "fetch_latest", "from_providers",
]

PACKAGE: Final = "genai-prices"
# Whose list prices we read, in order (an id both named would take the first's price):
# Anthropic's (Bedrock/Vertex ids are matched to these) and OpenAI's (Codex's models).
PROVIDERS: Final = ("anthropic", "openai")
DATED_PROVIDER: Final = "anthropic"  # ``data_date`` is the newest date of its prices
# An OpenAI family key: a normalised id ("gpt-5-4", "o4-mini"), or a dated snapshot's
# own lowercase id where its price differs from its alias's ("gpt-4o-2024-05-13");
# Anthropic's are ``model_ids.is_family_key``'s ("claude-" and a version).
_OPENAI_KEY: Final = re.compile(r"[a-z0-9][a-z0-9.-]{0,99}")
# The modules whose code decides what the table holds and how it is read back
# (their paths from the modules themselves: a renamed file cannot drop out of the key).
_BUILDERS: Final = (__file__, rates_module.__file__, model_ids_module.__file__,
                    table_cache.__file__)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_FAST: Final = {"speed": "fast"}
_TIER: Final = "service_tier"
_STANDARD_TIER: Final = "default"  # OpenAI's name for the standard prices


class PriceUpdateError(RuntimeError):
    """Fetching the newest price data failed; the message says why and what stays in use."""


class _UnsupportedError(ValueError):
    """A model whose prices our table cannot represent exactly (it stays unpriced)."""


def cache_file(cache_dir: Path, stamp: str | None = None) -> Path | None:
    """Where the table of the installed data (or of ``stamp``) is cached; None: not at all."""
    return table_cache.cache_file(cache_dir, _stamp() if stamp is None else stamp)


def _stamp() -> str | None:
    """Identity of the installed data and of this code (``table_cache.stamp``)."""
    return table_cache.stamp(_BUILDERS)


def bundled(cache_dir: Path | None) -> PriceData:
    """The table from the installed genai-prices, from ``cache_dir`` when still valid.

    ``cache_dir=None`` builds without a cache. A cache that cannot be read or
    written is rebuilt or skipped, never an error. Without genai-prices
    installed, nothing is priced (``describe`` and ``unpriced_help`` say so).
    """
    stamp = _stamp()
    if stamp is None:
        return PriceData({}, {}, {"package": PACKAGE, "version": "", "data_date": "",
                                  "origin": "not installed"})
    path = None if cache_dir is None else table_cache.cache_file(cache_dir, stamp)
    if path is not None:
        cached = table_cache.read_cache(path, stamp)
        if cached is not None:
            return cached
    try:
        from genai_prices.data import providers  # noqa: PLC0415 - lazy on purpose, see above

        data = from_providers(providers, origin="bundled")
    except Exception as exc:  # a release whose data we cannot read: price nothing, say why
        return PriceData({}, {}, {"package": PACKAGE, "version": _version(), "data_date": "",
                                  "origin": f"unusable ({type(exc).__name__}: {exc})"})
    if path is not None:
        table_cache.write_cache(path, stamp, data)
    return data


def fetch_latest(url: str | None = None, timeout: float = 10.0) -> PriceData:
    """Download the newest data with genai-prices' ``UpdatePrices`` (opt-in network).

    Raises :class:`PriceUpdateError` naming the URL and the cause; the caller
    keeps the shipped data in use.
    """
    import httpx2  # noqa: PLC0415 - genai-prices' HTTP client, only needed here
    from genai_prices import UpdatePrices  # noqa: PLC0415
    from genai_prices.update_prices import DEFAULT_UPDATE_URL  # noqa: PLC0415

    target = url or DEFAULT_UPDATE_URL
    updater = UpdatePrices(url=target, request_timeout=httpx2.Timeout(timeout, connect=timeout))
    try:
        snapshot = updater.fetch()  # one synchronous GET; no background thread
    except Exception as exc:  # any failure (DNS, refused, HTTP status, bad JSON) means the same
        raise PriceUpdateError(
            f"could not fetch prices from {target}: {type(exc).__name__}: {exc}"
        ) from exc
    if snapshot is None:
        raise PriceUpdateError(f"could not fetch prices from {target}: empty answer")
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        return from_providers(snapshot.providers, origin=f"fetched {stamp}")
    except ValueError as exc:
        raise PriceUpdateError(f"prices fetched from {target} are unusable: {exc}") from exc


def from_providers(providers: Sequence[gp.Provider], *, origin: str) -> PriceData:
    """Build the table from genai-prices providers (its bundled list or a fetched one)."""
    by_id = {p.id: p for p in providers}
    if DATED_PROVIDER not in by_id:
        raise ValueError(f"no {DATED_PROVIDER!r} provider in the price data")
    families: dict[str, Family] = {}
    keys: dict[str, str] = {}
    skipped: list[str] = []
    for name in (n for n in PROVIDERS if n in by_id):
        fits = is_family_key if name == DATED_PROVIDER else _is_openai_key
        for info in by_id[name].models:
            key = normalise_model_id(info.id)
            spellings = _match_keys(info, fits) | {key}
            if name != DATED_PROVIDER and key in families:
                # A dated snapshot priced apart from its alias ("gpt-4o-2024-05-13"): its
                # own id, matched exactly (RateTable looks an id up as written first).
                key = info.id.strip().lower()
                spellings = {key}
            if not fits(key) or key in families:
                continue  # e.g. "claude-v1": no version, and not a model Claude Code runs
            try:
                families[key] = _family(key, info)
            except _UnsupportedError:
                skipped.append(info.id)
                continue
            for spelling in sorted(spellings):  # the first model in data order wins, as in
                keys.setdefault(spelling, key)  # genai-prices
    meta = {
        "package": PACKAGE,
        "version": _version(),
        "data_date": max((d.isoformat() for d in _dates(by_id[DATED_PROVIDER])), default=""),
        "origin": origin,
    }
    if skipped:
        meta["skipped"] = ",".join(skipped)
    return PriceData(families, keys, meta)


def _is_openai_key(name: str) -> bool:
    """Whether ``name`` could be an OpenAI family key: letters, digits, dots and dashes."""
    return _OPENAI_KEY.fullmatch(name) is not None


def _version() -> str:
    """The installed genai-prices version, or "" when unknown."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return ""


def _dates(provider: gp.Provider) -> Iterator[date]:
    """Every date from which some price of the provider applies."""
    for info in provider.models:
        with contextlib.suppress(_UnsupportedError):
            yield from list(_start_dates(info, priced_only=False))


def _priced(variant: gp.PriceVariant) -> bool:
    """Whether our table holds the variant's prices: fast mode, and service tiers but the standard.

    Batch is priced by our own ×0.5 rule (exporter/data/pricing.toml), so its
    variants neither enter the table nor split its periods.
    """
    when = variant.when
    if when == _FAST:
        return True
    return set(when) == {_TIER} and str(when[_TIER]).lower() != _STANDARD_TIER


def _start_dates(info: gp.ModelInfo, *, priced_only: bool) -> Iterator[date]:
    """Start dates of the model's conditional prices and its variants' constraints.

    ``priced_only`` keeps, of the variants, only those our table holds (``_priced``).
    """
    from genai_prices.types import ConditionalPrice, StartDateConstraint  # noqa: PLC0415

    constraints: list[object] = []
    if isinstance(info.prices, list):
        constraints += [c.constraint for c in info.prices if isinstance(c, ConditionalPrice)]
    for variant in info.price_variants or ():
        if not priced_only or _priced(variant):
            constraints.append(variant.constraint)
    for constraint in constraints:
        if isinstance(constraint, StartDateConstraint):
            yield constraint.start_date
        elif constraint is not None:  # a time-of-day price: no fixed periods to build
            raise _UnsupportedError(f"{info.id}: {type(constraint).__name__}")


def _match_keys(info: gp.ModelInfo, fits: Callable[[str], bool]) -> set[str]:
    """Family keys the model's match rules name exactly (``equals``, ``starts_with``).

    Regex and substring rules are not turned into keys: an id must normalise to
    a named family exactly, or it is unpriced (never guessed from a prefix).
    """
    from genai_prices.types import ClauseEquals, ClauseOr, ClauseStartsWith  # noqa: PLC0415

    found: set[str] = set()
    todo: list[object] = [info.match]
    while todo:
        clause = todo.pop()
        if isinstance(clause, ClauseOr):
            todo.extend(clause.or_)
        elif isinstance(clause, ClauseEquals):
            found.add(clause.equals)
        elif isinstance(clause, ClauseStartsWith):
            found.add(clause.starts_with.rstrip("@-."))
    keys = {normalise_model_id(name) for name in found}
    return {k for k in keys if fits(k)}


def _family(key: str, info: gp.ModelInfo) -> Family:
    """The model's prices as periods split at each date on which they change."""
    starts = sorted(set(_start_dates(info, priced_only=True)))
    variants = [v.when for v in info.price_variants or () if _priced(v)]
    periods: list[ModelPrice] = []
    begins: list[float] = []
    for day in [None, *starts]:
        when = _EPOCH if day is None else datetime(day.year, day.month, day.day, tzinfo=UTC)
        price = _period(info, when, variants)
        if periods and price == periods[-1]:
            continue  # a date that changes nothing we price (e.g. another field's variant)
        if day is not None:
            begins.append(when.timestamp())
        periods.append(price)
    return Family(key, tuple(periods), tuple(begins), info.id)


def _period(info: gp.ModelInfo, when: datetime, variants: Sequence[Mapping[str, str]]
            ) -> ModelPrice:
    """Our price of one period: standard rates, long tier, fast-mode and service-tier rates.

    A variant that prices nothing differently on that date (one whose start
    date is later) is left out: its requests bill at the standard rates, as
    genai-prices bills them.
    """
    standard = info.get_prices(when)
    rates, long_context, threshold = _convert(standard, info.id)
    fast = fast_long = None
    tiers: list[TierPrice] = []
    for variant in variants:
        price = info.get_prices(when, variant)
        if price == standard:
            continue
        own, own_long, own_threshold = _convert(price, info.id)
        if own_long is not None and own_threshold != threshold:
            raise _UnsupportedError(f"{info.id}: {variant} tier at another threshold")
        if variant == _FAST:
            fast, fast_long = own, own_long
        else:
            tiers.append(TierPrice(str(variant[_TIER]).lower(), own, own_long))
    return ModelPrice(rates, long_context, threshold if long_context else 200_000, 1.0,
                      fast, fast_long, tuple(sorted(tiers, key=lambda t: t.name)))


def _convert(price: gp.ModelPrice, name: str) -> tuple[Rates, Rates | None, int]:
    """Five token rates and the web-search price; the long tier if any, and its threshold.

    A missing cache price falls back to its parent, as genai-prices prices the
    tokens: a cache read or write to input, a 5-minute or 1-hour write to the
    generic write price. A missing input or output price is unsupported (we
    never price tokens at $0 because a field is absent).
    """
    values: dict[str, Any] = dict(price.__dict__)
    for extra in set(values) - _KNOWN_KEYS:
        if values[extra] is not None:
            raise _UnsupportedError(f"{name}: price key {extra}")
    inp, out = values.get("input_mtok"), values.get("output_mtok")
    if inp is None or out is None:
        raise _UnsupportedError(f"{name}: no input or output price")
    write = _first(values.get("cache_write_mtok"), inp)
    fields = (
        inp,
        _first(values.get("cache_write_5m_mtok"), write),
        _first(values.get("cache_write_1h_mtok"), write),
        _first(values.get("cache_read_mtok"), inp),
        out,
    )
    search = values.get("web_searches_kcount")
    web = 0.0 if search is None else float(_flat(search, name) / 1000)
    base = Rates.of([float(_base(v)) for v in fields], web)
    tiers = {_tier(v, name) for v in fields} - {None}
    if not tiers:
        return base, None, 0
    if len(tiers) > 1:
        raise _UnsupportedError(f"{name}: tiers at different thresholds")
    (threshold,) = tiers
    assert threshold is not None
    long_context = Rates.of([float(_top(v)) for v in fields], web)
    return base, long_context, threshold


_KNOWN_KEYS: Final = frozenset({
    "input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok",
    "cache_write_5m_mtok", "cache_write_1h_mtok", "web_searches_kcount",
    # OpenAI's price per 1,000 file-search calls: no log we read counts such calls (Codex
    # writes none), so no figure of ours could carry it; known, and not read.
    "storage_searches_kcount",
})


def _first(value: object, fallback: object) -> object:
    """``value`` unless it is absent (an explicit 0 is a price, not an absence)."""
    return fallback if value is None else value


def _base(value: object) -> Decimal:
    """The price below any tier."""
    from genai_prices.types import TieredPrices  # noqa: PLC0415

    return value.base if isinstance(value, TieredPrices) else _decimal(value)


def _top(value: object) -> Decimal:
    """The price above the (single) tier, or the flat price."""
    from genai_prices.types import TieredPrices  # noqa: PLC0415

    return value.tiers[0].price if isinstance(value, TieredPrices) else _decimal(value)


def _tier(value: object, name: str) -> int | None:
    """The tier threshold of a price (None when flat); more than one tier is unsupported."""
    from genai_prices.types import TieredPrices  # noqa: PLC0415

    if not isinstance(value, TieredPrices):
        return None
    if len(value.tiers) != 1:
        raise _UnsupportedError(f"{name}: {len(value.tiers)} price tiers")
    return value.tiers[0].start


def _flat(value: object, name: str) -> Decimal:
    """A price that must not be tiered (per-request prices)."""
    if _tier(value, name) is not None:
        raise _UnsupportedError(f"{name}: tiered per-request price")
    return _decimal(value)


def _decimal(value: object) -> Decimal:
    """Check a price is a Decimal (the data's type)."""
    if not isinstance(value, Decimal):
        raise _UnsupportedError(f"price {value!r}")
    return value


