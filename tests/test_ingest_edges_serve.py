"""Ingest edges of round 3 against a real ``serve`` process: linked folders, a clock behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.exposition import total
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.trees import linked_tree
from tests.support.wait import poll

SLOW_RESCAN = ("--rescan-seconds", "3600")  # what arrives must come through the watch
# libfaketime (Debian's libfaketime, installed by .ci/install), preloaded into serve itself
# (the faketime command would stand between it and its signals); the monotonic clock is
# left alone (deadlines, backoffs).
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")


def _behind(days: int) -> dict[str, str]:
    """The environment that sets a process's clock ``days`` back; skipped only outside CI."""
    if not LIBFAKETIME.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{LIBFAKETIME} is missing in CI")
        pytest.skip("libfaketime is absent")
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": f"-{days}d",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def test_serve_follows_appends_in_a_linked_project_folder(tmp_path: Path) -> None:
    """Project folders linked elsewhere: counted at start, and an append is seen by the watch."""
    projects, p1 = linked_tree(tmp_path)
    serve = Serve(projects, tmp_path / "state", *SLOW_RESCAN)
    try:
        poll(lambda: serve.requests() == 5, 30, "the linked folders counted")
        with (p1 / "s1" / "subagents" / "agent-x.jsonl").open("ab") as fh:
            fh.write(jsonl(assistant("a8", "r8", sidechain=True)))
        poll(lambda: serve.requests() == 6, 30, "an append in a linked folder")
        assert serve.health()[0] == 200
    finally:
        assert serve.stop() == 0


def _stamp(epoch: float) -> str:
    """An ISO-8601 UTC timestamp, as Claude Code writes them."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(epoch))


def test_serve_with_its_clock_two_days_behind_loses_no_line(tmp_path: Path) -> None:
    """Serve under libfaketime -2d: 10 appended requests wait; a restart on time counts them."""
    data, state = tmp_path / "projects", tmp_path / "state"
    f = data / "-p" / "s.jsonl"
    f.parent.mkdir(parents=True)
    now = time.time()
    f.write_bytes(jsonl(assistant("old", "r0", ts=_stamp(now - 3 * 86_400))))
    behind = Serve(data, state, "--rescan-seconds", "1", env=_behind(2))
    try:
        poll(lambda: behind.requests() == 1, 30, "the line in time counted")
        with f.open("ab") as fh:
            fh.write(jsonl(*(assistant(f"n{i}", f"rn{i}", ts=_stamp(now + i)) for i in range(10))))
        poll(lambda: any(e.get("event") == "transcript_lines_ahead_of_clock" and e.get("lines")
                         == 10 for e in behind.events()), 30, "the lines ahead said")
        waiting = poll(lambda: behind.health()[1].get("lines_ahead_of_clock") == 10, 30,
                       "/healthz says 10 lines wait for the clock")
        assert waiting and behind.health()[0] == 200  # waiting, not failing: nothing is lost
        fams = behind.scrape()
        assert total(fams, "claude_code_requests") == 1
        assert total(fams, "claude_code_exporter_rejected_lines") == 0
    finally:
        assert behind.stop() == 0
    right = Serve(data, state, "--rescan-seconds", "1")
    try:
        poll(lambda: right.requests() == 11, 30, "the 10 lines counted once the clock is right")
        assert right.health()[1]["lines_ahead_of_clock"] == 0
        assert total(right.scrape(), "claude_code_exporter_rejected_lines") == 0
    finally:
        assert right.stop() == 0


def test_a_folder_linked_in_while_serve_runs_is_watched_too(tmp_path: Path) -> None:
    """A project folder linked in after start: read at once, and its appends seen by the watch."""
    data, elsewhere = tmp_path / "projects", tmp_path / "sync" / "p"
    (data / "-a").mkdir(parents=True)
    (data / "-a" / "s.jsonl").write_bytes(jsonl(assistant("a1", "r1")))
    elsewhere.mkdir(parents=True)
    (elsewhere / "s.jsonl").write_bytes(jsonl(assistant("b1", "r2")))
    serve = Serve(data, tmp_path / "state", *SLOW_RESCAN)
    try:
        poll(lambda: serve.requests() == 1, 30, "the real folder counted")
        (data / "p").symlink_to(elsewhere, target_is_directory=True)
        poll(lambda: serve.requests() == 2, 30, "the folder linked in counted")
        with (elsewhere / "s.jsonl").open("ab") as fh:
            fh.write(jsonl(assistant("b2", "r3")))
        poll(lambda: serve.requests() == 3, 30, "an append behind the new link")
    finally:
        assert serve.stop() == 0
