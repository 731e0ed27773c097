"""List-price cost of ledger requests in a time range, priced as `report` prices; "today".

:func:`ledger_cost` is the cost function the dollars-per-percent estimate
takes. It does not price anything itself: it asks the report's facts
(:class:`~exporter.projections.facts.Facts`, one grouped query per price
class over ``ts``) and prices them with the report's
:class:`~exporter.projections.class_prices.ClassPrices` — date-conditional prices, long
context, region, tier, speed and web searches included — so the estimate,
the status line's "today" and ``report`` never disagree about what a request
cost. :func:`publish_today` writes today's total for the status-line
command, which must not import the price table.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Final

from exporter.ingest import spool
from exporter.ingest.codex import KEY_PREFIX as CODEX_KEY
from exporter.projections.class_prices import ClassPrices
from exporter.projections.facts import Facts
from exporter.projections.money import usd
from exporter.projections.periods import UTC_ZONE, Range
from exporter.projections.plan.estimate import CostBetween
from exporter.projections.selection import Reader, Selection
from exporter.sqlite import sqlite3

#: Codex's turns: their keys start with ``codex\x1f`` (no Claude Code key does), a range of
#: the key index. Spelled with char() so no control character sits in the SQL text.
_CODEX_CODE: Final = ord(CODEX_KEY[-1])
_CODEX_KEYS: Final = (f"key >= '{CODEX_KEY[:-1]}' || char({_CODEX_CODE}) "
                      f"AND key < '{CODEX_KEY[:-1]}' || char({_CODEX_CODE + 1})")
CODEX_REQUESTS: Final = f"(SELECT * FROM requests WHERE {_CODEX_KEYS})"
#: Claude Code's requests: every request but Codex's turns.
CLAUDE_REQUESTS: Final = f"(SELECT * FROM requests WHERE NOT ({_CODEX_KEYS}))"


def reader(conn: sqlite3.Connection) -> Reader:
    """A :data:`~exporter.projections.selection.Reader` over a plain SQLite connection."""

    def read(sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        return conn.execute(sql, list(params)).fetchall()

    return read


def ledger_cost(conn: sqlite3.Connection, prices: ClassPrices, since: float,
                until: float | None) -> float:
    """USD at list price of the requests with ``since <= ts < until`` (unpriced models: 0).

    Every request of the ledger counts, whatever transcript root or agent it
    came from (a plan window's cost takes :func:`claude_cost` or
    :func:`codex_cost`: a window is the account's, not a directory's, and each
    agent's plan its own). ``until=None``: no end.
    """
    return _cost(conn, prices, "requests", since, until)


def _cost(conn: sqlite3.Connection, prices: ClassPrices, relation: str, since: float,
          until: float | None) -> float:
    """USD at list price of ``relation``'s requests with ``since <= ts < until``."""
    selection = Selection(reader(conn), relation, Range(since, until, UTC_ZONE))
    facts = Facts(selection, prices, by_class=True).collect()
    return usd(sum(f.usage.cost_pico for f in facts))


def claude_cost(conn: sqlite3.Connection, prices: ClassPrices) -> CostBetween:
    """The cost function of the status line's windows: Claude Code's requests alone.

    Codex's turns (their own plan, their own windows) never move Claude's
    figures: in a mixed ledger they would inflate its dollars per 1 %.
    """
    def between(since: float, until: float) -> float:
        return _cost(conn, prices, CLAUDE_REQUESTS, since, until)

    return between


def codex_cost(conn: sqlite3.Connection, prices: ClassPrices) -> CostBetween:
    """The cost function of Codex's windows: its turns' list price with ``since < ts <= until``.

    Codex logs a reading in the same event as the turn that moved it, at the
    same time stamp: the turn belongs to the change point it caused, not to the
    next one, so the range is shut at its end and open at its start (one ulp
    past each bound). Claude Code's requests never count in Codex's windows.
    """
    def between(since: float, until: float) -> float:
        return _cost(conn, prices, CODEX_REQUESTS, math.nextafter(since, math.inf),
                     math.nextafter(until, math.inf))

    return between


def publish_today(
    conn: sqlite3.Connection, prices: ClassPrices, state_dir: str | os.PathLike[str], now: float
) -> float:
    """Write today's list-price cost (local midnight to midnight) for the status line; return it.

    Bounded by the next midnight, not open-ended: a request stamped later (a
    clock ahead on another machine) is not today's, and the query reads one
    day's rows whatever the ledger holds after it.
    """
    since = spool.local_midnight(now)
    total = ledger_cost(conn, prices, since, spool.local_midnight(since + 36 * 3600))
    spool.write_today(os.fspath(state_dir), since, total, now)
    return total
