"""Session plans: who works where, when, on which model, with which quirks.

Each feature the tests need (a Sonnet session over 200k, an unpriced model, fast
mode, US-only inference, 1 h caching, old usage records, no requestId, old and
workflow subagent layouts, long idle gaps, API errors, placeholder outputs,
compaction) is handed round-robin to the first sessions, so even a tiny tree has
every one of them; further sessions draw them at realistic rates.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Final

from exporter.synth.identifiers import Ids
from exporter.synth.model import HAIKU, NOVA, OPUS, SONNET

# Several projects, some with "_" or "." in the path (the encoded dir name is lossy).
PROJECTS: Final = (
    "/home/dev/projects/payments-api",
    "/home/dev/projects/web_frontend",
    "/home/dev/src/github.com/acme/infra.tools",
    "/home/dev/projects/ml-pipeline",
    "/home/dev/work/data_eng.v2",
    "/home/dev/projects/exporter",
)
BRANCHES: Final = ("main", "main", "dev", "feature/cache-metrics", "fix/login_flow", "HEAD")
_SLUG_WORDS: Final = (
    "modular",
    "radiant",
    "lexical",
    "floating",
    "petting",
    "painting",
    "quiet",
    "amber",
    "thompson",
    "music",
    "whisper",
    "harbor",
    "cobalt",
    "meadow",
    "lantern",
    "velvet",
)
VERSION: Final = "2.1.39"
LEGACY_LAYOUT_VERSION: Final = "2.0.76"
LEGACY_USAGE_VERSION: Final = "1.0.51"

FEATURES: Final = (
    "ttl_1h",
    "legacy_usage",
    "sonnet",
    "fast",
    "us",
    "nova",
    "no_request_id",
    "legacy_layout",
    "workflow",
    "long_gaps",
    "api_error",
    "placeholder_agent",
    "compact",
    "spaced",
)
# Old usage records cannot express 1 h writes, inference_geo or fast mode.
_LEGACY_CONFLICTS: Final = frozenset({"ttl_1h", "us", "fast"})
_RATES: Final = {
    "ttl_1h": 0.25,
    "legacy_usage": 0.03,
    "sonnet": 0.15,
    "fast": 0.08,
    "us": 0.08,
    "nova": 0.02,
    "no_request_id": 0.04,
    "legacy_layout": 0.04,
    "workflow": 0.08,
    "long_gaps": 0.0,
    "api_error": 0.1,
    "placeholder_agent": 0.1,
    "compact": 0.05,
    "spaced": 0.0,
}
SESSION_SPACING_S: Final = 2 * 3600  # mean time between session starts: ~3 overlap


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of a session (fractions of its calls) run on another model or mode."""

    start: float
    end: float
    model: str
    geo: str
    speed: str = ""


@dataclass(slots=True)
class SessionPlan:
    """Everything decided about one main session before it is simulated."""

    session_id: str
    cwd: str
    branch: str
    slug: str
    version: str
    model: str
    geo: str
    ttl_s: int
    n_calls: int
    start_ms: int
    compact_at: int  # conversation size that triggers auto-compaction
    n_agents: int
    features: frozenset[str]
    opening: int  # tokens of the first prompt and its attachments
    segments: tuple[Segment, ...] = ()

    def has(self, feature: str) -> bool:
        """Whether the session carries a feature of ``FEATURES``."""
        return feature in self.features

    def segment_at(self, index: int) -> Segment:
        """The model, geo and speed in force for call ``index``."""
        pos = index / max(1, self.n_calls)
        for seg in self.segments:
            if seg.start <= pos < seg.end:
                return seg
        return Segment(0.0, 1.0, self.model, self.geo)


