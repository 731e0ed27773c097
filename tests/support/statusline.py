"""The status-line command run as Claude Code runs it, and the payloads Claude Code gives it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from exporter.ingest import spool
from tests.support.paths import ROOT


def payload(
    *, five: float | None = 35.0, seven: float | None = 17.0, now: float | None = None,
    session: str = "6f1c0c4e-8a8b-4b7e-9d55-0a3e6f0a1b2c", context: float | None = 42.0,
    cost: float = 1.2345,
) -> dict[str, Any]:
    """A status-line payload shaped like Claude Code 2.1's (the documented fields)."""
    t = time.time() if now is None else now
    doc: dict[str, Any] = {
        "hook_event_name": "Status",
        "session_id": session,
        "transcript_path": f"/home/dev/.claude/projects/-home-dev-app/{session}.jsonl",
        "cwd": "/home/dev/app",
        "model": {"id": "claude-opus-4-6", "display_name": "Opus 4.6"},
        "workspace": {"current_dir": "/home/dev/app", "project_dir": "/home/dev/app"},
        "version": "2.1.90",
        "output_style": {"name": "default"},
        "cost": {"total_cost_usd": cost, "total_duration_ms": 45000,
                 "total_api_duration_ms": 2300, "total_lines_added": 156,
                 "total_lines_removed": 23},
        "context_window": {"total_input_tokens": 15234, "total_output_tokens": 4521,
                           "context_window_size": 200000, "used_percentage": context,
                           "remaining_percentage": None if context is None else 100 - context,
                           "current_usage": {"input_tokens": 8500, "output_tokens": 1200,
                                             "cache_creation_input_tokens": 5000,
                                             "cache_read_input_tokens": 2000}},
        "exceeds_200k_tokens": False,
    }
    limits: dict[str, Any] = {}
    if five is not None:
        limits["five_hour"] = {"used_percentage": five, "resets_at": int(t) + 9000}
    if seven is not None:
        limits["seven_day"] = {"used_percentage": seven, "resets_at": int(t) + 300_000}
    if limits:
        doc["rate_limits"] = limits
    return doc


def run(
    stdin: bytes, *args: str, state: Path | None, env: dict[str, str] | None = None,
    timeout: float = 30,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m exporter.cli.statusline`` as Claude Code would."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE_CODE_EXPORTER")}
    environ["PYTHONPATH"] = str(ROOT)
    if state is not None:
        environ[spool.STATE_DIR_ENV] = str(state)
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "exporter.cli.statusline", *args], input=stdin,
        capture_output=True, env=environ, timeout=timeout, check=False,
    )


def line_of(proc: subprocess.CompletedProcess[bytes]) -> str:
    """The single status line printed (asserting exit 0 and exactly one line)."""
    assert proc.returncode == 0, proc.stderr.decode()
    text = proc.stdout.decode()
    assert text.endswith("\n") and text.count("\n") == 1, repr(text)
    assert text.strip(), "empty status line"
    return text.rstrip("\n")
