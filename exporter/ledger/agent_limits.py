"""Plan-window readings from agents' own logs (Codex's ``rate_limits``) → the plan tables.

The status line's samples come by the spool (exporter.ledger.plan_store);
these come with a batch of transcripts (``Parsed.limits``) and are stored in
the batch's transaction, so they commit with its checkpoints: a kill -9 leaves
all of a batch or none, and a file is never read twice. Each reading is keyed
by its content (agent and windows, not its time), as a status-line sample is:
the copies of one event (a repeated event, a fork's copy of its parent's
history, a re-read file) are stored once, with the first and last time seen.

Counters (``plan_counters``): ``samples``/<agent> distinct readings stored,
``<agent>_rejected``/<reason> readings refused (the parser's reasons, and
``window_cap`` when a reading's window names pass plausible's cap).
"""

from __future__ import annotations

from typing import Final

from exporter.ingest import plausible
from exporter.ledger import plan_store
from exporter.records import LimitSample, Parsed
from exporter.sqlite import sqlite3

SAMPLES: Final = "samples"  # plan_counters' name, labelled by agent (the status line's: "")


def rejected_counter(agent: str) -> str:
    """The ``plan_counters`` name of an agent's rejected readings."""
    return f"{agent}_rejected"


def store(db: sqlite3.Connection, parsed: Parsed) -> int:
    """Store a batch's readings and count its rejections (caller's transaction); new readings."""
    if not parsed.limits and not parsed.limit_rejected:
        return 0  # most batches: no plan table is touched
    plan_store.ensure_schema(db)
    for (agent, reason), n in parsed.limit_rejected.items():
        plan_store.count(db, rejected_counter(agent), reason, n)
    admitted: dict[str, set[str]] = {}
    new = 0
    for sample in parsed.limits.values():
        names = admitted.get(sample.agent)
        if names is None:
            names = admitted[sample.agent] = plan_store.admitted_names(db, sample.agent)
        new += _store_one(db, sample, names)
    return new


def _store_one(db: sqlite3.Connection, sample: LimitSample, admitted: set[str]) -> int:
    """One reading, its window names capped; 1 when it was new."""
    windows, dropped = plausible.admit_windows(
        {name: [pct, resets] for name, pct, resets in sample.windows}, admitted)
    if dropped:
        plan_store.count(db, rejected_counter(sample.agent), "window_cap", 1)
    if not windows:
        return 0
    rec = {"agent": sample.agent, "windows": windows}
    new = plan_store.write_sample(db, rec, sample.first, sample.agent)
    if sample.last != sample.first:
        plan_store.write_sample(db, rec, sample.last, sample.agent)
    if new:
        plan_store.count(db, SAMPLES, sample.agent, 1)
    return int(new)
