"""Small transcript and ledger builders the tests share: assistant records, JSON lines, requests."""

from __future__ import annotations

import json
from typing import Any

from exporter.records import Request, Source


def assistant(
    msg_id: str = "msg_1",
    req_id: str | None = "req_1",
    *,
    ts: str = "2026-10-01T12:00:00.000Z",
    model: str = "claude-opus-4-6",
    session: str = "s1",
    cwd: str = "/home/u/proj",
    sidechain: bool = False,
    agent: str | None = None,
    usage: Any = None,
    **extra: Any,
) -> dict[str, Any]:
    """An assistant transcript record with usage (defaults: small numbers)."""
    rec: dict[str, Any] = {
        "parentUuid": None,
        "isSidechain": sidechain,
        "userType": "external",
        "cwd": cwd,
        "sessionId": session,
        "version": "2.1.39",
        "type": "assistant",
        "timestamp": ts,
        "message": {
            "model": model,
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "hi"}],
            "usage": usage
            if usage is not None
            else {
                "input_tokens": 3,
                "output_tokens": 10,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 20,
                "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 0},
            },
        },
    }
    if req_id is not None:
        rec["requestId"] = req_id
    if agent is not None:
        rec["agentId"] = agent
    rec.update(extra)
    return rec


def request(key: str = "k", ts: float = 0.0, **fields: Any) -> Request:
    """A ledger Request with zero tokens and neutral labels unless given."""
    base: dict[str, Any] = {
        "key": key, "ts": ts, "model": "claude-opus-4-6", "session": "s", "project": "/p",
        "source": Source.MAIN, "input": 0, "output": 0, "cache_read": 0,
        "cache_write_5m": 0, "cache_write_1h": 0,
    }
    base.update(fields)
    return Request(**base)


# The keys of `report --json` (and of the generator's truth.json), from docs/figures.md.
REPORT_KEYS = frozenset({
    "totals", "by_model", "by_source", "sessions", "rejected_lines", "rejected_by_reason",
    "context_tokens", "output_tokens", "gap_seconds", "cache_write_share_by_gap",
    "requests_by_gap", "cache_read_share", "peak_requests_per_minute",
    "max_parallel_sessions_10m", "generation_tokens_per_second", "kv_bytes", "upload_bytes",
    "lines", "cache_savings_usd", "cache_reads_per_output_token",
})


def jsonl(*records: Any) -> bytes:
    """Compact JSON lines, each ending in a newline."""
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)


# An advisor consultation as Claude Code records it in ``usage.iterations`` (claude-opus-5).
ADVISOR_ENTRY = {"type": "advisor_message", "model": "claude-opus-5", "input_tokens": 91_627,
                 "output_tokens": 18_716, "cache_read_input_tokens": 100,
                 "cache_creation_input_tokens": 50}
# A claude-sonnet-5 executor's usage with one advisor consultation between its two messages.
ADVISOR_USAGE = {"input_tokens": 4, "output_tokens": 683, "iterations": [
    {"type": "message", "input_tokens": 2, "output_tokens": 85},
    ADVISOR_ENTRY,
    {"type": "message", "input_tokens": 2, "output_tokens": 598}]}
