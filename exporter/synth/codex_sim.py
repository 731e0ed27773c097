"""One simulated Codex thread: its turns, their usage, and the lines of its rollout file.

A thread is a run of user turns; each turn makes one to three model requests,
and each request writes one ``token_count`` event whose totals grew (a *turn*
of the ledger, booked here once as a :class:`Turn`). The prompt grows by what
the user and the tools add; most of it is a cache read; a compaction shrinks
it. What a thread can carry (its ``features``, from :data:`TRAPS`): repeated
events with unchanged totals, a compaction, an ``info: null`` event, a resume
after a long gap (appended to the same file, totals going on), a model switch,
no ``turn_context`` at all (the model unknown), plan windows missing or null.

A fork (:meth:`ThreadSim.fork`) is a sub-agent's thread: its own
``session_meta``, then a copy of the parent's lines so far re-dated to the
fork's moment, then its own turns, whose totals go on from the parent's.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Final

from exporter.ingest.codex import FALLBACK_MODEL
from exporter.synth import codex_lines as cl
from exporter.synth.codex_lines import CodexLine, Payload, Usage

TRAPS: Final = ("repeat", "compaction", "info_null", "snapshot", "archived", "archived_moved",
                "resume", "fork", "fork_empty", "fork_nested", "no_context", "model_switch",
                "limits_null")
"""Every trap a generated Codex home can hold; each is given to at least one thread."""
DEFAULT_TRAPS: Final = frozenset(TRAPS) - {"fork_nested"}
"""The default mix: all but a fork of a fork (not seen in real logs: Codex's depth-2 copies are
inferred from how it copies a depth-1 fork's parent)."""
MODELS: Final = ("gpt-5.5", "gpt-5.4", "gpt-5.3-codex", "gpt-5.1-codex-mini")
WINDOWS: Final = (258_400, 272_000)
PLANS: Final = ("plus", "pro", None)
ZONES: Final = ("Europe/Berlin", "Asia/Shanghai", "America/New_York")
CWDS: Final = ("/home/dev/exporter", "/home/dev/webapp", "/srv/work/infra", "/home/dev/notes")
_PROMPTS: Final = ("Fix the failing test", "continue", "Add a flag for the Codex home",
                   "Why is the cache hit rate low?", "Refactor this module")
_FILLER: Final = 1 << 19  # bytes of the noise pool big tool outputs are sliced from


@dataclass(frozen=True, slots=True)
class Turn:
    """One request, counted once: its thread, model, time (epoch ms) and usage."""

    session: str
    model: str
    ms: int
    usage: Usage  # gross input (cached included), cached, output (reasoning included), reasoning


@dataclass(frozen=True, slots=True)
class Mark:
    """A thread after one of its user turns: where a snapshot or a fork may cut it."""

    index: int  # lines written so far
    ms: int
    totals: Usage
    context: int
    model: str


@dataclass(frozen=True, slots=True)
class Setting:
    """What stays the same through a thread (and its forks)."""

    cwd: str
    zone: str
    window: int
    plan: str | None
    head: Payload  # session_meta's build fields


@dataclass(slots=True)
class Thread:
    """A simulated thread: its lines, its turns and where it can be cut."""

    sid: str
    start_ms: int
    setting: Setting
    lines: list[CodexLine] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    features: frozenset[str] = frozenset()
    copied: int = 0  # lines copied from a parent (after the first): a fork's inherited history
    reannounce: CodexLine | None = None  # the inherited totals, said again in the first turn


class Noise:
    """Deterministic filler: tool output and encrypted reasoning of varied sizes."""

    def __init__(self, rng: random.Random) -> None:
        """Draw one pool from ``rng``; every filler is a slice of it."""
        self.rng = rng
        self.pool = rng.randbytes(_FILLER).hex()

    def text(self, low: int, high: int) -> str:
        """A filler string of ``low`` to ``high`` characters."""
        n = self.rng.randint(low, min(high, len(self.pool)))
        at = self.rng.randrange(len(self.pool) - n + 1)
        return self.pool[at:at + n]

    def output(self) -> str:
        """A tool's output: mostly a few KB, now and then a pasted image's size."""
        return self.text(50_000, 300_000) if self.rng.random() < 0.02 else self.text(200, 4000)


@dataclass(slots=True)
class _State:
    """What a thread's next request depends on."""

    ms: int
    model: str
    totals: Usage = cl.ZERO
    context: int = 0


class ThreadSim:
    """Simulates threads from one RNG (one seed number: the same threads, byte for byte)."""

    def __init__(self, rng: random.Random, noise: Noise) -> None:
        """Draw every choice from ``rng``; filler from ``noise``."""
        self.rng, self.noise = rng, noise
        self.plan = rng.choice(PLANS)  # the account's: the same in every thread

    def thread(self, start_ms: int, turns: int, features: frozenset[str]) -> Thread:
        """A root thread of ``turns`` user turns starting at ``start_ms``."""
        rng = self.rng
        sid = cl.uuid7(rng, start_ms)
        setting = Setting(rng.choice(CWDS), rng.choice(ZONES), rng.choice(WINDOWS),
                          self.plan, cl.build_head(rng))
        t = Thread(sid, start_ms, setting, features=features)
        t.lines.append(cl.session_meta(start_ms, sid, setting.cwd, setting.head))
        state = _State(start_ms + rng.randint(200, 3000), rng.choice(MODELS))
        self._run(t, state, turns)
        return t

    def fork(self, parent: Thread, mark: Mark, turns: int, *, copy: bool,
             nested: bool = False) -> Thread:
        """A sub-agent thread forked from ``parent`` at ``mark`` (its history copied: ``copy``).

        ``nested``: ``parent`` is itself a fork, whose file (copied) holds its own
        parent's history before its own turns.
        """
        rng = self.rng
        fork_ms = mark.ms + rng.randint(500, 5000)
        sid = cl.uuid7(rng, fork_ms)
        feats = frozenset({"fork_nested" if nested else "fork" if copy else "fork_empty"})
        t = Thread(sid, fork_ms, parent.setting, features=feats)
        nickname = rng.choice(("auditor", "tester", "explorer", "reviewer"))
        root = parent.lines[0].payload["session_id"]  # the root thread of the tree
        t.lines.append(cl.session_meta(fork_ms, sid, t.setting.cwd, t.setting.head,
                                       fork=(parent.sid, root, nickname)))
        # A sub-agent runs its parent's model or another: the copied turn_context lines
        # still name the parent's, its own the one in force.
        model = mark.model if rng.random() < 0.5 else rng.choice(MODELS)
        state = _State(fork_ms + 50, model)
        if copy:  # the parent's lines so far, re-dated to the fork (payloads unchanged)
            t.lines += [dataclasses.replace(line, ms=fork_ms + 1 + i // 16)
                        for i, line in enumerate(parent.lines[:mark.index])]
            t.copied = mark.index
            state = _State(t.lines[-1].ms + rng.randint(1000, 4000), model,
                           mark.totals, mark.context)
            if rng.random() < 0.5:  # Codex often repeats the inherited totals first
                t.reannounce = next(line for line in reversed(t.lines) if line.usage)
        self._run(t, state, turns)
        return t

    def _run(self, t: Thread, state: _State, turns: int) -> None:
        """Write ``turns`` user turns of ``t`` from ``state``."""
        rng = self.rng
        resume_at = rng.randrange(1, turns) if "resume" in t.features and turns > 1 else -1
        switch_at = (rng.randrange(1, turns) if "model_switch" in t.features and turns > 1
                     else -1)
        compact_at = rng.randrange(turns) if "compaction" in t.features else -1
        for i in range(turns):
            state.ms += rng.randint(5_000, 900_000) if i else 0
            if i == resume_at:  # a day later, the same file, the totals going on
                state.ms += rng.randint(20 * 3600_000, 30 * 3600_000)
                t.lines.append(self._settings(state))
            if i == switch_at:
                state.model = rng.choice([m for m in MODELS if m != state.model])
                t.lines.append(self._settings(state))
            self._turn(t, state, first=i == 0)
            if i == compact_at or state.context > t.setting.window * 4 // 5:
                self._compact(t, state)
            t.marks.append(Mark(len(t.lines), state.ms, state.totals, state.context,
                                state.model))

    def _turn(self, t: Thread, state: _State, first: bool) -> None:
        """One user turn: its settings, the prompt, one to three requests, the end."""
        rng, lines = self.rng, t.lines
        turn_id = cl.uuid7(rng, state.ms)
        lines.append(cl.event(state.ms, "task_started", turn_id=turn_id,
                              started_at=state.ms // 1000, model_context_window=t.setting.window,
                              collaboration_mode_kind="default"))
        if "no_context" not in t.features:
            lines.append(cl.turn_context(state.ms, turn_id, t.setting.cwd, state.model,
                                              t.setting.zone))
        if first and t.reannounce is not None:
            lines.append(dataclasses.replace(t.reannounce, ms=state.ms + 1))
        prompt = rng.choice(_PROMPTS)
        lines.append(cl.item(state.ms, "message", role="user",
                             content=[{"type": "input_text", "text": prompt}]))
        lines.append(cl.event(state.ms, "user_message", message=prompt, images=[]))
        calls = rng.choice((1, 1, 2, 3))
        for c in range(calls):
            state.ms += rng.randint(2_000, 40_000)
            if first and c == 0 and ("info_null" in t.features or "fork_empty" in t.features):
                lines.append(cl.no_info(state.ms - 1, self._limits(t, state)))
            self._request(t, state, last=c == calls - 1)
        state.ms += rng.randint(50, 500)
        lines.append(cl.event(state.ms, "task_complete", turn_id=turn_id,
                              last_agent_message="Done."))

    def _request(self, t: Thread, state: _State, last: bool) -> None:
        """One model request: reasoning, its usage event (and repeats), a tool call or answer."""
        rng, lines, ms = self.rng, t.lines, state.ms
        lines.append(cl.item(ms - 5, "reasoning", summary=[{"type": "summary_text",
                                                             "text": "**Planning**"}],
                             encrypted_content=self.noise.text(300, 3000)))
        usage = self._usage(state)
        model = FALLBACK_MODEL if "no_context" in t.features else state.model
        t.turns.append(Turn(t.sid, model, ms, usage))
        state.totals = tuple(a + b for a, b in zip(state.totals, usage, strict=True))  # type: ignore[assignment]
        limits = self._limits(t, state)
        lines.append(cl.token_count(ms, state.totals, usage, t.setting.window, limits))
        repeat = 0.3 if "repeat" in t.features else 0.02
        if rng.random() < repeat:  # the same event again: the same turn, not a new one
            lines.append(dataclasses.replace(lines[-1], ms=ms + rng.randint(1, 900)))
        if last:
            lines.append(cl.item(ms + 1, "message", role="assistant",
                                 content=[{"type": "output_text", "text": "Done."}]))
            lines.append(cl.event(ms + 1, "agent_message", message="Done."))
            return
        call_id = "call_" + self.noise.text(24, 24)
        lines.append(cl.item(ms + 1, "function_call", name="shell", call_id=call_id,
                             arguments='{"command":["pytest","-q"]}'))
        lines.append(cl.item(ms + 2, "function_call_output", call_id=call_id,
                             output=self.noise.output()))

    def _usage(self, state: _State) -> Usage:
        """A request's usage; the context grows by it."""
        rng = self.rng
        gross = state.context + rng.randint(300, 8000)
        cached = 0 if rng.random() < 0.08 else state.context // 128 * 128
        out = rng.randint(20, 2500)
        reasoning = rng.randint(0, out) if rng.random() < 0.8 else 0
        state.context = gross + out
        return gross, min(cached, gross), out, reasoning

    def _compact(self, t: Thread, state: _State) -> None:
        """A compaction: the history summarised, the context cut, a repeat with a zero ``last``."""
        rng, ms = self.rng, state.ms + 200
        t.lines.append(cl.item(ms, "compacted", message=self.noise.text(400, 2000),
                               replacement_history=[]))
        t.lines.append(cl.event(ms, "context_compacted"))
        state.context = rng.randint(6_000, 20_000)
        t.lines.append(cl.after_compaction(ms + 1, state.totals, state.context, t.setting.window,
                                           self._limits(t, state)))
        state.ms = ms + 1

    def _settings(self, state: _State) -> CodexLine:
        """``thread_settings_applied``: written on a resume and on a model switch."""
        settings = {"model": state.model, "model_provider_id": "openai",
                    "service_tier": "default", "reasoning_effort": "high"}
        return cl.event(state.ms - 10, "thread_settings_applied", thread_settings=settings)

    def _limits(self, t: Thread, state: _State) -> Payload | None:
        """The plan's windows now (null or without windows now and then, as Codex writes)."""
        rng = self.rng
        if "limits_null" in t.features and rng.random() < 0.3:
            return None
        return cl.rate_limits(state.ms, t.setting.plan, windows=rng.random() < 0.7)
