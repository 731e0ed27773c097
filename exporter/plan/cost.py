"""List-price cost of ledger requests in a time range, in SQL; "today" for the status line.

:func:`ledger_cost` sums token counts per rate class (model, long context,
tier, region, speed) in one grouped query over ``ts`` (an index range scan
once the ledger indexes ``ts``) and prices each class once: the cost function
the dollars-per-percent estimate takes. :func:`publish_today` writes today's
total for the status-line command, which must not import the price table.
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING, Final

from exporter.plan import spool

if TYPE_CHECKING:
    from exporter.projections.pricing import Pricing

_NEVER: Final = 1 << 62  # the threshold of a model without a long-context price


def ledger_cost(conn: sqlite3.Connection, pricing: Pricing, since: float, until: float) -> float:
    """USD at list price of the requests with ``since <= ts < until`` (unpriced models: 0)."""
    models = [m for (m,) in conn.execute(
        "SELECT DISTINCT model FROM requests WHERE ts >= ? AND ts < ?", (since, until)
    )]
    if not models:
        return 0.0
    thresholds: list[object] = []
    for model in models:
        threshold = pricing.long_context_threshold(model)
        thresholds += [model, _NEVER if threshold is None else threshold]
    case = "CASE model " + "WHEN ? THEN ? " * len(models) + f"ELSE {_NEVER} END"
    rows = conn.execute(
        "SELECT model, service_tier, inference_geo, speed, "
        f"input + cache_read + cache_write_5m + cache_write_1h > ({case}) AS long, "
        "sum(input), sum(output), sum(cache_read), sum(cache_write_5m), sum(cache_write_1h) "
        "FROM requests WHERE ts >= ? AND ts < ? GROUP BY 1, 2, 3, 4, 5",
        (*thresholds, since, until),
    )
    total = 0.0
    for model, tier, geo, speed, long, inp, out, read, w5, w1 in rows:
        rates = pricing.rates(model, long_context=bool(long), inference_geo=geo,
                              service_tier=tier, speed=speed)
        if rates is not None:
            total += sum(rates.cost(inp, out, read, w5, w1).values())
    return total


def publish_today(
    conn: sqlite3.Connection, pricing: Pricing, state_dir: str | os.PathLike[str], now: float
) -> float:
    """Write today's list-price cost (since local midnight) for the status line; return it."""
    since = spool.local_midnight(now)
    usd = ledger_cost(conn, pricing, since, float("inf"))
    spool.write_today(os.fspath(state_dir), since, usd, now)
    return usd
