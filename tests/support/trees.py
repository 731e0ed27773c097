"""Transcript trees on disk shaped like the odd set-ups users have (links, loops, aliases)."""

from __future__ import annotations

from pathlib import Path

from tests.support.records import assistant, jsonl


def linked_tree(tmp: Path) -> tuple[Path, Path]:
    """projects/ whose folders are links elsewhere (a dotfiles set-up), with loops and aliases.

    Returns (projects, the folder elsewhere that projects/p1 links to).
    """
    projects, elsewhere = tmp / "claude" / "projects", tmp / "sync"
    (elsewhere / "p1" / "s1" / "subagents").mkdir(parents=True)
    (elsewhere / "p1" / "s1.jsonl").write_bytes(jsonl(assistant("a1", "r1"), assistant("a2", "r2")))
    (elsewhere / "p1" / "s1" / "subagents" / "agent-x.jsonl").write_bytes(
        jsonl(assistant("a3", "r3", sidechain=True)))
    (elsewhere / "lone.jsonl").write_bytes(jsonl(assistant("a4", "r4")))
    (projects / "p2").mkdir(parents=True)
    (projects / "p2" / "s2.jsonl").write_bytes(jsonl(assistant("a5", "r5")))
    (projects / "p1").symlink_to(elsewhere / "p1", target_is_directory=True)
    (projects / "p3").symlink_to(elsewhere / "p1", target_is_directory=True)  # a second link
    (projects / "alias").symlink_to(projects / "p2", target_is_directory=True)  # in the tree
    (projects / "p2" / "loop").symlink_to(projects, target_is_directory=True)
    (projects / "p2" / "up").symlink_to("..", target_is_directory=True)
    (projects / "p2" / "lone.jsonl").symlink_to(elsewhere / "lone.jsonl")
    (projects / "p2" / "twin.jsonl").symlink_to(projects / "p2" / "s2.jsonl")
    return projects, elsewhere / "p1"
