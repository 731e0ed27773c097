"""An independent count of Codex turns: each usage record once, wherever it was copied.

Deliberately unlike the parser (exporter.ingest.codex): no session ids, no
keys, no state carried between reads. A turn is a ``token_count`` event whose
cumulative totals grew past the previous event's in its file; the same turn
copied into another file (a snapshot, an archived copy, a fork's copy of its
parent's history) carries the same ``info`` (totals, turn usage, window), so
the set of distinct ``info`` objects holds each turn once.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")


def distinct_turns(home: Path) -> list[dict[str, Any]]:
    """The ``info`` of each distinct turn below a Codex home (in file order, first copy kept)."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for path in sorted(home.rglob("*.jsonl")):
        before: tuple[int, ...] | None = None
        for raw in path.read_bytes().splitlines():
            line = json.loads(raw) if raw.strip() else {}
            payload = line.get("payload") or {}
            info = payload.get("info") if payload.get("type") == "token_count" else None
            if line.get("type") != "event_msg" or not info:
                continue
            total = tuple(int(info["total_token_usage"].get(f, 0)) for f in FIELDS)
            key = json.dumps(info, sort_keys=True)
            if total != before and key not in seen:
                seen.add(key)
                out.append(info)
            before = total
    return out


def count_turns(home: Path) -> Counter[str]:
    """Turns and token sums (``FIELDS``, input still including cached) below a Codex home."""
    out: Counter[str] = Counter()
    for info in distinct_turns(home):
        out["turns"] += 1
        for field in FIELDS:
            out[field] += int(info["last_token_usage"].get(field, 0))
    return out
