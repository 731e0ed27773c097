"""The follower in-process, with a real watcher: event paths, directories replaced, odd names."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from exporter.ingest.follow import Follower, public_error
from exporter.ledger.store import LedgerError
from tests.support.logs import Log
from tests.support.wait import poll


class Running:
    """A Follower on its own thread that records every pass it runs."""

    def __init__(self, watched: Path, *, fail: Exception | None = None) -> None:
        self.passes: list[Collection[str] | None] = []
        self.log = Log()
        self._fail = fail
        self.follower = Follower(self._run, lambda: [watched], settle=lambda: 0,
                                 rescan_seconds=3600, log=self.log)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.follower.run, args=(self.stop,), daemon=True)
        self.thread.start()
        poll(lambda: self.follower.state.watcher_alive and self.passes, 10, "first pass")

    def _run(self, paths: Collection[str] | None) -> None:
        self.passes.append(None if paths is None else set(paths))
        if self._fail is not None:
            raise self._fail

    def named(self, path: Path) -> bool:
        """True once an event pass named ``path``."""
        return any(p is not None and str(path) in p for p in list(self.passes))

    def append_until_named(self, path: Path) -> None:
        """Append to ``path`` until an event pass names it (the watch may still be starting)."""
        def appended_and_named() -> bool:
            with path.open("a") as fh:
                fh.write("{}\n")
            return self.named(path)

        poll(appended_and_named, 10, f"an event pass naming {path.name}")

    def full_passes(self) -> int:
        """Passes over everything so far."""
        return sum(1 for p in list(self.passes) if p is None)

    def close(self) -> None:
        """Stop following and wait for the thread."""
        self.stop.set()
        self.thread.join(timeout=10)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Path, Running]]:
    """A projects dir with one transcript, followed by a running Follower."""
    projects = tmp_path / "projects"
    (projects / "-p").mkdir(parents=True)
    (projects / "-p" / "a.jsonl").write_text("{}\n")
    running = Running(projects)
    yield projects, running
    running.close()


def test_an_event_pass_names_the_file_that_changed(watched: tuple[Path, Running]) -> None:
    """An append wakes a pass over that file alone, not a walk of everything."""
    projects, running = watched
    full = running.full_passes()
    running.append_until_named(projects / "-p" / "a.jsonl")
    assert running.full_passes() == full
    new_dir = projects / "-q" / "s1" / "subagents"
    new_dir.mkdir(parents=True)
    (new_dir / "agent-x.jsonl").write_text("{}\n")
    poll(lambda: running.named(projects / "-q") or running.named(new_dir / "agent-x.jsonl"),
         10, "new directory named")


def test_a_deleted_and_restored_directory_gets_a_new_watcher(
    watched: tuple[Path, Running], tmp_path: Path,
) -> None:
    """projects/ removed: the watcher is reported dead; created again: watched again, walked."""
    projects, running = watched
    aside = tmp_path / "aside"
    shutil.copytree(projects, aside)
    shutil.rmtree(projects)
    poll(lambda: not running.follower.state.watcher_alive, 10, "watcher reported gone")
    full = running.full_passes()
    shutil.copytree(aside, projects)  # a new inode under the same name
    poll(lambda: running.follower.state.watcher_alive and running.full_passes() > full, 10,
         "watched again, with a full pass")
    assert len(running.log.named("watching")) == 2
    running.append_until_named(projects / "-p" / "a.jsonl")


def test_a_file_name_that_is_not_utf8_restarts_the_watch_not_kills_it(
    watched: tuple[Path, Running],
) -> None:
    """A name watchfiles cannot decode restarts the watch, and a full pass runs."""
    projects, running = watched
    full = running.full_passes()
    with open(os.path.join(os.fsencode(projects / "-p"), b"caf\xe9.jsonl"), "wb") as fh:
        fh.write(b"{}\n")
    poll(lambda: running.log.named("watcher_restarted"), 10, "watcher restarted")
    poll(lambda: running.full_passes() > full, 10, "full pass after the lost batch")
    assert running.follower.state.watcher_alive
    assert not running.log.named("watcher_failed")
    running.append_until_named(projects / "-p" / "a.jsonl")


def test_failed_pass_error_carries_no_directory_names(tmp_path: Path) -> None:
    """/healthz's error text keeps the file name and the reason, not the state dir's path."""
    state = tmp_path / "home" / "alice" / ".local" / "state" / "claude-code-exporter"
    err = LedgerError(f"ledger {state / 'ledger.sqlite3'}: database or disk is full")
    assert public_error(err) == "ledger ledger.sqlite3: database or disk is full"
    running = Running(tmp_path, fail=err)
    try:
        state_now = running.follower.state
        assert not state_now.last_pass_ok
        assert state_now.last_error == "ledger ledger.sqlite3: database or disk is full"
        assert "alice" not in state_now.last_error
        logged = running.log.named("pass_failed")
        assert logged and str(state) in logged[0]["error"]  # the local log keeps the detail
    finally:
        running.close()
