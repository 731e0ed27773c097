"""Usage slots: the ledger's requests summed per five minutes, kept with the rows.

A report over a year of history must not sort every request (SQLite sorts for
each GROUP BY: seconds for a year of requests). So the ledger keeps,
in the same transaction as its rows, these sums per 5-minute UTC slot and *key*
(session, project and the request attributes that decide a price), per roots
bitmask and per gap bucket. A report then groups a few rows per slot instead of
every request, and reads single requests only at the edges of a time range.

Slots are recomputed from the ``requests`` rows, never adjusted by deltas
(:mod:`exporter.ledger.slot_sums` keeps them; :mod:`exporter.ledger.slot_bins`
the value bins below); the tables are in :mod:`exporter.ledger.schema`.

The same sums per UTC day (``slot_days``, from the slots) answer everything that
needs no finer time: a whole-history summary, the session and project views; and
per 16-day block (``slot_blocks``, from the days; ``slot_class_blocks`` by price
class without session or project, ``slot_session_blocks`` by session) the whole
blocks of those.

Why these dimensions:
- 300 s divides a minute-aligned window of 5 minutes (``m0``..``m4`` count the
  requests in each calendar minute, for the busiest minute) and 10-minute windows
  (two slots), and every UTC offset in use is a multiple of 15 minutes, so local
  days and the prices' change dates (UTC midnights) start on slot bounds.
- ``long`` is the prompt's long-context level: how many of the price table's
  long-context thresholds its context exceeds (the ledger passes the price
  table's,  ``slot_sums.ensure``; they are stored in ``slot_meta``, only grow, and a
  new one rebuilds the slots). ``bucket`` the cache-expiry bucket of a main
  request (docs/figures.md), with 120 s split out for the generation speed.

Exact percentiles over a time range (``slot_hist``): per UTC day (``span`` 0)
and per 16-day block (``span`` 1), the count of requests in each *bin* of the
prompt size, the output size and the main requests' gap (whole milliseconds).
A bin keeps a value's top :data:`HIST_BITS` bits (32 bins an octave, under
3.2 % wide; values under 64 exactly). A nearest-rank percentile sums the bins
of the range to find the bin holding the rank, then walks the ledger's
(value, ts) index inside that one bin: the work is the range's bins and one
bin's share of the history, not every request (docs/figures.md).

``slot_meta`` holds ``version`` (what the tables hold: another is rebuilt by
the next writer, ``slot_sums.ensure``) and ``thresholds``.

This module holds the layout (constants, SQL expressions, what ``slot_meta``
says): the ledger keeps the tables by it, projections read them by it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Final

from exporter.records import ACTIVE_GAP_SECONDS, TTL_1H, TTL_5M, Source
from exporter.sqlite import sqlite3

SLOT_SECONDS: Final = 300
VERSION: Final = 5  # slot_meta 'version': 4 slot_hist, the blocks, day peaks; 5 attr_days
HIST_BITS: Final = 6  # a histogram bin keeps a value's top 6 bits (32 bins an octave)
BLOCK_DAYS: Final = 16  # days per block (slot_blocks, and span 1 of slot_hist)
HIST_BLOCK_DAYS: Final = BLOCK_DAYS
CONTEXT_HIST, OUTPUT_HIST, GAP_HIST = 0, 1, 2  # slot_hist measures
SLOTS_PER_DAY: Final = 86_400 // SLOT_SECONDS
LONG_CONTEXT_TOKENS: Final = 200_000  # the thresholds before any are given: every tier in use
DEFAULT_THRESHOLDS: Final = (LONG_CONTEXT_TOKENS,)
CONTEXT: Final = "(r.input + r.cache_read + r.cache_write_5m + r.cache_write_1h)"
# The rows the value bins count: an advisor consultation is no request a conversation sent
# (docs/figures.md, Iterations), so it is in no context, output or gap distribution.
OWN: Final = f"r.source != {int(Source.ADVISOR)}"
# -1 not main; main: 0 first of its conversation, 1 gap <= 120 s, 2 <= 300 s, 3 <= 1 h, 4 > 1 h.
# Each bucket's inclusive upper bound, in whole seconds: the counting rules' own.
BUCKET_EDGES: Final = tuple(int(edge) for edge in (ACTIVE_GAP_SECONDS, TTL_5M, TTL_1H))
BUCKET: Final = (
    "CASE WHEN r.source != 0 THEN -1 WHEN r.gap IS NULL THEN 0 "
    + " ".join(f"WHEN r.gap <= {edge} THEN {i}" for i, edge in enumerate(BUCKET_EDGES, 1))
    + f" ELSE {len(BUCKET_EDGES) + 1} END"
)
# Gaps are whole milliseconds (the ledger rounds them): integer sums are exact in any order.
GAP_MS: Final = "CAST(round(r.gap * 1000) AS INTEGER)"
SLOT_SQL: Final = f"CAST(r.ts / {SLOT_SECONDS} AS INTEGER)"  # a request's slot (as slot_of)
# The first and last request's times: two lookups in the ``ts`` index (one min() and one
# max() in a single SELECT would scan every row).
TIME_SPAN: Final = "SELECT (SELECT min(ts) FROM requests), (SELECT max(ts) FROM requests)"


def bin_sql(value: str) -> str:
    """SQL for an integer's histogram bin: the value with all but its top bits cleared.

    Values under ``2**HIST_BITS`` (and negative ones) are their own bin. A
    binary tree of CASEs on the bit length: six comparisons a value, not fifty.
    """
    def tree(lo: int, hi: int) -> str:  # bit lengths lo..hi
        if lo == hi:
            return f"(({value} >> {lo - HIST_BITS}) << {lo - HIST_BITS})"
        mid = (lo + hi) // 2
        return f"CASE WHEN {value} < {1 << mid} THEN {tree(lo, mid)} ELSE {tree(mid + 1, hi)} END"

    return f"(CASE WHEN {value} < {1 << HIST_BITS} THEN {value} ELSE {tree(HIST_BITS + 1, 63)} END)"


def bin_bounds(lo: int) -> tuple[int, int]:
    """The values ``[lo, hi)`` of the bin that starts at ``lo`` (a value of ``bin_sql``)."""
    if lo < 1 << HIST_BITS:
        return lo, lo + 1
    return lo, lo + (1 << (lo.bit_length() - HIST_BITS))


def version(db: sqlite3.Connection) -> int:
    """What the slot tables hold (0: a ledger from before slot_meta's version)."""
    try:
        row = db.execute("SELECT value FROM slot_meta WHERE name = 'version'").fetchone()
    except sqlite3.OperationalError as exc:
        _missing_table(exc)
        row = None
    return 0 if row is None else int(row[0])


def _missing_table(exc: sqlite3.OperationalError) -> None:
    """Re-raise anything but a missing table (a ledger from before slot_meta).

    A full disk or an I/O error met by a read inside a write transaction (a
    spill of its cache) made SQLite roll the transaction back: swallowed, the
    caller's COMMIT said only "no transaction is active".
    """
    if "no such table" not in str(exc):
        raise exc


def level_sql(thresholds: Sequence[int], context: str = CONTEXT) -> str:
    """SQL for the long-context level: how many of ``thresholds`` the context exceeds."""
    if not thresholds:
        return "0"
    return "(" + " + ".join(f"({context} > {int(t)})" for t in thresholds) + ")"


def stored_thresholds(db: sqlite3.Connection) -> tuple[int, ...]:
    """The long-context thresholds the slots were summed with."""
    try:
        row = db.execute("SELECT value FROM slot_meta WHERE name = 'thresholds'").fetchone()
    except sqlite3.OperationalError as exc:  # a ledger from before slot_meta: the first default
        _missing_table(exc)
        row = None
    return DEFAULT_THRESHOLDS if row is None else tuple(json.loads(row[0]))


def read_thresholds(read: Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
                    ) -> tuple[int, ...]:
    """:func:`stored_thresholds` through a reader (``Ledger.read``)."""
    try:
        rows = read("SELECT value FROM slot_meta WHERE name = 'thresholds'", [])
    except sqlite3.OperationalError:
        rows = []
    return tuple(json.loads(rows[0][0])) if rows else DEFAULT_THRESHOLDS


def read_version(read: Callable[[str, Sequence[object]], list[tuple[Any, ...]]]) -> int:
    """:func:`version` through a reader (``Ledger.read``)."""
    try:
        rows = read("SELECT value FROM slot_meta WHERE name = 'version'", [])
    except sqlite3.OperationalError:
        rows = []
    return int(rows[0][0]) if rows else 0


def slot_of(ts: float) -> int:
    """The slot holding epoch ``ts`` (as SQL computes it: ``CAST(ts / 300 AS INTEGER)``)."""
    return int(ts / SLOT_SECONDS)
