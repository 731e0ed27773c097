"""Ingest edges of round 3 against a real ``serve`` process: linked folders, a clock behind."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import assistant, jsonl
from tests.support.process import Serve
from tests.support.wait import poll
from tests.test_ingest_edges import _linked_tree

SLOW_RESCAN = ("--rescan-seconds", "3600")  # what arrives must come through the watch


def test_serve_follows_appends_in_a_linked_project_folder(tmp_path: Path) -> None:
    """Project folders linked elsewhere: counted at start, and an append is seen by the watch."""
    projects, p1 = _linked_tree(tmp_path)
    serve = Serve(projects, tmp_path / "state", *SLOW_RESCAN)
    try:
        poll(lambda: serve.requests() == 5, 30, "the linked folders counted")
        with (p1 / "s1" / "subagents" / "agent-x.jsonl").open("ab") as fh:
            fh.write(jsonl(assistant("a8", "r8", sidechain=True)))
        poll(lambda: serve.requests() == 6, 30, "an append in a linked folder")
        assert serve.health()[0] == 200
    finally:
        assert serve.stop() == 0
