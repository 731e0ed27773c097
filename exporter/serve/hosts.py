"""Which ``Host`` header values the HTTP endpoint answers (the DNS-rebinding guard).

A web page the user visits can rebind a name it controls (``evil.example``)
to 127.0.0.1 and then read the exporter's figures from the browser: the
request reaches the listener, but its ``Host`` header still names the
attacker's domain. So only names the listener is reachable as are answered;
any other gets 421 (docs/deploy.md, "Host names").

The rule, by where the listener is bound:

- always: ``localhost`` and names under ``.localhost`` (RFC 6761: they never
  leave the machine), loopback literals (127.0.0.0/8, ``[::1]``), the bound
  address itself, and every entry of ``allowed_hosts``;
- a bind beyond loopback (a LAN address, ``0.0.0.0``, ``::``) is also reached
  by names we cannot know: every IP literal, every single-label name (a
  container or compose service name such as ``exporter``, a short host name:
  no public DNS name has one label, so a rebinding page cannot use one) and
  this machine's host name.

A rebinding attack always needs a dotted name under the attacker's control,
which none of these rules admits. The port of the header is not compared: a
tunnel or a published container port changes it. A request without a Host
header (HTTP/1.0) is answered: browsers always send one.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

ANY = "*"  # an allowed_hosts entry that turns the check off


def host_name(header: str) -> str | None:
    """The name or address of a Host header, lowercased, without port or brackets.

    None when the header is not a host (``a b``, ``[::1`` or an empty name).
    """
    text = header.strip().lower()
    if text.startswith("["):
        inside, sep, rest = text[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return inside if _ip(inside) else None
    name, sep, port = text.rpartition(":") if ":" in text else (text, "", "")
    if sep and not port.isdigit():
        return None
    name = name.rstrip(".")
    if not name or any(not (c.isalnum() or c in "-._") for c in name):
        return None
    return name


def _ip(text: str) -> bool:
    """True for a literal IPv4 or IPv6 address."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """True for a host that only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loopback(name: str) -> bool:
    """``localhost``, a name under ``.localhost``, or a loopback literal."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def normalise_entry(entry: str) -> str | None:
    """An ``allowed_hosts`` entry as compared: ``*``, ``.domain``, a name or an address.

    None when it is none of these (a port, a scheme, a space).
    """
    text = entry.strip().lower()
    if text == ANY:
        return ANY
    bare = text.strip("[]")
    if _ip(bare):
        return bare
    if ":" in text or "/" in text:
        return None
    if text.startswith(".") and len(text) > 1:
        rest = host_name(text[1:])
        return f".{rest}" if rest else None
    return host_name(text)


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """The Host values one listener answers; see the module docstring for the rule."""

    listen_host: str
    allowed: tuple[str, ...] = ()  # normalised allowed_hosts entries
    machine: tuple[str, ...] = ()  # this machine's host names (binds beyond loopback)

    @classmethod
    def of(cls, listen_host: str, allowed: Iterable[str], machine: Iterable[str]) -> HostPolicy:
        """The policy for a listener bound to ``listen_host`` (entries checked by config)."""
        entries = tuple(e for e in (normalise_entry(a) for a in allowed) if e is not None)
        names = tuple(n for n in (host_name(m) for m in machine) if n)
        return cls(listen_host.strip("[]").lower(), entries, names)

    @property
    def beyond_loopback(self) -> bool:
        """True when the listener is bound to an address other hosts can reach."""
        return not _loopback(self.listen_host)

    def allows(self, header: str | None) -> bool:
        """True when a request with this Host header (None: none sent) is answered."""
        if header is None or ANY in self.allowed:
            return True
        name = host_name(header)
        if name is None:
            return False
        if _loopback(name) or name == self.listen_host or self._listed(name):
            return True
        if not self.beyond_loopback:
            return False
        return _ip(name) or "." not in name or name in self.machine

    def _listed(self, name: str) -> bool:
        """True when ``name`` is an allowed_hosts entry or under a ``.domain`` one."""
        for entry in self.allowed:
            if entry.startswith("."):
                if name == entry[1:] or name.endswith(entry):
                    return True
            elif name == entry:
                return True
        return False


def machine_names() -> tuple[str, ...]:
    """The host name the system gives this machine (no DNS lookup: start stays fast)."""
    try:
        return (socket.gethostname(),)
    except OSError:
        return ()
