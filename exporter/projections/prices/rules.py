"""Our rules on top of the database, and the user's overrides on top of everything.

Both are tables of one shape (``exporter/data/pricing.toml``): ``models``
(per-family rates, ``long_context`` rates and threshold, ``fast_multiplier``,
``web_search_usd``), ``aliases`` and whole-request ``multipliers``. They differ
in strength:

- shipped **rules** fill gaps only: a family the database lacks, a long-context
  tier where the database has none, a fast-mode multiplier where the database
  has no fast-mode price, an id the database does not spell (an alias to a
  family it prices; none when it does not). The database wins wherever it has
  a figure;
- the user's **overrides** win over both, in every period of the family.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from exporter.projections.prices.model_ids import normalise_model_id
from exporter.projections.prices.rates import RATE_NAMES, Family, ModelPrice, Rates

MULTIPLIER_FIELDS: Final = ("inference_geo", "service_tier")
_MODEL_KEYS: Final = frozenset(
    (*RATE_NAMES, "long_context", "long_context_threshold", "fast_multiplier", "web_search_usd")
)
_TOP_KEYS: Final = frozenset(("models", "aliases", "multipliers"))
Multipliers = dict[str, dict[str, float]]


def apply(
    families: Mapping[str, Family], keys: Mapping[str, str],
    rules: Mapping[str, Any], overrides: Mapping[str, Any],
) -> tuple[dict[str, Family], dict[str, str], Multipliers]:
    """Apply shipped ``rules`` (gap-filling) then user ``overrides`` (winning).

    Raises ValueError naming the offending key when either table is invalid.
    """
    out_families, out_keys = dict(families), dict(keys)
    multipliers: Multipliers = {}
    for table, wins in ((rules, False), (overrides, True)):
        _unknown(table, _TOP_KEYS, "")
        for key, value in _table(table.get("models", {}), "models").items():
            path = f"models.{key}"
            patch = _parse_model(value, path)
            family_key = out_keys.get(_family_key(key, path))
            if family_key is None:
                if not wins and set(patch.get("rates", {})) != set(RATE_NAMES):
                    continue  # a rule for a family this data lacks: nothing to fill
                out_families[key] = _new_family(key, patch, path)
                out_keys[key] = key
            else:
                fam = out_families[family_key]
                out_families[family_key] = _patched(fam, patch, path, wins=wins)
        for key, target in _table(table.get("aliases", {}), "aliases").items():
            path = f"aliases.{key}"
            name = _family_key(key, path)
            resolved = out_keys.get(target) if isinstance(target, str) else None
            if not wins and isinstance(target, str) and (resolved is None or name in out_keys):
                continue  # a rule: the data lacks the family, or spells the id itself
            if resolved is None:
                raise _fail(path, f"alias target {target!r} is not a priced model")
            out_keys[name] = resolved
        for field, factors in _parse_multipliers(table.get("multipliers", {})).items():
            multipliers.setdefault(field, {}).update(factors)
    return out_families, out_keys, multipliers


def _new_family(key: str, patch: Mapping[str, Any], path: str) -> Family:
    """A family the database lacks: all five rates must be given."""
    rates = _complete(patch.get("rates", {}), path, patch.get("web_search_usd", 0.0))
    price = ModelPrice(rates, fast_multiplier=patch.get("fast_multiplier", 1.0))
    return Family(key, (_with_long(price, patch, path, wins=True, require=True),), (), key)


def _patched(fam: Family, patch: Mapping[str, Any], path: str, *, wins: bool) -> Family:
    """``fam`` with ``patch`` applied to every period (gaps only unless ``wins``)."""
    periods = []
    # A partial long-context table patches the periods that have a tier; it must be
    # complete only where it would create the family's first tier.
    require = not any(p.long_context for p in fam.periods)
    for price in fam.periods:
        p = price
        if wins and ("rates" in patch or "web_search_usd" in patch):
            rates = {**_as_dict(p.rates), **patch.get("rates", {})}
            web = patch.get("web_search_usd", p.rates.web_search_usd)
            p = replace(p, rates=Rates.of([rates[n] for n in RATE_NAMES], web))
        if "fast_multiplier" in patch and (wins or p.fast is None):
            # An explicit multiplier replaces the data's fast-mode rates.
            p = replace(p, fast_multiplier=patch["fast_multiplier"], fast=None,
                        fast_long_context=None)
        periods.append(_with_long(p, patch, path, wins=wins, require=require))
    merged: list[ModelPrice] = []
    starts: list[float] = []
    for i, price in enumerate(periods):  # drop boundaries the patch made meaningless
        if merged and price == merged[-1]:
            continue
        if i:
            starts.append(fam.starts[i - 1])
        merged.append(price)
    return replace(fam, periods=tuple(merged), starts=tuple(starts))


def _with_long(
    price: ModelPrice, patch: Mapping[str, Any], path: str, *, wins: bool, require: bool
) -> ModelPrice:
    """Apply a patch's long-context rates and threshold (gaps only unless ``wins``)."""
    if price.long_context is not None and not wins:
        return price
    if "long_context" in patch:
        fields = patch["long_context"]
        old = price.long_context
        if old is None:
            if not require and set(fields) != set(RATE_NAMES):
                return price  # a partial table patches existing tiers only
            long_context = _complete(fields, path + ".long_context", price.rates.web_search_usd)
        else:
            merged = {**_as_dict(old), **fields}
            long_context = Rates.of([merged[n] for n in RATE_NAMES], old.web_search_usd)
        price = replace(price, long_context=long_context)
    if "long_context_threshold" in patch:
        price = replace(price, long_context_threshold=patch["long_context_threshold"])
    return price


