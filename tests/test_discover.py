"""Discovery: every root a user can have, recursive, loop-safe, depth-bounded, any file name."""

from __future__ import annotations

import os
from pathlib import Path

from exporter.ingest.discover import (
    KEY_PREFIX,
    MAX_DEPTH,
    default_roots,
    find_transcripts,
    fs_path,
    path_key,
    projects_dirs,
)
from tests.support.hardening import remove_tree


def test_default_roots_order_and_comma_list(tmp_path: Path) -> None:
    """CLAUDE_CONFIG_DIR entries come first, then ~/.claude and the XDG location."""
    env = {"CLAUDE_CONFIG_DIR": "/x/a, /x/b/projects", "XDG_CONFIG_HOME": "/cfg"}
    roots = default_roots(env, Path("/home/u"))
    assert roots == [Path("/x/a"), Path("/x/b/projects"), Path("/home/u/.claude/projects"),
                     Path("/cfg/claude/projects")]
    assert default_roots({}, Path("/h"))[-1] == Path("/h/.config/claude/projects")


def test_projects_dir_or_root_itself(tmp_path: Path) -> None:
    """A root with projects/ below it uses that; a projects dir is used as is."""
    (tmp_path / "a" / "projects").mkdir(parents=True)
    (tmp_path / "b" / "projects").mkdir(parents=True)
    got = projects_dirs([tmp_path / "a", tmp_path / "b" / "projects"])
    assert got == [tmp_path / "a" / "projects", tmp_path / "b" / "projects"]


def test_recursive_walk_finds_subagents_and_survives_link_loops(tmp_path: Path) -> None:
    """Subagent, compaction and workflow files are found; a symlink loop is not followed."""
    base = tmp_path / "projects" / "-p"
    deep = base / "s1" / "subagents" / "workflows" / "run1"
    deep.mkdir(parents=True)
    for rel in ["s1.jsonl", "s1/subagents/agent-a1.jsonl", "s1/subagents/agent-acompact-9.jsonl",
                "s1/subagents/workflows/run1/agent-w.jsonl", "agent-old.jsonl", "notes.txt"]:
        (base / rel).write_text("{}\n")
    (deep / "loop").symlink_to(tmp_path / "projects", target_is_directory=True)
    paths = find_transcripts([tmp_path / "projects"])
    found = [Path(p).relative_to(base).as_posix() for p in paths]
    assert found == ["agent-old.jsonl", "s1.jsonl", "s1/subagents/agent-a1.jsonl",
                     "s1/subagents/agent-acompact-9.jsonl",
                     "s1/subagents/workflows/run1/agent-w.jsonl"]


def test_missing_root_is_reported(tmp_path: Path) -> None:
    """A missing directory is passed to the problem callback and yields no files."""
    problems: list[tuple[str, str, str]] = []
    assert find_transcripts([tmp_path / "nope"], lambda *a: problems.append(a)) == []
    assert problems[0][0] == "transcript_root_missing"


def test_names_that_are_not_utf8_are_found_as_keys_that_round_trip(tmp_path: Path) -> None:
    """A file name in Latin-1 bytes is found; its key is valid text and opens the same file."""
    base = os.fsencode(tmp_path / "projects" / "-p")
    os.makedirs(base)
    odd = os.path.join(base, b"caf\xe9.jsonl")
    with open(odd, "wb") as fh:
        fh.write(b"{}\n")
    (tmp_path / "projects" / "-p" / "plain.jsonl").write_text("{}\n")
    keys = find_transcripts([tmp_path / "projects"])
    assert len(keys) == 2
    for key in keys:
        key.encode("utf-8")  # storable as SQLite text, loggable as JSON
        assert os.path.isfile(fs_path(key))
    (odd_key,) = [k for k in keys if k.startswith(KEY_PREFIX)]
    assert os.fsencode(fs_path(odd_key)) == odd and odd_key.endswith("caf%E9.jsonl")
    assert path_key(fs_path(odd_key)) == odd_key
    plain = str(tmp_path / "projects" / "-p" / "plain.jsonl")
    assert path_key(plain) == plain == fs_path(plain)


def test_very_deep_directories_are_bounded_not_a_recursion_error(tmp_path: Path) -> None:
    """990 nested directories: no RecursionError; files past MAX_DEPTH are skipped and counted."""
    top = tmp_path / "projects"
    where = os.fsencode(top)
    os.makedirs(where)
    fd = os.open(where, os.O_RDONLY)
    try:  # relative to a directory fd: the full path outgrows PATH_MAX before 990 levels
        for level in range(1, 991):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
            if level in (3, MAX_DEPTH, MAX_DEPTH + 1, 990):
                os.close(os.open(f"at{level}.jsonl", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    finally:
        os.close(fd)
    problems: list[tuple[str, str, str]] = []
    try:
        found = find_transcripts([top], lambda *a: problems.append(a))
    finally:
        remove_tree(top)  # pytest's own clean-up recurses, and would fail on it later
    assert [os.path.basename(p) for p in found] == ["at3.jsonl", f"at{MAX_DEPTH}.jsonl"]
    assert [p[0] for p in problems] == ["transcript_dirs_too_deep"]
    assert problems[0][2].startswith("1 directory deeper than")
