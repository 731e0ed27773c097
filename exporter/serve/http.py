"""Serve stage: /metrics, /healthz and a landing page over HTTP (optionally TLS, basic auth).

The exposition itself is prometheus-client's WSGI app over the exporter's
own registry; this module adds routing, authentication and the server.

The server gives each connection a thread, so what a client can hold is
bounded (``Limits``): at most ``max_connections`` at once, each for at most
``timeout_seconds`` in all (TLS handshake, request and response, however
slowly the bytes trickle), and at most ``max_header_bytes`` of request line
and headers (431 past that). When every slot is taken, a new connection
takes the slot of the oldest one still sending its request, so a slow or
silent client can delay a scrape by no more than the time it takes to
connect: a scrape sends its request at once and is then never evicted.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import http.client
import io
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any, Final
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

from exporter.projections import instruments
from exporter.serve.hosts import HostPolicy, is_loopback

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
    *, metrics: bool = True, routes: Mapping[str, Callable[..., Iterable[bytes]]] | None = None,
    hosts: HostPolicy | None = None, refused: Refused | None = None,
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """The WSGI application with all routes (``metrics=False``: no /metrics).

    ``routes`` adds handlers by path (the page, exporter.serve.page), behind the same auth.
    ``hosts`` answers only the Host values it allows (421 otherwise, counted in ``refused``);
    every route is read-only: a method other than GET or HEAD is 405.
    """
    metrics_app = make_wsgi_app(instruments.exposed(registry))  # dollars without float noise
    landing = _LANDING.format(version=version).encode()

    def route(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if routes and path in routes:
            return routes[path](environ, start)
        if path == "/metrics" and metrics:
            return metrics_app(environ, start)  # type: ignore[no-any-return]
        if path == "/healthz":
            ok, detail = health()
            if refused is not None:
                detail = {**detail, "http_refused_hosts": refused.count}
            body = json.dumps({"ok": ok, **detail}, sort_keys=True).encode()
            start("200 OK" if ok else "503 Service Unavailable",
                  [("Content-Type", "application/json")])
            return [body]
        if path in ("/", "/index.html"):
            start("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [landing]
        start("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    def app(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        host = environ.get("HTTP_HOST")
        if hosts is not None and not hosts.allows(host):
            if refused is not None:
                refused.add(str(host))
            start("421 Misdirected Request", [("Content-Type", "text/plain")])
            return [b"this server does not answer to that host name (allowed_hosts)\n"]
        if auth is not None and not auth.allows(environ.get("HTTP_AUTHORIZATION", "")):
            start("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="claude-code-exporter"'),
                                       ("Content-Type", "text/plain")])
            return [b"authentication required\n"]
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start("405 Method Not Allowed", [("Allow", "GET, HEAD"),
                                             ("Content-Type", "text/plain")])
            return [b"method not allowed\n"]
        if method == "HEAD":
            return _head(route, environ, start)
        return route(environ, start)

    return app


def _head(route: Callable[..., Iterable[bytes]], environ: dict[str, Any],
          start: StartResponse) -> Iterable[bytes]:
    """A HEAD request: the GET's status and headers (with its length), and no body."""
    said: list[Any] = []
    body = route({**environ, "REQUEST_METHOD": "GET"},  # prometheus-client answers GET only
                 lambda status, headers, *rest: said.extend((status, headers)))
    try:
        length = sum(len(chunk) for chunk in body)
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
    status, headers = said
    headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
    start(status, [*headers, ("Content-Length", str(length))])
    return []


