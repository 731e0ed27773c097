"""The plan-limit figures the metrics (and reports) show, read from the ledger's plan tables.

Read-only: a ledger without plan tables (the status line never ran) gives
empty figures. One call costs a handful of indexed queries plus one cost
query per window instance in the estimate's look-back (about 40 for a busy
week): compute it once per scrape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from exporter.ingest import codex_limits, plausible, spool
from exporter.ledger import agent_limits
from exporter.ledger import plan_store as store
from exporter.projections.plan.estimate import CostBetween, Estimate, usd_per_percent
from exporter.projections.plan.pace import NOT_ENOUGH, Pace, PaceInput, project, recent_span
from exporter.sqlite import sqlite3

DAY: Final = 86_400.0
#: How far back the dollars-per-percent estimate looks, by window: recent enough
#: to follow a change of plan or of Anthropic's limits, long enough for many instances.
LOOKBACK: Final[Mapping[str, float]] = {"five_hour": 7 * DAY, "seven_day": 35 * DAY}
DEFAULT_LOOKBACK: Final = 35 * DAY
#: How long each window lasts, by name prefix (``seven_day_opus`` is a weekly one): its
#: start is its reset time minus this. A window of another name starts at its first sample.
DURATIONS: Final = (("five_hour", 5 * 3600.0), ("seven_day", 7 * DAY))
CLAUDE: Final = store.CLAUDE
#: The other agents whose logs carry plan windows, and why a reading of theirs is refused.
AGENT_REASONS: Final[Mapping[str, tuple[str, ...]]] = {
    codex_limits.AGENT: (*codex_limits.REASONS, "window_cap")}


def live(agent: str) -> str:
    """An SQL condition on ``plan_levels``: the levels that can move an agent's estimate.

    An other agent's log may repeat an old reading long after its window reset
    (Codex's copies of a session's history carry new times): a level first seen
    after its instance's reset says nothing about when the figure moved, and is
    left out. The status line's readings are live (its condition is always true).
    """
    return "1" if agent == CLAUDE else f"first_seen <= resets_at + {store.RESETS_QUANTUM}"


def duration(window: str) -> float | None:
    """The length of a window of this name, or None when it is not known."""
    return next((d for prefix, d in DURATIONS if window.startswith(prefix)), None)


@dataclass(frozen=True, slots=True)
class WindowFigures:
    """One rate-limit window (``five_hour``, ``seven_day``) as of now."""

    used_ratio: float  # 0-1 (can pass 1 slightly); 0 once resets_at has passed
    resets_at: float  # Unix seconds of the current (or last seen) instance's reset
    exhausted: int  # instances that reached 100 %
    estimate: Estimate | None  # None when no cost function was given
    pace: Pace | None = None  # None when no cost function was given


@dataclass(frozen=True, slots=True)
class PlanFigures:
    """Everything the plan metric families observe."""

    windows: dict[str, WindowFigures] = field(default_factory=dict)
    samples: int = 0  # distinct samples stored
    sample_age_seconds: float | None = None  # None: no sample ever
    context_used_ratio: float | None = None
    failures: dict[str, int] = field(default_factory=dict)  # status-line failures by reason
    rejected: dict[str, int] = field(default_factory=dict)  # bad spool lines by reason
    #: Other agents' windows from their own logs (Codex's rate_limits), by agent: only
    #: those that recorded a reading or refused one (a Claude-only ledger has none).
    agents: dict[str, PlanFigures] = field(default_factory=dict)


def plan_figures(
    conn: sqlite3.Connection,
    now: float,
    cost_between: CostBetween | None = None,
    *,
    lookback: Mapping[str, float] = LOOKBACK,
    agent_cost: Mapping[str, CostBetween] | None = None,
) -> PlanFigures:
    """The plan figures at ``now``; the $/% estimate only when ``cost_between`` is given.

    ``agent_cost``: each other agent's own cost function (its requests alone,
    e.g. :func:`~exporter.projections.plan.cost.codex_cost`), for its windows'
    estimate and pace; an agent without one has neither.
    """
    if not store.has_schema(conn):
        return PlanFigures(failures=dict.fromkeys(spool.FAILURE_REASONS, 0),
                           rejected=dict.fromkeys(store.REJECT_REASONS, 0))
    counters: dict[tuple[str, str], int] = {
        (name, label): value
        for name, label, value in conn.execute("SELECT name, label, value FROM plan_counters")
    }
    meta = {name: (t, value) for name, t, value in conn.execute("SELECT * FROM plan_meta")}
    latest = meta.get("latest_sample")
    context = meta.get("latest_context")
    return PlanFigures(
        windows=_windows(conn, now, cost_between, lookback, CLAUDE),
        samples=counters.get(("samples", ""), 0),
        sample_age_seconds=None if latest is None else max(0.0, now - latest[0]),
        context_used_ratio=None if context is None else context[1] / 100.0,
        failures={r: counters.get(("statusline_failures", r), 0) for r in spool.FAILURE_REASONS},
        rejected={r: counters.get(("spool_rejected", r), 0) for r in store.REJECT_REASONS},
        agents=_agents(conn, now, counters, meta, agent_cost or {}),
    )


def _agents(conn: sqlite3.Connection, now: float, counters: Mapping[tuple[str, str], int],
            meta: Mapping[str, tuple[float, float]], agent_cost: Mapping[str, CostBetween],
            ) -> dict[str, PlanFigures]:
    """Each other agent's figures, where it recorded a reading or refused one.

    Its estimate and pace divide the agent's own list-price cost (``agent_cost``)
    by its own percentages: none without a cost function of its own.
    """
    out: dict[str, PlanFigures] = {}
    for agent, reasons in AGENT_REASONS.items():
        samples = counters.get((agent_limits.SAMPLES, agent), 0)
        name = agent_limits.rejected_counter(agent)
        rejected = {r: counters.get((name, r), 0) for r in reasons}
        if not samples and not any(rejected.values()):
            continue
        latest = meta.get(f"latest_sample:{agent}")
        out[agent] = PlanFigures(
            windows=_windows(conn, now, agent_cost.get(agent), LOOKBACK, agent),
            samples=samples,
            sample_age_seconds=None if latest is None else max(0.0, now - latest[0]),
            rejected=rejected)
    return out


def _windows(
    conn: sqlite3.Connection, now: float, cost_between: CostBetween | None,
    lookback: Mapping[str, float], agent: str,
) -> dict[str, WindowFigures]:
    """Per window name of ``agent``: the newest instance, the exhausted count, the estimate."""
    # Capped as ingest caps them (a ledger from before the cap may hold any number).
    found = conn.execute(
        "SELECT window, min(first_seen) AS first FROM plan_windows WHERE agent = ? "
        "GROUP BY window ORDER BY first, window", (agent,)
    ).fetchall()
    shown = set(plausible.capped([name for name, _first in found]))
    exhausted = dict(conn.execute(
        "SELECT window, count(*) FROM plan_windows WHERE agent = ? AND max_pct >= 100 "
        "AND max_pct <= ? GROUP BY window", (agent, plausible.MAX_PERCENT)
    ).fetchall())
    out: dict[str, WindowFigures] = {}
    for name in sorted(shown):
        newest = _newest(conn, agent, name)
        if newest is None:
            continue
        max_pct, reported, key = newest
        used = 0.0 if reported <= now else max_pct / 100.0
        estimate = pace = None
        if cost_between is not None:
            since = now - lookback.get(name, DEFAULT_LOOKBACK)
            estimate = usd_per_percent(_instances(conn, agent, name, since), cost_between)
            pace = _pace(conn, (agent, name), (key, reported, max_pct), now=now,
                         cost=cost_between, estimate=estimate)
        out[name] = WindowFigures(used, float(reported), exhausted.get(name, 0), estimate, pace)
    return out


def _pace(conn: sqlite3.Connection, window: tuple[str, str], instance: tuple[int, int, float],
          *, now: float, cost: CostBetween, estimate: Estimate) -> Pace:
    """The pace of an (agent, window)'s newest instance (not enough data once it has reset)."""
    agent, name = window
    key, reported, used = instance
    if reported <= now:
        return Pace(NOT_ENOUGH)
    points = tuple(conn.execute(
        "SELECT pct, min(first_seen) FROM plan_levels WHERE agent = ? AND window = ? "
        f"AND resets_at = ? AND pct <= ? AND {live(agent)} GROUP BY pct ORDER BY pct",
        (agent, name, key, plausible.MAX_PERCENT),
    ).fetchall())
    if not points:
        return Pace(NOT_ENOUGH)
    length = duration(name)
    first = min(seen for _pct, seen in points)
    start = min(first, reported - length) if length is not None else first
    span = recent_span(reported - start)
    return project(PaceInput(now, float(start), float(reported), used,
                             tuple((float(p), float(t)) for p, t in points),
                             cost(now - span, now), estimate.usd_per_percent))


