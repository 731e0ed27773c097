"""The HTTP edge: Host names answered (DNS rebinding), methods, HTTP/0.9, basic-auth names."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator

import pytest

from exporter.cli.config import load_settings
from exporter.errors import ConfigError
from exporter.serve.hosts import HostPolicy
from exporter.synth import GenOptions, generate
from tests.support.net import LOOPBACK
from tests.support.process import Serve

PATHS = ("/", "/api/summary.json", "/metrics", "/healthz")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """A real ``serve`` with default settings (no auth) over a small generated tree."""
    base = tmp_path_factory.mktemp("edges")
    generate(base / "tree", GenOptions(seed=7, sessions=2, requests_per_session=5))
    serve = Serve(base / "tree", base / "state")
    yield serve
    serve.stop()


def _request(serve: Serve, method: str, path: str,
             host: str | None = "") -> tuple[int, dict[str, str], bytes]:
    """One request with exactly this Host header ("": the usual one; None: no Host at all)."""
    conn = http.client.HTTPConnection(LOOPBACK, serve.port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=host is not None, skip_accept_encoding=True)
        if host:
            conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_a_rebound_name_reads_nothing_from_a_running_daemon(daemon: Serve) -> None:
    """Host: evil.example gets 421 and no figures on every route; loopback names get 200."""
    for path in PATHS:
        status, _, body = _request(daemon, "GET", path, f"evil.example:{daemon.port}")
        assert status == 421, (path, status)
        assert b"claude_code" not in body and b"cost" not in body, path
        for good in (f"localhost:{daemon.port}", f"127.0.0.1:{daemon.port}",
                     f"[::1]:{daemon.port}", "127.9.9.9", "LOCALHOST.", "app.localhost"):
            assert _request(daemon, "GET", path, good)[0] == 200, (path, good)
    status, _, body = _request(daemon, "GET", "/healthz", None)  # HTTP/1.0-style: no Host
    assert status == 200 and json.loads(body)["http_refused_hosts"] == len(PATHS)
    refused = [e for e in daemon.events() if e.get("event") == "http_host_refused"]
    assert [e["host"] for e in refused] == [f"evil.example:{daemon.port}"]  # logged once


def test_only_get_and_head_are_answered(daemon: Serve) -> None:
    """POST, PUT, DELETE, OPTIONS are 405 with Allow on every route; HEAD has no body."""
    for path in PATHS:
        for method in ("POST", "PUT", "DELETE", "OPTIONS", "PATCH"):
            status, headers, body = _request(daemon, method, path)
            assert status == 405 and headers["allow"] == "GET, HEAD", (method, path)
            assert b"claude_code" not in body
        status, headers, body = _request(daemon, "HEAD", path)
        got, _, full = _request(daemon, "GET", path)
        assert status == got == 200 and body == b"", path
        if path != "/metrics":  # the exposition's length moves with its live gauges
            assert int(headers["content-length"]) == len(full), path


def test_http09_requests_get_no_answer(daemon: Serve) -> None:
    """A request line without a version (HTTP/0.9) is hung up on, no figures sent."""
    for path in PATHS:
        with socket.create_connection((LOOPBACK, daemon.port), timeout=10) as sock:
            sock.sendall(f"GET {path}\r\n".encode())
            sock.shutdown(socket.SHUT_WR)  # all an HTTP/0.9 client sends
            got = b""
            while chunk := sock.recv(65536):
                got += chunk
                assert len(got) < 1 << 20
        assert got == b"", (path, got[:80])


@pytest.mark.parametrize(("listen", "allowed", "header", "ok"), [
    ("127.0.0.1", (), "localhost:9477", True),
    ("127.0.0.1", (), "127.0.0.2", True),
    ("127.0.0.1", (), "[::1]:9477", True),
    ("127.0.0.1", (), "evil.example:9477", False),
    ("127.0.0.1", (), "10.1.2.3:9477", False),  # loopback binds: loopback names only
    ("127.0.0.1", (), "exporter:9477", False),
    ("127.0.0.1", ("metrics.example.com",), "Metrics.Example.com:443", True),
    ("127.0.0.1", (".corp.example",), "a.b.corp.example", True),
    ("127.0.0.1", (".corp.example",), "corp.example.evil", False),
    ("127.0.0.1", ("*",), "anything.example", True),
    ("127.0.0.1", (), "bad host", False),
    ("127.0.0.1", (), "[::1", False),
    ("127.0.0.1", (), "localhost:x", False),
    ("::1", (), "[::1]", True),
    ("192.168.1.5", (), "192.168.1.5:9477", True),
    ("192.168.1.5", (), "workstation-1", True),  # this machine's name
    ("192.168.1.5", (), "evil.example", False),
    ("0.0.0.0", (), "exporter:9477", True),  # a compose service name
    ("0.0.0.0", (), "172.18.0.4:9477", True),
    ("0.0.0.0", (), "[fd00::4]:9477", True),
    ("0.0.0.0", (), "workstation-1.corp.example", True),
    ("0.0.0.0", (), "workstation-1.corp.example.evil.example", False),
    ("0.0.0.0", (), "evil.example:9477", False),
    ("::", (), "evil.example", False),
])
def test_host_rule(listen: str, allowed: tuple[str, ...], header: str, ok: bool) -> None:
    """The Host rule by bind: loopback names always, and beyond loopback IPs and bare names."""
    policy = HostPolicy.of(listen, allowed, ["workstation-1.corp.example", "workstation-1"])
    assert policy.allows(header) is ok


def test_bad_hosts_and_a_colon_user_are_refused_with_the_other_settings() -> None:
    """allowed_hosts entries with a port or scheme, and a user name with ':', fail together."""
    with pytest.raises(ConfigError) as err:
        load_settings({"basic_auth_user": "team:prom", "listen": "127.0.0.1:9464"},
                      {"CLAUDE_CODE_EXPORTER_BASIC_AUTH_PASSWORD": "pw",
                       "CLAUDE_CODE_EXPORTER_ALLOWED_HOSTS": "ok.example,https://x,h:80"})
    text = str(err.value)
    assert "basic_auth_user (--basic-auth-user): a user name cannot contain ':'" in text
    assert "CLAUDE_CODE_EXPORTER_ALLOWED_HOSTS" in text and "'https://x', 'h:80'" in text
    assert "listen (--listen)" in text
    ok = load_settings({}, {"CLAUDE_CODE_EXPORTER_ALLOWED_HOSTS": "m.example, .corp, *, ::1"})
    assert ok.allowed_hosts == ["m.example", ".corp", "*", "::1"]


