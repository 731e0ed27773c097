"""The HTTP endpoint: routes, health status, TLS, basic auth and limits on loopback."""

from __future__ import annotations

import base64
import json
import select
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from exporter.serve.http import (
    BasicAuth,
    HttpOptions,
    HttpServer,
    Limits,
    make_app,
    server_context,
)
from tests.support.net import http_get
from tests.support.tls import self_signed


def _registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("claude_code_probe", "probe", registry=reg).inc(7)
    return reg


def _get(url: str, *, headers: dict[str, str] | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int, str]:
    """GET ``url`` (tests.support.net.http_get): (status, body text)."""
    status, body = http_get(url, headers=headers, timeout=10, context=context)
    return status, body.decode()


@pytest.fixture
def server() -> Iterator[tuple[HttpServer, dict[str, Any]]]:
    """A plain HTTP server on a free loopback port with a switchable health state."""
    state: dict[str, Any] = {"ok": True}
    srv = HttpServer(make_app(_registry(), lambda: (state["ok"], {"why": "x"}), "9.9"),
                     "127.0.0.1", 0)
    yield srv, state
    srv.close()


def test_routes(server: tuple[HttpServer, dict[str, Any]]) -> None:
    """/metrics exposes the registry, / links both pages, unknown paths are 404."""
    srv, _ = server
    base = f"http://127.0.0.1:{srv.port}"
    status, body = _get(base + "/metrics")
    assert status == 200 and "claude_code_probe_total 7.0" in body
    status, body = _get(base + "/")
    assert status == 200 and 'href="metrics"' in body and "9.9" in body
    assert _get(base + "/nope")[0] == 404


def test_healthz_reflects_state(server: tuple[HttpServer, dict[str, Any]]) -> None:
    """/healthz answers 200 when healthy and 503 with details when not."""
    srv, state = server
    url = f"http://127.0.0.1:{srv.port}/healthz"
    assert _get(url) == (200, json.dumps({"ok": True, "why": "x"}))
    state["ok"] = False
    status, body = _get(url)
    assert status == 503 and json.loads(body)["ok"] is False


def test_tls_and_basic_auth(tmp_path: Path) -> None:
    """With a certificate and credentials, only authenticated TLS clients get metrics."""
    cert, key = self_signed(tmp_path)
    auth = BasicAuth("prom", "s3cret")
    srv = HttpServer(make_app(_registry(), lambda: (True, {}), "1", auth), "127.0.0.1", 0,
                     server_context(cert, key))
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        url = f"https://127.0.0.1:{srv.port}/metrics"
        assert _get(url, context=ctx)[0] == 401
        bad = base64.b64encode(b"prom:wrong").decode()
        assert _get(url, headers={"Authorization": f"Basic {bad}"}, context=ctx)[0] == 401
        good = base64.b64encode(b"prom:s3cret").decode()
        status, body = _get(url, headers={"Authorization": f"Basic {good}"}, context=ctx)
        assert status == 200 and "claude_code_probe_total" in body
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            _get(f"http://127.0.0.1:{srv.port}/metrics")  # plain HTTP to a TLS port fails
        assert _get(url, headers={"Authorization": f"Basic {good}"}, context=ctx)[0] == 200
    finally:
        srv.close()


def test_ipv6_loopback() -> None:
    """The server binds [::1] when given an IPv6 host."""
    try:
        srv = HttpServer(make_app(_registry(), lambda: (True, {}), "1"), "::1", 0)
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    try:
        assert _get(f"http://[::1]:{srv.port}/metrics")[0] == 200
    finally:
        srv.close()


def test_burst_of_scrapers_is_not_dropped() -> None:
    """Twenty simultaneous connections all get /metrics (the listen backlog is not 5)."""
    import threading

    srv = HttpServer(make_app(_registry(), lambda: (True, {}), "1"), "127.0.0.1", 0)
    results: list[int] = []
    lock = threading.Lock()

    def scrape() -> None:
        status, _ = _get(f"http://127.0.0.1:{srv.port}/metrics")
        with lock:
            results.append(status)

    try:
        threads = [threading.Thread(target=scrape) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    finally:
        srv.close()
    assert results == [200] * 20


# ---- limits (issue 13, items 7 and 10) -------------------------------------------------
def _raw(port: int, request: bytes, timeout: float = 10) -> bytes:
    """Send raw bytes, return everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def _limited(**kw: Any) -> HttpServer:
    return HttpServer(make_app(_registry(), lambda: (True, {}), "1"), "127.0.0.1", 0,
                      limits=Limits(**kw))


def test_oversized_or_too_many_headers_get_431() -> None:
    """30 headers of 1 kB, or 80 tiny ones, are refused with 431 before the app runs."""
    srv = _limited()
    try:
        big = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(30))
        reply = _raw(srv.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")
        assert reply.startswith(b"HTTP/1.0 431 "), reply[:80]
        many = b"".join(b"X-%d: 1\r\n" % i for i in range(80))
        reply = _raw(srv.port, b"GET /metrics HTTP/1.1\r\n" + many + b"\r\n")
        assert reply.startswith(b"HTTP/1.0 431 "), reply[:80]
        line = _raw(srv.port, b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n")
        assert line.startswith(b"HTTP/1.0 414 "), line[:80]
        assert _get(f"http://127.0.0.1:{srv.port}/metrics")[0] == 200
    finally:
        srv.close()


def test_silent_connections_give_their_slot_to_a_scrape() -> None:
    """All slots held by clients that send nothing: a scrape still gets through."""
    srv = _limited(max_connections=4)
    silent = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(12)]
    try:
        for _ in range(3):
            status, body = _get(f"http://127.0.0.1:{srv.port}/metrics")
            assert status == 200 and "claude_code_probe_total" in body
        assert srv.stats.evicted >= 8
        assert len(srv.stats.slots) <= 4
    finally:
        for sock in silent:
            sock.close()
        srv.close()


def test_a_trickling_request_is_cut_at_the_whole_request_deadline() -> None:
    """A byte every 0.2 s keeps every read alive, but not the connection past its deadline."""
    srv = _limited(timeout_seconds=1.0)
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
            request = b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"z" * 100 + b"\r\n\r\n"
            cut, sent = False, 0
            for byte in request:  # bounded: 20 s if never cut
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    cut = True
                    break
                sent += 1
                readable, _, _ = select.select([sock], [], [], 0.2)  # the trickle's pace
                if readable and not sock.recv(1):
                    cut = True
                    break
            assert cut and sent < 40, f"still connected after {sent} bytes"
        assert srv.stats.timed_out >= 1
    finally:
        srv.close()


def test_exposure_warnings_name_what_may_leave_the_machine() -> None:
    """Beyond loopback warns unless acknowledged; basic auth without TLS always warns."""
    auth = BasicAuth("prom", "pw")
    assert HttpOptions("127.0.0.1", 9477).warnings() == []
    assert HttpOptions("::1", 9477).warnings() == []
    assert [e for e, _ in HttpOptions("0.0.0.0", 9477).warnings()] == [
        "listening_beyond_loopback"]
    assert HttpOptions("0.0.0.0", 9477, beyond_loopback=True).warnings() == []
    assert [e for e, _ in HttpOptions("0.0.0.0", 9477, auth=auth, beyond_loopback=True)
            .warnings()] == ["basic_auth_without_tls"]
