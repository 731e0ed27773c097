"""Structured logging: event names plus key/values, JSON when not on a terminal.

structlog is imported on the first line that passes the level, not before:
importing it imports rich (for its console renderer and tracebacks), and a
warm ``report`` logs nothing at INFO.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from exporter.shown import visible

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}  # the logging module's numbers


class _Stderr:
    """``sys.stderr`` as it is at each write.

    While a progress bar is drawn, rich swaps ``sys.stderr`` for a proxy that
    prints above the bar; a logger holding the original stream would write into
    the bar's line instead.
    """

    def write(self, text: str) -> int:
        """Write to the current stderr."""
        return sys.stderr.write(text)

    def flush(self) -> None:
        """Flush the current stderr."""
        sys.stderr.flush()

    def isatty(self) -> bool:
        """Whether the current stderr is a terminal."""
        return sys.stderr.isatty()


class Logger:
    """``debug``/``info``/``warning``/``error`` (event, **fields), filtered by level.

    Lines below the level cost one comparison; the structlog logger behind the
    others is built when the first of them is written.
    """

    def __init__(self, level: str, fmt: str, stream: TextIO | None) -> None:
        """Log at ``level`` and above, as ``fmt``, to ``stream`` (None: stderr)."""
        self._threshold = _LEVELS[level]
        self._fmt = fmt
        self._stream = stream
        self._real: Any = None

    def _write(self, level: str, event: str, fields: dict[str, Any]) -> None:
        if _LEVELS[level] < self._threshold:
            return
        if self._real is None:
            self._real = _structlog(self._threshold, self._fmt, self._stream)
        getattr(self._real, level)(event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        """Log a DEBUG line (per line of input, per pass)."""
        self._write("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log an INFO line (lifecycle)."""
        self._write("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log a WARNING line (something the operator should look at)."""
        self._write("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log an ERROR line (the command cannot go on)."""
        self._write("error", event, fields)


def make_logger(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> Logger:
    """A logger writing to ``stream`` (stderr), without global configuration.

    ``fmt`` is ``json``, ``console`` or ``auto`` (console on a terminal, JSON otherwise).
    """
    return Logger(level, fmt, stream)


def _structlog(threshold: int, fmt: str, stream: TextIO | None) -> Any:
    """The structlog logger behind :class:`Logger`."""
    import structlog  # see the module docstring

    out: Any = stream if stream is not None else _Stderr()
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    return structlog.wrap_logger(
        structlog.PrintLogger(out),
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            *(() if use_json else (_visible,)),  # JSON escapes control characters itself
            renderer,
        ],
    )


def _visible(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """Console lines: a value from outside (a transcript's path) never sends terminal codes.

    A traceback keeps its line breaks: it is ours, and unreadable on one line.
    """
    return {k: visible(v) if isinstance(v, str) and k != "exception" else v
            for k, v in event.items()}
