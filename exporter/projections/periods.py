"""Time ranges and time zones for `report`: ``--since``/``--until``, ``--timezone``, local days.

A report's day, week and month boundaries are those of one time zone (the
system's by default). SQLite knows nothing of time zones, so a zone becomes a
piecewise-constant UTC offset over the range the data covers: the transitions
(daylight saving time, rule changes) are found once with :mod:`zoneinfo`, and
the SQL expression ``CASE WHEN ts < t1 THEN o0 WHEN ts < t2 THEN o1 … END``
gives every request's offset in C, with no Python work per request.

Local days are numbered like ``date.toordinal() - EPOCH_ORDINAL`` (day 0 is
1970-01-01); weeks start on Monday (ISO 8601).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from itertools import pairwise
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from exporter import tzrule

EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
DAY = 86_400
_AGE = re.compile(r"(\d+)([wdhm])")
#: Dates by name, as days from today in the report's zone.
_DAY_WORDS = {"today": 0, "yesterday": -1}
_AGE_SECONDS = {"w": 7 * DAY, "d": DAY, "h": 3600, "m": 60}
_OFFSET = re.compile(r"(?:UTC|GMT)?([+-])(\d{1,2})(?::?(\d{2}))?")
_COMPACT_DATE = re.compile(r"(\d{4})(\d{2})(\d{2})")
_UTC_NAMES = frozenset(("utc", "z", "gmt", "etc/utc", "etc/gmt", "zulu"))
_SAMPLE_SECONDS = 6 * 3600  # zone rules never change twice within six hours


class PeriodError(ValueError):
    """A time, range or zone the user gave cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class Zone:
    """A time zone and the name it is shown under (``UTC``, ``Europe/Berlin``, ``+02:00``)."""

    name: str
    tz: tzinfo

    def offset(self, ts: float) -> int:
        """The zone's UTC offset at epoch ``ts``, whole seconds."""
        delta = datetime.fromtimestamp(ts, self.tz).utcoffset()
        return 0 if delta is None else int(delta.total_seconds())

    def local(self, ts: float) -> datetime:
        """Epoch seconds as an aware local time."""
        return datetime.fromtimestamp(ts, self.tz)

    def midnight(self, day: int) -> float:
        """Epoch seconds of the start of local day number ``day``."""
        moment = datetime.combine(day_date(day), time(0), tzinfo=self.tz)
        return moment.timestamp()


UTC_ZONE = Zone("UTC", UTC)


def day_date(day: int) -> date:
    """The calendar date of local day number ``day``."""
    return date.fromordinal(EPOCH_ORDINAL + day)


def date_day(d: date) -> int:
    """The local day number of a calendar date."""
    return d.toordinal() - EPOCH_ORDINAL


def resolve_zone(
    name: str | None, env: Mapping[str, str] = os.environ, localtime: Path = Path("/etc/localtime"),
    warn: Callable[[str], None] | None = None,
) -> Zone:
    """A zone from ``--timezone``: ``local`` (default), ``UTC``, an IANA name or ``+HH:MM``.

    ``local`` is :func:`local_zone` (``warn`` hears about a ``TZ`` it cannot read).
    An offset here is ISO 8601's, east positive: ``+02:00`` and ``UTC+2`` are two
    hours ahead of UTC (a POSIX rule string, west positive, is ``TZ``'s spelling).
    """
    if name is None or name.strip().lower() in ("", "local"):
        return local_zone(env, localtime, warn)
    text = name.strip()
    if text.lower() in _UTC_NAMES:
        return UTC_ZONE
    fixed = _OFFSET.fullmatch(text)
    if fixed:
        return _fixed(fixed, text)
    try:
        return Zone(text, ZoneInfo(text))
    except (ZoneInfoNotFoundError, ValueError, OSError):
        near = difflib.get_close_matches(text, sorted(available_timezones()), n=1, cutoff=0.6)
        hint = (f"; did you mean {near[0]}?" if near
                else " (an IANA name like Europe/Berlin, UTC, or +02:00)")
        raise PeriodError(f"unknown time zone {text!r}{hint}") from None


def _fixed(match: re.Match[str], text: str) -> Zone:
    """A fixed UTC offset such as ``+02:00``, ``-0530`` or ``UTC+2``."""
    sign, hours, minutes = match.group(1), int(match.group(2)), int(match.group(3) or 0)
    if hours > 23 or minutes > 59:
        raise PeriodError(f"time zone offset {text!r} is out of range")
    delta = timedelta(hours=hours, minutes=minutes) * (-1 if sign == "-" else 1)
    label = f"{sign}{hours:02d}:{minutes:02d}"
    return Zone("UTC" if not delta else label, timezone(delta) if delta else UTC)


