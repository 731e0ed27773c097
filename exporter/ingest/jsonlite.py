"""JSON for the status-line command without importing ``re``: CPython's own C codec, directly.

The ``json`` package imports ``re`` (for whitespace and string patterns), and
``re`` with ``enum`` costs the status-line command, which Claude Code runs on
every refresh, more start-up than all else it does (bench/statusline.py). The
C accelerator ``_json`` that ``json`` itself uses needs no pattern: its
scanner is built from a plain object with the decoder's settings, and its
ASCII string encoder is exposed. Output and accepted input are those of
``json.dumps(obj, separators=(",", ":"))`` and ``json.loads`` (checked by
property tests). Where ``_json`` is missing (another Python implementation)
the ``json`` package is used.
"""

from __future__ import annotations

import math

TYPE_CHECKING = False  # typing imports re: not at run time (see exporter.ingest.spool)
if TYPE_CHECKING:
    from typing import Any

try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None  # type: ignore[assignment]

_WHITESPACE = " \t\n\r"
_CONSTANTS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class _Settings:
    """What ``_json.make_scanner`` reads from a decoder: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


# typeshed types the context as a scanner; any object with these attributes will do.
_scan = _json.make_scanner(_Settings()) if _json is not None else None  # type: ignore[arg-type]


def loads(text: str) -> Any:
    """Parse a JSON document; ValueError (or RecursionError) when it is not one."""
    if _scan is None:  # pragma: no cover
        import json  # noqa: PLC0415

        return json.loads(text)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as stop:  # no value where one must start
        raise ValueError(f"expecting a value at {stop.value}") from None
    except RecursionError:
        raise
    except Exception:
        # The C scanner reports syntax errors with json.decoder's exception class,
        # looked up only if that module is loaded (else a SystemError): let the
        # json package, imported on this error path only, raise the proper error.
        import json  # noqa: PLC0415

        return json.loads(text)
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"extra data at {end}")
    return value


def dumps(obj: Any) -> str:
    """Compact JSON, ASCII only (no NaN/Infinity: ValueError, as the spool must be JSON)."""
    if _json is None:  # pragma: no cover
        import json  # noqa: PLC0415

        return json.dumps(obj, separators=(",", ":"), allow_nan=False)
    return _encode(obj)


def _encode(obj: Any) -> str:
    """Encode one value recursively."""
    if obj is None or obj is True or obj is False:
        return "null" if obj is None else "true" if obj else "false"
    if isinstance(obj, str):
        return str(_json.encode_basestring_ascii(obj))
    if isinstance(obj, int):
        return int.__repr__(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"out of range float value {obj!r} is not JSON")
        return float.__repr__(obj)
    if isinstance(obj, list | tuple):
        return "[" + ",".join(_encode(v) for v in obj) + "]"
    if isinstance(obj, dict):
        return "{" + ",".join(_member(k, v) for k, v in obj.items()) + "}"
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _member(key: Any, value: Any) -> str:
    """One ``"key":value`` of an object."""
    if not isinstance(key, str):
        raise TypeError(f"keys must be str, not {type(key).__name__}")
    return str(_json.encode_basestring_ascii(key)) + ":" + _encode(value)
