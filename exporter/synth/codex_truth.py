"""Ground truth of a generated Codex home: each request once, from the simulation's own book.

Built from the :class:`~exporter.synth.codex_sim.Turn` records the simulator
booked as it invented each request, never by reading the files back, so a
snapshot, archived or fork copy can only add lines, never figures. The shape
follows ``report --json`` where the meaning carries (docs/figures.md,
"Codex"): ``input_tokens`` is the uncached input (input − cached),
``cache_read_tokens`` the cached part, no cache writes (0: Codex reports
none), ``output_tokens`` with the reasoning included, and
``reasoning_tokens`` on its own (the ledger's ``requests.reasoning``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from exporter.synth.codex_sim import Turn

_FIELDS = ("requests", "input_tokens", "cache_read_tokens", "output_tokens", "reasoning_tokens")


def compute_truth(turns: Sequence[Turn], lines: Mapping[str, int],
                  files: Mapping[str, int], latest_limits: Any) -> dict[str, Any]:
    """The figures ``report --json`` (and the ledger) must give for a home of these turns.

    ``lines``: the usage and other lines written (every copy); ``files``: how
    many files of each kind; ``latest_limits``: the plan windows of the latest
    original usage event that had them.
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
        "latest_rate_limits": latest_limits,
    }


def sums(turns: Iterable[Turn]) -> dict[str, int]:
    """Requests and tokens by kind of a group of turns (no cache writes: Codex has none)."""
    acc = dict.fromkeys(_FIELDS, 0)
    for t in turns:
        gross, cached, out, reasoning = t.usage
        acc["requests"] += 1
        acc["input_tokens"] += gross - cached
        acc["cache_read_tokens"] += cached
        acc["output_tokens"] += out
        acc["reasoning_tokens"] += reasoning
    return {**acc, "cache_write_5m_tokens": 0, "cache_write_1h_tokens": 0}
