"""Generated OpenAI Codex CLI homes with exact ground truth.

``generate_home(home, options)`` writes ``home/sessions/YYYY/MM/DD/rollout-<local
time>-<id>.jsonl`` (and ``home/archived_sessions/``) as Codex does, and returns
the truth (``codex_truth``): what ``report --json --codex-home home`` must
print. ``generate(root, GenOptions(codex_sessions=N))`` writes such a home at
``root/codex`` beside the Claude Code tree and puts its truth under the
``"codex"`` key of ``root/truth.json``.

Every trap of ``options.traps`` (default :data:`~exporter.synth.codex_sim.DEFAULT_TRAPS`)
goes to at least one thread: repeated events, compactions, ``info: null``,
snapshot copies (a prefix of a growing thread's file under a later file name
and day, now and then cut mid-line), archived copies (``archived_sessions/``,
beside the original or moved there), resumes, forks (with and without the
parent's history; ``fork_nested``, not in the default mix: a fork of a fork),
threads with no ``turn_context`` (the model unknown), model switches, missing
plan windows. One ``random.Random`` drives everything: a seed gives
byte-identical files.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from exporter.synth import codex_lines as cl
from exporter.synth.codex_sim import DEFAULT_TRAPS, TRAPS, Mark, Noise, Thread, ThreadSim, Turn
from exporter.synth.codex_truth import compute_truth

__all__ = ["DEFAULT_TRAPS", "TRAPS", "CodexOptions", "generate_home"]

_NO_FORK: Final = frozenset({"no_context"})  # a fork's own turns are found by turn_context
_SOLO: Final = ("no_context", "fork", "fork_empty", "fork_nested", "model_switch")  # kept apart
_COUNTED: Final = frozenset({"resume", "no_context", "model_switch", "snapshot", "archived",
                             "archived_moved"})  # a root thread's kinds in the truth's "files"


@dataclass(frozen=True)
class CodexOptions:
    """What to generate. The same options always give byte-identical files."""

    seed: int = 0
    sessions: int = 6  # root threads (forks, snapshots and archived copies come on top)
    turns_per_session: int = 10  # mean user turns (each makes one to three requests)
    start: datetime = datetime(2026, 10, 1, tzinfo=UTC)
    target_bytes: int | None = None  # if set, add threads until the home is about this size
    traps: frozenset[str] = DEFAULT_TRAPS
    utc_offset_minutes: int = 480  # the user's zone: file names and day folders are local


def generate_home(home: Path, options: CodexOptions = CodexOptions()) -> dict[str, Any]:
    """Write a Codex home's sessions under ``home``; return its truth.

    ``home/sessions`` and ``home/archived_sessions`` must be absent or empty:
    files left from another run would make the truth wrong.
    """
    home = Path(home)
    for sub in ("sessions", "archived_sessions"):
        if (home / sub).is_dir() and any((home / sub).iterdir()):
            raise FileExistsError(f"{home / sub} is not empty: generate into a fresh directory")
    unknown = options.traps - set(TRAPS)
    if unknown:
        raise ValueError(f"unknown Codex traps: {sorted(unknown)}")
    start = options.start if options.start.tzinfo else options.start.replace(tzinfo=UTC)
    rng = random.Random(f"codex:{options.seed}")
    run = _Run(rng, ThreadSim(rng, Noise(rng)), _HomeWriter(home, options.utc_offset_minutes),
               options, int(start.timestamp() * 1000))
    for features in assign_traps(max(1, options.sessions), options.traps):
        run.one(features)
    while options.target_bytes is not None and run.writer.bytes_written < options.target_bytes:
        extra = {t for t in TRAPS if t in options.traps and rng.random() < 0.1}  # in order
        if "no_context" in extra:  # then no fork, no switch: see assign_traps
            extra -= set(_SOLO) - {"no_context"}
        run.one(frozenset(extra))
    return compute_truth(run.turns, run.writer.lines, run.files, run.plan_samples())


def assign_traps(n: int, traps: frozenset[str]) -> list[frozenset[str]]:
    """Each thread's traps: every one of ``traps`` somewhere, round-robin.

    Traps that want a thread of their own (:data:`_SOLO`: no turn_context, a
    fork, a model switch) share one when there are too few threads, but never
    one that defeats them (a thread without turn_context is never forked and
    shows no model switch) unless there is a single thread.
    """
    out: list[set[str]] = [set() for _ in range(n)]
    solo, k = set(_SOLO), 0
    for trap in (t for t in (*_SOLO, *TRAPS) if t in traps and not any(t in o for o in out)):
        clash = (solo - {trap} if trap == "no_context" else {"no_context"}) if trap in solo \
            else set()
        order = [(k + j) % n for j in range(n)]
        best = ([i for i in order if not out[i] & solo and trap in solo]
                or [i for i in order if not out[i] & clash] or order)
        out[best[0]].add(trap)
        k = best[0] + 1
    return [frozenset(s) for s in out]


@dataclass(slots=True)
class _Run:
    """One generation run: the threads written so far and their booked turns."""

    rng: random.Random
    sim: ThreadSim
    writer: _HomeWriter
    options: CodexOptions
    ms: int  # when the next root thread starts
    turns: list[Turn] = field(default_factory=list)
    files: Counter[str] = field(default_factory=Counter)
    originals: list[Thread] = field(default_factory=list)

    def one(self, features: frozenset[str]) -> None:
        """One root thread, its forks and its copies, written; its turns booked."""
        rng, mean = self.rng, self.options.turns_per_session
        turns = max(2, rng.randint(max(1, mean // 2), max(2, mean * 3 // 2)))
        thread = self.sim.thread(self.ms, turns, features)
        self.ms += rng.randint(600_000, 3 * 3600_000)  # threads overlap, as a busy user's do
        kinds = [k for k in ("fork", "fork_empty", "fork_nested") if k in features]
        forks = [self.sim.fork(thread, self._cut(thread), rng.randint(1, 4),
                               copy=kind != "fork_empty")
                 for kind in kinds if not features & _NO_FORK]
        if "fork_nested" in features and forks:  # a sub-agent's sub-agent: a fork of the last
            forks.append(self.sim.fork(forks[-1], self._cut(forks[-1]), rng.randint(1, 3),
                                       copy=True, nested=True))
        self.writer.thread(thread, archived="archived" in features,
                           moved="archived_moved" in features)
        if "snapshot" in features:  # every other one caught mid-write: part of the next line
            partial = 0.05 + 0.9 * rng.random() if self.files["snapshot"] % 2 == 0 else 0.0
            self.writer.snapshot(thread, self._cut(thread), partial)
        for child in forks:
            self.writer.thread(child)
        for t in (thread, *forks):
            self.turns += t.turns
            self.originals.append(t)
        self.files.update(["threads", *(f for f in features if f in _COUNTED)])
        self.files.update(next(iter(child.features)) for child in forks)

    def _cut(self, thread: Thread) -> Mark:
        """A turn boundary before the thread's end (its first when it has one turn)."""
        return self.rng.choice(thread.marks[:-1] or thread.marks)

    def plan_samples(self) -> list[tuple[int, Any]]:
        """(time, rate_limits) of every original token_count line (copies repeat them)."""
        return [(line.ms, line.payload["rate_limits"]) for t in self.originals
                for line in t.lines[1 + t.copied:]
                if line.payload.get("type") == "token_count"]


