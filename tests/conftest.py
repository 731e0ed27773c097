"""Shared test fixtures: paths to ../shared and small transcript builders."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
REAL = SHARED / "fixtures" / "real"


@pytest.fixture
def real_tree() -> Path:
    """The real transcripts of ../shared; skipped only outside CI when absent."""
    if not (REAL / "projects").is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{REAL} is missing in CI")
        pytest.skip(f"{REAL} is absent")
    return REAL


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


def jsonl(*records: Any) -> bytes:
    """Compact JSON lines, each ending in a newline."""
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)
