"""Status-line samples that fit a ledger's requests, recorded as Claude Code would record them.

:func:`refreshes` turns requests (time order) into the refreshes Claude Code
would have sent if 1 % of the 5-hour window were worth ``usd_5h`` list-price
dollars and 1 % of the weekly window ``usd_7d``: 5-hour windows start at the
first request after the previous one ended (Anthropic's rule), the weekly one
at the first request; the figure is whole percents, refreshed just after each
request. :func:`record` runs the real status-line command (in process, at each
refresh's time) into a state directory's spool; :func:`record_now` runs it as a
process, now, as Claude Code does. :func:`generate` makes a whole run, requests
and refreshes, from known window sizes (with repeats, a stale second session,
usage on other machines, rounding and lag as asked).
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.cli import statusline
from exporter.ingest import spool
from exporter.ledger.store import Ledger
from exporter.projections.pricing import RateTable
from exporter.records import Parsed, Request, Source

FIVE_HOURS = 5 * 3600
WEEK = 7 * 86_400
T0 = 1_790_000_000.0  # a fixed start for generated runs
ROOT = Path(__file__).resolve().parents[2]


def payload(at: float, windows: Mapping[str, tuple[float, int]], *,
            session: str = "6f1c0c4e-8a8b-4b7e-9d55-0a3e6f0a1b2c",
            context: float | None = None, cost: float | None = None) -> dict[str, Any]:
    """A status-line payload shaped like Claude Code 2.1's with these (percent, reset) windows.

    No ``rate_limits`` when ``windows`` is empty (before a session's first
    response); the context fill and session cost vary with ``at`` unless given.
    """
    doc: dict[str, Any] = {
        "hook_event_name": "Status", "session_id": session,
        "transcript_path": f"/home/dev/.claude/projects/-home-dev-app/{session}.jsonl",
        "cwd": "/home/dev/app", "model": {"id": "claude-opus-4-6", "display_name": "Opus 4.6"},
        "version": "2.1.90",
        "cost": {"total_cost_usd": round(at % 97, 2) if cost is None else cost,
                 "total_duration_ms": 45_000},
        "context_window": {"context_window_size": 200_000,
                           "used_percentage": int(at) % 80 + 10 if context is None else context},
    }
    if windows:
        doc["rate_limits"] = {name: {"used_percentage": pct, "resets_at": reset}
                              for name, (pct, reset) in windows.items()}
    return doc


def refreshes(requests: Iterable[Request], pricing: RateTable, *, usd_5h: float,
              usd_7d: float) -> list[tuple[float, dict[str, Any]]]:
    """(time, payload) of the refreshes after each request of ``requests`` (time order)."""
    out: list[tuple[float, dict[str, Any]]] = []
    five_end = week_end = -math.inf
    five_usd = week_usd = 0.0
    for req in requests:
        if req.ts >= five_end:
            five_end, five_usd = req.ts + FIVE_HOURS, 0.0
        if req.ts >= week_end:
            week_end, week_usd = req.ts + WEEK, 0.0
        cost = sum((pricing.cost(req) or {}).values())
        five_usd += cost
        week_usd += cost
        windows = {"five_hour": (float(math.floor(five_usd / usd_5h)), int(five_end)),
                   "seven_day": (float(math.floor(week_usd / usd_7d)), int(week_end))}
        at = req.ts + 0.5
        out.append((at, payload(at, windows, session=req.session or "s")))
    return out


def record(state: Path, found: Iterable[tuple[float, dict[str, Any]]]) -> None:
    """Run the status-line command once per refresh, at its time, into ``state``'s spool."""
    env = {spool.STATE_DIR_ENV: str(state)}
    for at, doc in found:
        out = io.BytesIO()
        code = statusline.main([], io.BytesIO(json.dumps(doc).encode()), out, env,
                               clock=functools.partial(float, at))
        assert code == 0 and out.getvalue().strip(), out.getvalue()


