"""Structured logging: event names plus key/values, JSON when not on a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


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


def make_logger(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> Any:
    """A structlog logger writing to ``stream`` (stderr), without global configuration.

    ``fmt`` is ``json``, ``console`` or ``auto`` (console on a terminal, JSON otherwise).
    """
    out: Any = stream if stream is not None else _Stderr()
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    return structlog.wrap_logger(
        structlog.PrintLogger(out),
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