@dataclass(slots=True)
class Planner:
    """Draws session plans one after another, advancing a shared start clock."""

    rng: random.Random
    ids: Ids
    start_ms: int
    mean_calls: int
    _next_ms: int = field(init=False)

    def __post_init__(self) -> None:
        """The first session starts within 20 minutes of ``start``."""
        self._next_ms = self.start_ms + self.rng.randrange(20 * 60_000)

    def main(self, forced: frozenset[str]) -> SessionPlan:
        """A new main session with the ``forced`` features plus randomly drawn ones."""
        rng = self.rng
        features = forced | {f for f, p in _RATES.items() if rng.random() < p}
        if "legacy_usage" in features and features & _LEGACY_CONFLICTS:
            drop = _LEGACY_CONFLICTS - forced if "legacy_usage" in forced else {"legacy_usage"}
            features -= drop
        start = self._next_ms
        self._next_ms += int(rng.expovariate(1 / SESSION_SPACING_S) * 1000) + 60_000
        return self._plan(features, start)

    def resumed(self, source: SessionPlan, start_ms: int, smaller_id: bool | None) -> SessionPlan:
        """A session that replays ``source`` first; its id sorts below/above it if asked."""
        sid = self.ids.uuid()
        while smaller_id is not None and (sid < source.session_id) != smaller_id:
            sid = self.ids.uuid()
        n_calls = max(4, self._n_calls() // 2)
        features = source.features - {"long_gaps", "spaced", "compact"}
        return replace(
            source,
            session_id=sid,
            n_calls=n_calls,
            start_ms=start_ms,
            features=features,
            n_agents=self._n_agents(n_calls),
            segments=(),
        )

    def _plan(self, features: frozenset[str], start: int) -> SessionPlan:
        """Fill in the remaining choices of a session with these features."""
        rng = self.rng
        n_calls = self._n_calls()
        model = SONNET if "sonnet" in features else OPUS
        legacy = "legacy_usage" in features
        # A Sonnet session opens with a large spec attached (1M-context beta): its
        # prompts exceed 200k from the start, where the long-context premium applies.
        opening = rng.randrange(190_000, 230_000) if model == SONNET else rng.randrange(200, 3_000)
        if model == SONNET:
            compact_at = rng.randrange(260_000, 480_000)  # crosses the 200k premium line
        else:
            compact_at = rng.randrange(160_000, 450_000)
        return SessionPlan(
            session_id=self.ids.uuid(),
            cwd=rng.choice(PROJECTS),
            branch=rng.choice(BRANCHES),
            slug="-".join(rng.sample(_SLUG_WORDS, 3)),
            version=_version(features),
            model=model,
            geo=rng.choice(("not_available", "not_available", "global", "")),
            ttl_s=3600 if "ttl_1h" in features and not legacy else 300,
            n_calls=n_calls,
            start_ms=start,
            compact_at=compact_at,
            n_agents=self._n_agents(n_calls),
            features=features,
            opening=opening,
            segments=_segments(features),
        )

    def _n_calls(self) -> int:
        """Main calls of one session: log-normal around the configured mean."""
        mean = max(4, self.mean_calls)
        drawn = round(mean * math.exp(self.rng.gauss(-0.125, 0.5)))
        return min(max(drawn, 4, mean // 4), mean * 3)

    def _n_agents(self, n_calls: int) -> int:
        """Subagents spawned by a session: about one per 40 calls, at least one."""
        return 1 + sum(1 for _ in range(n_calls // 40) if self.rng.random() < 0.8)


def _version(features: frozenset[str]) -> str:
    """The Claude Code version a session's quirks imply."""
    if "legacy_usage" in features:
        return LEGACY_USAGE_VERSION
    return LEGACY_LAYOUT_VERSION if "legacy_layout" in features else VERSION


def assign_features(n: int) -> list[frozenset[str]]:
    """Hand every feature to one of ``n`` sessions, round-robin, avoiding conflicts.

    ``legacy_usage`` goes last, to a session without a conflicting feature (with
    a single session there may be none: the tree then has no old usage records).
    """
    sets: list[set[str]] = [set() for _ in range(n)]
    for k, feature in enumerate(f for f in FEATURES if f != "legacy_usage"):
        sets[k % n].add(feature)
    free = [s for s in sets if not s & _LEGACY_CONFLICTS]
    if free:
        free[0].add("legacy_usage")
    return [frozenset(s) for s in sets]


def _segments(features: frozenset[str]) -> tuple[Segment, ...]:
    """Model/mode switches, at fixed disjoint stretches so features never overlap."""
    segs = []
    if "fast" in features:
        segs.append(Segment(0.15, 0.35, OPUS, "not_available", "fast"))
    if "us" in features:
        segs.append(Segment(0.45, 0.6, OPUS, "us"))
    if "nova" in features:
        segs.append(Segment(0.7, 0.85, NOVA, "not_available"))
    return tuple(segs)


def agent_model(rng: random.Random) -> str:
    """The model of a spawned subagent: mostly Haiku."""
    roll = rng.random()
    return HAIKU if roll < 0.7 else SONNET if roll < 0.85 else OPUS
