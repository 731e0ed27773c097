"""Discovery: every root a user can have, recursive, loop-safe."""

from __future__ import annotations

from pathlib import Path

from exporter.ingest.discover import default_roots, find_transcripts, projects_dirs


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
