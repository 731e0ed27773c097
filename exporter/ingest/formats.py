"""The agents whose logs ingest reads: where each keeps them, and which parser reads them.

Each agent is a :class:`LogFormat`: the directories below a root that hold
its logs, and a chunk parser (complete lines → requests, plus the state a
later read starts from). Everything else — discovery walks, tailing with
checkpoints, worker processes, the ledger's keys and provenance — is shared.
A third agent is one module and one entry in :data:`FORMATS`.

Roots: Claude Code's are config directories (``~/.claude``, entries of
``CLAUDE_CONFIG_DIR``) or their ``projects`` folder; Codex's are homes
(``~/.codex``, entries of ``CODEX_HOME``), whose ``sessions`` and
``archived_sessions`` folders hold its rollout files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple, Protocol

from exporter.ingest import ahead
from exporter.ingest.discover import is_compaction_file, projects_dirs
from exporter.records import CLAUDE_AGENT, CODEX_AGENT, Checkpoint, Chunk, Parsed

CLAUDE: Final = CLAUDE_AGENT
# Not exporter.ingest.codex.AGENT: the parser is imported when a Codex file is read, not
# before (a Claude Code-only run never pays for it).
CODEX: Final = CODEX_AGENT
AGENTS: Final = (CLAUDE, CODEX)
"""Every agent, in the order views list them."""
AGENT_NAMES: Final = {CLAUDE: "Claude Code", CODEX: "Codex"}
"""What the views call each agent."""


class LogFormat(Protocol):
    """One agent's logs: where below a root they are, and how a chunk of one is parsed."""

    @property
    def agent(self) -> str:
        """The agent's name (``claude``, ``codex``): the ledger's roots and the views use it."""

    def log_dirs(self, root: Path) -> list[Path]:
        """The directories below ``root`` whose ``*.jsonl`` files are this agent's logs."""

    def parse_chunk(
        self, chunk: Chunk, before: Checkpoint | None, into: Parsed, *, now: float,
        max_line_bytes: int,
    ) -> tuple[Chunk, int]:
        """Parse ``chunk`` into ``into``: (the chunk as taken, lines left for a later pass)."""


@dataclass(frozen=True, slots=True)
class _Claude:
    """Claude Code: ``projects/<project>/<session>.jsonl`` and the files deeper down."""

    agent: str = CLAUDE

    def log_dirs(self, root: Path) -> list[Path]:
        """The root's ``projects`` folder (or the root itself if it is one)."""
        return projects_dirs([root])

    def parse_chunk(
        self, chunk: Chunk, before: Checkpoint | None, into: Parsed, *, now: float,
        max_line_bytes: int,
    ) -> tuple[Chunk, int]:
        """Claude Code's parser (exporter.ingest.parse), lines ahead of the clock left."""
        return ahead.parse_chunk(chunk, before, into, compaction_file=is_compaction_file(
            chunk.path), now=now, max_line_bytes=max_line_bytes)


@dataclass(frozen=True, slots=True)
class _Codex:
    """OpenAI Codex CLI: ``sessions/YYYY/MM/DD/rollout-*.jsonl`` and ``archived_sessions/``."""

    agent: str = CODEX

    def log_dirs(self, root: Path) -> list[Path]:
        """A home's session folders (those present; both when neither is yet), or the root."""
        found = [root / "sessions", root / "archived_sessions"]
        if any(d.is_dir() for d in found) or root.name not in ("sessions", "archived_sessions"):
            return found
        return [root]

    def parse_chunk(
        self, chunk: Chunk, before: Checkpoint | None, into: Parsed, *, now: float,
        max_line_bytes: int,
    ) -> tuple[Chunk, int]:
        """Codex's parser (exporter.ingest.codex)."""
        from exporter.ingest import codex  # noqa: PLC0415 - see CODEX

        return codex.parse_chunk(chunk, before, into, now=now, max_line_bytes=max_line_bytes)


FORMATS: Final[Mapping[str, LogFormat]] = {CLAUDE: _Claude(), CODEX: _Codex()}


class Root(NamedTuple):
    """A directory given to ingest, and whose logs it holds."""

    path: Path
    agent: str = CLAUDE


def default_codex_homes(env: Mapping[str, str], home: Path) -> list[Path]:
    """Codex's homes: each entry of ``$CODEX_HOME`` (a comma list), else ``~/.codex``."""
    given = [Path(e.strip()).expanduser() for e in env.get("CODEX_HOME", "").split(",")
             if e.strip()]
    return given or [home / ".codex"]


def looks_like_codex_home(path: Path) -> bool:
    """Whether a directory given as a data dir is a Codex home (or one of its session folders)."""
    if path.name in ("sessions", "archived_sessions") and (path.parent / "config.toml").exists():
        return True
    return (path / "sessions").is_dir() or (path / "archived_sessions").is_dir()


def split_data_dirs(dirs: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """``--data-dir`` values split into (Claude Code roots, Codex homes), by what each holds."""
    claude: list[Path] = []
    homes: list[Path] = []
    for d in dirs:
        (homes if looks_like_codex_home(d) else claude).append(d)
    return claude, homes


def agent_of(path: str, tops: Sequence[tuple[str, str]]) -> str:
    """The agent of a log file: that of the deepest of ``tops`` ((dir, agent)) holding it."""
    best, agent = "", CLAUDE
    for given, kind in tops:
        top = given.rstrip(os.sep)
        if path.startswith(top + os.sep) and len(top) > len(best):
            best, agent = top, kind
    return agent
