"""Discover stage: where transcripts live, and which files are transcripts.

Roots, in order: every entry of ``$CLAUDE_CONFIG_DIR`` (a comma list), then
``~/.claude`` and ``$XDG_CONFIG_HOME/claude`` (default ``~/.config/claude``).
Explicit data directories replace the defaults. Each root may be a Claude
config directory (``…/projects`` below it) or a ``projects`` directory itself.
The walk is recursive (subagent, compaction and workflow files sit deeper),
iterative (no recursion limit to hit) and bounded in depth. It follows
symlinks (a dotfiles or sync set-up links each ``projects/<p>`` to a folder
elsewhere) after the real trees, which cost nothing more than before: a
folder a link reaches is entered once whatever the names that reach it (by
its resolved path), not at all when it is in a walked tree, and never when
it holds one (a loop). A file is found once whatever its names: by its real
name in a tree when it has one, else by the first name a link gives it (in
name order). ``canonical_key`` gives an event's path the same name.

File names are bytes to the kernel and need not be UTF-8. Paths travel
through the pipeline as *keys*: the path itself when it is valid UTF-8 (every
name Claude Code writes), else an escaped form (``fsbytes:/p/caf%E9.jsonl``)
that the ledger can store. ``fs_path`` turns a key back into the path for a
system call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    """Every ``*.jsonl`` file below ``dirs``, sorted, as absolute path keys, each file once.

    Directories deeper than ``max_depth`` levels are not entered; each walk
    that met some reports them once, with their number, as
    ``transcript_dirs_too_deep``.
    """
    tops: list[str] = []
    for given in dirs:
        if given.is_dir():
            tops.append(os.path.abspath(given))
        elif on_problem:
            on_problem("transcript_root_missing", path_key(str(given)), "not a directory")
    walk = _Walk(on_problem, max_depth, tops)
    for top in tops:  # the real trees first, as they are: no system call beyond the listing
        walk.tree([(top, "", 0)], top)
    while walk.links:  # then the folders links reach outside them, in name order
        pending, walk.links = sorted(walk.links), []
        for link, depth in pending:
            real = os.path.realpath(link)
            if walk.inside(real) is None and not walk.above(real) and real not in walk.entered:
                walk.entered.add(real)
                walk.tree([(link, real, depth)], link)
    walk.file_links()
    return sorted(walk.keys)


class _Walk:
    """One walk's state: the names found, the folders entered through links, links to follow.

    A folder a link reaches is known by its resolved path: entered once, and
    never when it is in a walked tree (walked already) or above one (a loop).
    """

    def __init__(self, on_problem: OnProblem | None, max_depth: int, tops: list[str]) -> None:
        """A walk below ``tops`` (absolute)."""
        self.on_problem = on_problem
        self.max_depth = max_depth
        self.tops = [(top.rstrip("/"), os.path.realpath(top).rstrip("/")) for top in tops]
        self.keys: set[str] = set()
        self.entered: set[str] = set()  # resolved folders walked through links
        self.reached: dict[str, str] = {}  # resolved path -> key of a file found through a link
        self.links: list[tuple[str, int]] = []  # linked folders to walk, with their depth
        self.linked_files: list[str] = []

    def tree(  # noqa: PLR0912 - one inlined loop over every entry
        self, stack: list[tuple[str, str, int]], label: str,
    ) -> None:
        """Walk the folders on ``stack`` (path, resolved path or "" in a real tree, depth)."""
        too_deep = 0
        while stack:
            where, real, depth = stack.pop()
            try:
                with os.scandir(where) as entries:
                    listed = list(entries)
            except OSError as err:
                if self.on_problem:
                    self.on_problem("transcript_dir_unreadable", path_key(where),
                                    err.strerror or str(err))
                continue
            for entry in listed:  # inline: this runs for every entry of every folder
                if _is_dir(entry):
                    if depth + 1 > self.max_depth:
                        too_deep += 1
                    elif entry.is_symlink():
                        self.links.append((entry.path, depth + 1))
                    elif not real:
                        stack.append((entry.path, "", depth + 1))
                    elif (inner := f"{real}/{entry.name}") not in self.entered:
                        self.entered.add(inner)
                        stack.append((entry.path, inner, depth + 1))
                elif not entry.name.endswith(".jsonl"):
                    continue
                elif entry.is_symlink():
                    self.linked_files.append(entry.path)
                elif not real:
                    self.keys.add(path_key(entry.path))
                else:
                    self.reached.setdefault(f"{real}/{entry.name}", path_key(entry.path))
        if too_deep and self.on_problem:
            noun = "directory" if too_deep == 1 else "directories"
            self.on_problem("transcript_dirs_too_deep", path_key(label),
                            f"{too_deep} {noun} deeper than {self.max_depth} levels skipped")

    def file_links(self) -> None:
        """Settle the names: linked files by their real name in a tree, else once each."""
        self.keys.update(self.reached.values())
        for link in sorted(self.linked_files):
            real = os.path.realpath(link)
            named = self.inside(real)
            if named is not None:
                self.keys.add(path_key(named))
            elif real not in self.reached:
                self.reached[real] = path_key(link)
                self.keys.add(self.reached[real])

    def inside(self, real: str) -> str | None:
        """The name in a walked tree of the resolved path ``real``, None if it is in none."""
        for top, real_top in self.tops:
            if real == real_top or real.startswith(real_top + "/"):
                return top + real[len(real_top):]
        return None

    def above(self, real: str) -> bool:
        """True when ``real`` holds a walked tree (a link to it is a loop)."""
        base = real.rstrip("/") + "/"
        return any(real_top.startswith(base) for _, real_top in self.tops)


def canonical_key(path: str, tops: Sequence[str]) -> str:
    """The key a full walk gives the file an event names (watches follow links too).

    A file whose real location is below one of ``tops`` (absolute) is known
    by its name there; any other by the name it was given.
    """
    real = os.path.realpath(path)
    for top in tops:
        real_top = os.path.realpath(top)
        if real.startswith(real_top.rstrip("/") + "/"):
            return path_key(top.rstrip("/") + real[len(real_top.rstrip("/")):])
    return path_key(path)


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
