"""Small typed values that connect the stages: tail → parse → ledger → projections.

Nothing here does I/O. Every stage imports this module; it imports no stage.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final, NamedTuple, Protocol


class Source(IntEnum):
    """Who made a request.

    The integer order is the merge order: a request seen as a sidechain
    anywhere is a sidechain, whichever copy was read first.
    """

    MAIN = 0
    SUBAGENT = 1
    COMPACTION = 2
    # A billed part of a request that its line's top-level usage leaves out (an advisor
    # consultation in ``usage.iterations``): its own row, keyed under the request's key.
    ADVISOR = 3

    @property
    def label(self) -> str:
        """The metric label value: ``main``, ``subagent``, ``compaction`` or ``advisor``."""
        return self.name.lower()


CLAUDE_AGENT: Final = "claude"
CODEX_AGENT: Final = "codex"
"""Whose logs a root holds (``roots.agent``, the plan tables' ``agent``, ``--agent``)."""
CODEX_KEY_PREFIX: Final = "codex\x1f"
"""How a Codex turn's key starts (exporter.ingest.codex); no Claude Code key (a message id) does."""


class LineResult:
    """Values of the ``result`` label of ``claude_code_exporter_lines_total``."""

    USAGE = "usage"
    DUPLICATE = "duplicate"
    OTHER = "other"
    REJECTED = "rejected"


class RejectReason:
    """Values of the ``reason`` label of rejected lines (``LineCounts.rejected``)."""

    INVALID_UTF8 = "invalid_utf8"
    INVALID_JSON = "invalid_json"
    NOT_OBJECT = "not_object"
    TOO_LONG = "too_long"
    BAD_MESSAGE = "bad_message"
    BAD_USAGE = "bad_usage"
    NEGATIVE_TOKENS = "negative_tokens"
    MISSING_ID = "missing_id"
    BAD_TIMESTAMP = "bad_timestamp"


class MendKind:
    """Values of the ``kind`` label of mended lines (``LineCounts.mended``)."""

    LONE_SURROGATE = "lone_surrogate"  # a string cut mid-emoji (exporter.ingest.mend)
    # A Codex turn before any turn_context named its model: priced as the fallback
    # (exporter.ingest.codex.FALLBACK_MODEL), shown as assumed.
    MODEL_ASSUMED = "model_assumed"

    ALL = (LONE_SURROGATE,)  # the kinds /metrics shows from the start (Claude Code's)


class IterationKind:
    """What ``LineCounts.iterations`` counts, by key (unknown types: ``unknown:<name>``)."""

    ADVISOR = "advisor"  # consultations billed on top (one per entry per line)
    FALLBACK = "fallback"  # attempts a server-side fallback served
    SUPERSEDED = "superseded"  # attempts a fallback replaced: not billed
    MISMATCH = "mismatch"  # lines whose parts do not add up to their top-level usage
    BAD = "bad"  # entries that are not objects with valid counts
    UNKNOWN = "unknown"  # prefix of an undocumented type's key; the name if it is a plain one

    FIXED = (ADVISOR, FALLBACK, SUPERSEDED, MISMATCH, BAD, UNKNOWN)


class Request(NamedTuple):
    r"""One API request as seen on one transcript line (or as merged in the ledger).

    ``key`` is ``message.id + "\x1f" + requestId`` (or ``message.id`` alone).
    Token fields merge by maximum, ``ts`` by minimum; the descriptive fields
    (model, session, project) come from the copy with the smallest
    ``(ts, session)`` so the result does not depend on reading order. An
    attribution field comes from the earliest copy that has one (a streamed
    response names its MCP server on the tool_use block's line only).
    """

    key: str
    ts: float  # epoch seconds of the line's timestamp
    model: str
    session: str
    project: str  # the record's cwd, verbatim
    source: Source
    input: int
    output: int
    cache_read: int
    cache_write_5m: int
    cache_write_1h: int
    service_tier: str = ""
    inference_geo: str = ""
    speed: str = ""
    recorded_cost_usd: float = 0.0  # old builds' top-level costUSD, an aside only
    web_search: int = 0  # usage.server_tool_use.web_search_requests (billed per search)
    # Attribution (docs/figures.md, "Attribution"): the line's attributionSkill,
    # attributionPlugin, attributionMcpServer, attributionAgent and effort; "" when absent.
    skill: str = ""
    plugin: str = ""
    mcp_server: str = ""
    agent: str = ""
    effort: str = ""
    # Output tokens spent reasoning, a part of ``output`` (Codex writes them apart; Claude
    # Code does not): shown on their own, never added again.
    reasoning: int = 0
    # The model's context window as the log states it (Codex's ``model_context_window``;
    # 0: not stated): a prompt's share of it is a figure of its own.
    context_window: int = 0
    # Set by the ledger only: seconds since the latest earlier main request of any
    # transcript holding this one (None: first of its conversation, or not main).
    gap: float | None = None

    @property
    def cache_write(self) -> int:
        """All cache-write tokens (5 m + 1 h)."""
        return self.cache_write_5m + self.cache_write_1h

    @property
    def context(self) -> int:
        """Prompt size: input + cache read + cache writes."""
        return self.input + self.cache_read + self.cache_write_5m + self.cache_write_1h


def merge(a: Request, b: Request) -> Request:
    """Merge two copies of one request: per-field max, earliest time, stable labels.

    ``gap`` is the ledger's to set; a merge leaves it unset. Attribution: the
    earliest copy's value, else the other's (never a blank over a name).
    """
    if (b.ts, b.session) < (a.ts, a.session):
        a, b = b, a  # ``a`` is the earliest copy: its descriptive fields win
    # Positional construction: this runs once per transcript line on cold scans.
    return Request(
        a.key, a.ts, a.model, a.session, a.project,
        max(a.source, b.source), max(a.input, b.input), max(a.output, b.output),
        max(a.cache_read, b.cache_read), max(a.cache_write_5m, b.cache_write_5m),
        max(a.cache_write_1h, b.cache_write_1h), a.service_tier, a.inference_geo, a.speed,
        max(a.recorded_cost_usd, b.recorded_cost_usd), max(a.web_search, b.web_search),
        a.skill or b.skill, a.plugin or b.plugin, a.mcp_server or b.mcp_server,
        a.agent or b.agent, a.effort or b.effort, max(a.reasoning, b.reasoning),
        max(a.context_window, b.context_window),
    )


def gap_seconds(later: float, earlier: float) -> float:
    """Return the time between two request timestamps, rounded to whole milliseconds.

    Transcript timestamps have millisecond resolution; rounding removes the float
    noise of epoch seconds, so a 300.000 s gap is exactly 300 (bucket ``lt_5m``).
    """
    return round((later - earlier) * 1000) / 1000


ATTRIBUTION: Final = ("skill", "plugin", "mcp_server", "agent", "effort")
"""The attribution fields of a Request (and columns of the ledger's requests), in order."""


class CountClass(NamedTuple):
    """The raw dimensions a request is counted under: one rollup row per class and root set.

    Raw on purpose (model id, cwd, price-class fields, price period, gap bucket):
    label policies and prices apply when the rows are read, so neither needs
    the history to be counted again.
    """

    model: str
    project: str
    source: int
    geo: str
    tier: str
    speed: str
    long: int  # 1 when the prompt is past the model's long-context threshold
    period: int  # price period: how many of the model's price changes precede the request
    gap: str  # gap bucket of a main request, "" for the others


COUNT_SUMS = ("requests", "input", "output", "cache_read", "cache_write_5m", "cache_write_1h",
              "web_search")
"""The sums each rollup row keeps, in this order."""


class HistSeries(NamedTuple):
    """One histogram series in raw form: catalogue name, raw model, source, architecture."""

    name: str
    model: str
    source: int
    arch: str


ALL_ROOTS = -1
"""The roots bitmask of requests from a v1 ledger (never recorded where they came from):
every bit set, so they are in every scope."""

TTL_5M = 300.0  # prompt-cache lifetimes, and the bounds of the gap buckets (docs/figures.md)
TTL_1H = 3600.0
ACTIVE_GAP_SECONDS = 120.0  # a gap this short is "the model generating" (the speed figure)


class Appearance(NamedTuple):
    """Where some requests were read: one transcript file, its root and its session.

    ``root`` is the transcript directory the file was found under; ``session``
    the session id its lines carry (the smallest one, should several occur).
    The ledger keeps every appearance for good, also after the file is gone.
    """

    path: str
    root: str
    session: str
    keys: tuple[str, ...]
    agent: str = "claude"  # whose log the file is (exporter.ingest.formats), noted on its root


@dataclass(slots=True)
class LineCounts:
    """How the lines of some bytes were classified.

    ``usage_lines`` counts lines that carried a request (before global dedupe);
    the ledger splits them into ``usage`` (new key) and ``duplicate``.
    """

    usage_lines: int = 0
    other: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    # ``usage.iterations`` entries by what was made of them (exporter.ingest.iterations):
    # not lines, so not in ``total``.
    iterations: Counter[str] = field(default_factory=Counter)
    # Lines read despite an oddity that was mended (by MendKind): each
    # is also counted above, as whatever it turned out to be.
    mended: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        """Every line counted exactly once."""
        return self.usage_lines + self.other + sum(self.rejected.values())

    def add(self, other: LineCounts) -> None:
        """Accumulate another batch's counts into this one."""
        self.usage_lines += other.usage_lines
        self.other += other.other
        self.rejected.update(other.rejected)
        self.iterations.update(other.iterations)
        self.mended.update(other.mended)


RootLines = dict[str, tuple[LineCounts, int]]
"""A batch's line counts and bytes read by transcript root (a scan's files, folded by root)."""


class LimitSample(NamedTuple):
    """One reading of an agent's plan windows written into its own log (Codex's ``rate_limits``).

    The status line's samples come by the spool; these come with the transcripts.
    ``windows`` is sorted and checked (exporter.ingest.plausible); the same reading
    seen again (a repeated event, a fork's copy of its parent's history) keeps its
    first and last time.
    """

    agent: str  # exporter.ingest.formats: "codex"
    windows: tuple[tuple[str, float, float], ...]  # (window name, used %, resets_at epoch s)
    first: float  # the first and last time this reading was seen
    last: float


@dataclass(slots=True)
class Parsed:
    """What the parser made of a run of complete lines.

    ``requests`` is already merged per key within the batch; the ledger tells
    new keys from known ones, and every other usage line is a duplicate.
    """

    requests: dict[str, Request] = field(default_factory=dict)
    counts: LineCounts = field(default_factory=LineCounts)
    # Plan-window readings from the logs, by (agent, windows): each reading once.
    limits: dict[tuple[str, tuple[tuple[str, float, float], ...]], LimitSample] = field(
        default_factory=dict)
    # Readings rejected, by (agent, reason): exporter.ingest.plausible's, and "bad_record".
    limit_rejected: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(self, req: Request) -> None:
        """Record one usage-bearing line."""
        old = self.requests.get(req.key)
        self.requests[req.key] = req if old is None else merge(old, req)
        self.counts.usage_lines += 1

    def update(self, other: Parsed) -> None:
        """Fold another batch into this one (order does not matter)."""
        for key, req in other.requests.items():
            old = self.requests.get(key)
            self.requests[key] = req if old is None else merge(old, req)
        self.counts.add(other.counts)
        for sample in other.limits.values():
            self.add_limit(sample)
        self.limit_rejected.update(other.limit_rejected)

    def add_limit(self, sample: LimitSample) -> None:
        """Record one plan-window reading (a known one widens its first and last time)."""
        key = (sample.agent, sample.windows)
        old = self.limits.get(key)
        if old is None:
            self.limits[key] = sample
        elif sample.first < old.first or sample.last > old.last:  # (no _replace: per event)
            self.limits[key] = LimitSample(sample.agent, sample.windows,
                                           min(old.first, sample.first),
                                           max(old.last, sample.last))


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """How far one transcript file has been read, and how to recognise it again.

    ``fingerprint`` hashes the first ``fp_len`` bytes (and, in the tail stage's
    format, the bytes just before ``offset``): a file whose remembered bytes
    changed was replaced or rewritten, not appended to, and is read again
    from the start.
    """

    path: str
    dev: int
    ino: int
    size: int
    offset: int
    fp_len: int
    fingerprint: str
    mtime_ns: int = 0
    # A log format's parser state after ``offset`` ("" for Claude Code's, which needs none):
    # a Codex file's session, model and running totals, so a read can start mid-file.
    carry: str = ""


@dataclass(slots=True)
class Chunk:
    """Complete lines read from one file, plus the checkpoint after them."""

    path: str
    data: bytes
    start: int
    checkpoint: Checkpoint
    restarted: bool = False  # the file was truncated or replaced: read from 0
    too_long: int = 0  # lines over the line-size limit, skipped unread (rejected: too_long)
    reason: str = ""  # why a restarted file is read again: truncated, replaced, rewritten


# ------------------------------------------------ between the ledger and the projections

CountRow = tuple[int, CountClass, float, float, tuple[int, ...]]
"""A counter rollup row or increment: roots bitmask, class, first and last request time, sums."""
HistRow = tuple[int, HistSeries, int, float]
"""A histogram rollup row or increment: roots bitmask, series, bucket (-1: the sum), value."""


class Rules(Protocol):
    """The counting rules the rollups follow (exporter.projections.counting.Counting).

    A class depends on a request's context, time and gap only through
    thresholds (a long-context limit, price-change dates, gap buckets: each
    non-decreasing in its value), and on its other fields by value; the sums
    are the :data:`COUNT_SUMS` fields (the count, then the request's fields of
    those names). The raw pass counts whole groups of rows on that basis.
    """

    fingerprint: str

    def count_class(self, req: Request) -> CountClass:
        """The class a request counts under."""

    def sums(self, req: Request, count: int = 1) -> tuple[int, ...]:
        """The sums a request adds (``count`` requests)."""

    def cuts(self, model: str) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
        """Context sizes, times and gaps where a request of ``model`` may change class.

        A hint for grouping rows: each group is classed at its edges and
        row by row should they differ, so a wrong hint costs time, not exactness.
        """

    def observations(self, req: Request) -> list[tuple[HistSeries, int, int | float]]:
        """The histogram values of a settled request, with their buckets."""


@dataclass(slots=True)
class Applied:
    """What one batch changed: rows, and the rollup increments they made.

    ``counts`` and ``hists`` are exactly what was added to the stored rollups,
    so a projection that starts from the rollups and adds these stays equal
    to one started later. ``roots`` maps each root path to its bit.
    """

    new: list[Request] = field(default_factory=list)
    upgraded: list[tuple[Request, Request]] = field(default_factory=list)  # (old, new)
    lines: dict[str, int] = field(default_factory=dict)  # by result label
    rejected: dict[str, int] = field(default_factory=dict)  # by reason
    bytes_read: int = 0
    counts: list[CountRow] = field(default_factory=list)
    hists: list[HistRow] = field(default_factory=list)
    late: int = 0  # upgrades of requests already in the histograms
    roots: dict[str, int] = field(default_factory=dict)
    # How many rows the batch added and changed: ``new`` and ``upgraded`` list them, but a
    # raw pass (see Ledger.bulk) has no per-row lists, only these counts.
    new_count: int = 0
    upgraded_count: int = 0
    iterations: dict[str, int] = field(default_factory=dict)  # usage.iterations entries, by kind
    mended: dict[str, int] = field(default_factory=dict)  # lines read once an oddity was mended
    # The project folders of the batch's files (exporter.projections.project_groups).
    folders: set[str] = field(default_factory=set)
    # Whose logs each root of ``roots`` holds ("claude", "codex": exporter.ingest.formats).
    agents: dict[str, str] = field(default_factory=dict)
