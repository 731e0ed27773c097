"""The lines of a Codex CLI rollout file (``rollout-*.jsonl``), shaped like real ones.

Each builder returns a :class:`CodexLine`: its time, its ``type`` and its
payload. The envelope (``{"timestamp", "type", "payload"}``) is made only when
the line is encoded, so a fork can copy a parent's lines and re-date them to
the fork's moment, as Codex does, with the payloads untouched
(/work/notes/codex_format.md §1). Shapes follow Codex 0.121 to 0.144:
``session_meta`` (no model), ``turn_context`` (the model, a time-ordered
``turn_id``), ``event_msg`` ``token_count`` (cumulative and last usage, the
context window, the plan's ``rate_limits``) and filler nobody counts.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Final

from exporter.synth.identifiers import iso

Payload = dict[str, Any]
Usage = tuple[int, int, int, int]  # input (gross, cached included), cached, output, reasoning
ZERO: Final[Usage] = (0, 0, 0, 0)
CLI_VERSIONS: Final = ("0.121.0", "0.128.3", "0.142.4")
ORIGINATORS: Final = ("codex_cli_rs", "codex_vscode", "Codex Desktop")
PRIMARY_MINUTES: Final = 300  # the 5-hour window
SECONDARY_MINUTES: Final = 10080  # the weekly window


@dataclass(frozen=True, slots=True)
class CodexLine:
    """One line: its time (epoch ms), its type, its payload; ``usage``: a token_count with info."""

    ms: int
    type: str
    payload: Payload
    usage: bool = False

    def envelope(self, ms: int | None = None) -> Payload:
        """The line as written, dated ``ms`` (a fork's copy) or its own time."""
        return {"timestamp": iso(self.ms if ms is None else ms), "type": self.type,
                "payload": self.payload}


def uuid7(rng: random.Random, ms: int) -> str:
    """A UUIDv7 for the moment ``ms``: its text sorts by time (Codex's thread and turn ids)."""
    stamp = f"{ms:012x}"
    tail = rng.randbytes(10).hex()
    variant = "89ab"[int(tail[3], 16) & 3]
    return f"{stamp[:8]}-{stamp[8:]}-7{tail[:3]}-{variant}{tail[4:7]}-{tail[8:20]}"


def file_name(ms: int, offset_minutes: int, session: str) -> tuple[str, str]:
    """(``YYYY/MM/DD`` directory, ``rollout-<local time>-<id>.jsonl``), in the user's local time."""
    local = time.gmtime(ms // 1000 + offset_minutes * 60)
    return (time.strftime("%Y/%m/%d", local),
            f"rollout-{time.strftime('%Y-%m-%dT%H-%M-%S', local)}-{session}.jsonl")


def usage_object(u: Usage) -> Payload:
    """A usage object: ``input_tokens`` holds the cached part, ``output_tokens`` the reasoning."""
    return {"input_tokens": u[0], "cached_input_tokens": u[1], "output_tokens": u[2],
            "reasoning_output_tokens": u[3], "total_tokens": u[0] + u[2]}


def session_meta(ms: int, sid: str, cwd: str, head: Payload,
                 fork: tuple[str, str, str] | None = None) -> CodexLine:
    """The first line: id, cwd, build; a fork's (``(parent, root, nickname)``) names its parent."""
    payload: Payload = {"session_id": fork[1] if fork else sid, "id": sid}
    if fork:
        payload |= {"forked_from_id": fork[0], "parent_thread_id": fork[0]}
    payload |= {"timestamp": iso(ms), "cwd": cwd, **head}
    if fork:
        spawn = {"parent_thread_id": fork[0], "depth": 1 if fork[0] == fork[1] else 2,
                 "agent_path": f"/root/{fork[2]}", "agent_nickname": fork[2].title(),
                 "agent_role": None}
        payload |= {"source": {"subagent": {"thread_spawn": spawn}}, "thread_source": "subagent",
                    "agent_nickname": fork[2].title(), "history_mode": "legacy"}
    else:
        payload |= {"source": "cli", "thread_source": "user"}
    return CodexLine(ms, "session_meta", payload)


def build_head(rng: random.Random) -> Payload:
    """The build fields of a session_meta: originator, CLI version, provider, instructions."""
    return {"originator": rng.choice(ORIGINATORS), "cli_version": rng.choice(CLI_VERSIONS),
            "model_provider": "openai", "base_instructions": {"text": "You are Codex."}}


def turn_context(ms: int, turn_id: str, cwd: str, model: str, zone: str) -> CodexLine:
    """The settings of a turn: the model in force from here on."""
    return CodexLine(ms, "turn_context", {
        "turn_id": turn_id, "cwd": cwd, "current_date": iso(ms)[:10], "timezone": zone,
        "approval_policy": "on-request", "sandbox_policy": {"type": "workspace-write"},
        "model": model, "effort": "high", "summary": "auto",
        "collaboration_mode": {"mode": "default", "settings": {"model": model,
                                                               "reasoning_effort": "high"}},
    })


def event(ms: int, kind: str, **fields: Any) -> CodexLine:
    """An ``event_msg`` line of one kind (task_started, agent_message, task_complete…)."""
    return CodexLine(ms, "event_msg", {"type": kind, **fields})


def item(ms: int, kind: str, **fields: Any) -> CodexLine:
    """A ``response_item`` line (message, reasoning, function_call, its output…)."""
    return CodexLine(ms, "response_item", {"type": kind, **fields})


def token_count(ms: int, totals: Usage, last: Usage, window: int,
                limits: Payload | None) -> CodexLine:
    """A usage event: the session's cumulative usage and this request's."""
    info = {"total_token_usage": usage_object(totals), "last_token_usage": usage_object(last),
            "model_context_window": window}
    return CodexLine(ms, "event_msg", {"type": "token_count", "info": info,
                                       "rate_limits": limits}, usage=True)


def after_compaction(ms: int, totals: Usage, context: int, window: int,
                     limits: Payload | None) -> CodexLine:
    """The event Codex writes after a compaction: totals unchanged, ``last`` zero.

    Zero but for its ``total_tokens``: the context left (Codex writes so).
    """
    line = token_count(ms, totals, ZERO, window, limits)
    line.payload["info"]["last_token_usage"]["total_tokens"] = context
    return line


def no_info(ms: int, limits: Payload | None) -> CodexLine:
    """A token_count with ``info: null`` (a fresh thread's first): plan windows only."""
    return CodexLine(ms, "event_msg", {"type": "token_count", "info": None,
                                       "rate_limits": limits})


def rate_limits(ms: int, plan: str | None, windows: bool = True) -> Payload:
    """The plan's windows as Codex reports them: used share, length, reset (epoch s).

    The account's, so a function of the time alone: every thread open at one
    moment reports the same; the share grows through a window and starts
    again at its reset.
    """
    primary = secondary = None
    if windows:
        primary = window(ms, PRIMARY_MINUTES, 5.0, 90.0)
        secondary = window(ms, SECONDARY_MINUTES, 2.0, 60.0)
    return {"limit_id": "codex", "limit_name": None, "primary": primary, "secondary": secondary,
            "credits": {"has_credits": False, "unlimited": False, "balance": None},
            "individual_limit": None, "plan_type": plan, "rate_limit_reached_type": None}


def window(ms: int, minutes: int, floor: float, span: float) -> Payload:
    """One plan window at ``ms``: ``floor`` % used at its start, ``floor + span`` % at its end."""
    now, length = ms // 1000, minutes * 60
    start = now - now % length
    # Whole percents, as Codex reports them (every one of the real fixture's 685 readings).
    used = float(round(floor + span * (now - start) / length))
    return {"used_percent": used, "window_minutes": minutes, "resets_at": start + length}
