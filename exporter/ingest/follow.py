"""Following: keep the ledger current while transcripts grow.

File-system events (inotify through watchfiles) wake an ingestion pass within
milliseconds, and that pass reads only the files the events name; a periodic
full rescan is the safety net for missed events, roots that appear later and
filesystems without events. In polling mode there is no watcher, only the
rescan at a short interval. Every second the loop also lets the projection
settle requests that went quiet, and checks that each watched directory is
still the one being watched: a directory deleted and created again (or
replaced) gets a new watcher and a full pass within a second. A watch follows
the symlinks to directories that exist when it starts; a new link to a
directory (a project folder linked in) restarts it, so that what is written
behind the link is seen too.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import watchfiles

TICK_SECONDS = 1.0  # settle cadence; a wake-up a second costs nothing measurable
MAX_EVENT_PATHS: Final = 10_000  # more changed paths than this before a pass: walk everything
RESTART_BACKOFF: Final = (0.5, 30.0)  # first and longest wait before restarting a failed watcher

RunPass = Callable[[Collection[str] | None], Any]
"""Ingests once: the paths events named, or everything (None)."""

_PATH = re.compile(r"(?<![\w.])/(?:[^\s/:'\"]+/)+([^\s/:'\"]+)")


@dataclass(slots=True)
class FollowState:
    """What /healthz reports about the follower."""

    last_pass_ok: bool = True
    last_pass_at: float = 0.0  # monotonic
    last_error: str = ""  # without directory names: /healthz may be seen by others
    watcher_alive: bool = False
    passes: int = 0
    watcher_restarts: int = 0


def public_error(exc: BaseException) -> str:
    """An exception's message with every absolute path cut to its last part."""
    return _PATH.sub(r"\1", str(exc))


