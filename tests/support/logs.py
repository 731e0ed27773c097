"""A logger that records what it is told, for tests that run parts in-process."""

from __future__ import annotations

from typing import Any


class Log:
    """A structlog-like logger that keeps (level, event, fields)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def _add(self, level: str, event: str, **kw: Any) -> None:
        self.events.append((level, event, kw))

    def debug(self, event: str, **kw: Any) -> None:
        """Keep a DEBUG line."""
        self._add("debug", event, **kw)

    def info(self, event: str, **kw: Any) -> None:
        """Keep an INFO line."""
        self._add("info", event, **kw)

    def warning(self, event: str, **kw: Any) -> None:
        """Keep a WARNING line."""
        self._add("warning", event, **kw)

    def error(self, event: str, **kw: Any) -> None:
        """Keep an ERROR line."""
        self._add("error", event, **kw)

    def named(self, event: str) -> list[dict[str, Any]]:
        """The fields of every line logged as ``event``."""
        return [kw for _, e, kw in self.events if e == event]

    def at(self, *levels: str) -> list[str]:
        """The events logged at any of ``levels``."""
        return [e for level, e, _ in self.events if level in levels]
