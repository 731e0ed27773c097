"""List-price cost of a request, from the price table shipped as data.

The table is ``exporter/data/pricing.toml`` (see pricing.md); the user's config
may override any part of it with a mapping of the same shape. A model id is
normalised (provider prefix, version and date suffixes removed) and then matched
EXACTLY to a family key: an id that matches nothing is unpriced, never guessed.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from exporter.records import Request

RATE_NAMES = ("input", "cache_write_5m", "cache_write_1h", "cache_read", "output")
MULTIPLIER_FIELDS = ("inference_geo", "service_tier")
_MODEL_KEYS = frozenset((*RATE_NAMES, "long_context", "long_context_threshold", "fast_multiplier"))
_TOP_KEYS = frozenset(("models", "aliases", "multipliers"))
_PER_TOKEN = 1e-6  # rates are USD per million tokens

_PREFIX = re.compile(r"^(?:anthropic/|(?:(?:us|eu|apac|global)\.)?anthropic\.)")
# Stripped repeatedly from the end, so "…-20250929-v1:0" and "…@20241022" both go.
_SUFFIX = re.compile(r"(?:\[1m\]|-v\d+(?::\d+)?|@\d{8}|-\d{8}|-latest)$")
_DOTTED_VERSION = re.compile(r"(?<=\d)\.(?=\d)")  # "claude-sonnet-4.5" (OpenRouter style)


def normalise_model_id(model: str) -> str:
    """Return the family form of a model id: lowercase, prefixes and suffixes removed."""
    name = _PREFIX.sub("", model.strip().lower())
    while True:
        shorter = _SUFFIX.sub("", name)
        if shorter == name:
            break
        name = shorter
    return _DOTTED_VERSION.sub("-", name)


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per million tokens for each token type of a request."""

    input: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float
    output: float

    def scaled(self, factor: float) -> Rates:
        """Return these rates multiplied by a whole-request factor (geo, tier, speed)."""
        if factor == 1.0:
            return self
        return Rates(*(getattr(self, name) * factor for name in RATE_NAMES))

    def cost(
        self, input: int, output: int, cache_read: int, cache_write_5m: int, cache_write_1h: int
    ) -> dict[str, float]:
        """USD per token type for the given token counts."""
        return {
            "input": input * self.input * _PER_TOKEN,
            "output": output * self.output * _PER_TOKEN,
            "cache_read": cache_read * self.cache_read * _PER_TOKEN,
            "cache_write_5m": cache_write_5m * self.cache_write_5m * _PER_TOKEN,
            "cache_write_1h": cache_write_1h * self.cache_write_1h * _PER_TOKEN,
        }


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """The price of one model family, long-context premium and fast mode included."""

    rates: Rates
    long_context: Rates | None = None
    long_context_threshold: int = 200_000
    fast_multiplier: float = 1.0

    def is_long(self, prompt_tokens: int) -> bool:
        """Whether a request with this prompt size bills all its tokens at the premium."""
        return self.long_context is not None and prompt_tokens > self.long_context_threshold


