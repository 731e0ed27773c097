"""The generator's internal model: the requests it invents and how they were made.

The simulator (``session.py``) fills these values; the writer (``writer.py``)
renders them as transcript lines; the truth (``truth.py``) is computed from them
and from the copies the writer recorded (``book.py``) — never from the files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OPUS = "claude-opus-4-6"
SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-haiku-4-5-20251001"
NOVA = "claude-nova-9-20261101"  # a model nobody has a price for: counted as unpriced
SYNTHETIC = "<synthetic>"


@dataclass(slots=True)
class SimRequest:
    """One unique API request: its key parts and its final token counts."""

    msg_id: str
    request_id: str  # "" when the endpoint sent none: the key is the message id alone
    model: str
    input: int
    output: int
    cache_read: int
    cache_write_5m: int
    cache_write_1h: int
    geo: str = "not_available"
    speed: str = ""
    legacy_usage: bool = False  # written without the cache_creation breakdown
    part_key: str = ""  # a part billed on top of a request (synth.iterations): its own key
    iterations: bool = False  # its lines carry ``usage.iterations`` (synth.iterations)
    attribution: bool = False  # its lines carry attribution fields (synth.attribution)

    @property
    def key(self) -> str:
        """The dedupe key, spelled as the exporter's ``records.Request.key``."""
        if self.part_key:
            return self.part_key
        return f"{self.msg_id}\x1f{self.request_id}" if self.request_id else self.msg_id

    @property
    def context(self) -> int:
        """Prompt size: input + cache read + cache writes."""
        return self.input + self.cache_read + self.cache_write_5m + self.cache_write_1h


@dataclass(slots=True)
class Call:
    """One request as streamed to a transcript: one line per content block."""

    req: SimRequest
    times: list[int]  # epoch ms of each line; times[0] is the earliest (the request's time)
    kinds: list[str]  # content block per line: "thinking", "text" or "tool_use"
    partial: int  # output_tokens on every line but the last (the final count)
    done_ms: int  # when the tool result (or the turn's end) comes back
    api_error: bool = False  # a <synthetic> API error line precedes the call

    @property
    def ts(self) -> int:
        """The request's time: its earliest line."""
        return self.times[0]

    @property
    def uses_tool(self) -> bool:
        """Whether the response ends in a tool call (so a tool result follows)."""
        return self.kinds[-1] == "tool_use"


@dataclass(slots=True)
class AgentRun:
    """A subagent spawned by a main call: its own file, its own requests."""

    agent_id: str
    layout: str  # "subagents" (2.1.x), "workflow" (deeper) or "legacy" (2.0.x, beside the session)
    run_id: str  # the workflow run directory ("" for other layouts)
    start_ms: int
    calls: list[Call]
    prompt: str
    progress: bool  # whether the main file mirrors its lines as agent_progress


@dataclass(slots=True)
class Compaction:
    """A compaction call made just before a main call."""

    agent_id: str  # acompact-<6hex>
    call: Call
    pre_tokens: int
    trigger: str  # "auto" (context limit) or "manual" (/compact)


@dataclass(slots=True)
class Turn:
    """One main-chain request with what happened around it."""

    call: Call
    prompt_ms: int | None = None  # a fresh user prompt preceded the call, at this time
    compaction: Compaction | None = None
    agents: list[AgentRun] = field(default_factory=list)


@dataclass(slots=True)
class ResumePoint:
    """Where a resumed session picks up: the conversation state of its source."""

    source_id: str
    context: int
    last_ms: int  # the last replayed main call's time
    done_ms: int  # the end of the last replayed turn


@dataclass(slots=True)
class SessionSim:
    """The whole simulated main session."""

    session_id: str
    turns: list[Turn]
    contexts_after: list[int]  # conversation size after each turn (for resumes)
