"""POSIX ``TZ`` rule strings (``CET-1CEST,M3.5.0,M10.5.0/3``), read as the C library reads them.

``TZ`` may name a zone file (``Europe/Berlin``) or spell a rule: standard and
daylight names, their offsets (hours *west* of Greenwich) and when daylight
time starts and ends. The status line's days follow the C library
(``time.localtime``); ``report`` and the page read zones with :mod:`zoneinfo`,
which knows no rule strings. This module is the one rule both sides share:
``report`` turns a rule string into a zone with it, so a day ends at the same
moment for both, and a ``TZ`` that is neither a zone name nor a rule is UTC for
both (glibc's reading) and worth a warning.

It imports nothing (the status line starts in milliseconds and may use it);
dates are computed from day numbers, as the C library does.
"""

from __future__ import annotations

DAY = 86_400
#: glibc's rules when a rule string names a daylight zone but not when it applies
#: (its ``posixrules`` file is America/New_York): second Sunday of March, first of November.
DEFAULT_RULES = "M3.2.0,M11.1.0"


class Rule:
    """A parsed rule string: offsets east of UTC in seconds, and the daylight-time dates."""

    __slots__ = ("default_dates", "dst_name", "dst_offset", "end", "start", "std_name",
                 "std_offset")

    def __init__(self, std: tuple[str, int], dst: tuple[str, int] | None,
                 start: tuple[str, int, int, int, int] | None,
                 end: tuple[str, int, int, int, int] | None) -> None:
        """Names and offsets (seconds east), and the start and end dates with their times."""
        self.std_name, self.std_offset = std
        self.dst_name, self.dst_offset = dst if dst is not None else (std[0], std[1])
        self.start, self.end = start, end
        self.default_dates = False  # daylight time without dates: DEFAULT_RULES assumed

    def offset(self, ts: float) -> int:
        """Seconds east of UTC at epoch ``ts``."""
        if self.start is None or self.end is None:
            return self.std_offset
        # As glibc: the dates of the year that is current in UTC, no look at the year before.
        year = civil_year(int(ts // DAY))
        begins = _day(year, self.start) * DAY + self.start[4] - self.std_offset
        ends = _day(year, self.end) * DAY + self.end[4] - self.dst_offset
        summer = begins <= ts < ends if begins < ends else not ends <= ts < begins
        return self.dst_offset if summer else self.std_offset


def parse(text: str) -> Rule | None:
    """The rule a ``TZ`` string spells (a leading ``:`` dropped), or None if it spells none."""
    reader = _Reader(text[1:] if text.startswith(":") else text)
    std_name = reader.name()
    std = reader.offset() if std_name else None
    if std_name is None or std is None:
        return None
    if reader.done():
        return Rule((std_name, -std), None, None, None)
    return _daylight(reader, (std_name, std))


def _daylight(reader: _Reader, std: tuple[str, int]) -> Rule | None:
    """The rest of a rule string after its standard part: a daylight name, offset, dates."""
    std_name, std_west = std
    dst_name = reader.name()
    if dst_name is None:
        return None
    dst = reader.offset() if reader.peek() not in (",", "") else std_west - 3600
    if dst is None:
        return None
    if not reader.done() and reader.peek() != ",":
        return None
    rules = reader.rest() or DEFAULT_RULES
    start_text, comma, end_text = rules.partition(",")
    start, end = _date_rule(start_text), _date_rule(end_text)
    if not comma or start is None or end is None:
        return None
    rule = Rule((std_name, -std_west), (dst_name, -dst), start, end)
    rule.default_dates = not reader.rest()
    return rule


class _Reader:
    """A cursor over a rule string."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def done(self) -> bool:
        return self.at >= len(self.text)

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def rest(self) -> str:
        """What follows a ``,`` here ("" if nothing does)."""
        if self.peek() != ",":
            return ""
        return self.text[self.at + 1:]

    def name(self) -> str | None:
        """``<+0330>`` or three letters or more."""
        if self.peek() == "<":
            close = self.text.find(">", self.at)
            inner = self.text[self.at + 1:close] if close > 0 else ""
            if len(inner) < 3 or not all(c.isalnum() or c in "+-" for c in inner):
                return None
            self.at = close + 1
            return inner
        end = self.at
        while end < len(self.text) and self.text[end].isascii() and self.text[end].isalpha():
            end += 1
        if end - self.at < 3:
            return None
        name, self.at = self.text[self.at:end], end
        return name

    def offset(self) -> int | None:
        """``[+-]hh[:mm[:ss]]`` in seconds (as written: positive is west)."""
        end = self.at
        while end < len(self.text) and (self.text[end].isdigit() or self.text[end] in "+-:"):
            end += 1
        value = clock(self.text[self.at:end], 24)
        self.at = end
        return value


def clock(text: str, max_hours: int) -> int | None:
    """``[+-]hh[:mm[:ss]]`` in seconds, or None."""
    sign = -1 if text.startswith("-") else 1
    parts = text.lstrip("+-").split(":")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and len(p) <= 3 for p in parts):
        return None
    hours, minutes, seconds = (int(p) for p in [*parts, "0", "0"][:3])
    if hours > max_hours or minutes > 59 or seconds > 59:
        return None
    return sign * (hours * 3600 + minutes * 60 + seconds)


def _date_rule(text: str) -> tuple[str, int, int, int, int] | None:
    """``Jn``, ``n`` or ``Mm.w.d`` with an optional ``/time`` (default 02:00)."""
    date, slash, time_text = text.partition("/")
    at = clock(time_text, 167) if slash else 7200
    if at is None:
        return None
    if date.startswith("M"):
        fields = date[1:].split(".")
        if len(fields) != 3 or not all(f.isdigit() for f in fields):
            return None
        month, week, weekday = (int(f) for f in fields)
        ok = 1 <= month <= 12 and 1 <= week <= 5 and 0 <= weekday <= 6
        return ("M", month, week, weekday, at) if ok else None
    julian = date.startswith("J")
    digits = date[1:] if julian else date
    if not digits.isdigit() or not (1 if julian else 0) <= int(digits) <= 365:
        return None
    return ("J" if julian else "n", int(digits), 0, 0, at)


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146_097 + (yoe * 365 + yoe // 4 - yoe // 100 + doy) - 719_468


def civil_year(days: int) -> int:
    """The year of day number ``days`` since 1970-01-01."""
    year = 1970 + days // 366
    while days_from_civil(year + 1, 1, 1) <= days:
        year += 1
    return year


def _leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _day(year: int, rule: tuple[str, int, int, int, int]) -> int:
    """The day number on which a date rule falls in ``year``."""
    kind, a, week, weekday, _ = rule
    jan1 = days_from_civil(year, 1, 1)
    if kind == "J":  # 1..365, February 29 never counted
        return jan1 + a - 1 + (1 if _leap(year) and a >= 60 else 0)
    if kind == "n":  # 0..365, February 29 counted
        return jan1 + a
    first = days_from_civil(year, a, 1)
    following = days_from_civil(year + (a == 12), a % 12 + 1, 1)
    day = first + (weekday - (first + 4) % 7) % 7 + 7 * (week - 1)  # 1970-01-01: Thursday
    while day >= following:  # week 5: the last such weekday of the month
        day -= 7
    return day
