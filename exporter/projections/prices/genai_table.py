"""Our rate table, built from the genai-prices database (Pydantic's, released monthly).

genai-prices knows every Anthropic model with its 5-minute and 1-hour cache-write
prices, long-context tiers, prices that change on a date, fast-mode and
web-search prices, and it makes no network call unless asked. Its ``calc_price``
works in Decimals through pydantic types, far too slow to call per request,
so we read its data ONCE into plain float rates per family and period
(``Family``), and price requests with those.

Importing its data (a 1.6 MB module, and httpx for its updater) would be most
of a warm ``report``'s time (docs/benchmarks.md); so the table is cached as a small JSON
file, keyed by the installed data file (path, size, mtime) and by the content
of the code that builds and reads the table, and genai-prices is imported only
to rebuild it. Each key has its own file (a few kB; the newest few are kept):
two installs or source trees sharing a cache directory do not rebuild each
other's table on every other run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from importlib import metadata, util
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from exporter.projections.prices import model_ids as model_ids_module
from exporter.projections.prices import rates as rates_module
from exporter.projections.prices.model_ids import is_family_key, normalise_model_id
from exporter.projections.prices.rates import Family, ModelPrice, Rates

if TYPE_CHECKING:  # imported lazily at run time: see the module docstring
    from genai_prices import types as gp

PACKAGE: Final = "genai-prices"
PROVIDER: Final = "anthropic"  # list prices: Bedrock/Vertex ids are matched to these
CACHE_PREFIX: Final = "genai-prices-table-"  # + the first hex digits of the key, + ".json"
CACHE_KEEP: Final = 8  # cache files kept (newest first); older keys are removed on a write
_SCHEMA: Final = 2  # bump when the cached table's shape or meaning changes
# The modules whose code decides what the table holds and how it is read back
# (their paths from the modules themselves: a renamed file cannot drop out of the key).
_BUILDERS: Final = (__file__, rates_module.__file__, model_ids_module.__file__)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_FAST: Final = {"speed": "fast"}


class PriceUpdateError(RuntimeError):
    """Fetching the newest price data failed; the message says why and what stays in use."""


@dataclass(frozen=True, slots=True)
class PriceData:
    """The priced families, the ids that name them, and where the data came from."""

    families: Mapping[str, Family]
    keys: Mapping[str, str]  # normalised model id -> family key
    meta: Mapping[str, str] = field(default_factory=dict)


class _UnsupportedError(ValueError):
    """A model whose prices our table cannot represent exactly (it stays unpriced)."""


def default_cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CACHE_HOME/claude-code-exporter`` (default ``~/.cache/…``)."""
    base = env.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".cache"
    return root / "claude-code-exporter"


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
    path = None if cache_dir is None else cache_file(cache_dir, stamp)
    if path is not None:
        cached = _read_cache(path, stamp)
        if cached is not None:
            return cached
    try:
        from genai_prices.data import providers  # noqa: PLC0415 - lazy on purpose, see above

        data = from_providers(providers, origin="bundled")
    except Exception as exc:  # a release whose data we cannot read: price nothing, say why
        return PriceData({}, {}, {"package": PACKAGE, "version": _version(), "data_date": "",
                                  "origin": f"unusable ({type(exc).__name__}: {exc})"})
    if path is not None:
        _write_cache(path, stamp, data)
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
    provider = next((p for p in providers if p.id == PROVIDER), None)
    if provider is None:
        raise ValueError(f"no {PROVIDER!r} provider in the price data")
    families: dict[str, Family] = {}
    keys: dict[str, str] = {}
    skipped: list[str] = []
    for info in provider.models:
        key = normalise_model_id(info.id)
        if not is_family_key(key) or key in families:
            continue  # e.g. "claude-v1": no version, and not a model Claude Code runs
        try:
            families[key] = _family(key, info)
        except _UnsupportedError:
            skipped.append(info.id)
            continue
        for name in sorted(_match_keys(info) | {key}):
            keys.setdefault(name, key)  # the first model in data order wins, as in genai-prices
    meta = {
        "package": PACKAGE,
        "version": _version(),
        "data_date": max((d.isoformat() for d in _dates(provider)), default=""),
        "origin": origin,
    }
    if skipped:
        meta["skipped"] = ",".join(skipped)
    return PriceData(families, keys, meta)


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
            yield from list(_start_dates(info, fast_only=False))


def _start_dates(info: gp.ModelInfo, *, fast_only: bool) -> Iterator[date]:
    """Start dates of the model's conditional prices and its variants' constraints.

    ``fast_only`` keeps, of the variants, only fast mode's (we price batch by
    our own ×0.5 rule, so batch dates do not split our periods).
    """
    from genai_prices.types import ConditionalPrice, StartDateConstraint  # noqa: PLC0415

    constraints: list[object] = []
    if isinstance(info.prices, list):
        constraints += [c.constraint for c in info.prices if isinstance(c, ConditionalPrice)]
    for variant in info.price_variants or ():
        if not fast_only or variant.when == _FAST:
            constraints.append(variant.constraint)
    for constraint in constraints:
        if isinstance(constraint, StartDateConstraint):
            yield constraint.start_date
        elif constraint is not None:  # a time-of-day price: no fixed periods to build
            raise _UnsupportedError(f"{info.id}: {type(constraint).__name__}")


def _match_keys(info: gp.ModelInfo) -> set[str]:
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
    return {k for k in keys if is_family_key(k)}


