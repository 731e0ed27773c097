"""Discover stage: where transcripts live, and which files are transcripts.

Roots, in order: every entry of ``$CLAUDE_CONFIG_DIR`` (a comma list), then
``~/.claude`` and ``$XDG_CONFIG_HOME/claude`` (default ``~/.config/claude``).
Explicit data directories replace the defaults. Each root may be a Claude
config directory (``…/projects`` below it) or a ``projects`` directory itself.
The walk is recursive (subagent, compaction and workflow files sit deeper),
iterative (no recursion limit to hit) and bounded in depth. It follows
symlinks (a dotfiles or sync set-up links each ``projects/<p>`` to a folder
elsewhere) after the real tree: a linked directory is entered once whatever
the names that reach it (by device and inode), and never a link to a
projects directory or to one above it (a loop). A file is found once
whatever its names: by its real name in the tree when it has one, else by
its smallest name through a link. ``canonical_key`` gives an event's path
the same name.

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
    walk = _Walk(on_problem, max_depth, [os.path.realpath(t) for t in tops])
    for top in tops:  # the real trees first: their names win, and their directories are known
        walk.tree([(top, 0)], top)
    while walk.links:  # then what links reach, in name order, round by round
        pending, walk.links = sorted(walk.links), []
        walk.tree(pending[::-1], pending[0][0], linked=True)
    return sorted(key for _, key in walk.names.values())


class _Walk:
    """One walk's state: directories entered, each file's best name, links still to follow."""

    def __init__(self, on_problem: OnProblem | None, max_depth: int, real_tops: list[str]) -> None:
        """A walk below tops whose resolved paths are ``real_tops``."""
        self.on_problem = on_problem
        self.max_depth = max_depth
        self.real_tops = real_tops
        self.entered: set[tuple[int, int]] = set()  # (device, inode) of directories walked
        self.names: dict[object, tuple[bool, str]] = {}  # file identity -> (linked, key)
        self.links: list[tuple[str, int]] = []  # linked directories to walk, with their depth

    def tree(self, stack: list[tuple[str, int]], label: str, *, linked: bool = False) -> None:
        """Walk the directories on ``stack`` and below, depth first, without recursion."""
        too_deep = 0
        while stack:
            where, depth = stack.pop()
            listed, dev = self._list(where)
            for entry in listed:
                if _is_dir(entry):
                    if depth + 1 > self.max_depth:
                        too_deep += 1
                    elif not entry.is_symlink():
                        stack.append((entry.path, depth + 1))
                    elif not self._loops(entry.path):
                        self.links.append((entry.path, depth + 1))
                elif entry.name.endswith(".jsonl"):
                    self._found(entry, dev, linked)
        if too_deep and self.on_problem:
            noun = "directory" if too_deep == 1 else "directories"
            self.on_problem("transcript_dirs_too_deep", path_key(label),
                            f"{too_deep} {noun} deeper than {self.max_depth} levels skipped")

    def _list(self, where: str) -> tuple[list[os.DirEntry[str]], int]:
        """The entries of a directory not entered yet (none if it was), and its device."""
        try:
            st = os.stat(where)
            if (st.st_dev, st.st_ino) in self.entered:
                return [], 0  # reached again through a link: walked once
            self.entered.add((st.st_dev, st.st_ino))
            with os.scandir(where) as entries:
                return list(entries), st.st_dev
        except OSError as err:
            if self.on_problem:
                self.on_problem("transcript_dir_unreadable", path_key(where),
                                err.strerror or str(err))
            return [], 0

    def _loops(self, link: str) -> bool:
        """True for a link to a projects directory walked, or to a directory above one."""
        target = os.path.realpath(link)
        return any(t == target or t.startswith(target.rstrip("/") + "/") for t in self.real_tops)

    def _found(self, entry: os.DirEntry[str], dev: int, linked: bool) -> None:
        """Note one transcript name; of several names of one file, the real one, else the least."""
        key = path_key(entry.path)
        ident: object = (dev, entry.inode())
        if entry.is_symlink():
            linked = True
            try:
                st = os.stat(entry.path)
                ident = (st.st_dev, st.st_ino)
            except OSError:
                ident = key  # dangling or a loop: kept, so that reading it says why
        best = self.names.get(ident)
        if best is None or (linked, key) < best:
            self.names[ident] = (linked, key)


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