def _as_dict(rates: Rates) -> dict[str, float]:
    """The five token rates by name."""
    return dict(zip(RATE_NAMES, rates.token_rates(), strict=True))


def _complete(fields: Mapping[str, float], path: str, web: float) -> Rates:
    """Rates from a table that must name all five."""
    for name in RATE_NAMES:
        if name not in fields:
            raise _fail(f"{path}.{name}", "missing rate")
    return Rates.of([fields[n] for n in RATE_NAMES], web)


def _fail(path: str, problem: str) -> ValueError:
    """Build a uniform error naming the bad key of the pricing table."""
    return ValueError(f"invalid pricing table at {path!r}: {problem}")


def _table(value: Any, path: str) -> Mapping[str, Any]:
    """Check that ``value`` is a table (mapping)."""
    if not isinstance(value, Mapping):
        raise _fail(path, f"expected a table, got {value!r}")
    return value


def _number(value: Any, path: str) -> float:
    """Check a finite non-negative number (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(path, f"expected a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise _fail(path, f"expected a finite number >= 0, got {value!r}")
    return float(value)


def _unknown(table: Mapping[str, Any], allowed: frozenset[str], path: str) -> None:
    """Reject keys the table does not know (typos must not be silently ignored)."""
    for key in table:
        if key not in allowed:
            raise _fail(f"{path}{key}", f"unknown key; expected one of {sorted(allowed)}")


def _parse_rates(value: Any, path: str) -> dict[str, float]:
    """Some of the five rates, validated."""
    table = _table(value, path)
    _unknown(table, frozenset(RATE_NAMES), path + ".")
    return {name: _number(table[name], f"{path}.{name}") for name in RATE_NAMES if name in table}


def _parse_model(value: Any, path: str) -> dict[str, Any]:
    """One family's table as a patch: only the fields it names."""
    table = _table(value, path)
    _unknown(table, _MODEL_KEYS, path + ".")
    patch: dict[str, Any] = {}
    rates = _parse_rates({k: v for k, v in table.items() if k in RATE_NAMES}, path)
    if rates:
        patch["rates"] = rates
    if "long_context" in table:
        patch["long_context"] = _parse_rates(table["long_context"], path + ".long_context")
    if "long_context_threshold" in table:
        limit = _number(table["long_context_threshold"], path + ".long_context_threshold")
        patch["long_context_threshold"] = int(limit)
    for name in ("fast_multiplier", "web_search_usd"):
        if name in table:
            patch[name] = _number(table[name], f"{path}.{name}")
    return patch


def _parse_multipliers(value: Any) -> Multipliers:
    """Whole-request factors by a field of the usage record."""
    raw = _table(value, "multipliers")
    _unknown(raw, frozenset(MULTIPLIER_FIELDS), "multipliers.")
    return {
        name: {
            str(v).lower(): _number(factor, f"multipliers.{name}.{v}")
            for v, factor in _table(raw[name], f"multipliers.{name}").items()
        }
        for name in MULTIPLIER_FIELDS
        if name in raw
    }


def _family_key(key: Any, path: str) -> str:
    """Check a family key is in normalised form: any other form could never match."""
    if not isinstance(key, str) or normalise_model_id(key) != key:
        wanted = normalise_model_id(key) if isinstance(key, str) else "a string"
        raise _fail(path, f"family keys are normalised model ids; write {wanted!r}")
    return key
