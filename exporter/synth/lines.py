"""Line builders: plain dicts shaped like Claude Code 2.1.x transcript records.

Every builder takes the file's ``head`` (the fields Claude Code repeats on each
line of a file: isSidechain, userType, cwd, sessionId, version, gitBranch,
agentId, slug) and returns the record in Claude Code's key order. Nothing here
draws random numbers or does I/O; ids and payloads come in as arguments.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from exporter.synth import iteration_parts as iterations
from exporter.synth.identifiers import iso
from exporter.synth.model import SYNTHETIC, SimRequest

Record = dict[str, Any]
COMPACT_PROMPT = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions."
)


class At(NamedTuple):
    """Where a new line sits: its file's repeated fields, its parent, its uuid, its time."""

    head: Record
    parent: str | None
    uid: str
    ms: int


def usage(req: SimRequest, output: int) -> Record:
    """The ``message.usage`` object; old builds lack the 5m/1h breakdown and geo."""
    out: Record = {
        "input_tokens": req.input,
        "cache_creation_input_tokens": req.cache_write_5m + req.cache_write_1h,
        "cache_read_input_tokens": req.cache_read,
    }
    if not req.legacy_usage:
        out["cache_creation"] = {
            "ephemeral_5m_input_tokens": req.cache_write_5m,
            "ephemeral_1h_input_tokens": req.cache_write_1h,
        }
    out["output_tokens"] = output
    out["service_tier"] = "standard"
    if not req.legacy_usage:
        out["inference_geo"] = req.geo
    if req.speed:
        out["speed"] = req.speed
    if its := iterations.entries(req, output):
        out["iterations"] = its
    return out


def message(req: SimRequest, block: Record, output: int) -> Record:
    """The API message of one streamed line: one content block, the usage so far."""
    return {
        "model": req.model,
        "id": req.msg_id,
        "type": "message",
        "role": "assistant",
        "content": [block],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage(req, output),
    }


def block(kind: str, payload: msgspec.Raw, extra: str) -> Record:
    """A content block: thinking (``extra`` = signature), text, or tool_use (``extra`` = id)."""
    if kind == "thinking":
        return {"type": "thinking", "thinking": payload, "signature": extra}
    if kind == "tool_use":
        return {
            "type": "tool_use",
            "id": extra,
            "name": "Bash",
            "input": {"command": payload, "description": "Run a command"},
        }
    return {"type": "text", "text": payload}


def assistant(at: At, msg: Record, req_id: str) -> Record:
    """A top-level assistant line (requestId omitted when the endpoint sent none)."""
    line: Record = {"parentUuid": at.parent, **at.head, "message": msg}
    if req_id:
        line["requestId"] = req_id
    line.update(type="assistant", uuid=at.uid, timestamp=iso(at.ms))
    return line


def agent_progress(at: At, inner: Record, agent_id: str, prompt: str, tool_use_id: str) -> Record:
    """A main-file progress line mirroring one subagent record at ``data.message``."""
    data = {
        "message": inner,
        "normalizedMessages": [],
        "type": "agent_progress",
        "prompt": prompt,
        "agentId": agent_id,
    }
    return {
        "parentUuid": at.parent,
        **at.head,
        "type": "progress",
        "data": data,
        "toolUseID": "agent_" + tool_use_id,
        "parentToolUseID": tool_use_id,
        "uuid": at.uid,
        "timestamp": iso(at.ms),
    }


def embedded_assistant(ms: int, msg: Record, req_id: str, uid: str) -> Record:
    """The subagent assistant record as embedded in an agent_progress line."""
    inner: Record = {"type": "assistant", "timestamp": iso(ms), "message": msg}
    if req_id:
        inner["requestId"] = req_id
    inner["uuid"] = uid
    return inner


def embedded_user(ms: int, text: str, uid: str) -> Record:
    """The subagent's prompt as embedded in an agent_progress line."""
    msg = {"role": "user", "content": [{"type": "text", "text": text}]}
    return {"type": "user", "message": msg, "uuid": uid, "timestamp": iso(ms)}