def _newest(conn: sqlite3.Connection, agent: str, name: str) -> tuple[float, int, int] | None:
    """(highest plausible %, reported reset, key) of a window's newest plausible instance.

    Ingest rejects implausible samples; a ledger filled before it did may still
    hold a reset in the year 5107 or a 999.9 % level, which must not be the
    gauge's: such an instance is passed over, such a level left out.
    """
    row = conn.execute(
        "SELECT resets_at, max_pct, reported_resets_at FROM plan_windows WHERE agent = ? "
        "AND window = ? AND reported_resets_at <= last_seen + ? ORDER BY resets_at DESC LIMIT 1",
        (agent, name, plausible.reset_bound(name)),
    ).fetchone()
    if row is None:
        return None
    resets_at, max_pct, reported = row
    if max_pct > plausible.MAX_PERCENT:
        (max_pct,) = conn.execute(
            "SELECT max(pct) FROM plan_levels WHERE agent = ? AND window = ? AND resets_at = ? "
            "AND pct <= ?", (agent, name, resets_at, plausible.MAX_PERCENT),
        ).fetchone()
        if max_pct is None:
            return None
    return float(max_pct), int(reported), int(resets_at)


def _instances(
    conn: sqlite3.Connection, agent: str, name: str, since: float
) -> list[list[tuple[float, float]]]:
    """The (pct, first seen) levels of each instance of a window resetting after ``since``."""
    groups: dict[int, list[tuple[float, float]]] = {}
    rows = conn.execute(
        "SELECT resets_at, pct, first_seen FROM plan_levels WHERE agent = ? AND window = ? "
        f"AND resets_at > ? AND pct <= ? AND {live(agent)}",
        (agent, name, since, plausible.MAX_PERCENT),
    )
    for resets_at, pct, seen in rows:
        groups.setdefault(resets_at, []).append((pct, seen))
    return [groups[k] for k in sorted(groups)]


