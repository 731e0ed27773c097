"""Status-line samples that fit a ledger's requests, recorded as Claude Code would record them.

:func:`refreshes` turns requests (time order) into the refreshes Claude Code
would have sent if 1 % of the 5-hour window were worth ``usd_5h`` list-price
dollars and 1 % of the weekly window ``usd_7d``: 5-hour windows start at the
first request after the previous one ended (Anthropic's rule), the weekly one
at the first request; the figure is whole percents, refreshed just after each
request. :func:`record` runs the real status-line command (in process, at each
refresh's time) into a state directory's spool; :func:`record_now` runs it as a
process, now, as Claude Code does.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from exporter import statusline
from exporter.plan import spool
from exporter.projections.pricing import Pricing
from exporter.records import Request

FIVE_HOURS = 5 * 3600
WEEK = 7 * 86_400
ROOT = Path(__file__).resolve().parents[2]


def payload(at: float, windows: Mapping[str, tuple[float, int]], *,
            session: str = "6f1c0c4e-8a8b-4b7e-9d55-0a3e6f0a1b2c") -> dict[str, Any]:
    """A status-line payload shaped like Claude Code 2.1's with these (percent, reset) windows."""
    return {
        "hook_event_name": "Status", "session_id": session,
        "transcript_path": f"/home/dev/.claude/projects/-home-dev-app/{session}.jsonl",
        "cwd": "/home/dev/app", "model": {"id": "claude-opus-4-6", "display_name": "Opus 4.6"},
        "version": "2.1.90",
        "cost": {"total_cost_usd": round(at % 97, 2), "total_duration_ms": 45_000},
        "context_window": {"context_window_size": 200_000,
                           "used_percentage": int(at) % 80 + 10},
        "rate_limits": {name: {"used_percentage": pct, "resets_at": reset}
                        for name, (pct, reset) in windows.items()},
    }


def refreshes(requests: Iterable[Request], pricing: Pricing, *, usd_5h: float,
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
    """Run ``python -m exporter.statusline`` as Claude Code does on a refresh; its line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE_CODE_EXPORTER")}
    env.update({"PYTHONPATH": str(ROOT), spool.STATE_DIR_ENV: str(state)})
    proc = subprocess.run([sys.executable, "-m", "exporter.statusline"],
                          input=json.dumps(doc).encode(), capture_output=True, env=env,
                          timeout=30, check=False)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr.decode()
    return proc.stdout.decode()


def requests_of(tree: Path, scratch: Path) -> list[Request]:
    """The requests of a transcript tree in time order (read into a scratch ledger)."""
    from exporter.ingest.discover import projects_dirs
    from exporter.ingest.scan import Scanner
    from exporter.ledger import Ledger

    ledger = Ledger(scratch / "ledger.sqlite3")
    try:
        Scanner(ledger, projects_dirs([tree]), workers=1).scan()
        return ledger.requests()
    finally:
        ledger.close()


def sizes(requests: Iterable[Request], pricing: Pricing, *, peak_5h: float = 95.0,
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
