"""Which project a working directory belongs to: its own, or its transcripts' project folder.

Claude Code keeps a session's transcript in a *project folder*,
``<root>/projects/<encoded path>/``, the encoded path being the directory the
session started in with every character but ASCII letters and digits made
``-``. A session's lines carry their ``cwd``, which can differ from that
directory: a ``cd`` into a subdirectory, or a git worktree whose sessions
Claude Code files under the main repository's folder (three worktrees of
``spotter``, ``spotter-worktrees/spotter-gqc`` and two more, all in
``-home-USER-projects-spotter``). Claude Code and ccusage list projects by
folder; under the ``folder`` grouping (the default) so does this exporter.

The grouping works on the paths alone: a cwd belongs to the longest project
folder whose name encodes a leading part of it, and that leading part is the
project's path (``/home/USER/projects/spotter``); a cwd no folder's name
encodes stays its own project. The project is always a leading part of the
cwd, so the label policy (exporter.projections.labels) shows no more of it
than of the cwd. Under ``cwd`` every working directory is its own project.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from exporter.ledger.scopes import folder_of

GROUPINGS: Final = ("folder", "cwd")
Reader = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
"""Runs one read-only query with its parameters (``Ledger.read``)."""
MAX_PATH: Final = 4096  # a longer cwd is its own project (nothing is encoded past this)
MAX_CACHED: Final = 65_536  # distinct cwds remembered; past this each is worked out again


def encode(path: str) -> str:
    """Claude Code's folder name of a path: every character but ASCII letters and digits → ``-``.

    Claude Code replaces UTF-16 code units: a character outside the BMP becomes two.
    """
    return "".join(ch if ch.isascii() and ch.isalnum() else "--" if ord(ch) > 0xFFFF else "-"
                   for ch in path)


class ProjectGroups:
    """The project of each working directory, by the folders the transcripts were found in."""

    def __init__(self, grouping: str = "folder", folders: Iterable[str] = ()) -> None:
        """``grouping``: ``folder`` or ``cwd``; ``folders``: project folder names seen so far."""
        if grouping not in GROUPINGS:
            raise ValueError(f"project grouping {grouping!r} is not one of {GROUPINGS}")
        self.grouping = grouping
        self._folders: set[str] = set()
        self._cache: dict[str, str] = {}
        self.learn(folders)

    def learn(self, folders: Iterable[str]) -> None:
        """Add project folder names (a new one may give later cwds another project)."""
        new = {f for f in folders if f and f not in self._folders}
        if new:
            self._folders |= new
            self._cache.clear()

    def of(self, cwd: str) -> str:
        """The project path of a working directory."""
        if self.grouping == "cwd" or not self._folders or not cwd:
            return cwd
        got = self._cache.get(cwd)
        if got is None:
            got = self._lead(cwd)
            if len(self._cache) < MAX_CACHED:
                self._cache[cwd] = got
        return got

    def _lead(self, cwd: str) -> str:
        """The longest leading part of ``cwd`` that a known folder's name encodes (else cwd)."""
        if len(cwd) > MAX_PATH:
            return cwd
        best = cwd
        encoded: list[str] = []
        for end, ch in enumerate(cwd, 1):
            encoded.append(ch if ch.isascii() and ch.isalnum() else
                           "--" if ord(ch) > 0xFFFF else "-")
            if "".join(encoded) in self._folders:
                best = cwd[:end]
        return best


def folders_of(read: Reader) -> set[str]:
    """The project folder names of every transcript file the ledger knows.

    A file's folder is the first part of its path below its root (the root is
    the ``projects`` directory, or a directory given as one).
    """
    rows = read("SELECT f.path, r.path FROM files f JOIN roots r ON r.id = f.root", [])
    return {folder for path, root in rows if (folder := folder_of(path, root))}