Read = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
"""Runs one read-only query on the ledger (``Ledger.read``, or ``cost.reader(conn)``)."""


@dataclass(frozen=True, slots=True)
class PlanHistory:
    """The ledger's samples as ``backfill`` replays them (exporter.projections.timeline)."""

    samples: tuple[float, ...] = ()  # first sighting of every distinct sample, ascending
    #: (first seen, window, used %, reported reset) of every window figure with a reset
    #: time, in time order: what the used-ratio, reset and exhausted series follow.
    windows: tuple[tuple[float, str, float, float], ...] = ()
    #: Other agents' readings (Codex's ``rate_limits``), each for its own families
    #: (``<namespace>_<agent>_plan_*``).
    others: tuple[tuple[str, PlanHistory], ...] = ()


def plan_history(read: Read, agent: str = CLAUDE) -> PlanHistory:
    """Every sample of the ledger, for the backfill (empty without plan tables).

    The status line's, with every other agent's readings in ``others``.
    """
    found = read("SELECT count(*) FROM pragma_table_info('plan_samples') WHERE name = 'agent'",
                 [])
    if not found[0][0]:
        return PlanHistory()
    others: tuple[tuple[str, PlanHistory], ...] = ()
    if agent == CLAUDE:
        others = tuple((other, plan_history(read, other)) for (other,) in read(
            "SELECT DISTINCT agent FROM plan_samples WHERE agent != ? ORDER BY 1", [CLAUDE]))
    times: list[float] = []
    windows: list[tuple[float, str, float, float]] = []
    for seen, text in read("SELECT first_seen, windows FROM plan_samples WHERE agent = ? "
                           "ORDER BY first_seen, key", [agent]):
        times.append(float(seen))
        for name, (pct, resets) in sorted(json.loads(text).items()) if text else ():
            if resets is not None:
                windows.append((float(seen), name, float(pct), float(resets)))
    # The window names capped as ingest caps them, first seen first.
    shown = set(plausible.capped(list(dict.fromkeys(w[1] for w in windows))))
    return PlanHistory(tuple(times), tuple(w for w in windows if w[1] in shown), others)


def window_history(
    conn: sqlite3.Connection, since: float, until: float
) -> list[tuple[float, str, float, float | None]]:
    """(first seen, window, used %, resets_at) of every sample in [since, until), in time order.

    For backfilling the used-ratio and reset series from the ledger's history.
    """
    if not store.has_schema(conn):
        return []
    out: list[tuple[float, str, float, float | None]] = []
    rows = conn.execute(
        "SELECT first_seen, windows FROM plan_samples WHERE first_seen >= ? AND first_seen < ? "
        "AND windows IS NOT NULL AND agent = ? ORDER BY first_seen",
        (since, until, CLAUDE),
    )
    for seen, text in rows:
        for name, (pct, resets) in sorted(json.loads(text).items()):
            out.append((seen, name, pct, resets))
    return out


