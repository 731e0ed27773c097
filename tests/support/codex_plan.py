"""A Codex home whose turns move its plan windows, and what they should be worth, independently.

:func:`codex_home` writes one rollout whose ``token_count`` events each carry a
turn and the account's windows (a 5-hour one rising, a weekly one); a Claude
Code transcript with one costly request inside the same hours sits beside it
(it must never count in Codex's windows). :func:`expected_usd_per_percent`
computes the dollars per 1 % from the written events alone: genai-prices' own
price of each turn, and the change points of the readings, without the
exporter's code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from genai_prices import Usage, calc_price

from tests.support.records import assistant, jsonl

MODEL = "gpt-5.5"
SESSION = "019f0000-0000-7000-8000-0000000c0de5"
#: The 5-hour window's official figure after each turn: it rises, sometimes stays.
FIVE_HOUR = (10.0, 10.0, 14.0, 14.0, 20.0, 25.0, 25.0, 31.0, 31.0, 40.0)
WEEK = (5.0, 5.0, 5.0, 6.0, 6.0, 6.0, 7.0, 7.0, 7.0, 8.0)
STEP = 300.0  # seconds between turns


@dataclass(frozen=True)
class Turn:
    """One Codex turn as written: its time, usage and the 5-hour figure it logged."""

    t: float
    uncached: int
    cached: int
    output: int
    five_hour: float


def iso(t: float) -> str:
    """An ISO 8601 UTC time as Codex writes it (milliseconds, ``Z``)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _window(pct: float, minutes: int, reset: float) -> dict[str, Any]:
    return {"used_percent": pct, "window_minutes": minutes, "resets_at": int(reset)}


def codex_home(home: Path, claude: Path, start: float) -> tuple[list[Turn], float, float]:
    """Write the rollout (turns from ``start``) and the Claude transcript; the turns and resets.

    Returns (turns, the 5-hour reset, the weekly reset).
    """
    five_reset, week_reset = start + 2 * 3600 + len(FIVE_HOUR) * STEP, start + 3 * 86_400
    turns = [Turn(start + k * STEP, 20_000 + 1_000 * k, 50_000 + 5_000 * k, 3_000 + 700 * k,
                  FIVE_HOUR[k]) for k in range(len(FIVE_HOUR))]
    lines: list[dict[str, Any]] = [
        {"timestamp": iso(start - 10), "type": "session_meta",
         "payload": {"id": SESSION, "cwd": "/home/dev/app"}},
        {"timestamp": iso(start - 10), "type": "turn_context",
         "payload": {"model": MODEL, "cwd": "/home/dev/app", "turn_id": SESSION}}]
    totals = [0, 0, 0]
    for k, turn in enumerate(turns):
        last = {"input_tokens": turn.uncached + turn.cached, "cached_input_tokens": turn.cached,
                "output_tokens": turn.output, "reasoning_output_tokens": 0,
                "total_tokens": turn.uncached + turn.cached + turn.output}
        totals = [totals[0] + last["input_tokens"], totals[1] + turn.cached,
                  totals[2] + turn.output]
        total = {"input_tokens": totals[0], "cached_input_tokens": totals[1],
                 "output_tokens": totals[2], "reasoning_output_tokens": 0,
                 "total_tokens": totals[0] + totals[2]}
        rate = {"limit_id": "codex", "limit_name": None,
                "primary": _window(turn.five_hour, 300, five_reset),
                "secondary": _window(WEEK[k], 10_080, week_reset),
                "credits": None, "plan_type": None}
        lines.append({"timestamp": iso(turn.t), "type": "event_msg", "payload": {
            "type": "token_count", "rate_limits": rate,
            "info": {"total_token_usage": total, "last_token_usage": last,
                     "model_context_window": 272_000}}})
    day = datetime.fromtimestamp(start, UTC)
    path = (home / "sessions" / day.strftime("%Y/%m/%d")
            / f"rollout-{day.strftime('%Y-%m-%dT%H-%M-%S')}-{SESSION}.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    project = claude / "projects" / "-home-dev-app"
    project.mkdir(parents=True, exist_ok=True)
    costly = {"input_tokens": 900_000, "output_tokens": 90_000, "cache_read_input_tokens": 0,
              "cache_creation_input_tokens": 0}  # dollars inside Codex's window, not Codex's
    (project / "s1.jsonl").write_bytes(jsonl(assistant(ts=iso(start + 4.5 * STEP),
                                                       usage=costly)))
    return turns, float(int(five_reset)), float(int(week_reset))


def turn_cost(turn: Turn) -> Decimal:
    """genai-prices' own price of one turn (its input counts the cached part too)."""
    usage = Usage(input_tokens=turn.uncached + turn.cached, cache_read_tokens=turn.cached,
                  output_tokens=turn.output)
    return calc_price(usage, MODEL, provider_id="openai",
                      genai_request_timestamp=datetime.fromtimestamp(turn.t, UTC)).total_price


def expected_usd_per_percent(turns: list[Turn]) -> float:
    """Codex's cost between the first and last change point over the percentage it moved.

    A level's change point is the turn that first showed it; the lowest level
    is not one (the window may have reached it before). The turns that moved
    the figure from the first change point to the last are those after the
    first and up to the last (each reading is logged with its own turn).
    """
    first: dict[float, int] = {}
    for k, turn in enumerate(turns):
        first.setdefault(turn.five_hour, k)
    points = sorted(first.items())[1:]
    (low, a), (high, b) = points[0], points[-1]
    cost = sum((turn_cost(t) for t in turns[a + 1:b + 1]), Decimal(0))
    return float(cost) / (high - low)


def window_cost(turns: list[Turn]) -> float:
    """Every turn's cost (all inside the 5-hour window)."""
    return float(sum((turn_cost(t) for t in turns), Decimal(0)))
