"""Simulate one Claude Code session: request timing, context growth and caching.

The shape follows a measured heavy-use month: a conversation grows from ~15-25k tokens by
each output and tool result until auto-compaction shrinks it; per-session gaps
are generation time plus tool time (median ~12 s) with a few idle pauses over
5 minutes and ~1 % over an hour. Within the cache TTL only the new part of the
prompt is written to cache (~2 %); after the TTL (5 m, or 1 h for sessions that
write 1 h cache), a model switch or a compaction most of the prompt is written.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from exporter.synth.identifiers import Ids
from exporter.synth.model import (
    AgentRun,
    Call,
    Compaction,
    ResumePoint,
    SessionSim,
    SimRequest,
    Turn,
)
from exporter.synth.plan import SessionPlan, agent_model

MAX_OUTPUT = 32_000


@dataclass(slots=True)
class _Chain:
    """The running state of one conversation (main chain or one subagent)."""

    context: int  # tokens the next request will send
    prefix: int  # system prompt + tools: cached across compactions
    last_ms: int | None = None  # previous request of this chain
    model: str = ""
    geo: str = "not_available"
    speed: str = ""
    force_miss: bool = False


class Simulator:
    """Turns a :class:`SessionPlan` into timed calls with token counts."""

    def __init__(self, rng: random.Random, ids: Ids) -> None:
        """Draw all randomness from ``rng`` and ids from ``ids``."""
        self.rng = rng
        self.ids = ids

    def run(self, plan: SessionPlan, resume: ResumePoint | None = None) -> SessionSim:
        """Simulate the main chain of ``plan`` (continuing ``resume`` if given)."""
        rng = self.rng
        prefix = rng.randrange(14_000, 22_000)
        chain = _Chain(context=prefix + plan.opening, prefix=prefix)
        if resume is not None:
            chain.context, chain.last_ms, chain.model = resume.context, resume.last_ms, plan.model
        last = plan.n_calls - 1
        spawn_at = set(rng.sample(range(last), min(plan.n_agents, last)))
        forced_idle = _forced_idle(plan)
        turns: list[Turn] = []
        sizes: list[int] = []
        now, prompt, spawned = plan.start_ms, True, 0
        for i in range(plan.n_calls):
            compaction = None
            manual = plan.has("compact") and i == plan.n_calls // 2  # the user ran /compact
            if i > 0 and (manual or chain.context > plan.compact_at):
                compaction, now = self._compact(plan, chain, now, "manual" if manual else "auto")
            prompt_ms = now if prompt else None
            now += rng.randrange(200, 1_500) if prompt else rng.randrange(100, 700)
            seg = plan.segment_at(i)
            chain.force_miss |= bool(chain.model) and seg.model != chain.model  # per-model cache
            chain.model, chain.geo, chain.speed = seg.model, seg.geo, seg.speed
            call = self._call(plan, chain, now, _main_output(rng))
            call.api_error = (i == 2 and plan.has("api_error")) or rng.random() < 0.004
            turn = Turn(call, prompt_ms, compaction)
            now = call.done_ms
            if i in spawn_at:
                turn.agents, now = self._spawn(plan, call, first=spawned == 0)
                spawned += 1
            prompt = not call.uses_tool
            chain.context += call.req.output + _tool_tokens(rng, call.uses_tool)
            now += _idle_ms(rng, forced_idle.get(i))
            if prompt:
                now += _lognormal_ms(rng, 8_000, 0.8, 1_500, 240_000)  # the user reads, types
            turns.append(turn)
            sizes.append(chain.context)
        return SessionSim(plan.session_id, turns, sizes)

    def _call(self, plan: SessionPlan, chain: _Chain, ts: int, output: int) -> Call:
        """One request at ``ts`` on ``chain``: tokens, streamed line times, tool time."""
        rng = self.rng
        req = self._tokens(plan, chain, ts, output)
        n_lines = rng.choices((1, 2, 3, 4), (25, 35, 25, 15))[0]
        kinds = _kinds(rng, n_lines)
        gen_ms = rng.randrange(500, 2_000) + output * 1000 // rng.randrange(60, 110)
        if rng.random() < 0.3:
            times = [ts] * n_lines  # all blocks flushed at once
        else:
            times = [ts, *sorted(ts + rng.randrange(80, max(81, gen_ms)) for _ in kinds[1:])]
        tool_ms = _lognormal_ms(rng, 2_000, 1.0, 300, 600_000) if kinds[-1] == "tool_use" else 0
        done = max(times[-1] + 50, ts + gen_ms + tool_ms)
        partial = min(output, rng.randrange(1, 26))
        chain.last_ms = ts
        return Call(req, times, kinds, partial, done)

    def _tokens(self, plan: SessionPlan, chain: _Chain, ts: int, output: int) -> SimRequest:
        """Split the prompt into input, cache read and cache writes (see module doc)."""
        rng = self.rng
        prompt = chain.context
        inp = rng.randrange(1, 12) if rng.random() < 0.95 else rng.randrange(50, 3_000)
        gap_s = None if chain.last_ms is None else (ts - chain.last_ms) / 1000
        if gap_s is None or gap_s > plan.ttl_s or chain.force_miss:
            # A cold prompt: at most the system prompt and tools (shared with other
            # sessions, unchanged by compaction) may still be cached.
            read = min(chain.prefix, prompt - inp) if rng.random() < 0.6 else 0
        else:
            new = min(prompt - inp, max(50, int(prompt * rng.uniform(0.003, 0.032))))
            read = prompt - inp - new
        chain.force_miss = False
        write = prompt - inp - read
        legacy = plan.has("legacy_usage")
        one_hour = plan.ttl_s > 300 and not legacy
        return SimRequest(
            msg_id=self.ids.message_id(bedrock=plan.has("no_request_id")),
            request_id="" if plan.has("no_request_id") else self.ids.request_id(),
            model=chain.model,
            input=inp,
            output=output,
            cache_read=read,
            cache_write_5m=0 if one_hour else write,
            cache_write_1h=write if one_hour else 0,
            geo="" if legacy else chain.geo,
            speed="" if legacy else chain.speed,
            legacy_usage=legacy,
        )

    def _compact(
        self, plan: SessionPlan, chain: _Chain, now: int, trigger: str
    ) -> tuple[Compaction, int]:
        """A compaction call; the conversation restarts from its summary."""
        rng = self.rng
        pre = chain.context
        # Same model and mode as the conversation it summarises.
        call = self._call(plan, chain, now + rng.randrange(300, 1_500), rng.randrange(2_500, 9_000))
        call.kinds = ["text"] * len(call.kinds)  # a summary: no tool call follows
        call.done_ms = call.times[-1] + rng.randrange(500, 2_000)
        chain.context = chain.prefix + rng.randrange(8_000, 20_000) + call.req.output
        chain.force_miss = True  # the summary replaced the cached conversation
        return Compaction(self.ids.compact_agent_id(), call, pre, trigger), call.done_ms

    def _spawn(self, plan: SessionPlan, call: Call, *, first: bool) -> tuple[list[AgentRun], int]:
        """Make ``call`` a Task call and run the subagent(s) it spawns; returns them and the end.

        The first spawn of a session always shows the session's agent feature
        (workflow run, placeholder outputs) so that small trees have them too.
        """
        call.kinds[-1] = "tool_use"
        show = first or self.rng.random() < 0.3
        agents, end = self._agents(
            plan,
            call.done_ms,
            workflow=plan.has("workflow") and show,
            placeholder=plan.has("placeholder_agent") and show,
        )
        call.done_ms = end  # the Task result comes back when the agents are done
        return agents, end

    def _agents(
        self, plan: SessionPlan, now: int, *, workflow: bool, placeholder: bool
    ) -> tuple[list[AgentRun], int]:
        """The subagent(s) of one Task call, and when they all finished.

        A ``placeholder`` agent writes output_tokens 1 or 3 on every line (some
        2.1.x builds never wrote the final count).
        """
        rng = self.rng
        old = plan.has("legacy_layout") or plan.has("legacy_usage")  # builds before 2.1
        layout = "legacy" if old else "workflow" if workflow else "subagents"
        run_id = "wf-" + self.ids.hex(8) if layout == "workflow" else ""
        agents, end = [], now
        for _ in range(rng.randrange(2, 4) if layout == "workflow" else 1):
            start = now + rng.randrange(100, 900)
            agent = self._agent(plan, start, layout, run_id, placeholder=placeholder)
            agents.append(agent)
            end = max(end, agent.calls[-1].done_ms)
        return agents, end + rng.randrange(300, 2_000)

    def _agent(
        self, plan: SessionPlan, start: int, layout: str, run_id: str, *, placeholder: bool
    ) -> AgentRun:
        """One subagent conversation: a fresh, short chain on its own model."""
        rng = self.rng
        prefix = rng.randrange(6_000, 14_000)
        chain = _Chain(
            context=prefix + rng.randrange(300, 4_000),
            prefix=prefix,
            model=agent_model(rng),
            geo=plan.geo,
        )
        now, calls = start + rng.randrange(200, 800), []
        for j in range(rng.randrange(3, 26)):
            out = rng.choice((1, 3)) if placeholder else _agent_output(rng)
            call = self._call(plan, chain, now, out)
            if placeholder:
                call.partial = out  # the final count was never written
            calls.append(call)
            chain.context += out + _tool_tokens(rng, True)
            now = call.done_ms + rng.randrange(100, 1_000)
            if j > 0 and not call.uses_tool:
                break
        agent_id = self.ids.hex(8) if layout == "legacy" else self.ids.agent_id()
        return AgentRun(
            agent_id,
            layout,
            run_id,
            start,
            calls,
            _AGENT_PROMPTS[j % 3],
            progress=layout == "subagents",
        )


_AGENT_PROMPTS = (
    "Explore the repository and list every module that reads transcript files.",
    "Find where the cache TTL is configured and report the call sites.",
    "Run the test suite and summarise the failures with file and line.",
)


def _forced_idle(plan: SessionPlan) -> dict[int, int]:
    """Guaranteed idle pauses (one over 1 h, one of 5m-1h) for the ``long_gaps`` feature."""
    if not plan.has("long_gaps") or plan.n_calls < 4:
        return {}
    return {plan.n_calls // 3: 2 * 3600_000, (2 * plan.n_calls) // 3: 20 * 60_000}


def _idle_ms(rng: random.Random, forced: int | None) -> int:
    """Idle time before the next call: usually none, sometimes minutes or hours."""
    if forced is not None:
        return forced
    roll = rng.random()
    if roll < 0.01:
        return int(math.exp(rng.uniform(math.log(3_700), math.log(14 * 3600))) * 1000)
    if roll < 0.03:
        return int(math.exp(rng.uniform(math.log(310), math.log(3_500))) * 1000)
    return 0


def _kinds(rng: random.Random, n: int) -> list[str]:
    """Content block kinds of a streamed response (thinking first, tool call last)."""
    kinds = ["thinking" if rng.random() < 0.5 else "text"]
    kinds += ["text" if rng.random() < 0.4 else "tool_use" for _ in range(n - 1)]
    if rng.random() < 0.8:
        kinds[-1] = "tool_use"
    elif n > 1:
        kinds[-1] = "text"
    return kinds


def _lognormal_ms(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    """A log-normal duration in ms, clipped to ``[lo, hi]``."""
    return min(hi, max(lo, int(median * math.exp(rng.gauss(0, sigma)))))


def _main_output(rng: random.Random) -> int:
    """Output tokens of a main call: median ~500, p90 ~3000, capped at 32k."""
    return min(MAX_OUTPUT, max(1, int(500 * math.exp(rng.gauss(0, 1.4)))))


def _agent_output(rng: random.Random) -> int:
    """Output tokens of a subagent call: shorter than the main chain's."""
    return min(MAX_OUTPUT, max(1, int(300 * math.exp(rng.gauss(0, 1.1)))))


def _tool_tokens(rng: random.Random, tool: bool) -> int:
    """Tokens a tool result (or a user reply) adds to the conversation."""
    median = 1_100 if tool else 300
    return min(60_000, max(20, int(median * math.exp(rng.gauss(0, 1.3)))))