def limits_rows(figures: PlanFigures, now: float) -> list[dict[str, object]]:
    """One row per window for a ``report limits`` view (text or JSON)."""
    rows: list[dict[str, object]] = []
    for name, win in figures.windows.items():
        est = win.estimate
        usd = None if est is None else est.usd_per_percent
        rows.append({
            "window": name,
            "used_percent": round(100 * win.used_ratio, 1),
            "resets_in_seconds": max(0.0, win.resets_at - now),
            "windows_exhausted": win.exhausted,
            "usd_per_percent": usd,
            "window_usd": None if usd is None else 100 * usd,
            "pairs": 0 if est is None else est.pairs,
        })
    return rows


@dataclass(frozen=True, slots=True)
class Instance:
    """One window instance (a window and its reset time) as the samples saw it."""

    window: str
    start: float  # its reset time minus its duration (or its first sample)
    resets_at: float  # as Claude Code reported it
    first_seen: float  # first and last sample of it
    last_seen: float
    peak_percent: float  # the highest official figure seen
    cost_usd: float  # list price of this ledger's requests from start to reset (or now)
    estimate: Estimate  # dollars per 1 % from this instance's change points alone

    @property
    def exhausted(self) -> bool:
        """Whether it reached 100 %."""
        return self.peak_percent >= 100.0

    def open(self, now: float) -> bool:
        """Whether it has not reset yet at ``now``."""
        return self.resets_at > now


def instances(conn: sqlite3.Connection, cost_between: CostBetween, now: float,
              since: float | None = None, until: float | None = None, *,
              agent: str = CLAUDE) -> list[Instance]:
    """An agent's window instances overlapping [since, until), by window then start.

    Each with its peak, the list-price cost inside it (up to ``now`` for the
    open one) and its own estimate (change points of that instance only);
    ``cost_between`` prices that agent's requests.
    """
    if not store.has_schema(conn):
        return []
    levels: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for name, key, pct, seen in conn.execute(
            f"SELECT window, resets_at, pct, first_seen FROM plan_levels WHERE agent = ? "
            f"AND {live(agent)}", (agent,)):
        levels.setdefault((name, key), []).append((pct, seen))
    out: list[Instance] = []
    for key, peak in _spans(conn, agent, since, until):
        end = min(peak.resets_at, now)
        cost = cost_between(peak.start, end) if end > peak.start else 0.0
        estimate = usd_per_percent([levels.get((peak.window, key), [])], cost_between)
        out.append(Instance(peak.window, peak.start, peak.resets_at, peak.first_seen,
                            peak.last_seen, peak.peak_percent, cost, estimate))
    return out


@dataclass(frozen=True, slots=True)
class Peak:
    """One window instance as its samples saw it: its span and highest figure, no dollars."""

    window: str
    start: float  # its reset time minus its duration (or its first sample)
    resets_at: float  # as reported
    first_seen: float
    last_seen: float
    peak_percent: float

    @property
    def exhausted(self) -> bool:
        """Whether it reached 100 %."""
        return self.peak_percent >= 100.0

    def open(self, now: float) -> bool:
        """Whether it has not reset yet at ``now``."""
        return self.resets_at > now


def peaks(conn: sqlite3.Connection, agent: str, since: float | None = None,
          until: float | None = None) -> list[Peak]:
    """Another agent's window instances overlapping [since, until), by window then start.

    Without cost or estimate: those need the agent's own prices (not wired yet).
    """
    if not store.has_schema(conn):
        return []
    return [peak for _key, peak in _spans(conn, agent, since, until)]


def _spans(conn: sqlite3.Connection, agent: str, since: float | None,
           until: float | None) -> list[tuple[int, Peak]]:
    """(instance key, span and peak) of an agent's window instances overlapping the range."""
    out: list[tuple[int, Peak]] = []
    rows = conn.execute("SELECT window, resets_at, max_pct, first_seen, last_seen, "
                        "reported_resets_at FROM plan_windows WHERE agent = ? "
                        "ORDER BY window, resets_at", (agent,))
    for name, key, peak, first, last, reported in rows.fetchall():
        length = duration(name)
        start = min(first, reported - length) if length is not None else first
        if (since is not None and reported <= since) or (until is not None and start >= until):
            continue
        out.append((key, Peak(name, float(start), float(reported), first, last, peak)))
    return out
