"""Realistic Claude Code transcript trees with exact ground truth.

``generate(root, options)`` writes ``root/projects/…`` (``root`` plays
``~/.claude``) and ``root/truth.json``: the figures ``report --json`` must
print for that tree, computed from the generator's own model of the requests
it invented (``truth.py``), not by reading the files back. With
``codex_sessions``, also an OpenAI Codex CLI home at ``root/codex``
(``codex.py``), its truth under ``truth["codex"]`` (``codex_truth.py``).

Pipeline: ``plan`` (who, when, which quirks) → ``session`` (timing, context,
caching; values in ``model``) → ``writer``/``agents`` (lines from ``lines``,
payloads from ``noise``, malformed lines from ``traps``; every line booked in
``book``) → ``truth``. One ``random.Random(seed)`` drives everything, so a
seed always gives byte-identical files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from exporter.synth.book import Book
from exporter.synth.codex import CodexOptions, generate_home
from exporter.synth.identifiers import Ids
from exporter.synth.model import ResumePoint
from exporter.synth.noise import NoisePool
from exporter.synth.plan import Planner, SessionPlan, assign_features
from exporter.synth.session import Simulator
from exporter.synth.traps import VARIANTS
from exporter.synth.truth import compute_truth
from exporter.synth.writer import TreeWriter

__all__ = ["GenOptions", "generate"]

RESUMED_SHARE: Final = 0.15  # resumed/forked copies per main session
EXTRA_TRAP_RATE: Final = 0.03  # malformed lines per extra session (target_bytes trees)


def _default_kv() -> dict[str, int]:
    """KV-cache bytes per token of the two reference architectures (docs/figures.md)."""
    return {"mla": 70272, "gqa": 516096}


@dataclass(frozen=True)
class GenOptions:
    """What to generate. The same options always give byte-identical output."""

    seed: int = 0
    sessions: int = 8  # main sessions (resumed copies and subagents come on top)
    requests_per_session: int = 120  # mean; actual varies per session
    start: datetime = datetime(2026, 10, 1, tzinfo=UTC)
    target_bytes: int | None = None  # if set, add sessions until the tree is about this size
    malformed: bool = True  # include malformed lines of every rejection reason
    kv_bytes_per_token: Mapping[str, int] = field(default_factory=_default_kv)
    upload_bytes_per_token: float = 4.0
    iterations: bool = False  # advisor, fallback, compaction, unknown iterations (synth.iterations)
    attribution: bool = False  # skill, plugin, MCP server, agent, effort (synth.attribution)
    codex_sessions: int = 0  # if set, a Codex home of this many threads at root/codex (synth.codex)


def generate(root: Path, options: GenOptions = GenOptions()) -> dict[str, Any]:
    """Write a transcript tree under root/projects/ and root/truth.json; return the truth.

    ``root/projects`` must be absent or empty: files left from another run would
    make the truth wrong. A naive ``options.start`` is taken as UTC.
    """
    root = Path(root)
    projects = root / "projects"
    if projects.is_dir() and any(projects.iterdir()):
        raise FileExistsError(f"{projects} is not empty: generate into a fresh directory")
    start = options.start if options.start.tzinfo else options.start.replace(tzinfo=UTC)
    start_ms = int(start.timestamp()) * 1000 + start.microsecond // 1000
    rng = random.Random(options.seed)
    ids = Ids(rng)
    book = Book()
    run = _Run(
        rng,
        ids,
        Planner(rng, ids, start_ms, options.requests_per_session),
        Simulator(rng, ids),
        TreeWriter(projects, book, rng, ids, NoisePool(rng, ids, start_ms),
                   iterations=options.iterations, attribution=options.attribution),
    )
    n = max(1, options.sessions)
    forced = assign_features(n)
    variants: list[list[str]] = [[] for _ in range(n)]
    for k, variant in enumerate(VARIANTS if options.malformed else ()):
        variants[k % n].append(variant)
    # At least two resumed copies (when there are two sessions to copy), so that
    # both orders of (new, old) session id occur.
    resumed = set(rng.sample(range(n), min(n, max(2, round(n * RESUMED_SHARE)))))
    for i in range(n):
        run.one(run.planner.main(forced[i]), variants[i], i in resumed)
    while options.target_bytes is not None and run.writer.bytes_written < options.target_bytes:
        extra = (
            [rng.choice(list(VARIANTS))]
            if options.malformed and rng.random() < EXTRA_TRAP_RATE
            else []
        )
        run.one(run.planner.main(frozenset()), extra, rng.random() < RESUMED_SHARE)
    truth = compute_truth(book, options.kv_bytes_per_token, options.upload_bytes_per_token)
    if options.codex_sessions > 0:  # its own RNG: the Claude Code tree is the same either way
        codex = CodexOptions(seed=options.seed, sessions=options.codex_sessions, start=start)
        truth["codex"] = generate_home(root / "codex", codex)
    (root / "truth.json").write_text(json.dumps(truth, indent=2) + "\n", encoding="utf-8")
    return truth


@dataclass(slots=True)
class _Run:
    """The shared machinery of one generation run."""

    rng: random.Random
    ids: Ids
    planner: Planner
    sim: Simulator
    writer: TreeWriter
    resumes: int = 0

    def one(self, plan: SessionPlan, variants: list[str], resume: bool) -> None:
        """Simulate and write one main session, and a resumed copy of it if asked."""
        sim = self.sim.run(plan)
        kept, marks = self.writer.session(plan, sim, variants, keep=resume)
        if not resume:
            return
        # Fork from a turn before the end, so the source keeps requests of its own.
        n = len(sim.turns)
        cut = self.rng.randrange(n // 2, n - 1)
        call = sim.turns[cut].call
        point = ResumePoint(plan.session_id, sim.contexts_after[cut], call.ts, call.done_ms)
        later = 6 * 60_000 + self.rng.randrange(10 * 3600_000)  # minutes to hours later
        # The first resumed copy sorts below its source, the second above: the
        # (ts, sessionId) rule then gives the replayed requests to each in turn.
        smaller = (True, False)[self.resumes] if self.resumes < 2 else None
        self.resumes += 1
        copy = self.planner.resumed(plan, point.done_ms + later, smaller)
        self.writer.session(copy, self.sim.run(copy, point), replay=kept[: marks[cut]])