class Pricing:
    """The price table: model id → family → rates, plus whole-request multipliers."""

    def __init__(
        self,
        models: Mapping[str, ModelPrice],
        aliases: Mapping[str, str] | None = None,
        multipliers: Mapping[str, Mapping[str, float]] | None = None,
    ) -> None:
        """Build from already validated parts; most callers want :meth:`load`."""
        self.models = dict(models)
        self.aliases = dict(aliases or {})
        mult = multipliers or {}
        self._geo = {k.lower(): v for k, v in mult.get("inference_geo", {}).items()}
        self._tier = {k.lower(): v for k, v in mult.get("service_tier", {}).items()}
        # Called once per request on hot paths: memoise by the raw id / rate class.
        self._families: dict[str, str | None] = {}
        self._rates: dict[tuple[str, str, str, str, bool], Rates | None] = {}

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None) -> Pricing:
        """Read the shipped table and apply the user's overrides (same shape).

        Raises ValueError naming the offending key when the result is invalid.
        """
        text = resources.files("exporter").joinpath("data/pricing.toml").read_text("utf-8")
        table = tomllib.loads(text)
        if overrides:
            table = _merged(table, overrides)
        return _parse(table)

    def family(self, model: str) -> str | None:
        """Return the family key pricing ``model``, or None when the model is unpriced."""
        try:
            return self._families[model]
        except KeyError:
            pass
        name = normalise_model_id(model)
        name = self.aliases.get(name, name)
        found = name if name in self.models else None
        self._families[model] = found
        return found

    def price(self, model: str) -> ModelPrice | None:
        """Return the family price of ``model``, or None when unpriced."""
        family = self.family(model)
        return None if family is None else self.models[family]

    def long_context_threshold(self, model: str) -> int | None:
        """Prompt size above which ``model`` bills at premium, or None if it never does."""
        price = self.price(model)
        if price is None or price.long_context is None:
            return None
        return price.long_context_threshold

    def rates(
        self,
        model: str,
        *,
        long_context: bool = False,
        inference_geo: str = "",
        service_tier: str = "",
        speed: str = "",
    ) -> Rates | None:
        """Effective rates with every multiplier folded in, or None when unpriced.

        ``long_context`` is the per-request decision (see :meth:`ModelPrice.is_long`).
        """
        key = (model, inference_geo, service_tier, speed, long_context)
        try:
            return self._rates[key]
        except KeyError:
            pass
        price = self.price(model)
        result: Rates | None = None
        if price is not None:
            base = price.long_context if long_context and price.long_context else price.rates
            factor = self._geo.get(inference_geo.lower(), 1.0)
            factor *= self._tier.get(service_tier.lower(), 1.0)
            if speed.lower() == "fast":
                factor *= price.fast_multiplier
            result = base.scaled(factor)
        self._rates[key] = result
        return result

    def request_rates(self, req: Request) -> Rates | None:
        """Effective rates for one request (long context decided on its prompt)."""
        price = self.price(req.model)
        if price is None:
            return None
        return self.rates(
            req.model,
            long_context=price.is_long(req.context),
            inference_geo=req.inference_geo,
            service_tier=req.service_tier,
            speed=req.speed,
        )

    def cost(self, req: Request) -> dict[str, float] | None:
        """USD per token type for one request, or None when its model is unpriced."""
        rates = self.request_rates(req)
        if rates is None:
            return None
        return rates.cost(
            req.input, req.output, req.cache_read, req.cache_write_5m, req.cache_write_1h
        )


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``over`` into a copy of ``base``: tables merge, values replace."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            out[key] = _merged(old, value)
        else:
            out[key] = value
    return out


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


def _parse_rates(value: Any, path: str) -> Rates:
    """Five rates, all present."""
    table = _table(value, path)
    _unknown(table, frozenset(RATE_NAMES), path + ".")
    values = []
    for name in RATE_NAMES:
        if name not in table:
            raise _fail(f"{path}.{name}", "missing rate")
        values.append(_number(table[name], f"{path}.{name}"))
    return Rates(*values)


def _parse_model(value: Any, path: str) -> ModelPrice:
    """One family's table: five rates, optional long-context rates and fast multiplier."""
    table = _table(value, path)
    _unknown(table, _MODEL_KEYS, path + ".")
    rates = _parse_rates({k: v for k, v in table.items() if k in RATE_NAMES}, path)
    long_context = None
    if "long_context" in table:
        long_context = _parse_rates(table["long_context"], path + ".long_context")
    threshold = table.get("long_context_threshold", 200_000)
    threshold = _number(threshold, path + ".long_context_threshold")
    fast = _number(table.get("fast_multiplier", 1.0), path + ".fast_multiplier")
    return ModelPrice(rates, long_context, int(threshold), fast)


def _family_key(key: Any, path: str) -> str:
    """Check a family key is in normalised form: any other form could never match."""
    if not isinstance(key, str) or normalise_model_id(key) != key:
        wanted = normalise_model_id(key) if isinstance(key, str) else "a string"
        raise _fail(path, f"family keys are normalised model ids; write {wanted!r}")
    return key


def _parse(table: Mapping[str, Any]) -> Pricing:
    """Validate a whole (merged) table and build the Pricing."""
    _unknown(table, _TOP_KEYS, "")
    models = {
        _family_key(key, f"models.{key}"): _parse_model(value, f"models.{key}")
        for key, value in _table(table.get("models", {}), "models").items()
    }
    aliases: dict[str, str] = {}
    for key, target in _table(table.get("aliases", {}), "aliases").items():
        if target not in models:
            raise _fail(f"aliases.{key}", f"alias target {target!r} is not a model key")
        aliases[_family_key(key, f"aliases.{key}")] = target
    raw_mult = _table(table.get("multipliers", {}), "multipliers")
    _unknown(raw_mult, frozenset(MULTIPLIER_FIELDS), "multipliers.")
    multipliers = {
        field: {
            str(value): _number(factor, f"multipliers.{field}.{value}")
            for value, factor in _table(raw_mult[field], f"multipliers.{field}").items()
        }
        for field in MULTIPLIER_FIELDS
        if field in raw_mult
    }
    return Pricing(models, aliases, multipliers)
