"""Sidechain files: subagents (three layouts) and auto-compaction calls.

A subagent gets its own file — ``<session>/subagents/agent-<id>.jsonl`` (2.1.x),
``<session>/subagents/workflows/<run>/agent-<id>.jsonl`` (workflow agents) or
``agent-<id>.jsonl`` beside the session file (2.0.x) — and, in the 2.1.x layout,
the main file mirrors some of its records as ``agent_progress`` lines. A
compaction call gets ``<session>/subagents/agent-acompact-<hex>.jsonl`` and
leaves a ``compact_boundary`` and a summary in the main file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.synth import lines
from exporter.synth.model import Compaction
from exporter.synth.plan import SessionPlan

if TYPE_CHECKING:
    from exporter.synth.writer import FileOut, Mirror, TreeWriter


def write_agent(w: TreeWriter, plan: SessionPlan, mirror: Mirror) -> None:
    """A subagent's own file, plus agent_progress copies in the main file."""
    main, agent, tool_id = mirror
    base = w.dir(plan)
    if agent.layout == "legacy":
        path = base / f"agent-{agent.agent_id}.jsonl"  # 2.0.x: beside the session file
    elif agent.layout == "workflow":
        path = base / plan.session_id / "subagents" / "workflows" / agent.run_id
        path = path / f"agent-{agent.agent_id}.jsonl"
    else:
        path = base / plan.session_id / "subagents" / f"agent-{agent.agent_id}.jsonl"
    f = w.open(path, plan, agent.agent_id)
    first = w.at(f, agent.start_ms, parent=False)
    w.emit(f, lines.user_prompt(first, agent.prompt))
    if agent.progress:
        inner = lines.embedded_user(agent.start_ms, agent.prompt, first.uid)
        at = w.at(main, agent.start_ms)
        w.emit(main, lines.agent_progress(at, inner, agent.agent_id, agent.prompt, tool_id))
    for call in agent.calls:
        used = w.call(f, call, "subagent", mirror=mirror if agent.progress else None)
        if call.uses_tool:
            w.emit(f, lines.tool_result(w.at(f, call.done_ms), used, w.noise.tool_result()))
    w.flush(f)


def write_compaction(w: TreeWriter, plan: SessionPlan, main: FileOut, comp: Compaction) -> None:
    """The acompact file of one compaction call, and the boundary in the main file."""
    call = comp.call
    path = w.dir(plan) / plan.session_id / "subagents" / f"agent-{comp.agent_id}.jsonl"
    f = w.open(path, plan, comp.agent_id)
    w.emit(f, lines.user_prompt(w.at(f, call.ts - 150, parent=False), lines.COMPACT_PROMPT))
    w.call(f, call, "compaction")
    w.flush(f)
    meta = {"trigger": comp.trigger, "preTokens": comp.pre_tokens}
    boundary = w.at(main, call.done_ms, parent=False)
    w.emit(
        main,
        lines.system(
            boundary,
            "compact_boundary",
            content="Conversation compacted",
            level="info",
            logicalParentUuid=main.parent,
            compactMetadata=meta,
        ),
    )
    w.emit(main, lines.compact_summary(w.at(main, call.done_ms + 5), w.noise.text()))
