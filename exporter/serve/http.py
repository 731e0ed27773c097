"""Serve stage: /metrics, /healthz and a landing page over HTTP (optionally TLS, basic auth).

The exposition itself is prometheus-client's WSGI app over the exporter's
own registry; this module adds routing, authentication and the server.
"""

from __future__ import annotations

import base64
import hmac
import json
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

Health = Callable[[], tuple[bool, dict[str, Any]]]
StartResponse = Callable[..., Any]
_LANDING = """<!doctype html><html><head><title>claude-code-exporter</title></head>
<body><h1>claude-code-exporter {version}</h1>
<p>Claude Code usage from local transcripts.</p>
<ul><li><a href="metrics">/metrics</a> — Prometheus exposition</li>
<li><a href="healthz">/healthz</a> — ledger and watcher health</li></ul></body></html>
"""


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """One user name and password, compared in constant time."""

    user: str
    password: str

    def allows(self, header: str) -> bool:
        """True when an Authorization header carries these credentials."""
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except ValueError:
            return False
        ok_user = hmac.compare_digest(user.encode(), self.user.encode())
        return hmac.compare_digest(password.encode(), self.password.encode()) and ok_user


def make_app(
    registry: CollectorRegistry, health: Health, version: str, auth: BasicAuth | None = None,
    *, metrics: bool = True,
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """The WSGI application with all routes (``metrics=False``: no /metrics)."""
    metrics_app = make_wsgi_app(registry)
    landing = _LANDING.format(version=version).encode()

    def app(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        if auth is not None and not auth.allows(environ.get("HTTP_AUTHORIZATION", "")):
            start("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="claude-code-exporter"'),
                                       ("Content-Type", "text/plain")])
            return [b"authentication required\n"]
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics" and metrics:
            return metrics_app(environ, start)  # type: ignore[no-any-return]
        if path == "/healthz":
            ok, detail = health()
            body = json.dumps({"ok": ok, **detail}, sort_keys=True).encode()
            start("200 OK" if ok else "503 Service Unavailable",
                  [("Content-Type", "application/json")])
            return [body]
        if path in ("/", "/index.html"):
            start("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [landing]
        start("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    """A threaded WSGI server; handler threads never block shutdown."""

    daemon_threads = True
    # The listen backlog: socketserver's default of 5 drops connections when a dozen
    # scrapers arrive at once, and each drop costs the client a 1 s SYN retransmission.
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up, stalls or fails the TLS handshake is not our error."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: scrapes every few seconds would flood it."""

    timeout = 30  # seconds a silent client may hold its thread (handshake, request, body)

    def setup(self) -> None:
        """Finish the TLS handshake here, in the request's thread, not in the accept loop."""
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def log_message(self, format: str, *args: Any) -> None:
        return


class HttpServer:
    """A running HTTP server on its own thread."""

    def __init__(
        self, app: Callable[..., Iterable[bytes]], host: str, port: int,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        """Bind ``host:port`` (port 0 picks a free one) and start serving."""
        cls = _Server6 if ":" in host else _Server
        self._server = make_server(host, port, app, server_class=cls, handler_class=_QuietHandler)
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(str(tls[0]), str(tls[1]))
            # The handshake happens in _QuietHandler.setup: done on accept, one client that
            # connects and stays silent would stall every other scrape.
            self._server.socket = ctx.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.5}, name="http",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stop accepting, finish, and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
