"""Structured logging: event names plus key/values, JSON when not on a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def make_logger(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> Any:
    """A structlog logger writing to ``stream`` (stderr), without global configuration.

    ``fmt`` is ``json``, ``console`` or ``auto`` (console on a terminal, JSON otherwise).
    """
    out = stream if stream is not None else sys.stderr
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
