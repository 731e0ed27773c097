"""The page's range and agent: the query parameters ``since``, ``until``, ``tz`` and ``agent``.

They mean exactly what ``report --since``, ``--until``, ``--timezone`` and
``--agent`` mean (:mod:`exporter.projections.periods` parses the range):
``since=7d``, ``since=2026-02-01&until=2026-02-28``, ``tz=Europe/Berlin``,
``agent=codex`` (one of exporter.ingest.formats.AGENTS). A parameter given
empty is a flag not given (``?since=`` is everything, as a form with an empty
field sends it); with neither ``since`` nor ``until`` the page shows its
default window, the last 30 whole days and the whole month.

A query string is outside input: it is bounded (:data:`MAX_QUERY` bytes,
:data:`MAX_VALUE` characters a value), its parameters are known ones given
once, and every value is shown only escaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode

from exporter.ingest.formats import AGENTS

MAX_QUERY: Final = 512  # bytes of QUERY_STRING read at all
MAX_VALUE: Final = 64  # characters of one value (the longest zone name is 32)
PARAMS: Final = ("since", "until", "tz", "agent")
TAKES: Final = ("since, until, tz and agent (as report --since/--until/--timezone/--agent)")


class QueryError(ValueError):
    """A query string the page does not take; the message says why (a 400)."""


@dataclass(frozen=True, slots=True)
class PageQuery:
    """The page's range as asked: each value stripped, None when absent or empty."""

    since: str | None = None
    until: str | None = None
    tz: str | None = None
    ranged: bool = False  # since or until was given (even empty): not the default window
    agent: str | None = None  # one agent's requests only (None: every agent's)

    def key(self) -> tuple[str | None, ...]:
        """What the page cache is keyed by (with the zone the source resolves)."""
        return (self.since, self.until, self.tz, "r" if self.ranged else "", self.agent)

    def query(self, **changes: str | None) -> str:
        """``?…`` for this range with ``changes`` (None drops a parameter), for a link."""
        since = (self.since or "") if self.ranged else None  # ``since=``: everything
        values = {"since": since, "until": self.until if self.ranged else None, "tz": self.tz,
                  "agent": self.agent, **changes}
        pairs = [(k, v) for k, v in values.items() if v is not None]
        return "?" + urlencode(pairs) if pairs else "./"


DEFAULT: Final = PageQuery()


def parse_query(raw: str) -> PageQuery:
    """A :class:`PageQuery` from a ``QUERY_STRING``; a :class:`QueryError` says what is wrong."""
    if len(raw) > MAX_QUERY:
        raise QueryError(f"the query string is longer than {MAX_QUERY} bytes")
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, strict_parsing=False,
                          max_num_fields=len(PARAMS) + 1, errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise QueryError(f"the page takes at most {len(PARAMS)} parameters: {TAKES}") from None
    found: dict[str, str] = {}
    for name, value in pairs:
        if name not in PARAMS:
            raise QueryError(f"unknown parameter {name[:MAX_VALUE]!r}: the page takes {TAKES}")
        if name in found:
            raise QueryError(f"{name} is given twice")
        if len(value) > MAX_VALUE:
            raise QueryError(f"{name} is longer than {MAX_VALUE} characters")
        found[name] = value.strip()
    tz = found.get("tz") or None
    if tz is not None and tz.lower() == "local":  # the default, one cache entry for both
        tz = None
    agent = found.get("agent") or None
    if agent is not None and agent not in AGENTS:  # shown escaped; never a scope
        raise QueryError(f"agent {agent!r} is not one of {', '.join(AGENTS)}")
    return PageQuery(found.get("since") or None, found.get("until") or None, tz,
                     ranged="since" in found or "until" in found, agent=agent)