class _HomeWriter:
    """Writes rollout files under a home, counting their lines and bytes."""

    def __init__(self, home: Path, offset_minutes: int) -> None:
        """Write below ``home``; name files in the zone ``offset_minutes`` east of UTC."""
        self.home, self.offset = home, offset_minutes
        self.lines: Counter[str] = Counter()
        self.bytes_written = 0
        self._written: set[Path] = set()
        self._encode = msgspec.json.Encoder().encode

    def thread(self, t: Thread, *, archived: bool = False, moved: bool = False) -> None:
        """A thread's file in ``sessions/`` (and/or, archived, in ``archived_sessions/``)."""
        day, name = cl.file_name(t.start_ms, self.offset, t.sid)
        if not moved:
            self.write(self.home / "sessions" / day / name, t.lines)
        if archived or moved:
            self.write(self.home / "archived_sessions" / name, t.lines)

    def snapshot(self, t: Thread, mark: Mark, partial: float) -> None:
        """A prefix of ``t``'s file, named for a later moment (a copy of a growing thread).

        ``partial``: the share of the next line copied too, unterminated (no line yet).
        """
        day, name = cl.file_name(mark.ms + 1000, self.offset, t.sid)
        tail = b""
        if mark.index < len(t.lines):
            line = self._encode(t.lines[mark.index].envelope())
            tail = line[:int(len(line) * partial)]
        self.write(self.home / "sessions" / day / name, t.lines[:mark.index], tail)

    def write(self, path: Path, lines: list[cl.CodexLine], tail: bytes = b"") -> None:
        """One file in one call, every line newline-terminated (but ``tail``); lines counted."""
        if path in self._written:  # a collision would silently drop a thread's turns
            raise RuntimeError(f"generator wrote {path} twice")
        self._written.add(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = b"\n".join(self._encode(line.envelope()) for line in lines) + b"\n" + tail
        path.write_bytes(data)
        self.bytes_written += len(data)
        usage = sum(line.usage for line in lines)
        self.lines.update(usage=usage, other=len(lines) - usage)
