"""A collector that hangs or refuses: pushes counted and logged as JSON, the stop bounded."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData

from exporter.serve import otlp
from exporter.serve.push import PushState
from exporter.synth import GenOptions, generate
from tests.support.exposition import total
from tests.support.logs import Log
from tests.support.net import LOOPBACK
from tests.support.process import Serve
from tests.support.wait import poll

STOP_BUDGET_S = 8.0  # docker stop waits 10 s before SIGKILL


@pytest.fixture
def hung() -> Iterator[socket.socket]:
    """A loopback port whose kernel accepts connections that nobody ever answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        sock.listen(16)  # handshakes complete in the backlog; accept() is never called
        yield sock


@pytest.fixture
def refused() -> Iterator[socket.socket]:
    """A loopback port that is bound but not listening: every connection is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        yield sock


def _serve(tmp_path: Path, collector: socket.socket, *extra: str,
           env: dict[str, str] | None = None) -> Serve:
    """`serve` pushing to ``collector`` over a small tree (``env`` adds variables)."""
    generate(tmp_path / "tree", GenOptions(seed=5, sessions=2, requests_per_session=5))
    url = f"http://{LOOPBACK}:{collector.getsockname()[1]}"
    return Serve(tmp_path / "tree", tmp_path / "state", "--otlp-endpoint", url, *extra, env=env)


def _plain_lines(proc: Serve) -> list[str]:
    """Lines of the log that are not JSON (the library's plain-text complaints)."""
    out = []
    for line in proc.log().splitlines():
        try:
            json.loads(line)
        except ValueError:
            out.append(line)
    return out


def _failures(proc: Serve, reason: str) -> float:
    """claude_code_exporter_otlp_push_failures_total for one reason, from a real scrape."""
    return total(proc.scrape(), "claude_code_exporter_otlp_push_failures", reason=reason)


def test_refused_pushes_are_counted_logged_and_reported(
    tmp_path: Path, refused: socket.socket,
) -> None:
    """Refused pushes: counter, /healthz otlp.ok false (still 200), JSON log lines only."""
    proc = _serve(tmp_path, refused, "--otlp-interval-seconds", "0.2",
                  env={"CLAUDE_CODE_EXPORTER_OTLP_TIMEOUT_SECONDS": "1"})
    try:
        poll(lambda: _failures(proc, "unreachable") >= 2, 60, "two refused pushes counted")
        assert total(proc.scrape(), "claude_code_exporter_otlp_pushes") >= 2
        status, health = proc.health()
        assert status == 200 and health["otlp"]["ok"] is False
        assert health["otlp"]["consecutive_failures"] >= 2
        failed = [e for e in proc.events() if e.get("event") == "otlp_push_failed"]
        assert failed and failed[0]["reason"] == "unreachable" and failed[0]["level"] == "warning"
        assert proc.stop() == 0
        assert _plain_lines(proc) == []
    finally:
        proc.kill9()


def test_a_hung_collector_is_counted_as_timeouts(tmp_path: Path, hung: socket.socket) -> None:
    """Pushes into a collector that never answers count as reason="timeout"."""
    proc = _serve(tmp_path, hung, "--otlp-interval-seconds", "0.2",
                  env={"CLAUDE_CODE_EXPORTER_OTLP_TIMEOUT_SECONDS": "0.5"})
    try:
        poll(lambda: _failures(proc, "timeout") >= 1, 60, "a hung push counted")
        assert _failures(proc, "unreachable") == _failures(proc, "rejected") == 0
        assert proc.health()[1]["otlp"]["ok"] is False
    finally:
        proc.kill9()


def test_sigterm_with_a_hung_collector_exits_within_docker_stops_wait(
    tmp_path: Path, hung: socket.socket,
) -> None:
    """A push hanging at SIGTERM (default 10 s timeout): exit 0 in under 8 s (was 20.4 s)."""
    proc = _serve(tmp_path, hung, "--otlp-interval-seconds", "0.5")
    try:
        poll(lambda: select.select([hung], [], [], 0)[0], 30, "a push connected")
        started = time.monotonic()
        code = proc.stop(timeout=60)
        took = time.monotonic() - started
        assert code == 0 and took < STOP_BUDGET_S, (code, took, proc.log()[-2000:])
        assert _plain_lines(proc) == []
    finally:
        proc.kill9()


class _Rejecting(BaseHTTPRequestHandler):
    """A collector that reads each push and answers 400."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(400)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


def test_rejected_pushes_and_a_bounded_log() -> None:
    """An error status counts as rejected; a run of failures logs at 1, 2, 4, 8 only."""
    httpd = ThreadingHTTPServer((LOOPBACK, 0), _Rejecting)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    log = Log()
    state = PushState("http://collector", log)
    options = otlp.OtlpOptions(f"http://{LOOPBACK}:{httpd.server_address[1]}/v1/metrics",
                               timeout_seconds=5)
    exporter = otlp.reader(options, state)._exporter  # the GuardedExporter it pushes through
    try:
        for _ in range(9):
            assert exporter.export(MetricsData(resource_metrics=[])) == \
                MetricExportResult.FAILURE
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
    assert state.failures == {"timeout": 0, "unreachable": 0, "rejected": 9, "other": 0}
    assert [f["consecutive_failures"] for f in log.named("otlp_push_failed")] == [1, 2, 4, 8]
    state.record(True, "", 0.1)
    assert log.named("otlp_push_recovered") == [{"endpoint": "http://collector",
                                                 "failed_before": 9}]
    assert state.health()["ok"] and state.pushes == 10
