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

import math
from typing import Annotated, Final

import msgspec

from exporter.ingest import plausible, spool
from exporter.records import CODEX_AGENT, LimitSample

AGENT: Final = CODEX_AGENT
#: Window names by length in minutes (the status line's names for the same windows).
NAMES: Final = {300: "five_hour", 10_080: "seven_day"}
#: The limit whose windows keep their plain names (the others are prefixed by their id).
PLAIN_LIMIT: Final = "codex"
MAX_MINUTES: Final = 366 * 1440  # a year: beyond it, not a window
MAX_LIMIT_ID: Final = 32
#: Why a reading was rejected, as counted: plausible's reasons and a malformed shape.
REASONS: Final = ("bad_record", "implausible_percent", "implausible_reset")


class _Window(msgspec.Struct):
    """One window as Codex writes it, its bounds checked as it is decoded (no float overflows)."""

    used_percent: Annotated[float, msgspec.Meta(ge=0.0, le=spool.MAX_PERCENT)]
    window_minutes: Annotated[int, msgspec.Meta(gt=0, le=MAX_MINUTES)]
    resets_at: Annotated[float, msgspec.Meta(ge=0.0, le=spool.MAX_EPOCH)]


class _Limits(msgspec.Struct):
    """A ``rate_limits`` object (the fields read; credits and plan type are not windows)."""

    limit_id: str | None = None
    primary: _Window | None = None
    secondary: _Window | None = None


_DECODE: Final = msgspec.json.Decoder(_Limits | None)


class Readings:
    """The readings of one file's events in order, each value checked once while it repeats.

    Codex writes the same ``rate_limits`` on event after event (most events of
    a turn, every copy of a history): the value's shape is checked when it
    changes, its plausibility again only when it could have changed (an
    earlier time, or a reset judged too far ahead of the time before).
    """

    def __init__(self) -> None:
        """No value seen yet."""
        self._raw = b""
        self._windows: tuple[tuple[str, float, float], ...] | None = None
        self._t = math.inf  # when the value was last judged plausible
        self._reason: str | None = None

    def reading(self, raw: bytes, t: float) -> tuple[LimitSample | None, str | None]:
        """(the reading of a ``rate_limits`` value at time ``t``, or None; why it was rejected)."""
        if raw != self._raw:
            self._raw, self._windows, self._t = raw, _shape(raw), math.inf
        windows = self._windows
        if windows is None:
            return None, "bad_record"
        if not windows:
            return None, None
        if t < self._t or self._reason == "implausible_reset":
            self._reason = plausible.rejection(
                {"t": t, "windows": {n: (p, r) for n, p, r in windows}})
            self._t = t  # a later time only moves the reset bound further out
        if self._reason is not None:
            return None, self._reason
        return LimitSample(AGENT, windows, t, t), None


def _shape(raw: bytes) -> tuple[tuple[str, float, float], ...] | None:
    """The windows of a ``rate_limits`` value (() for none); None when it is malformed."""
    try:
        value = _DECODE.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        return None
    if value is None:
        return ()
    prefix = _prefix(value.limit_id)
    if prefix is None:
        return None
    out: dict[str, tuple[str, float, float]] = {}
    for window in (value.primary, value.secondary):
        if window is not None:
            minutes = window.window_minutes
            name = prefix + NAMES.get(minutes, f"{minutes}_minute")
            out[name] = (name, window.used_percent, window.resets_at)
    return tuple(sorted(out.values()))


def _prefix(limit_id: str | None) -> str | None:
    """"" for the plain limit (or none named), ``<id>_`` for another; None if not a name."""
    if limit_id is None or limit_id == PLAIN_LIMIT:
        return ""
    if len(limit_id) > MAX_LIMIT_ID or not spool.window_name(limit_id):
        return None
    return f"{limit_id}_"
