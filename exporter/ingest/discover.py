"""Discover stage: where transcripts live, and which files are transcripts.

Roots, in order: every entry of ``$CLAUDE_CONFIG_DIR`` (a comma list), then
``~/.claude`` and ``$XDG_CONFIG_HOME/claude`` (default ``~/.config/claude``).
Explicit data directories replace the defaults. Each root may be a Claude
config directory (``…/projects`` below it) or a ``projects`` directory itself.
The walk is recursive (subagent, compaction and workflow files sit deeper),
iterative (no recursion limit to hit), bounded in depth, and never follows
directory symlinks, so a link loop cannot trap it.

File names are bytes to the kernel and need not be UTF-8. Paths travel
through the pipeline as *keys*: the path itself when it is valid UTF-8 (every
name Claude Code writes), else an escaped form (``fsbytes:/p/caf%E9.jsonl``)
that the ledger can store. ``fs_path`` turns a key back into the path for a
system call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final
from urllib.parse import unquote_to_bytes

OnProblem = Callable[[str, str, str], None]
"""Called as ``on_problem(event, path, detail)`` for a missing or unreadable directory."""

MAX_DEPTH: Final = 32
"""Directory levels below a projects dir that are walked (Claude Code uses about 5)."""

KEY_PREFIX: Final = "fsbytes:"  # cannot start an absolute path, so no real path is taken for it


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


def transcript_dirs(data_dirs: Sequence[Path], env: Mapping[str, str], home: Path) -> list[Path]:
    """The projects directories a command reads: of ``data_dirs``, or of every default root."""
    return projects_dirs(list(data_dirs) or default_roots(env, home))


def present(dirs: Iterable[Path]) -> list[Path]:
    """Those of ``dirs`` that exist as directories (absent default roots are normal)."""
    return [d for d in dirs if d.is_dir()]


def projects_dirs(roots: Iterable[Path]) -> list[Path]:
    """The ``projects`` directory of each root (or the root itself if it is one)."""
    out = []
    for root in roots:
        nested = root / "projects"
        out.append(nested if root.name != "projects" and nested.is_dir() else root)
    return _unique(out)


def find_transcripts(
    dirs: Sequence[Path], on_problem: OnProblem | None = None, *, max_depth: int = MAX_DEPTH,
) -> list[str]:
    """Every ``*.jsonl`` file below ``dirs``, sorted, as absolute path keys.

    Directories deeper than ``max_depth`` levels are not entered; each walk
    that met some reports them once, with their number, as
    ``transcript_dirs_too_deep``.
    """
    found: set[str] = set()
    for top in dirs:
        if not top.is_dir():
            if on_problem:
                on_problem("transcript_root_missing", path_key(str(top)), "not a directory")
            continue
        found.update(_walk(os.path.abspath(top), on_problem, max_depth))
    return sorted(found)


def _walk(top: str, on_problem: OnProblem | None, max_depth: int) -> Iterator[str]:
    """Yield the transcript keys below one directory, depth first, without recursion."""
    stack = [(top, 0)]
    too_deep = 0
    while stack:
        where, depth = stack.pop()
        try:
            with os.scandir(where) as entries:
                listed = list(entries)
        except OSError as err:
            if on_problem:
                on_problem("transcript_dir_unreadable", path_key(where), err.strerror or str(err))
            continue
        for entry in listed:
            if _is_dir(entry):
                if entry.is_symlink():
                    continue  # a link loop (or a link out of the tree) is never followed
                if depth + 1 > max_depth:
                    too_deep += 1
                else:
                    stack.append((entry.path, depth + 1))
            elif entry.name.endswith(".jsonl"):
                yield path_key(entry.path)
    if too_deep and on_problem:
        noun = "directory" if too_deep == 1 else "directories"
        on_problem("transcript_dirs_too_deep", path_key(top),
                   f"{too_deep} {noun} deeper than {max_depth} levels skipped")


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """True for a directory (or a link to one), as ``os.walk`` decides; False if it vanished."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def path_key(path: str) -> str:
    """The text a path is known by: itself, or an escaped form if its bytes are not UTF-8."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # os.fsdecode gave surrogates for the undecodable bytes
        raw = os.fsencode(path)
        return KEY_PREFIX + "".join(
            chr(b) if 0x20 < b < 0x7F and b != 0x25 else f"%{b:02X}" for b in raw
        )
    return path


def fs_path(key: str) -> str:
    """The path for system calls of a key made by ``path_key``."""
    if not key.startswith(KEY_PREFIX):
        return key
    return os.fsdecode(unquote_to_bytes(key[len(KEY_PREFIX):]))


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