def record_now(state: Path, doc: Mapping[str, Any]) -> str:
    """Run ``python -m exporter.cli.statusline`` as Claude Code does on a refresh; its line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE_CODE_EXPORTER")}
    env.update({"PYTHONPATH": str(ROOT), spool.STATE_DIR_ENV: str(state)})
    proc = subprocess.run([sys.executable, "-m", "exporter.cli.statusline"],
                          input=json.dumps(doc).encode(), capture_output=True, env=env,
                          timeout=30, check=False)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr.decode()
    return proc.stdout.decode()


def requests_of(tree: Path, scratch: Path) -> list[Request]:
    """The requests of a transcript tree in time order (read into a scratch ledger)."""
    from exporter.ingest.discover import projects_dirs
    from exporter.ingest.scan import Scanner
    from exporter.ledger.store import Ledger

    ledger = Ledger(scratch / "ledger.sqlite3")
    try:
        Scanner(ledger, projects_dirs([tree]), workers=1).scan()
        return ledger.requests()
    finally:
        ledger.close()


def sizes(requests: Iterable[Request], pricing: RateTable, *, peak_5h: float = 95.0,
          peak_7d: float = 60.0) -> tuple[float, float]:
    """Dollars per 1 % of each window such that the busiest 5-hour window peaks at ``peak_5h``.

    And the first week at ``peak_7d`` (by the window rules of :func:`refreshes`).
    """
    busiest = week = window = 0.0
    end = -math.inf
    for req in requests:
        if req.ts >= end:
            end, window = req.ts + FIVE_HOURS, 0.0
        cost = sum((pricing.cost(req) or {}).values())
        window += cost
        week += cost
        busiest = max(busiest, window)
    return busiest / peak_5h, week / peak_7d


def store_requests(ledger: Ledger, requests: list[Request]) -> None:
    """Put requests into the ledger through its own write path."""
    parsed = Parsed()
    for req in requests:
        parsed.add(req)
    ledger.apply(parsed, [], 0)


@dataclass
class Run:
    """A generated stretch of plan usage: ledger requests and status-line refreshes.

    Made by :func:`generate` with known dollars per 1 % of each window (the
    ground truth the estimate must recover).
    """

    usd_per_percent_5h: float
    usd_per_percent_7d: float
    foreign_share: float = 0.0  # share of the usage made on other machines (not in the ledger)
    decimals: int = 0  # the official figure's rounding
    lag: bool = False  # the figure a response carries leaves out that response's own usage
    requests: list[Request] = field(default_factory=list)
    refreshes: list[tuple[float, dict[str, Any]]] = field(default_factory=list)


def generate(run: Run, pricing: RateTable, seed: int = 11, t0: float = T0) -> Run:
    """Five 5-hour windows inside one weekly window from ``t0``, each driven to 70-100 %."""
    rng = random.Random(seed)
    week_reset = int(t0 + WEEK)
    week_usd = 0.0
    history: list[dict[str, Any]] = []
    for k in range(5):
        start = t0 + k * 6 * 3600
        reset = int(start + FIVE_HOURS)
        target = rng.uniform(0.7, 1.0) * 100 * run.usd_per_percent_5h
        window_usd, t, n = 0.0, start + 30, 0
        while window_usd < target and t < reset - 120:
            t += rng.uniform(2, 12)
            n += 1
            req = Request(f"w{k}r{n}", t, "claude-opus-4-6", "sess-a", "/p", Source.MAIN,
                          rng.randrange(500, 4000), rng.randrange(800, 4000),
                          rng.randrange(40_000, 160_000), rng.randrange(0, 8000), 0)
            priced = pricing.cost(req)
            assert priced is not None
            usd = sum(priced.values())
            if rng.random() < run.foreign_share:
                usd_foreign = usd  # the same request made elsewhere: the window moves, no row
                window_usd += usd_foreign
                week_usd += usd_foreign
                continue
            run.requests.append(req)
            lagged = usd if run.lag else 0.0
            window_usd += usd
            week_usd += usd
            five = _official((window_usd - lagged) / run.usd_per_percent_5h, run.decimals)
            seven = _official((week_usd - lagged) / run.usd_per_percent_7d, run.decimals)
            doc = _payload("sess-a", five, reset, seven, week_reset, rng=rng)
            at = t + rng.uniform(0.05, 1.0)
            run.refreshes.append((at, doc))
            history.append(doc)
            if rng.random() < 0.2:  # Claude Code refreshes again with unchanged figures
                run.refreshes.append((at + rng.uniform(1, 3), doc))
            if rng.random() < 0.1 and len(history) > 30:  # another session, figures minutes old
                old = dict(history[-30], session_id="sess-b")
                run.refreshes.append((at + 0.5, old))
    return run


def _official(percent: float, decimals: int) -> float:
    """The figure as Claude Code shows it: rounded down to whole (or tenth) percents."""
    scale = 10.0**decimals
    return math.floor(percent * scale) / scale


def _payload(session: str, five: float, five_reset: int, seven: float, seven_reset: int, *,
             rng: random.Random) -> dict[str, Any]:
    """A status-line payload with the given official figures."""
    return {
        "session_id": session, "model": {"id": "claude-opus-4-6", "display_name": "Opus 4.6"},
        "version": "2.1.90",
        "rate_limits": {"five_hour": {"used_percentage": five, "resets_at": five_reset},
                        "seven_day": {"used_percentage": seven, "resets_at": seven_reset}},
        "context_window": {"used_percentage": rng.randrange(5, 90),
                           "context_window_size": 200_000},
    }
