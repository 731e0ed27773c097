"""An independent count of Codex turns: each usage record once, wherever it was copied.

Deliberately unlike the parser (exporter.ingest.codex): no session ids, no
keys, no state carried between reads. A turn is a ``token_count`` event whose
cumulative totals grew past the previous event's in its file; the same turn
copied into another file (a snapshot, an archived copy, a fork's copy of its
parent's history) carries the same totals and the same turn usage, so the
set of (totals, usage) pairs holds each turn once.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")


def count_turns(home: Path) -> Counter[str]:
    """Turns and token sums (``FIELDS``, input still including cached) below a Codex home."""
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    for path in sorted(home.rglob("*.jsonl")):
        before: tuple[int, ...] | None = None
        for raw in path.read_bytes().splitlines():
            line = json.loads(raw)
            payload = line.get("payload") or {}
            info = payload.get("info") if payload.get("type") == "token_count" else None
            if line.get("type") != "event_msg" or not info:
                continue
            total = tuple(int(info["total_token_usage"].get(f, 0)) for f in FIELDS)
            last = tuple(int(info["last_token_usage"].get(f, 0)) for f in FIELDS)
            if total != before:
                seen.add((total, last))
            before = total
    out: Counter[str] = Counter()
    for _total, last in seen:
        out["turns"] += 1
        for field, value in zip(FIELDS, last, strict=True):
            out[field] += value
    return out
