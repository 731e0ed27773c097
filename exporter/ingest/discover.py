"""Discover stage: where transcripts live, and which files are transcripts.

Roots, in order: every entry of ``$CLAUDE_CONFIG_DIR`` (a comma list), then
``~/.claude`` and ``$XDG_CONFIG_HOME/claude`` (default ``~/.config/claude``).
Explicit data directories replace the defaults. Each root may be a Claude
config directory (``…/projects`` below it) or a ``projects`` directory itself.
The walk is recursive (subagent, compaction and workflow files sit deeper)
and never follows directory symlinks, so a link loop cannot trap it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

OnProblem = Callable[[str, str, str], None]
"""Called as ``on_problem(event, path, detail)`` for a missing or unreadable directory."""


def default_roots(env: Mapping[str, str], home: Path) -> list[Path]:
    """The transcript roots a user can have, most specific first, without duplicates."""
    roots: list[Path] = []
    for entry in env.get("CLAUDE_CONFIG_DIR", "").split(","):
        if entry.strip():
            roots.append(Path(entry.strip()).expanduser())
    xdg = env.get("XDG_CONFIG_HOME", "").strip()
    # The well-known roots are Claude config directories: only their projects/ holds
    # transcripts (history.jsonl and friends beside it are not), even before it exists.
    roots.append(home / ".claude" / "projects")
    roots.append((Path(xdg) if xdg else home / ".config") / "claude" / "projects")
    return _unique(roots)


def projects_dirs(roots: Iterable[Path]) -> list[Path]:
    """The ``projects`` directory of each root (or the root itself if it is one)."""
    out = []
    for root in roots:
        nested = root / "projects"
        out.append(nested if root.name != "projects" and nested.is_dir() else root)
    return _unique(out)


def find_transcripts(dirs: Sequence[Path], on_problem: OnProblem | None = None) -> list[str]:
    """Every ``*.jsonl`` file below ``dirs``, sorted, as absolute path strings."""
    found: set[str] = set()
    for top in dirs:
        if not top.is_dir():
            if on_problem:
                on_problem("transcript_root_missing", str(top), "not a directory")
            continue
        found.update(_walk(top, on_problem))
    return sorted(found)


def _walk(top: Path, on_problem: OnProblem | None) -> Iterable[str]:
    """Yield transcript paths below one directory, reporting unreadable parts."""

    def onerror(err: OSError) -> None:
        if on_problem:
            on_problem("transcript_dir_unreadable", str(err.filename), err.strerror or str(err))

    for dirpath, _dirnames, filenames in os.walk(top, onerror=onerror, followlinks=False):
        for name in filenames:
            if name.endswith(".jsonl"):
                yield os.path.abspath(os.path.join(dirpath, name))


def is_compaction_file(path: str) -> bool:
    """True for an auto-compaction call's file (``agent-acompact-*.jsonl``)."""
    return os.path.basename(path).startswith("agent-acompact")


def _unique(paths: Iterable[Path]) -> list[Path]:
    """Keep the first of each path, comparing resolved locations."""
    seen: set[str] = set()
    out = []
    for p in paths:
        key = os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out
