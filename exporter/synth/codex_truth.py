"""Ground truth of a generated Codex home: each request once, from the simulation's own book.

Built from the :class:`~exporter.synth.codex_sim.Turn` records the simulator
booked as it invented each request, never by reading the files back, so a
snapshot, archived or fork copy can only add lines, never figures. The shape
follows ``report --json`` where the meaning carries (docs/figures.md,
"Codex"): ``input_tokens`` is the uncached input (input − cached),
``cache_read_tokens`` the cached part, no cache writes (0: Codex reports
none), ``output_tokens`` with the reasoning included, and
``reasoning_tokens`` on its own (the ledger's ``requests.reasoning``), and
``cost_usd``: the list price by genai-prices' own ``calc_price`` (OpenAI,
on the turn's date; a turn of no named model as gpt-5), in exact 1e-9 USD
until the final division.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from genai_prices import Usage, calc_price

from exporter.ingest.codex import FALLBACK_MODEL
from exporter.synth.codex_sim import Turn

_PRICED_AS: Final = {FALLBACK_MODEL: "gpt-5"}  # the fallback's documented price
_NANO: Final = Decimal(10) ** 9

_FIELDS = ("requests", "input_tokens", "cache_read_tokens", "output_tokens", "reasoning_tokens")


def compute_truth(turns: Sequence[Turn], lines: Mapping[str, int],
                  files: Mapping[str, int], samples: Sequence[tuple[int, Any]]) -> dict[str, Any]:
    """The figures ``report --json`` (and the ledger) must give for a home of these turns.

    ``lines``: the usage and other lines written (every copy); ``files``: how
    many files of each kind; ``samples``: (time, ``rate_limits``) of every
    original token_count event.
    """
    by_model: dict[str, list[Turn]] = defaultdict(list)
    by_day: dict[str, list[Turn]] = defaultdict(list)
    for t in turns:
        by_model[t.model].append(t)
        by_day[time.strftime("%Y-%m-%d", time.gmtime(t.ms // 1000))].append(t)
    return {
        "totals": sums(turns),
        "by_model": {m: sums(group) for m, group in sorted(by_model.items())},
        "by_day": {d: sums(group) for d, group in sorted(by_day.items())},
        "sessions": len({t.session for t in turns}),
        "lines": {"usage": len(turns), "duplicate": lines["usage"] - len(turns),
                  "other": lines["other"], "rejected": 0},
        "files": dict(sorted(files.items())),
        "plan_windows": plan_windows(samples),
    }


def sums(turns: Iterable[Turn]) -> dict[str, Any]:
    """Requests and tokens by kind of a group of turns (no cache writes: Codex has none)."""
    acc = dict.fromkeys(_FIELDS, 0)
    nano = 0
    for t in turns:
        gross, cached, out, reasoning = t.usage
        acc["requests"] += 1
        acc["input_tokens"] += gross - cached
        acc["cache_read_tokens"] += cached
        acc["output_tokens"] += out
        acc["reasoning_tokens"] += reasoning
        nano += cost_nano_usd(t)
    return {**acc, "cache_write_5m_tokens": 0, "cache_write_1h_tokens": 0,
            "cost_usd": nano / 1e9}


def cost_nano_usd(turn: Turn) -> int:
    """One turn's list price in 1e-9 USD (genai-prices: cache reads are part of the input)."""
    gross, cached, out, _reasoning = turn.usage
    price = calc_price(Usage(input_tokens=gross, cache_read_tokens=cached, output_tokens=out),
                       _PRICED_AS.get(turn.model, turn.model), provider_id="openai",
                       genai_request_timestamp=datetime.fromtimestamp(turn.ms / 1000, UTC))
    nano = price.total_price * _NANO
    if nano != nano.to_integral_value():
        raise ValueError(f"{turn.model}: a price below 1e-9 USD per request ({nano})")
    return int(nano)


def plan_windows(samples: Sequence[tuple[int, Any]]) -> dict[str, Any]:
    """Per plan window (``primary`` 5 h, ``secondary`` 7 d) and reset: the peak used share.

    Copies repeat an original event's payload unchanged, so no copy can move a
    peak. ``latest``: the windows of the latest event that had them.
    """
    peaks: dict[str, dict[int, float]] = {"primary": {}, "secondary": {}}
    latest: tuple[int, Any] = (-1, None)
    for ms, limits in samples:
        if not limits or not limits.get("primary"):
            continue
        for name, by_reset in peaks.items():
            w = limits[name]
            by_reset[w["resets_at"]] = max(by_reset.get(w["resets_at"], 0.0), w["used_percent"])
        if ms >= latest[0]:
            latest = (ms, limits)
    return {**{name: [{"resets_at": r, "peak_used_percent": p} for r, p in sorted(by.items())]
               for name, by in peaks.items()},
            "latest": latest[1]}