def local_zone(env: Mapping[str, str], localtime: Path = Path("/etc/localtime"),
               warn: Callable[[str], None] | None = None) -> Zone:
    """The system's zone, read as the C library (and so the status line) reads it.

    ``$TZ`` when set: a zone name (``Europe/Berlin``, ``:Europe/Berlin``), a zone
    file's path, or a POSIX rule (``CET-1CEST,M3.5.0,M10.5.0/3``, read by
    :mod:`exporter.tzrule`); a ``TZ`` that is none of these is UTC, as glibc
    takes it, and ``warn`` hears so. Without ``TZ``: what ``/etc/localtime`` is,
    else UTC.
    """
    raw = env.get("TZ", "")
    text = raw.strip().removeprefix(":")
    if text:
        zone = _tz_zone(text)
        if zone is None:
            if warn is not None:
                warn(f"TZ={raw!r} is neither a time zone name nor a POSIX TZ rule: days are "
                     "UTC days, as the C library reads it (set e.g. TZ=Europe/Berlin)")
            return UTC_ZONE
        if warn is not None and isinstance(zone.tz, RuleZone) and zone.tz.rule.default_dates:
            warn(f"TZ={raw!r} has daylight time without its dates: taken as "
                 f"{tzrule.DEFAULT_RULES} at 02:00; the C library may change hours apart "
                 "on those days (give the dates, e.g. CET-1CEST,M3.5.0,M10.5.0/3)")
        return zone
    try:
        target = os.readlink(localtime)
    except OSError:
        target = ""
    if "zoneinfo/" in target:
        key = target.split("zoneinfo/", 1)[1]
        try:
            return UTC_ZONE if key.lower() in _UTC_NAMES else Zone(key, ZoneInfo(key))
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    return _zone_file(localtime, "local") or UTC_ZONE


def _tz_zone(text: str) -> Zone | None:
    """``TZ`` as glibc tries it: a zone file (by name or path), then a POSIX rule."""
    if text.lower() in _UTC_NAMES:
        return UTC_ZONE
    if text.startswith("/"):
        found = _zone_file(Path(text), text)
        if found is not None:
            return found
    else:
        try:
            return Zone(text, ZoneInfo(text))
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    rule = tzrule.parse(text)
    return Zone(text, RuleZone(rule)) if rule is not None else None


def _zone_file(path: Path, name: str) -> Zone | None:
    """The zone of a TZif file, or None when it cannot be read as one."""
    try:
        with path.open("rb") as fh:
            return Zone(name, ZoneInfo.from_file(fh, key=name))
    except (OSError, ValueError):
        return None


class RuleZone(tzinfo):
    """A POSIX TZ rule (:class:`exporter.tzrule.Rule`) as a ``tzinfo``, folds included."""

    def __init__(self, rule: tzrule.Rule) -> None:
        """The zone that ``rule`` describes."""
        self.rule = rule

    def utcoffset(self, dt: datetime | None) -> timedelta:
        """The offset of a wall time: of its first occurrence (fold 0) or second (fold 1)."""
        if dt is None:
            return timedelta(seconds=self.rule.std_offset)
        wall = (dt.toordinal() - EPOCH_ORDINAL) * DAY + dt.hour * 3600 + dt.minute * 60 \
            + dt.second
        offsets = sorted({self.rule.std_offset, self.rule.dst_offset}, reverse=True)
        valid = [o for o in offsets if self.rule.offset(wall - o) == o]
        if not valid:  # skipped by a change: the offset before it
            return timedelta(seconds=self.rule.offset(wall - offsets[0]))
        return timedelta(seconds=valid[-1] if dt.fold and len(valid) > 1 else valid[0])

    def dst(self, dt: datetime | None) -> timedelta:
        """How far the offset is from standard time."""
        return self.utcoffset(dt) - timedelta(seconds=self.rule.std_offset)

    def tzname(self, dt: datetime | None) -> str:
        """The standard or daylight name."""
        return self.rule.dst_name if self.dst(dt) else self.rule.std_name

    def fromutc(self, dt: datetime) -> datetime:
        """The wall time of a UTC time (``dt`` carries this zone), fold set on a repeat."""
        ts = (dt.toordinal() - EPOCH_ORDINAL) * DAY + dt.hour * 3600 + dt.minute * 60 \
            + dt.second
        offset = self.rule.offset(ts)
        local = dt + timedelta(seconds=offset)
        if self.utcoffset(local) != timedelta(seconds=offset):
            local = local.replace(fold=1)
        return local


