"""The daemon in-process: built from its parts, its clocks injected, its follower stepped by hand.

Beside the process tests (tests/test_daemon_e2e.py), these drive ``Daemon`` as
mtail's tests drive their tailer: polling mode starts no watcher thread,
``wake()`` stands for a batch of file events, ``step()`` is one turn of the
loop, and time moves only when the test moves it. A scrape is the registry's
exposition, read right after the step that should have changed it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import RESCAN, Driven
from tests.support.exposition import total
from tests.support.net import http_get


@pytest.fixture
def driven(tmp_path: Path) -> Iterator[Driven]:
    """A started daemon, closed at the end."""
    d = Driven(tmp_path)
    try:
        yield d
    finally:
        d.daemon.close()


def test_start_counts_what_is_on_disk_and_serves_it(driven: Driven) -> None:
    """After start() the one request is counted, /metrics and /healthz answer on loopback."""
    assert driven.requests() == 1
    assert driven.daemon.http is not None
    url = f"http://127.0.0.1:{driven.daemon.http.port}"
    status, body = http_get(url + "/metrics")
    assert status == 200 and total(body.decode(), "claude_code_requests") == 1
    assert http_get(url + "/healthz")[0] == 200


def test_a_wake_counts_an_appended_request_in_that_step(driven: Driven) -> None:
    """The path of a wake-up is read by the next step: the counter grows by exactly one."""
    driven.step()  # the follower's first turn: its full pass (nothing new)
    assert driven.requests() == 1
    driven.append("msg_2")
    assert driven.requests() == 1  # nothing reads the file until a wake-up or a rescan
    driven.daemon.follower.wake([str(driven.session)])
    driven.step()
    assert driven.requests() == 2
    driven.step()
    assert driven.requests() == 2  # a quiet turn reads nothing again


def test_without_a_wake_the_rescan_finds_it_when_due(driven: Driven) -> None:
    """No event: the request is counted by the rescan once its interval has passed."""
    driven.step()
    driven.append("msg_2")
    driven.mono.advance(RESCAN - 0.5)
    driven.step()
    assert driven.requests() == 1
    driven.mono.advance(0.5)
    driven.step()
    assert driven.requests() == 2
    ok, health = driven.daemon.health()
    assert ok and health["passes"] == 2 and health["error"] == ""


def test_a_healthy_start_logs_no_warning(driven: Driven) -> None:
    """On loopback, with readable transcripts, start and a few turns warn about nothing."""
    driven.step()
    driven.step()
    assert driven.log.named("serving") and driven.log.named("serving")[0]["requests"] == 1
    assert driven.log.at("warning", "error") == []


def test_a_signal_is_noted_by_the_handler_and_logged_by_run(tmp_path: Path) -> None:
    """SIGTERM only sets the stop event (no log line from inside the handler); run logs, stops."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    driven = Driven(tmp_path)
    try:
        driven.daemon.install_signals()
        os.kill(os.getpid(), signal.SIGTERM)  # handled before the next line runs
        assert driven.daemon.stop_event.is_set()
        assert driven.log.named("signal") == []
        driven.daemon.run()  # the follow loop sees the event at once, then closes
        assert driven.log.named("signal") == [{"signal": "SIGTERM"}]
        assert driven.log.at("info")[-1] == "stopped"
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
