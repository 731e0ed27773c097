"""Following: keep the ledger current while transcripts grow.

File-system events (inotify through watchfiles) wake an ingestion pass within
milliseconds; a periodic full rescan is the safety net for missed events,
roots that appear later and filesystems without events. In polling mode
there is no watcher, only the rescan at a short interval. Every second the
loop also lets the projection settle requests that went quiet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import watchfiles

TICK_SECONDS = 1.0  # settle cadence; a wake-up a second costs nothing measurable


@dataclass(slots=True)
class FollowState:
    """What /healthz reports about the follower."""

    last_pass_ok: bool = True
    last_pass_at: float = 0.0  # monotonic
    last_error: str = ""
    watcher_alive: bool = False
    passes: int = 0


class Follower:
    """Runs ingestion passes on events and on a timer until stopped."""

    def __init__(
        self,
        run_pass: Callable[[], Any],
        dirs: Callable[[], Sequence[Path]],
        *,
        settle: Callable[[], int],
        poll: bool = False,
        rescan_seconds: float = 30.0,
        log: Any,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``run_pass`` ingests once; ``dirs`` lists the directories to watch now."""
        self._run_pass = run_pass
        self._dirs = dirs
        self._settle = settle
        self.poll = poll
        self.rescan_seconds = rescan_seconds
        self.log = log
        self._mono = monotonic
        self._wake = threading.Event()
        self._watched: tuple[Path, ...] = ()
        self._watch_stop: threading.Event | None = None
        self.state = FollowState()

    def run(self, stop: threading.Event) -> None:
        """Follow until ``stop`` is set; the last pass completes before returning."""
        next_rescan = self._mono()
        while not stop.is_set():
            timeout = max(0.0, min(TICK_SECONDS, next_rescan - self._mono()))
            woke = self._wake.wait(timeout)
            if stop.is_set():
                break
            if woke or self._mono() >= next_rescan:
                self._wake.clear()
                if self._mono() >= next_rescan:
                    self._ensure_watcher(stop)
                    next_rescan = self._mono() + self.rescan_seconds
                self.run_pass()
            self._settle()
        self._stop_watcher()

    def run_pass(self) -> None:
        """One ingestion pass, recording its outcome for health checks."""
        try:
            self._run_pass()
        except Exception as exc:  # keep following: the next pass may succeed
            self.state.last_pass_ok = False
            self.state.last_error = str(exc)
            self.log.warning("pass_failed", error=str(exc), kind=type(exc).__name__)
        else:
            self.state.last_pass_ok = True
            self.state.last_error = ""
        self.state.last_pass_at = self._mono()
        self.state.passes += 1

    def wake(self) -> None:
        """Ask for a pass now (used by the watcher and by tests)."""
        self._wake.set()

    def _ensure_watcher(self, stop: threading.Event) -> None:
        """(Re)start the event watcher when the set of existing directories changed."""
        if self.poll:
            return
        present = tuple(d for d in self._dirs() if d.is_dir())
        alive = self.state.watcher_alive
        if present == self._watched and (alive or not present):
            return
        self._stop_watcher()
        self._watched = present
        if not present:
            return
        mine = threading.Event()
        self._watch_stop = mine
        thread = threading.Thread(
            target=self._watch, args=(present, mine, stop), name="watcher", daemon=True
        )
        self.state.watcher_alive = True
        thread.start()
        self.log.info("watching", dirs=[str(d) for d in present])

    def _watch(self, dirs: tuple[Path, ...], mine: threading.Event, stop: threading.Event) -> None:
        """Watcher thread: wake the loop on every batch of file events."""
        halt = _Either(mine, stop)
        try:
            for _changes in watchfiles.watch(
                *dirs, stop_event=halt, debounce=50, step=20, raise_interrupt=False,
                ignore_permission_denied=True, yield_on_timeout=False,
            ):
                self._wake.set()
        except Exception as exc:  # a dead watcher is reported; the rescan still runs
            self.log.warning("watcher_failed", error=str(exc))
        finally:
            if not mine.is_set():
                self.state.watcher_alive = False

    def _stop_watcher(self) -> None:
        """Stop the current watcher thread, if any."""
        if self._watch_stop is not None:
            self._watch_stop.set()
            self._watch_stop = None
        self.state.watcher_alive = False


class _Either:
    """An event-like object that is set when either of two events is."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        self._a, self._b = a, b

    def is_set(self) -> bool:
        """True once either event is set."""
        return self._a.is_set() or self._b.is_set()
