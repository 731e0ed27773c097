"""A parsed range kept to the times a calendar can show: years 1 to 9999.

:meth:`exporter.projections.periods.Range.parse` turns ``--since 99999999w``
into a time no ``datetime`` can hold; every later step that shows or bins it
would fail. :func:`checked` says so as a :class:`PeriodError` naming the flag
instead, for any caller that takes ranges from outside (the page's query).
"""

from __future__ import annotations

from exporter.projections.periods import PeriodError, Range

# 0001-01-02 and 9999-12-30 UTC: a day inside the calendar's ends, for any zone's offset.
_FIRST, _LAST = -62_135_510_400.0, 253_402_128_000.0


def checked(rng: Range, since: str | None, until: str | None) -> Range:
    """``rng`` as it is when both ends are inside the calendar; else a PeriodError."""
    for flag, text, at in (("--since", since, rng.since), ("--until", until, rng.until)):
        if at is not None and not _FIRST <= at <= _LAST:
            raise PeriodError(f"{flag} {text!r} is out of range (the years 1 to 9999)")
    return rng