class Refused:
    """Requests refused for their Host header: a count, and each new name logged once.

    At most ``MAX_NAMES`` names are remembered (and logged), so a client that
    sends a new name per request costs a bounded amount of memory and log.
    """

    MAX_NAMES: Final = 32

    def __init__(self, log: Callable[[str], None] | None = None) -> None:
        """``log`` hears each new refused name (the daemon logs a warning)."""
        self._lock = threading.Lock()
        self._names: set[str] = set()
        self._log = log
        self.count = 0

    def add(self, host: str) -> None:
        """Count one refused request; log its Host the first time it is seen."""
        with self._lock:
            self.count += 1
            new = host not in self._names and len(self._names) < self.MAX_NAMES
            if new:
                self._names.add(host)
        if new and self._log is not None:
            self._log(host[:256])


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """The TLS server context for a certificate and its key (TLS 1.2 at least).

    Loaded once, when the settings become parts: a file that cannot be read or a
    key that does not match is an ``OSError`` / ``ssl.SSLError`` before anything runs.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert_file), str(key_file))
    return context


@dataclass(frozen=True, slots=True)
class Limits:
    """What clients may hold of the server: connections, time, header bytes."""

    max_connections: int = 64  # threads; the unit's TasksMax=256 leaves room for the rest
    timeout_seconds: float = 10.0  # a Prometheus scrape times out after 10 s by default
    max_header_bytes: int = 16 * 1024  # a scrape's request is a few hundred bytes
    max_headers: int = 64


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """Where and how ``serve`` answers: address, TLS, auth, limits, whether /metrics is on."""

    host: str
    port: int
    tls: ssl.SSLContext | None = None
    auth: BasicAuth | None = None
    limits: Limits = field(default_factory=Limits)
    metrics: bool = True  # False: OTLP push only, /healthz and the page stay
    beyond_loopback: bool = False  # a non-loopback host is intended (the container image)
    hosts: HostPolicy | None = None  # the Host values answered (None: any)

    def warnings(self) -> list[tuple[str, dict[str, Any]]]:
        """(event, fields) to log at start when private figures may leave this machine."""
        out: list[tuple[str, dict[str, Any]]] = []
        if not is_loopback(self.host) and not self.beyond_loopback:
            out.append(("listening_beyond_loopback", {"host": self.host, "tls": bool(self.tls),
                                                      "basic_auth": bool(self.auth)}))
        if self.auth and not self.tls:
            out.append(("basic_auth_without_tls", {"detail": "the password crosses in clear"}))
        return out


LINGER_BYTES: Final = 256 * 1024  # read and dropped after an error reply, so it is not reset
LINGER_SECONDS: Final = 1.0


@dataclass(slots=True)
class _Slot:
    """One connection being served."""

    deadline: float  # monotonic
    reading: bool = True  # still receiving its request (may be evicted for a newcomer)


@dataclass(slots=True)
class ServerStats:
    """Connections the limits acted on, since start."""

    refused: int = 0  # every slot busy with a request being answered
    evicted: int = 0  # gave their slot, still sending a request, to a newcomer
    timed_out: int = 0  # passed the whole-request deadline
    slots: dict[Any, _Slot] = field(default_factory=dict)  # in arrival order
    dying: set[Any] = field(default_factory=set)  # evicted, their thread not yet ended


class _Server(ThreadingMixIn, WSGIServer):
    """A threaded WSGI server with a bounded number of connections and deadlines."""

    daemon_threads = True
    block_on_close = False
    # The listen backlog: socketserver's default of 5 drops connections when a dozen
    # scrapers arrive at once, and each drop costs the client a 1 s SYN retransmission.
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], handler: type[_QuietHandler], limits: Limits,
        tls: ssl.SSLContext | None,
    ) -> None:
        """Bind and listen; with ``tls`` the listening socket hands out TLS connections."""
        self.limits = limits
        self.stats = ServerStats()
        self._lock = threading.Lock()
        self._clock = time.monotonic
        super().__init__(address, handler)
        if tls is not None:
            # The handshake happens in _QuietHandler.setup: done on accept, one client that
            # connects and stays silent would stall every other scrape.
            self.socket = tls.wrap_socket(self.socket, server_side=True,
                                          do_handshake_on_connect=False)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Start a thread for a connection that gets a slot; close it otherwise."""
        if not self._admit(request):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread to be had: the connection waits for none
            self.shutdown_request(request)

    def _admit(self, request: Any) -> bool:
        """Give the connection a slot, taking the oldest reader's when all are busy."""
        st = self.stats
        with self._lock:
            if len(st.slots) >= self.limits.max_connections:
                victim = next((s for s, slot in st.slots.items() if slot.reading), None)
                if victim is None or len(st.dying) >= self.limits.max_connections:
                    st.refused += 1
                    return False
                st.evicted += 1
                self._evict(victim)
            st.slots[request] = _Slot(self._clock() + self.limits.timeout_seconds)
            return True

    def request_read(self, request: Any) -> None:
        """The connection's request has arrived: it keeps its slot until answered."""
        with self._lock:
            slot = self.stats.slots.get(request)
            if slot is not None:
                slot.reading = False

    def service_actions(self) -> None:
        """Between accepts (at least twice a second): end connections past their deadline."""
        now = self._clock()
        with self._lock:
            late = [s for s, slot in self.stats.slots.items() if slot.deadline <= now]
            self.stats.timed_out += len(late)
            for sock in late:
                self._evict(sock)

    def _evict(self, sock: Any) -> None:
        """Cut a connection off (its thread then ends); the caller holds the lock."""
        self.stats.slots.pop(sock, None)
        self.stats.dying.add(sock)
        # The plain socket's shutdown, also for TLS: SSLSocket.shutdown would drop the
        # TLS state under the thread still using it. OSError: already gone.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def shutdown_request(self, request: Any) -> None:
        """Close a connection and free its slot."""
        with self._lock:
            self.stats.slots.pop(request, None)
            self.stats.dying.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up, stalls or fails the TLS handshake is not our error."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _HeaderBudget:
    """The request's input while its headers are parsed: a bounded number of bytes and lines."""

    def __init__(self, raw: io.BufferedIOBase, max_bytes: int, max_lines: int) -> None:
        self._raw, self._left, self._lines = raw, max_bytes, max_lines

    def readline(self, limit: int = -1) -> bytes:
        """One header line; past the budget, the errors http.server answers with 431."""
        if self._lines <= 0:
            raise http.client.HTTPException("too many header lines")
        self._lines -= 1
        want = self._left + 1 if limit < 0 else min(limit, self._left + 1)
        line: bytes = self._raw.readline(want)
        self._left -= len(line)
        if self._left < 0:
            raise http.client.LineTooLong("header section")
        return line