def parse_moment(text: str, zone: Zone, now: float, *, until: bool = False) -> float:
    """Epoch seconds from ``--since``/``--until``.

    Accepts ages (``30m``, ``12h``, ``7d``, ``2w`` before ``now``), dates
    (``2026-01-31``, ``20260131``, ``today``, ``yesterday``) and ISO date-times; a
    date or naive time is in ``zone``. A date-only ``--until`` (``until=True``)
    means the end of that day.
    """
    value = text.strip()
    word = _DAY_WORDS.get(value.lower())
    if word is not None:
        today = date_day(zone.local(now).date())
        return zone.midnight(today + word + (1 if until else 0))
    age = _AGE.fullmatch(value)
    if age:
        return now - int(age.group(1)) * _AGE_SECONDS[age.group(2)]
    compact = _COMPACT_DATE.fullmatch(value)
    if compact:
        value = "-".join(compact.groups())
    try:
        day = date.fromisoformat(value) if len(value) == 10 else None
        moment = None if day else datetime.fromisoformat(value)
    except ValueError:
        raise PeriodError(
            f"{text!r} is not a date (2026-01-31, 20260131, today, yesterday), a date-time "
            "(2026-01-31T18:00) or an age (30m, 12h, 7d, 2w)"
        ) from None
    if day is not None:
        return zone.midnight(date_day(day) + (1 if until else 0))
    assert moment is not None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone.tz)
    return moment.timestamp()


@dataclass(frozen=True, slots=True)
class Range:
    """The requests a report covers: ``since <= ts < until`` (None: unbounded), and its zone."""

    since: float | None
    until: float | None
    zone: Zone

    @classmethod
    def parse(cls, since: str | None, until: str | None, zone: Zone, now: float) -> Range:
        """Build from flag texts; an inverted or empty range is a PeriodError."""
        lo = _flag("--since", since, zone, now, until=False)
        hi = _flag("--until", until, zone, now, until=True)
        if lo is not None and hi is not None and lo >= hi:
            raise PeriodError(
                f"--since {since} ({iso(lo, zone)}) is not before --until {until} ({iso(hi, zone)})"
            )
        return cls(lo, hi, zone)

    def sql(self, column: str = "ts") -> tuple[str, list[object]]:
        """A WHERE condition for this range, and its parameters."""
        parts: list[str] = []
        params: list[object] = []
        if self.since is not None:
            parts.append(f"{column} >= ?")
            params.append(self.since)
        if self.until is not None:
            parts.append(f"{column} < ?")
            params.append(self.until)
        return " AND ".join(parts) or "1", params


def _flag(flag: str, text: str | None, zone: Zone, now: float, *, until: bool) -> float | None:
    """One of --since/--until parsed, its errors naming the flag."""
    if text is None:
        return None
    try:
        return parse_moment(text, zone, now, until=until)
    except PeriodError as exc:
        raise PeriodError(f"{flag} {exc}") from None


def iso(ts: float, zone: Zone) -> str:
    """Epoch seconds as ISO-8601 in ``zone`` to the second (``Z`` for UTC)."""
    text = zone.local(ts).replace(microsecond=0).isoformat()
    return text.removesuffix("+00:00") + "Z" if zone.tz is UTC else text


def transitions(zone: Zone, lo: float, hi: float) -> list[tuple[float, int]]:
    """``[(start, offset), …]``: the zone's offset from each start on, covering [lo, hi].

    The first start is ``-inf``. Found by sampling every six hours and bisecting
    each change to the second.
    """
    t = lo - _SAMPLE_SECONDS
    current = zone.offset(t)
    out: list[tuple[float, int]] = [(float("-inf"), current)]
    while t <= hi:
        nxt = t + _SAMPLE_SECONDS
        offset = zone.offset(nxt)
        if offset != current:
            a, b = t, nxt  # offset(a) == current, offset(b) == offset
            while b - a > 1:
                mid = (a + b) // 2
                a, b = (mid, b) if zone.offset(mid) == current else (a, mid)
            out.append((float(b), offset))
            current = offset
        t = nxt
    return out


def offset_sql(segments: Sequence[tuple[float, int]], column: str = "ts") -> str:
    """An SQL expression for the UTC offset of ``column`` given :func:`transitions`."""
    if len(segments) == 1:
        return str(segments[0][1])
    whens = " ".join(
        f"WHEN {column} < {start!r} THEN {prev}"
        for (_, prev), (start, _) in pairwise(segments)
    )
    return f"(CASE {whens} ELSE {segments[-1][1]} END)"


def week_start(day: int) -> int:
    """The Monday on or before local day ``day`` (1970-01-01, day 0, was a Thursday)."""
    return day - (day + 3) % 7


def month_start(day: int) -> int:
    """The first day of the month of local day ``day``."""
    d = day_date(day)
    return date_day(d.replace(day=1))


def next_month(day: int) -> int:
    """The first day of the month after the one starting on ``day``."""
    d = day_date(day)
    return date_day(date(d.year + d.month // 12, d.month % 12 + 1, 1))
