"""The rate table's on-disk cache: a small JSON file per (installed data, our code) key.

Importing genai-prices' data (a 1.6 MB module) would be most of a warm
``report``'s time (docs/benchmarks.md), so the table built from it
(``prices.genai_table``) is kept as JSON, keyed by the installed data file
(path, size, mtime) and by the content of the code that builds and reads the
table. Each key has its own file (a few kB; the newest few are kept): two
installs or source trees sharing a cache directory do not rebuild each
other's table on every other run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from importlib import util
from pathlib import Path
from typing import Any, Final

from exporter.projections.prices.rates import Family, ModelPrice, PriceData, Rates, TierPrice

CACHE_PREFIX: Final = "genai-prices-table-"  # + the first hex digits of the key, + ".json"
CACHE_KEEP: Final = 8  # cache files kept (newest first); older keys are removed on a write
# Bump when the cached table's shape or meaning changes (3: OpenAI's models, service tiers).
_SCHEMA: Final = 3


def default_cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CACHE_HOME/claude-code-exporter`` (default ``~/.cache/…``)."""
    base = env.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".cache"
    return root / "claude-code-exporter"


def cache_file(cache_dir: Path, stamp: str | None) -> Path | None:
    """Where the table of ``stamp`` is cached; None: not at all (no stamp)."""
    if not stamp:
        return None
    return cache_dir / f"{CACHE_PREFIX}{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.json"


def stamp(builders: Sequence[str]) -> str | None:
    """Identity of the installed data and of our code; None when genai-prices is not installed.

    The data: its data file's path, size and mtime (a reinstall changes them).
    Our code: a hash of ``builders``, the modules that build and decode the
    table, so a new exporter rebuilds it and a checkout that only touches
    mtimes does not. "" when our own files cannot be read (a zip install):
    the table is then built without a cache.
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
        for path in builders:
            code.update(Path(path).read_bytes())
    except OSError:
        return ""
    return f"{_SCHEMA}:{data_file}:{st.st_size}:{st.st_mtime_ns}:{code.hexdigest()}"


def read_cache(path: Path, key: str) -> PriceData | None:
    """The cached table if it exists, is ours and matches ``key``; else None."""
    try:
        raw = json.loads(path.read_bytes())
        if raw.get("stamp") != key:
            return None
        return _decode(raw)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # unreadable or from another version: rebuilt and rewritten


def write_cache(path: Path, key: str, data: PriceData) -> None:
    """Write the table atomically; a read-only or full disk only costs the speed-up."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".prices-", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"stamp": key, **_encode(data)}, fh, separators=(",", ":"))
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


def _rates_out(r: Rates | None) -> list[float] | None:
    """JSON form of rates (floats round-trip exactly through ``repr``)."""
    return None if r is None else [*r.token_rates(), r.web_search_usd]


def _rates_in(value: Any) -> Rates | None:
    """Inverse of :func:`_rates_out`."""
    if value is None:
        return None
    *tokens, web = (float(v) for v in value)
    return Rates.of(tokens, web)


def _encode(data: PriceData) -> dict[str, Any]:
    """JSON form of the table."""
    families = {
        key: {
            "name": fam.name,
            "starts": list(fam.starts),
            "periods": [
                {"rates": _rates_out(p.rates), "long": _rates_out(p.long_context),
                 "threshold": p.long_context_threshold, "fast": _rates_out(p.fast),
                 "fast_long": _rates_out(p.fast_long_context),
                 "tiers": [[t.name, _rates_out(t.rates), _rates_out(t.long_context)]
                           for t in p.tiers]}
                for p in fam.periods
            ],
        }
        for key, fam in data.families.items()
    }
    return {"meta": dict(data.meta), "keys": dict(data.keys), "families": families}


def _period(p: Mapping[str, Any]) -> ModelPrice:
    """One period from its JSON form; raises on any malformed part."""
    base = _rates_in(p["rates"])
    tiers = []
    for name, rates, long_context in p["tiers"]:
        tier_rates = _rates_in(rates)
        if tier_rates is None:
            raise ValueError("tier without rates")
        tiers.append(TierPrice(str(name), tier_rates, _rates_in(long_context)))
    if base is None:
        raise ValueError("period without rates")
    return ModelPrice(base, _rates_in(p["long"]), int(p["threshold"]), 1.0,
                      _rates_in(p["fast"]), _rates_in(p["fast_long"]), tuple(tiers))


def _decode(raw: Mapping[str, Any]) -> PriceData:
    """Inverse of :func:`_encode`; raises on any malformed part."""
    families = {
        str(key): Family(str(key), tuple(_period(p) for p in fam["periods"]),
                         tuple(float(s) for s in fam["starts"]), str(fam["name"]))
        for key, fam in raw["families"].items()
    }
    keys = {str(k): str(v) for k, v in raw["keys"].items() if v in families}
    return PriceData(families, keys, {str(k): str(v) for k, v in raw["meta"].items()})
