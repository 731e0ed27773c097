"""The follower driven turn by turn: an injected clock, explicit wake-ups, no threads, no waits.

As mtail's tests drive their tailer, the test owns time and events here:
``wake()`` stands for a batch from the watcher, ``step()`` for one turn of the
loop, and the clock moves only when the test moves it. Polling mode starts no
watcher thread, so every step is synchronous and every assertion exact.
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from exporter.ingest.follow import MAX_EVENT_PATHS, Follower
from exporter.ledger.store import LedgerError
from tests.support.clock import Clock
from tests.support.logs import Log
from tests.support.wait import poll

RESCAN = 30.0


class Driven:
    """A polling-mode follower over a recording pass, on a test-owned clock."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.log = Log()
        self.passes: list[frozenset[str] | None] = []
        self.settles = 0
        self.failures: list[Exception] = []  # raised by the next passes, in order
        self.stop = threading.Event()
        self.follower = Follower(self._run, lambda: [], settle=self._settle, poll=True,
                                 rescan_seconds=RESCAN, log=self.log, monotonic=self.clock)

    def _run(self, paths: Collection[str] | None) -> None:
        self.passes.append(None if paths is None else frozenset(paths))
        if self.failures:
            raise self.failures.pop(0)

    def _settle(self) -> int:
        self.settles += 1
        return 0

    def step(self) -> None:
        """One turn of the follower's loop."""
        self.follower.step(self.stop)


def started() -> Driven:
    """A follower past its first turn (the full pass at start)."""
    driven = Driven()
    driven.step()
    return driven


def test_the_first_turn_walks_everything_and_quiet_turns_only_settle() -> None:
    """Turn one is a full pass; with no wake-up and no rescan due, later turns only settle."""
    driven = Driven()
    driven.step()
    assert driven.passes == [None] and driven.settles == 1
    driven.clock.advance(RESCAN - 0.001)
    driven.step()
    driven.step()
    assert driven.passes == [None] and driven.settles == 3


def test_a_wake_passes_exactly_the_named_paths_once() -> None:
    """The paths of one wake-up are the next pass's; the turn after has nothing to do."""
    driven = started()
    driven.follower.wake(["/t/a.jsonl", "/t/b.jsonl"])
    driven.step()
    driven.step()
    assert driven.passes == [None, frozenset({"/t/a.jsonl", "/t/b.jsonl"})]


def test_wakes_between_two_turns_make_one_pass() -> None:
    """Two batches before a turn are merged into one pass over both (duplicates once)."""
    driven = started()
    driven.follower.wake(["/t/a.jsonl"])
    driven.follower.wake(["/t/b.jsonl", "/t/a.jsonl"])
    driven.step()
    assert driven.passes[1:] == [frozenset({"/t/a.jsonl", "/t/b.jsonl"})]


def test_an_empty_wake_runs_no_pass() -> None:
    """A wake-up naming no paths settles but does not ingest."""
    driven = started()
    driven.follower.wake([])
    driven.step()
    assert driven.passes == [None] and driven.settles == 2


def test_wake_without_paths_walks_everything_without_moving_the_rescan() -> None:
    """wake(None) is a full pass now; the periodic rescan stays where it was."""
    driven = started()
    driven.clock.advance(10)
    driven.follower.wake(None)
    driven.step()
    assert driven.passes == [None, None]
    driven.clock.advance(RESCAN - 10)  # the rescan was due 30 s after the first pass
    driven.step()
    assert driven.passes == [None, None, None]


def test_more_paths_than_the_cap_become_a_full_pass() -> None:
    """Past MAX_EVENT_PATHS named paths the pass walks everything instead of a huge list."""
    driven = started()
    driven.follower.wake(f"/t/{i}.jsonl" for i in range(MAX_EVENT_PATHS + 1))
    driven.step()
    assert driven.passes == [None, None]


def test_the_rescan_comes_when_the_clock_says_and_covers_pending_paths() -> None:
    """The full pass runs when rescan_seconds have passed; paths woken meanwhile are not re-run."""
    driven = started()
    driven.clock.advance(RESCAN - 0.5)
    driven.step()
    assert driven.passes == [None]
    driven.follower.wake(["/t/a.jsonl"])
    driven.clock.advance(0.5)
    driven.step()
    driven.step()
    assert driven.passes == [None, None]


def test_a_failed_pass_is_reported_without_paths_and_the_next_clears_it() -> None:
    """A raising pass marks the state unhealthy (no directories in the message); the next heals."""
    driven = started()
    driven.failures.append(LedgerError("/home/u/.local/state/cce/ledger.sqlite3: disk is full"))
    driven.clock.advance(2)
    driven.follower.wake(["/t/a.jsonl"])
    driven.step()
    state = driven.follower.state
    assert not state.last_pass_ok and state.passes == 2 and state.last_pass_at == driven.clock.now
    assert state.last_error == "ledger.sqlite3: disk is full", state.last_error
    assert [kw["kind"] for kw in driven.log.named("pass_failed")] == ["LedgerError"]
    driven.follower.wake(["/t/a.jsonl"])
    driven.step()
    assert state.last_pass_ok and state.last_error == "" and state.passes == 3


def test_run_takes_the_same_turns_on_its_own_until_stopped() -> None:
    """run() in a thread: the full pass at once, a pass for a wake-up, and a return when stopped."""
    driven = Driven()
    thread = threading.Thread(target=driven.follower.run, args=(driven.stop,), daemon=True)
    thread.start()
    try:
        poll(lambda: driven.passes, 10, "the first pass")
        driven.follower.wake(["/t/a.jsonl"])
        poll(lambda: len(driven.passes) > 1, 10, "the pass of the wake-up")
    finally:
        driven.stop.set()
        driven.follower.wake(None)  # end the loop's wait now
        thread.join(10)
    assert not thread.is_alive()
    assert driven.passes == [None, frozenset({"/t/a.jsonl"})]
