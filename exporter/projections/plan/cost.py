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

import os
from collections.abc import Sequence
from typing import Any

from exporter.ingest import spool
from exporter.projections.class_prices import ClassPrices
from exporter.projections.facts import Facts
from exporter.projections.money import usd
from exporter.projections.periods import UTC_ZONE, Range
from exporter.projections.selection import Reader, Selection
from exporter.sqlite import sqlite3


def reader(conn: sqlite3.Connection) -> Reader:
    """A :data:`~exporter.projections.selection.Reader` over a plain SQLite connection."""

    def read(sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        return conn.execute(sql, list(params)).fetchall()

    return read


def ledger_cost(conn: sqlite3.Connection, prices: ClassPrices, since: float,
                until: float | None) -> float:
    """USD at list price of the requests with ``since <= ts < until`` (unpriced models: 0).

    Every request of the ledger counts, whatever transcript root it came from:
    a plan window is the account's, not a directory's. ``until=None``: no end.
    """
    selection = Selection(reader(conn), "requests", Range(since, until, UTC_ZONE))
    facts = Facts(selection, prices, by_class=True).collect()
    return usd(sum(f.usage.cost_pico for f in facts))


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
