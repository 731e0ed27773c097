"""Codex's ``rate_limits`` → plan-window readings, checked as the status line's samples are.

Every ``token_count`` event of a Codex log may carry the plan's windows as the
server reported them (docs/plan-limits.md, "Codex")::

    {"limit_id": "codex", "primary": {"used_percent": 1.0, "window_minutes": 300,
     "resets_at": 1783599019}, "secondary": {... "window_minutes": 10080 ...}, ...}

A window is named by its length as the status line's are (300 minutes:
``five_hour``, 10080: ``seven_day``; another length ``<n>_minute``), under a
limit other than ``codex`` prefixed by that limit's id (``premium_five_hour``).
A reading with no window (``rate_limits: null``, both windows null, a
``premium`` limit with only credits) says nothing and is no sample.

Every byte is hostile: a malformed reading is rejected as ``bad_record``,
one that cannot be true by :func:`exporter.ingest.plausible.rejection`'s rules
(``implausible_percent``: 999.9 %; ``implausible_reset``: a reset in the year
5107), and each rejection is counted (``Parsed.limit_rejected``), never stored.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from exporter.ingest import plausible, spool
from exporter.records import LimitSample

AGENT: Final = "codex"
#: Window names by length in minutes (the status line's names for the same windows).
NAMES: Final = {300: "five_hour", 10_080: "seven_day"}
#: The limit whose windows keep their plain names (the others are prefixed by their id).
PLAIN_LIMIT: Final = "codex"
MAX_MINUTES: Final = 366 * 1440  # a year: beyond it, not a window
MAX_LIMIT_ID: Final = 32
#: Why a reading was rejected, as counted: plausible's reasons and a malformed shape.
REASONS: Final = ("bad_record", "implausible_percent", "implausible_reset")
_SIDES: Final = ("primary", "secondary")
_DECODE: Final = msgspec.json.Decoder()


def reading(raw: bytes, t: float) -> tuple[LimitSample | None, str | None]:
    """(the reading of a ``rate_limits`` value at time ``t``, or None; why it was rejected)."""
    try:
        value = _DECODE.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None, "bad_record"
    if value is None:
        return None, None
    windows = _windows(value)
    if windows is None:
        return None, "bad_record"
    if not windows:
        return None, None
    reason = plausible.rejection({"t": t, "windows": {n: (p, r) for n, p, r in windows}})
    if reason is not None:
        return None, reason
    return LimitSample(AGENT, windows, t, t), None


def _windows(value: Any) -> tuple[tuple[str, float, float], ...] | None:
    """The (name, used %, resets_at) of a ``rate_limits`` object's windows; None if malformed."""
    if not isinstance(value, dict):
        return None
    prefix = _prefix(value.get("limit_id"))
    if prefix is None:
        return None
    out: dict[str, tuple[str, float, float]] = {}
    for side in _SIDES:
        window = value.get(side)
        if window is None:
            continue
        checked = _window(window)
        if checked is None:
            return None
        minutes, pct, resets = checked
        name = prefix + NAMES.get(minutes, f"{minutes}_minute")
        out[name] = (name, pct, resets)
    return tuple(sorted(out.values()))


def _prefix(limit_id: Any) -> str | None:
    """"" for the plain limit (or none named), ``<id>_`` for another; None if not a name."""
    if limit_id is None or limit_id == PLAIN_LIMIT:
        return ""
    if (not isinstance(limit_id, str) or len(limit_id) > MAX_LIMIT_ID
            or not spool.window_name(limit_id)):
        return None
    return f"{limit_id}_"


def _window(value: Any) -> tuple[int, float, float] | None:
    """(minutes, used %, resets_at) of one window object, or None when malformed."""
    if not isinstance(value, dict):
        return None
    minutes = value.get("window_minutes")
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 0 < minutes <= MAX_MINUTES:
        return None
    pct = _number(value.get("used_percent"), spool.MAX_PERCENT)
    resets = _number(value.get("resets_at"), spool.MAX_EPOCH)
    if pct is None or resets is None:
        return None
    return minutes, pct, resets


def _number(value: Any, high: float) -> float | None:
    """A finite number in [0, high], else None (an integer of 400 digits too: no float holds it)."""
    if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= high:
        return None  # checked before float(), which would raise OverflowError
    return spool.number(value, 0.0, high)