class _QuietHandler(WSGIRequestHandler):
    """One connection: TLS handshake, bounded request head, the app's answer; no access log."""

    server: _Server

    def setup(self) -> None:
        """Finish the TLS handshake here, in the request's thread, not in the accept loop."""
        # Per read and write; the server cuts the connection at the total deadline.
        self.request.settimeout(self.server.limits.timeout_seconds)
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def handle(self) -> None:
        """Handle a single HTTP request whose head fits the limits."""
        limits = self.server.limits
        raw = self.rfile
        self.raw_requestline = raw.readline(limits.max_header_bytes + 1)
        if len(self.raw_requestline) > limits.max_header_bytes:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414)
            self._linger()
            return
        if len(self.raw_requestline.split()) == 2:  # HTTP/0.9: no status line to refuse it
            self.close_connection = True  # with, and no headers to wait for: hang up
            return
        self.rfile = _HeaderBudget(  # type: ignore[assignment]
            raw, limits.max_header_bytes - len(self.raw_requestline), limits.max_headers)
        try:
            ok = self.parse_request()
        finally:
            self.rfile = raw
        if not ok:  # an error reply was sent (400, 431, ...)
            self._linger()
            return
        self.server.request_read(self.request)
        handler = ServerHandler(self.rfile, self.wfile,  # type: ignore[arg-type]  # as wsgiref
                                self.get_stderr(), self.get_environ(), multithread=False)
        handler.request_handler = self  # type: ignore[attr-defined]  # wsgiref's back-pointer
        handler.run(self.server.get_app())  # type: ignore[arg-type]

    def _linger(self) -> None:
        """After an error reply, drop what the client still sends so it reads the reply."""
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(LINGER_SECONDS)
            left = LINGER_BYTES
            while left > 0 and (got := self.connection.recv(min(left, 65536))):
                left -= len(got)
        except OSError:
            pass  # gone, or still sending after the linger time: a reset is its problem

    def log_message(self, format: str, *args: Any) -> None:
        return


class HttpServer:
    """A running HTTP server on its own thread."""

    def __init__(
        self, app: Callable[..., Iterable[bytes]], host: str, port: int,
        tls: ssl.SSLContext | None = None, limits: Limits | None = None,
    ) -> None:
        """Bind ``host:port`` (port 0 picks a free one) and start serving (HTTPS with ``tls``)."""
        cls = _Server6 if ":" in host else _Server
        self._server = cls((host, port), _QuietHandler, limits or Limits(), tls)
        self._server.set_app(app)
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.5}, name="http",
            daemon=True,
        )
        self._thread.start()

    @property
    def stats(self) -> ServerStats:
        """What the limits did so far (refused, evicted and timed-out connections)."""
        return self._server.stats

    def close(self) -> None:
        """Stop accepting, finish, and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