def _family(key: str, info: gp.ModelInfo) -> Family:
    """The model's prices as periods split at each date on which they change."""
    starts = sorted(set(_start_dates(info, fast_only=True)))
    has_fast = any(v.when == _FAST for v in info.price_variants or ())
    periods: list[ModelPrice] = []
    begins: list[float] = []
    for day in [None, *starts]:
        when = _EPOCH if day is None else datetime(day.year, day.month, day.day, tzinfo=UTC)
        price = _period(info, when, has_fast)
        if periods and price == periods[-1]:
            continue  # a date that changes nothing we price (e.g. another field's variant)
        if day is not None:
            begins.append(when.timestamp())
        periods.append(price)
    return Family(key, tuple(periods), tuple(begins), info.id)


def _period(info: gp.ModelInfo, when: datetime, has_fast: bool) -> ModelPrice:
    """Our price of one period: standard rates, long tier, fast-mode rates."""
    standard = info.get_prices(when)
    rates, long_context, threshold = _convert(standard, info.id)
    fast = fast_long = None
    if has_fast:
        fast_price = info.get_prices(when, _FAST)
        if fast_price != standard:
            fast, fast_long, fast_threshold = _convert(fast_price, info.id)
            if fast_long is not None and fast_threshold != threshold:
                raise _UnsupportedError(f"{info.id}: fast-mode tier at another threshold")
    return ModelPrice(rates, long_context, threshold if long_context else 200_000, 1.0,
                      fast, fast_long)


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


# --- the on-disk cache ------------------------------------------------------------


def cache_file(cache_dir: Path, stamp: str | None = None) -> Path | None:
    """Where the table of the installed data (or of ``stamp``) is cached; None: not at all."""
    stamp = _stamp() if stamp is None else stamp
    if not stamp:
        return None
    return cache_dir / f"{CACHE_PREFIX}{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.json"


def _stamp() -> str | None:
    """Identity of the installed data and of this code; None when genai-prices is not installed.

    The data: its data file's path, size and mtime (a reinstall changes them).
    Our code: a hash of the modules that build and decode the table, so a new
    exporter rebuilds it and a checkout that only touches mtimes does not. ""
    when our own files cannot be read (a zip install): the table is then built
    without a cache.
    """
    try:
        spec = util.find_spec("genai_prices")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    data_file = Path(next(iter(spec.submodule_search_locations))) / "data.py"
    try:
        st = data_file.stat()
    except OSError:
        return None
    code = hashlib.sha256()
    try:
        for path in _BUILDERS:
            code.update(Path(path).read_bytes())
    except OSError:
        return ""
    return f"{_SCHEMA}:{data_file}:{st.st_size}:{st.st_mtime_ns}:{code.hexdigest()}"


def _read_cache(path: Path, stamp: str) -> PriceData | None:
    """The cached table if it exists, is ours and matches ``stamp``; else None."""
    try:
        raw = json.loads(path.read_bytes())
        if raw.get("stamp") != stamp:
            return None
        return _decode(raw)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # unreadable or from another version: rebuilt and rewritten


def _write_cache(path: Path, stamp: str, data: PriceData) -> None:
    """Write the table atomically; a read-only or full disk only costs the speed-up."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".prices-", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"stamp": stamp, **_encode(data)}, fh, separators=(",", ":"))
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _prune(path.parent)


def _prune(cache_dir: Path) -> None:
    """Keep the newest :data:`CACHE_KEEP` tables (other keys: other installs, older releases).

    An older release's single ``genai-prices-table.json`` is left to it.
    """
    with contextlib.suppress(OSError):
        tables = sorted(cache_dir.glob(f"{CACHE_PREFIX}*.json"),
                        key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in tables[CACHE_KEEP:]:
            old.unlink(missing_ok=True)


def _encode(data: PriceData) -> dict[str, Any]:
    """JSON form of the table (floats round-trip exactly through ``repr``)."""
    def rates(r: Rates | None) -> list[float] | None:
        return None if r is None else [*r.token_rates(), r.web_search_usd]

    families = {
        key: {
            "name": fam.name,
            "starts": list(fam.starts),
            "periods": [
                {"rates": rates(p.rates), "long": rates(p.long_context),
                 "threshold": p.long_context_threshold, "fast": rates(p.fast),
                 "fast_long": rates(p.fast_long_context)}
                for p in fam.periods
            ],
        }
        for key, fam in data.families.items()
    }
    return {"meta": dict(data.meta), "keys": dict(data.keys), "families": families}


def _decode(raw: Mapping[str, Any]) -> PriceData:
    """Inverse of :func:`_encode`; raises on any malformed part."""
    def rates(value: Any) -> Rates | None:
        if value is None:
            return None
        *tokens, web = (float(v) for v in value)
        return Rates.of(tokens, web)

    families = {}
    for key, fam in raw["families"].items():
        periods = []
        for p in fam["periods"]:
            base = rates(p["rates"])
            if base is None:
                raise ValueError("period without rates")
            periods.append(ModelPrice(base, rates(p["long"]), int(p["threshold"]), 1.0,
                                      rates(p["fast"]), rates(p["fast_long"])))
        families[str(key)] = Family(str(key), tuple(periods),
                                    tuple(float(s) for s in fam["starts"]), str(fam["name"]))
    keys = {str(k): str(v) for k, v in raw["keys"].items() if v in families}
    return PriceData(families, keys, {str(k): str(v) for k, v in raw["meta"].items()})
