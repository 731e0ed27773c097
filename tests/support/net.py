"""Loopback networking for tests: a free port and a GET that returns errors as values."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping

LOOPBACK = "127.0.0.1"  # the only address tests listen on or connect to


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def unverified_context() -> ssl.SSLContext:
    """A TLS client context that accepts any certificate (tests' self-signed ones)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def http_get(
    url: str, *, headers: Mapping[str, str] | None = None, timeout: float = 5.0,
    context: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    """GET ``url``: (status, body), for 4xx/5xx too; HTTPS without ``context`` trusts any cert."""
    if context is None and url.startswith("https:"):
        context = unverified_context()
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            status: int = resp.status
            return status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
