"""What a spooled sample must be, beyond well-formed, before its figures reach the gauges.

:mod:`exporter.ingest.spool` checks a record's shape (types, loose bounds); this
module judges whether its content can be true, at ingest time, where a
rejection is counted by reason (``plan_counters``, exposed as
``claude_code_exporter_plan_spool_rejected_lines_total``). One bad sample must
not pin a gauge for years or show "1000% used" on the page, nor break the
ledger's UTF-8 text (docs/plan-limits.md, "Which samples are kept"):

- ``bad_text``: a session id, model id or version that is not valid Unicode
  (a lone surrogate, U+D800 escaped in JSON, is valid JSON but cannot be stored as
  UTF-8). The sample is rejected, not repaired: those fields are identities, a
  replaced code point would invent one Claude Code never sent, and a payload
  carrying one is damaged or forged, so its figures are not trusted either;
- ``implausible_percent``: a window's or the context's percentage above
  :data:`MAX_PERCENT` (the official figure passes 100 slightly after the limit);
- ``implausible_reset``: a window that resets later than its length after the
  sample (5 hours for ``five_hour``, 7 days for ``seven_day``; what an unknown
  window's name states, e.g. ``thirty_day``, else :data:`MAX_UNSTATED_S`). A
  reset in the past is kept: a status line shows a window's last reset until
  the next response, and an old instance never becomes the gauge's (the newest does).

Window names are capped too (:func:`admit_windows`): the known names always
pass, then at most :data:`MAX_OTHER_WINDOWS` other names, first come; the windows
of further names are dropped from the sample (its other figures are kept) and
the line is counted as ``window_cap``.

Standard library only, nothing slow to import.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from itertools import pairwise
from typing import Any, Final

#: The highest plausible official percentage (105 % has been seen after a limit was hit).
MAX_PERCENT: Final = 110.0
#: Clock skew allowed between this machine (the sample's time) and Anthropic's reset time.
RESET_SLACK_S: Final = 600.0
#: The reset bound of a window whose name states no length (a month, and a bit).
MAX_UNSTATED_S: Final = 31 * 86_400.0
#: A stated length is believed up to a year: ``99999_day`` must not pin a gauge for centuries.
MAX_STATED_S: Final = 366 * 86_400.0
#: Window names always admitted: the documented ones and their per-model weekly variants.
KNOWN_WINDOWS: Final = frozenset({"five_hour", "seven_day", "seven_day_opus", "seven_day_sonnet"})
#: Other window names admitted, first come: enough for Anthropic's next few windows,
#: few enough that the ``window`` label stays bounded.
MAX_OTHER_WINDOWS: Final = 8

#: The reasons a sample is rejected (or, ``window_cap``, cut), as counted.
REASONS: Final = ("bad_text", "implausible_percent", "implausible_reset", "window_cap")

_UNITS: Final = {"minute": 60.0, "hour": 3600.0, "day": 86_400.0, "week": 604_800.0,
                 "month": 31 * 86_400.0}
_COUNTS: Final = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                  "eight": 8, "nine": 9, "ten": 10, "twelve": 12, "fourteen": 14,
                  "twenty": 20, "thirty": 30, "ninety": 90}
_TEXT_FIELDS: Final = ("session", "model", "version")


def stated_length(name: str) -> float | None:
    """The length a window's name states (``five_hour``: 5 h, ``30_day``: 30 d), or None."""
    words = name.split("_")
    for count_word, unit_word in pairwise(words):
        count = int(count_word) if count_word.isdigit() else _COUNTS.get(count_word)
        unit = _UNITS.get(unit_word.removesuffix("s"))
        if count and unit:
            return min(count * unit, MAX_STATED_S)
    return None


def reset_bound(name: str) -> float:
    """How long after its sample a window of this name may reset, at most."""
    return (stated_length(name) or MAX_UNSTATED_S) + RESET_SLACK_S


def valid_unicode(value: str) -> bool:
    """True when ``value`` encodes as UTF-8 (no lone surrogate)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def rejection(rec: Mapping[str, Any]) -> str | None:
    """Why a well-formed sample record (spool.check_record's form) cannot be true, or None."""
    if any(isinstance(rec.get(k), str) and not valid_unicode(rec[k]) for k in _TEXT_FIELDS):
        return "bad_text"
    context = rec.get("context")
    if context and context[0] is not None and context[0] > MAX_PERCENT:
        return "implausible_percent"
    t = float(rec["t"])
    for name, (pct, resets) in rec.get("windows", {}).items():
        if pct is not None and pct > MAX_PERCENT:
            return "implausible_percent"
        if resets is not None and resets > t + reset_bound(name):
            return "implausible_reset"
    return None


def admit_windows(
    windows: Mapping[str, Any], admitted: set[str]
) -> tuple[dict[str, Any], bool]:
    """The windows whose names pass the cap, and whether any was dropped.

    ``admitted`` holds the other (not known) names stored so far; names this
    call admits are added to it.
    """
    out: dict[str, Any] = {}
    dropped = False
    for name, value in windows.items():
        if name in KNOWN_WINDOWS or name in admitted:
            out[name] = value
        elif len(admitted) < MAX_OTHER_WINDOWS:
            admitted.add(name)
            out[name] = value
        else:
            dropped = True
    return out, dropped


def capped(names: Collection[str]) -> list[str]:
    """The names a reader shows, in the given (first-seen) order: known ones, then the cap."""
    others = [n for n in names if n not in KNOWN_WINDOWS][:MAX_OTHER_WINDOWS]
    keep = set(others)
    return [n for n in names if n in KNOWN_WINDOWS or n in keep]