def user_prompt(at: At, text: str) -> Record:
    """A user message typed at the prompt."""
    return {
        "parentUuid": at.parent,
        **at.head,
        "type": "user",
        "message": {"role": "user", "content": text},
        "uuid": at.uid,
        "timestamp": iso(at.ms),
        "permissionMode": "default",
    }


def tool_result(at: At, tool_use_id: str, content: Any) -> Record:
    """A user line carrying a tool's output."""
    result = {"tool_use_id": tool_use_id, "type": "tool_result", "content": content}
    return {
        "parentUuid": at.parent,
        **at.head,
        "type": "user",
        "message": {"role": "user", "content": [result]},
        "uuid": at.uid,
        "timestamp": iso(at.ms),
    }


def api_error(at: At, msg_id: str) -> Record:
    """An API error placeholder: model <synthetic>, zero usage, not a billed request."""
    zero = {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    msg = {
        "id": msg_id,
        "container": None,
        "model": SYNTHETIC,
        "role": "assistant",
        "stop_reason": "stop_sequence",
        "stop_sequence": "",
        "type": "message",
        "usage": zero,
        "content": [{"type": "text", "text": "API Error: 529 Overloaded. Retrying."}],
    }
    return {
        "parentUuid": at.parent,
        **at.head,
        "type": "assistant",
        "uuid": at.uid,
        "timestamp": iso(at.ms),
        "message": msg,
        "error": "overloaded",
        "isApiErrorMessage": True,
    }


def hook_progress(at: At, event: str, tool: str) -> Record:
    """A hook_progress line (PreToolUse / PostToolUse / Stop)."""
    data = {
        "type": "hook_progress",
        "hookEvent": event,
        "hookName": f"{event}:{tool}",
        "command": "$HOME/.claude/hooks/audit.sh",
    }
    return {
        "parentUuid": at.parent,
        **at.head,
        "type": "progress",
        "data": data,
        "parentToolUseID": tool,
        "toolUseID": tool,
        "timestamp": iso(at.ms),
        "uuid": at.uid,
    }


def bash_progress(at: At, output: Any, tool: str, elapsed: int) -> Record:
    """A bash_progress line with the command's output so far."""
    data = {
        "type": "bash_progress",
        "output": output,
        "fullOutput": output,
        "elapsedTimeSeconds": elapsed,
        "totalLines": 5,
        "timeoutMs": 120000,
    }
    return {
        "parentUuid": at.parent,
        **at.head,
        "type": "progress",
        "data": data,
        "toolUseID": f"bash-progress-{elapsed}",
        "parentToolUseID": tool,
        "uuid": at.uid,
        "timestamp": iso(at.ms),
    }


def system(at: At, subtype: str, **extra: Any) -> Record:
    """A system line (turn_duration, compact_boundary, stop_hook_summary, …)."""
    return {
        "parentUuid": at.parent,
        **at.head,
        "type": "system",
        "subtype": subtype,
        **extra,
        "timestamp": iso(at.ms),
        "uuid": at.uid,
        "isMeta": False,
    }


def compact_summary(at: At, text: Any) -> Record:
    """The user line that carries a compaction's summary into the new context."""
    return {
        "parentUuid": at.parent,
        **at.head,
        "type": "user",
        "message": {"role": "user", "content": text},
        "isVisibleInTranscriptOnly": True,
        "isCompactSummary": True,
        "uuid": at.uid,
        "timestamp": iso(at.ms),
    }


def snapshot(message_id: str, ms: int) -> Record:
    """A file-history-snapshot line (no session fields, like the real ones)."""
    return {
        "type": "file-history-snapshot",
        "messageId": message_id,
        "snapshot": {"messageId": message_id, "trackedFileBackups": {}, "timestamp": iso(ms)},
        "isSnapshotUpdate": False,
    }


def queue_operation(session_id: str, ms: int, content: str) -> Record:
    """A queue-operation line (a background task's notification)."""
    return {
        "type": "queue-operation",
        "operation": "enqueue",
        "timestamp": iso(ms),
        "sessionId": session_id,
        "content": content,
    }


def summary(text: str, leaf: str) -> Record:
    """A summary line, as found at the top of resumed sessions."""
    return {"type": "summary", "summary": text, "leafUuid": leaf}
