"""Render simulated sessions as transcript files, recording every copy in the book.

Each file is built in memory (one session's files at a time) and written with
one call. Every line goes through :meth:`TreeWriter.emit`, which encodes it,
counts it (usage / other) in the :class:`Book` and, for a session that will be
resumed, keeps the record so the resumed file can replay it verbatim.

Sidechain files: a subagent gets its own file (``<session>/subagents/agent-<id>.jsonl``
in 2.1.x, ``<session>/subagents/workflows/<run>/agent-<id>.jsonl`` for workflow
agents, ``agent-<id>.jsonl`` beside the session file in 2.0.x) and, in the 2.1.x
layout, the main file mirrors some of its records as ``agent_progress`` lines; a
compaction call gets ``<session>/subagents/agent-acompact-<hex>.jsonl`` and leaves a
``compact_boundary`` and a summary in the main file.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec

from exporter.synth import attribution_fields as attribution
from exporter.synth import lines, traps
from exporter.synth.book import Book
from exporter.synth.identifiers import Ids, encode_cwd
from exporter.synth.lines import At, Record
from exporter.synth.model import AgentRun, Call, Compaction, SessionSim, SimRequest, Turn
from exporter.synth.noise import NoisePool
from exporter.synth.plan import VERSION, SessionPlan

SPACED_RATE: Final = 0.002  # share of lines written as `{"a": 1}` instead of `{"a":1}`
MIRROR_RATE: Final = 0.5  # share of subagent lines also mirrored as agent_progress
_PROMPTS: Final = (
    "Fix the failing test in tests/test_ledger.py",
    "continue",
    "yes, go ahead",
    "Add a histogram for the gap between requests",
    "Why is the cache hit rate so low?",
    "Refactor the parser into smaller functions and keep the tests green",
)
Note = tuple[SimRequest, int, str]  # a usage copy: request, line time, source
Kept = list[tuple[Record, bool, Note | None]]  # records of a main file, for a resume
Mirror = tuple["FileOut", AgentRun, str]  # main file, agent, the spawning tool_use id


@dataclass(slots=True)
class FileOut:
    """One transcript file being assembled in memory."""

    path: Path
    head: Record  # fields repeated on every line of this file
    session: str
    parts: list[bytes] = field(default_factory=list)
    parent: str | None = None  # uuid of the previous line: the next line's parentUuid
    kept: Kept | None = None  # records kept for a later resume (main files only)


class TreeWriter:
    """Writes sessions under ``projects/`` and books every line it writes."""

    def __init__(
        self, projects: Path, book: Book, rng: random.Random, ids: Ids, noise: NoisePool,
        *, iterations: bool = False, attribution: bool = False,
    ) -> None:
        """Write below ``projects``; count into ``book``; draw from ``rng``/``ids``/``noise``.

        ``iterations``: the requests' lines carry ``usage.iterations`` (synth.iterations);
        ``attribution``: their attribution fields (synth.attribution).
        """
        self.projects, self.book, self.rng, self.ids, self.noise = projects, book, rng, ids, noise
        self.iterations = iterations
        self.attribution = attribution
        self.bytes_written = 0
        self._written: set[Path] = set()
        self._encode = msgspec.json.Encoder().encode

    def session(
        self,
        plan: SessionPlan,
        sim: SessionSim,
        variants: Sequence[str] = (),
        *,
        keep: bool = False,
        replay: Kept | None = None,
    ) -> tuple[Kept, list[int]]:
        """Write one main session and its agent files; return kept records and turn marks.

        ``replay`` lines (another session's records) open the file, with this
        session's id; ``variants`` are malformed lines to hide mid-file.
        """
        rng = self.rng
        main = self.open(self.dir(plan) / f"{plan.session_id}.jsonl", plan)
        main.kept = [] if keep else None
        for rec, spaced, note in replay or ():
            if "sessionId" in rec:
                rec = rec | {"sessionId": plan.session_id}  # noqa: PLW2901 - the only change
            self.emit(main, rec, note, spaced)
        if not replay and rng.random() < 0.1:
            self.emit(main, lines.summary("Exporter metrics work", self.ids.uuid()))
        trap_at: dict[int, list[str]] = {}
        for variant in variants:  # never after the last turn: malformed lines sit mid-file
            trap_at.setdefault(rng.randrange(max(1, len(sim.turns) - 1)), []).append(variant)
        marks = []
        for i, turn in enumerate(sim.turns):
            self._turn(plan, main, turn, spaced=i == 0 and plan.has("spaced") and not replay)
            for variant in trap_at.get(i, ()):
                reason, data = traps.malformed(variant, main.head, self.ids, turn.call.done_ms)
                main.parts.append(data)  # not kept: a resume copies parsed messages only
                self.book.reject(reason)
            marks.append(len(main.kept) if main.kept is not None else 0)
        self.flush(main)
        return main.kept or [], marks

    def open(self, path: Path, plan: SessionPlan, agent_id: str = "") -> FileOut:
        """A new file of ``plan``'s session (a sidechain file when ``agent_id`` is given)."""
        head: Record = {
            "isSidechain": bool(agent_id),
            "userType": "external",
            "cwd": plan.cwd,
            "sessionId": plan.session_id,
            "version": plan.version,
            "gitBranch": plan.branch,
        }
        if agent_id:
            head["agentId"] = agent_id
        if plan.version == VERSION:
            head["slug"] = plan.slug
        return FileOut(path, head, plan.session_id)

    def at(self, f: FileOut, ms: int, parent: bool = True) -> At:
        """Where the next line of ``f`` goes (``parent=False`` starts a new chain)."""
        return At(f.head, f.parent if parent else None, self.ids.uuid(), ms)

    def emit(self, f: FileOut, rec: Record, note: Note | None = None, spaced: bool = False) -> None:
        """Append one record to ``f`` and book it as a usage copy (``note``) or other line."""
        spaced = spaced or self.rng.random() < SPACED_RATE
        data = self._encode(rec)
        f.parts.append(msgspec.json.format(data, indent=0) if spaced else data)
        f.parent = rec.get("uuid", f.parent)
        if note is None:
            self.book.other()
        else:
            self.book.usage(note[0], note[1], f.session, note[2])
        if f.kept is not None:
            f.kept.append((rec, spaced, note))

    def call(
        self,
        f: FileOut,
        call: Call,
        source: str,
        spaced: bool = False,
        mirror: Mirror | None = None,
    ) -> str:
        """The streamed lines of one call (and their progress copies); returns its tool id."""
        req, ids, noise, rng = call.req, self.ids, self.noise, self.rng
        req.iterations = self.iterations  # before its first line: every copy then agrees
        req.attribution = self.attribution
        last, tool_id = len(call.times) - 1, ""
        for j, (ms, kind) in enumerate(zip(call.times, call.kinds, strict=True)):
            if kind == "tool_use":
                tool_id = ids.tool_use_id()
                block = lines.block(kind, noise.command(), tool_id)
            elif kind == "thinking":
                block = lines.block(kind, noise.thought(), noise.signature())
            else:
                block = lines.block(kind, noise.text(), "")
            msg = lines.message(req, block, req.output if j == last else call.partial)
            at = self.at(f, ms)
            named = attribution.fields(req, j, last + 1)
            self.emit(f, {**lines.assistant(at, msg, req.request_id), **named}, (req, ms, source),
                      spaced and j == 0)
            if mirror is not None and (j == last or rng.random() < MIRROR_RATE):
                # Claude Code mirrors a record a moment later: never the earliest copy.
                self._mirror(mirror, ms + rng.randrange(1, 200), msg, req, at.uid, named=named)
        return tool_id

    def flush(self, f: FileOut) -> None:
        """Write a finished file in one call (every line newline-terminated)."""
        if f.path in self._written:  # an id collision would silently drop a file's requests
            raise RuntimeError(f"generator wrote {f.path} twice")
        self._written.add(f.path)
        f.path.parent.mkdir(parents=True, exist_ok=True)
        data = b"\n".join(f.parts) + b"\n"
        f.path.write_bytes(data)
        self.bytes_written += len(data)

    def dir(self, plan: SessionPlan) -> Path:
        """The project directory of a session."""
        return self.projects / encode_cwd(plan.cwd)

    def _mirror(self, mirror: Mirror, ms: int, msg: Record, req: SimRequest, uid: str, *,
                named: Record) -> None:
        """An agent_progress line in the main file embedding one subagent record.

        ``named``: the record's attribution fields, on the embedded record.
        """
        main, agent, tool_id = mirror
        inner = {**lines.embedded_assistant(ms, msg, req.request_id, uid), **named}
        rec = lines.agent_progress(self.at(main, ms), inner, agent.agent_id, agent.prompt, tool_id)
        self.emit(main, rec, (req, ms, "subagent"))

    def _turn(self, plan: SessionPlan, main: FileOut, turn: Turn, spaced: bool) -> None:
        """All main-file lines of one turn, and the agent/compaction files it spawns."""
        call, noise = turn.call, self.noise
        if turn.compaction is not None:
            write_compaction(self, plan, main, turn.compaction)
        if turn.prompt_ms is not None:
            at = self.at(main, turn.prompt_ms)
            self.emit(main, lines.snapshot(at.uid, at.ms))
            self.emit(main, lines.user_prompt(at, self.rng.choice(_PROMPTS)), spaced=spaced)
        if call.api_error:
            self.emit(main, lines.api_error(self.at(main, call.ts - 1), self.ids.uuid()))
        tool_id = self.call(main, call, "main", spaced=spaced)
        if call.uses_tool:
            self._tool_noise(main, call, tool_id)
        for agent in turn.agents:
            write_agent(self, plan, (main, agent, tool_id))
        done = self.at(main, call.done_ms)
        if call.uses_tool:
            content = noise.text() if turn.agents else noise.tool_result()
            self.emit(main, lines.tool_result(done, tool_id, content))
        else:
            self.emit(main, lines.system(done, "turn_duration", durationMs=call.done_ms - call.ts))

    def _tool_noise(self, main: FileOut, call: Call, tool_id: str) -> None:
        """Hook and bash progress lines while a tool runs (most of a real file's lines)."""
        rng = self.rng
        start, end = call.times[-1] + 20, max(call.times[-1] + 40, call.done_ms - 20)
        if rng.random() < 0.6:
            self.emit(main, lines.hook_progress(self.at(main, start), "PreToolUse", tool_id))
        for k in range(rng.choice((0, 0, 0, 0, 1, 2))):
            at = self.at(main, start + (end - start) * (k + 1) // 5)
            self.emit(main, lines.bash_progress(at, self.noise.bash_output(), tool_id, k + 1))
        if rng.random() < 0.6:
            self.emit(main, lines.hook_progress(self.at(main, end), "PostToolUse", tool_id))
        if rng.random() < 0.02:
            self.emit(main, lines.queue_operation(main.session, end, "<task-notification/>"))


# ---------------------------------------------------------------- sidechain files

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
