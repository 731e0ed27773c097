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

import json
from collections import Counter
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
    """Store a batch's readings and count its rejections (caller's transaction); new readings.

    The readings are folded in memory first (each sample, level and window
    instance once, with its extremes), then written a statement per table:
    what the status line's path does sample by sample, at a fraction of the
    statements (a month of Codex logs holds thousands of readings).
    """
    if not parsed.limits and not parsed.limit_rejected:
        return 0  # most batches: no plan table is touched
    plan_store.ensure_schema(db)
    for (agent, reason), n in parsed.limit_rejected.items():
        plan_store.count(db, rejected_counter(agent), reason, n)
    folded = _Folded()
    admitted: dict[str, set[str]] = {}
    for sample in parsed.limits.values():
        names = admitted.get(sample.agent)
        if names is None:
            names = admitted[sample.agent] = plan_store.admitted_names(db, sample.agent)
        windows, dropped = plausible.admit_windows(
            {name: [pct, resets] for name, pct, resets in sample.windows}, names)
        if dropped:
            folded.capped[sample.agent] += 1
        if windows:
            folded.add(sample, windows)
    return folded.write(db)


class _Folded:
    """A batch's readings folded: samples, levels and window instances, each once."""

    def __init__(self) -> None:
        """Nothing folded yet."""
        self.samples: dict[str, tuple[str, float, float, str]] = {}  # key -> agent, times, windows
        self.levels: dict[tuple[str, str, int, float], float] = {}  # -> first seen
        self.instances: dict[tuple[str, str, int], list[float]] = {}  # -> max %, times, reset
        self.latest: dict[str, float] = {}
        self.capped: Counter[str] = Counter()

    def add(self, sample: LimitSample, windows: dict[str, list[float]]) -> None:
        """One reading (seen from ``sample.first`` to ``sample.last``) and its window figures."""
        agent, first, last = sample.agent, sample.first, sample.last
        key = plan_store.sample_key({"agent": agent, "windows": windows})
        known = self.samples.get(key)
        if known is not None:
            first, last = min(first, known[1]), max(last, known[2])
        self.samples[key] = (agent, first, last, json.dumps(windows, sort_keys=True))
        self.latest[agent] = max(last, self.latest.get(agent, last))
        for name, (pct, resets) in windows.items():
            if resets is None:
                continue  # it cannot be placed in a window instance
            instance = plan_store.window_instance(resets)
            level = (agent, name, instance, pct)
            self.levels[level] = min(first, self.levels.get(level, first))
            seen = self.instances.get((agent, name, instance))
            if seen is None:
                self.instances[(agent, name, instance)] = [pct, first, last, resets]
            else:
                seen[:] = [max(seen[0], pct), min(seen[1], first), max(seen[2], last),
                           max(seen[3], resets)]

    def write(self, db: sqlite3.Connection) -> int:
        """Write what was folded (the caller's transaction); how many samples were new."""
        new = 0
        for agent in sorted({a for a, *_ in self.samples.values()}):
            rows = [(k, f, la, w, a) for k, (a, f, la, w) in self.samples.items() if a == agent]
            added = db.executemany(
                "INSERT OR IGNORE INTO plan_samples (key, first_seen, last_seen, windows, agent) "
                "VALUES (?,?,?,?,?)", rows).rowcount
            db.executemany("UPDATE plan_samples SET first_seen = min(first_seen, ?), "
                           "last_seen = max(last_seen, ?) WHERE key = ?",
                           [(f, la, k) for k, f, la, _w, _a in rows])
            if added:
                plan_store.count(db, SAMPLES, agent, added)
            new += added
        plan_store.write_levels(db, [(*level, t) for level, t in self.levels.items()])
        plan_store.write_instances(db, [(a, name, at, pct, first, last, resets) for (a, name, at), (
            pct, first, last, resets) in self.instances.items()])
        for agent, t in self.latest.items():
            plan_store.latest(db, plan_store.latest_name(agent), t, 0.0)
        for agent, n in self.capped.items():
            plan_store.count(db, rejected_counter(agent), "window_cap", n)
        return new