class Follower:
    """Runs ingestion passes on events and on a timer until stopped."""

    def __init__(
        self,
        run_pass: RunPass,
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
        self._lock = threading.Lock()
        self._changed: set[str] = set()
        self._everything = False  # an event batch too large, or lost: walk everything
        self._watched: tuple[tuple[str, int, int], ...] = ()
        self._watch_stop: threading.Event | None = None
        self._relinked = threading.Event()  # a new link to a directory: watch it too
        self._next_rescan = monotonic()  # the first step walks everything
        self.state = FollowState()

    def run(self, stop: threading.Event) -> None:
        """Follow until ``stop`` is set; the last pass completes before returning."""
        self._next_rescan = self._mono()
        while not stop.is_set():
            timeout = max(0.0, min(TICK_SECONDS, self._next_rescan - self._mono()))
            woke = self._wake.wait(timeout)
            if stop.is_set():
                break
            self.step(stop, woke)
        self._stop_watcher()

    def step(self, stop: threading.Event, woke: bool | None = None) -> None:
        """One turn of the loop: the pass a wake-up or a due rescan asks for, then settle.

        ``run`` calls it after each wait. Tests call it directly instead, with an
        injected ``monotonic`` and explicit ``wake()`` calls, to drive the follower
        without threads or timing; ``woke`` None means "was ``wake()`` called since
        the last step".
        """
        if woke is None:
            woke = self._wake.is_set()
        self._wake.clear()
        due = self._mono() >= self._next_rescan
        if self._ensure_watcher(stop, due):
            due = True  # a directory came back or was replaced: walk it now
        if due:
            self._take()
            self._next_rescan = self._mono() + self.rescan_seconds
            self.run_pass(None)
        elif woke:
            changed = self._take()
            if changed is None or changed:
                self.run_pass(changed)
        self._settle()

    def run_pass(self, paths: Collection[str] | None = None) -> None:
        """One ingestion pass, recording its outcome for health checks."""
        try:
            self._run_pass(paths)
        except Exception as exc:  # keep following: the next pass may succeed
            self.state.last_pass_ok = False
            self.state.last_error = public_error(exc)
            self.log.warning("pass_failed", error=str(exc), kind=type(exc).__name__)
        else:
            self.state.last_pass_ok = True
            self.state.last_error = ""
        self.state.last_pass_at = self._mono()
        self.state.passes += 1

    def wake(self, paths: Iterable[str] | None = None) -> None:
        """Ask for a pass now over ``paths`` (None: over everything)."""
        with self._lock:
            if paths is None:
                self._everything = True
            else:
                self._changed.update(paths)
                if len(self._changed) > MAX_EVENT_PATHS:
                    self._everything = True
                    self._changed.clear()
        self._wake.set()

    def _take(self) -> set[str] | None:
        """The paths changed since the last pass (None: everything), and reset them."""
        with self._lock:
            changed, everything = self._changed, self._everything
            self._changed, self._everything = set(), False
        return None if everything else changed

    def _ensure_watcher(self, stop: threading.Event, due: bool) -> bool:
        """(Re)start the watcher when the existing directories, or their identity, changed.

        A watcher that failed on the same directories is retried only when a
        rescan is ``due``. Returns True when directories appeared or were
        replaced (a full pass should follow).
        """
        if self.poll:
            return False
        present = _identities(self._dirs())
        moved = present != self._watched or self._relinked.is_set()
        self._relinked.clear()
        if not moved and (self.state.watcher_alive or not present or not due):
            return False
        self._stop_watcher()
        self._watched = present
        if not present:
            return False
        mine = threading.Event()
        self._watch_stop = mine
        dirs = tuple(Path(p) for p, _, _ in present)
        thread = threading.Thread(
            target=self._watch, args=(dirs, mine, stop), name="watcher", daemon=True
        )
        self.state.watcher_alive = True
        thread.start()
        self.log.info("watching", dirs=[str(d) for d in dirs])
        return moved

    def _watch(self, dirs: tuple[Path, ...], mine: threading.Event, stop: threading.Event) -> None:
        """Watcher thread: hand every batch of file events to the loop."""
        halt = _Either(mine, stop)
        backoff = RESTART_BACKOFF[0]
        try:
            while not halt.is_set():
                started = self._mono()
                try:
                    for changes in watchfiles.watch(
                        *dirs, stop_event=halt, debounce=50, step=20, raise_interrupt=False,
                        ignore_permission_denied=True, yield_on_timeout=False,
                    ):
                        self.wake(path for _change, path in changes)
                        if any(change == watchfiles.Change.added and _linked_dir(path)
                               for change, path in changes):
                            self._relinked.set()
                    return
                except Exception as exc:
                    if not _restartable(exc):
                        raise
                    # A batch naming a file that is not UTF-8 kills the watch. Its events,
                    # and any until the watch resumes, are lost: a full pass follows.
                    self.state.watcher_restarts += 1
                    self.log.info("watcher_restarted", error=str(exc), kind=type(exc).__name__)
                    if self._mono() - started > 60:
                        backoff = RESTART_BACKOFF[0]
                    if mine.wait(backoff) or stop.is_set():
                        return
                    backoff = min(backoff * 2, RESTART_BACKOFF[1])
                    self.wake(None)
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


def _identities(dirs: Iterable[Path]) -> tuple[tuple[str, int, int], ...]:
    """(path, device, inode) of each directory that exists now."""
    out = []
    for d in dirs:
        try:
            st = os.stat(d)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            out.append((str(d), st.st_dev, st.st_ino))
    return tuple(out)


def _linked_dir(path: str) -> bool:
    """True for a symlink to a directory (a watch started before it does not follow it)."""
    return os.path.islink(path) and os.path.isdir(path)


def _restartable(exc: Exception) -> bool:
    """True for a watcher error caused by one event, not by the watch itself."""
    return "decode" in str(exc).lower()  # watchfiles: "Unable to decode path ... to string"


class _Either:
    """An event-like object that is set when either of two events is."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        self._a, self._b = a, b

    def is_set(self) -> bool:
        """True once either event is set."""
        return self._a.is_set() or self._b.is_set()
